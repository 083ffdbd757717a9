"""Patience with a front end that answers "not yet" (workloads/seeding/patience.py), on a
clock of the test's own that the backoff moves."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable

import pytest

from socialbench.workloads.seeding.patience import NOT_YET, Patience, seconds_text


class Clock:
    """The test's time: a backoff's sleep moves it (and may let others be answered)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.meanwhile: Callable[[], None] = lambda: None

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.meanwhile()


def patience_on(clock: Clock, limit_s: float, notes: list[str] | None = None) -> Patience:
    return Patience(limit_s, note=(notes if notes is not None else []).append, clock=clock,
                    sleep=clock.sleep)


def sender(script: list[str], sent: list[float], clock: Clock
           ) -> Callable[[], Awaitable[str]]:
    """Answers ``script`` in order, then ``ok``; records when each was sent."""
    async def send() -> str:
        sent.append(clock.now)
        return script.pop(0) if script else "ok"
    return send


def test_not_yet_is_sent_again_with_a_growing_backoff_until_another_answer() -> None:
    clock, notes, sent = Clock(), [], []
    patience = patience_on(clock, 60, notes)
    script = ["http 502"] * 6 + ["ClientConnectorError", "http 503", "http 504"]
    assert asyncio.run(patience.attempt(sender(script, sent, clock))) == "ok"
    assert patience.retried == {"http 502": 6, "ClientConnectorError": 1, "http 503": 1,
                                "http 504": 1}
    assert len(sent) == 10
    gaps = [b - a for a, b in itertools.pairwise(sent)]
    assert 0.125 <= gaps[0] <= 0.25 and all(gap <= 5.0 for gap in gaps)
    assert gaps[4] >= 2.0 > gaps[1]  # 0.25 s doubled each time, half of it jitter
    assert patience.gave_up is None
    assert patience.longest_down_s == pytest.approx(sent[-1] - sent[0])
    assert "not serving yet" in notes[0] and "--retry-for" in notes[0]
    assert "answers again after" in notes[-1]


def test_another_failure_is_not_sent_again() -> None:
    clock = Clock()
    patience = patience_on(clock, 60)
    for outcome in ("http 500", "http 400", "TimeoutError", "ClientConnectorDNSError",
                    "ServerDisconnectedError"):
        sent: list[float] = []
        assert asyncio.run(patience.attempt(sender([outcome], sent, clock))) == outcome
        assert len(sent) == 1
    assert patience.retried == {}
    # What the caller leaves out of retry_on fails at once (a compose's 504).
    sent = []
    assert asyncio.run(patience.attempt(sender(["http 504"], sent, clock),
                                        NOT_YET - {"http 504"})) == "http 504"
    assert len(sent) == 1


def test_a_front_end_that_stays_down_is_given_up_after_the_limit() -> None:
    clock, sent = Clock(), []
    patience = patience_on(clock, 20)
    outcome = asyncio.run(patience.attempt(sender(["http 502"] * 1000, sent, clock)))
    assert outcome == "http 502"
    assert 20 <= sent[-1] - sent[0] <= 25  # the limit, and at most one backoff past it
    assert patience.gave_up is not None
    assert "nothing but http 502" in patience.gave_up
    assert "--retry-for 20 s" in patience.gave_up
    # Given up: any other item fails at its first "not yet".
    sent = []
    assert asyncio.run(patience.attempt(sender(["http 503"], sent, clock))) == "http 503"
    assert len(sent) == 1


def test_an_item_stops_after_the_limit_while_the_front_end_answers_others() -> None:
    # Others are answered during each backoff: the front end is not down, but this item,
    # always 503, fails after the limit from its first "not yet".
    clock, sent = Clock(), []
    patience = patience_on(clock, 10)
    clock.meanwhile = patience.answered
    outcome = asyncio.run(patience.attempt(sender(["http 503"] * 1000, sent, clock)))
    assert outcome == "http 503"
    assert 10 <= sent[-1] - sent[0] <= 15
    assert patience.gave_up is None


def test_seconds_text() -> None:
    assert [seconds_text(s) for s in (0.4, 45, 60, 150, 600)] == [
        "0 s", "45 s", "1 min", "2 min 30 s", "10 min"]
