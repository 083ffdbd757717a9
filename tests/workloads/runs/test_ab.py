"""The A/B mode's arithmetic: ABBA order and paired ratios with their interval."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pytest

from socialbench.workloads.runs.ab import AbStep, arm_order, compute_ratios, paired_ratio


def step(arm: str, pair: int, cpu: float, rate: float = 100.0) -> AbStep:
    return AbStep(arm=arm, pair=pair, rate=rate, started_at=datetime.now(UTC),
                  achieved_rps=rate, requests=100, errors=0, p50_ms=cpu, p99_ms=2 * cpu,
                  stack_cpu_seconds=cpu / 10, responses_in_span=100,
                  cpu_ms_per_request=cpu, settle_s=0.0)


def test_pairs_alternate_abba() -> None:
    assert [arm_order(pair) for pair in (1, 2, 3, 4)] == [(0, 1), (1, 0), (0, 1), (1, 0)]


def test_a_paired_ratio_is_the_geometric_mean_with_a_t_interval() -> None:
    ratio = paired_ratio("cpu_ms_per_request", 100.0, [1.0, 2.0, 4.0], [1.1, 2.0, 4.4])

    assert ratio.ratios == pytest.approx([1.1, 1.0, 1.1])
    logs = [math.log(1.1), 0.0, math.log(1.1)]
    mean = sum(logs) / 3
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / 2)
    half = 4.303 * sd / math.sqrt(3)  # t(0.975, 2)
    assert ratio.geometric_mean == pytest.approx(math.exp(mean))
    assert (ratio.low, ratio.high) == pytest.approx((math.exp(mean - half),
                                                     math.exp(mean + half)))
    assert ratio.low is not None and ratio.low <= 1.0 and not ratio.clear


def test_a_steady_difference_is_clear_and_drift_cancels() -> None:
    """B costs 20% more; the host slows by 10% a pair: the ratios stay 1.2."""
    steps = []
    for pair in (1, 2, 3, 4):
        host = 1 + 0.1 * pair
        steps += [step("A", pair, 2.0 * host), step("B", pair, 2.4 * host)]
    cpu = next(r for r in compute_ratios(steps, [100.0])
               if r.metric == "cpu_ms_per_request" and r.rate is None)
    assert cpu.geometric_mean == pytest.approx(1.2)
    assert cpu.clear


def test_a_pair_cut_short_is_left_out() -> None:
    steps = [step("A", 1, 2.0), step("B", 1, 2.2), step("B", 2, 2.2)]
    per_rate = [r for r in compute_ratios(steps, [100.0]) if r.metric == "p50_ms"]
    assert all(len(r.ratios) == 1 for r in per_rate)
    assert all(r.low is None for r in per_rate)
