"""Waiting out a front end that is not serving yet, for the seeder's api path.

A stack coming up answers "not yet" for a while: nginx 502 before its upstreams accept
connections, a service 503 before its stores or neighbours do, 504 when one is still too
slow, or no connection at all. :class:`Patience` sends such an item again after a
jittered backoff (0.25 s doubling to 5 s), for at most ``limit_s`` from that item's first
"not yet"; when no request of the seeding has had any other answer for ``limit_s``, the
front end is taken for down, :attr:`Patience.gave_up` says so and the seeding stops.
A connection refused or reset before the request was sent is "not yet"; a name that does
not resolve, or a connection that drops after the request was sent, is a failure.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable

NOT_YET_STATUSES = (502, 503, 504)
CONNECT_FAILED = "ClientConnectorError"  # aiohttp's: no connection made, nothing sent
NOT_YET = frozenset({*(f"http {status}" for status in NOT_YET_STATUSES), CONNECT_FAILED})
DEFAULT_RETRY_FOR_S = 120.0
FIRST_DELAY_S = 0.25
MAX_DELAY_S = 5.0
# A line when the front end has answered only "not yet" this long, then this often.
NOTE_AFTER_S = 1.0
NOTE_EVERY_S = 30.0


def seconds_text(seconds: float) -> str:
    """``90 s``, ``2 min``, ``2 min 30 s``."""
    minutes, rest = divmod(round(seconds), 60)
    if not minutes:
        return f"{rest} s"
    return f"{minutes} min" + (f" {rest} s" if rest else "")


class Patience:
    """The "not yet" answers of one seeding, and whether the front end is taken for down.

    ``note`` is told when the front end has answered only "not yet" for
    :data:`NOTE_AFTER_S`, every :data:`NOTE_EVERY_S` while it goes on, and when it
    answers again.
    """

    def __init__(self, limit_s: float = DEFAULT_RETRY_FOR_S,
                 note: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.limit_s = limit_s
        self.note = note or (lambda _: None)
        self.clock, self.sleep = clock, sleep
        self.retried: Counter[str] = Counter()  # answers sent again, by kind
        self.longest_down_s = 0.0  # the longest time with nothing but "not yet"
        self.gave_up: str | None = None  # what the front end answered, once taken for down
        self._down_since: float | None = None
        self._noted_at: float | None = None  # when the front end was last said to be down
        self._streak: Counter[str] = Counter()

    def answered(self) -> None:
        """A request had an answer other than "not yet": the front end serves."""
        if self._down_since is not None and self.gave_up is None:
            down = self.clock() - self._down_since
            self.longest_down_s = max(self.longest_down_s, down)
            if self._noted_at is not None:
                self.note(f"the front end answers again after {down:.1f} s of "
                          f"{_kinds(self._streak)}")
            self._down_since = self._noted_at = None
            self._streak.clear()

    def delay(self, outcome: str, first_at: float, attempt: int) -> float | None:
        """Seconds to wait before sending again an item that got ``outcome`` (its
        ``attempt``-th "not yet", its first at ``first_at``), or None: it fails as it is."""
        now = self.clock()
        if self.gave_up is not None:
            return None
        if self._down_since is None:
            self._down_since = now
        self._streak[outcome] += 1
        down = now - self._down_since
        self.longest_down_s = max(self.longest_down_s, down)
        if down >= self.limit_s:
            self.gave_up = (f"answered nothing but {_kinds(self._streak)} for "
                            f"{seconds_text(down)} (--retry-for {seconds_text(self.limit_s)})")
            return None
        if now - first_at >= self.limit_s:
            return None
        if self._noted_at is None and down >= NOTE_AFTER_S:
            self._noted_at = now
            self.note(f"the front end is not serving yet ({_kinds(self._streak)} for "
                      f"{down:.1f} s): each item is sent again for up to "
                      f"{seconds_text(self.limit_s)} (--retry-for)")
        elif self._noted_at is not None and now - self._noted_at >= NOTE_EVERY_S:
            self._noted_at = now
            self.note(f"still not serving after {seconds_text(down)}: {_kinds(self._streak)}")
        self.retried[outcome] += 1
        backoff = min(MAX_DELAY_S, FIRST_DELAY_S * 2 ** min(attempt, 16))
        return random.uniform(backoff / 2, backoff)

    async def attempt(self, send: Callable[[], Awaitable[str]],
                      retry_on: frozenset[str] = NOT_YET) -> str:
        """``send()`` until its outcome is not in ``retry_on`` or it is not to be sent
        again: that outcome."""
        first_at = self.clock()
        attempt = 0
        while True:
            outcome = await send()
            if outcome not in retry_on:
                self.answered()
                return outcome
            wait = self.delay(outcome, first_at, attempt)
            if wait is None:
                return outcome
            attempt += 1
            await self.sleep(wait)


def _kinds(counts: Counter[str]) -> str:
    return ", ".join(f"{kind} ({n:,})" for kind, n in counts.most_common())
