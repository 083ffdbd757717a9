"""Driver results made from known samples, as ``socialbench load`` would build them."""

from __future__ import annotations

import random
from collections.abc import Sequence
from datetime import UTC, datetime

from socialbench.workloads.driver.config import LoadConfig
from socialbench.workloads.driver.histogram import encode, new_histogram
from socialbench.workloads.driver.result import HostInfo, LoadResult, SecondStats, build_result
from socialbench.workloads.driver.worker import WorkerReport

STARTED_AT = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
WINDOW_S = 10.0


def _encoded(values: Sequence[int]) -> str:
    histogram = new_histogram()
    for value in values:
        histogram.record_value(value)
    return encode(histogram)


def worker_report(index: int, requests: int, seed: int) -> WorkerReport:
    """One worker's totals: latencies around 0.7 ms, a few errors of each kind.

    The spread is narrow because reading percentiles walks the histogram in Python.
    """
    rng = random.Random(seed)
    latency = [max(1, int(rng.lognormvariate(6.5, 0.3))) for _ in range(requests)]
    service = [max(1, value - rng.randrange(0, 200)) for value in latency]
    lag = [rng.randrange(1, 400) for _ in range(requests)]
    return WorkerReport(
        worker=index,
        scheduled=requests,
        sent=requests - 1,
        ok=requests - 4,
        status_errors={500: 2, 503: index},
        failures={"timeout": 1, "connect": index % 2},
        queued=index,
        completed_in_window=requests - 2,
        in_flight_at_start=0,
        in_flight_at_end=2,
        peak_connections=8 + index,
        latency=_encoded(latency),
        service_time=_encoded(service),
        send_lag=_encoded(lag),
        cpu_s=0.25 * (index + 1),
        precise_timer=True,
    )


def load_config(rate: float, processes: int, connections: int) -> LoadConfig:
    return LoadConfig(url="http://nginx:8080/", rate=rate, duration_s=WINDOW_S, warmup_s=1.0,
                      workload="mixed", connections=connections, processes=processes, seed=7)


def result_of(config: LoadConfig, reports: Sequence[WorkerReport],
              timeline: Sequence[SecondStats] = ()) -> LoadResult:
    return build_result(config, list(reports), list(timeline), started_at=STARTED_AT,
                        elapsed_s=WINDOW_S + 1.5, host=HostInfo.now())


def second(number: int, sent: int, p99_us: int) -> SecondStats:
    return SecondStats(second=number, warmup=number <= 1, sent=sent, completed=sent, errors=1,
                       latency_p99_us=p99_us, send_lag_p99_us=p99_us // 10, connections=4,
                       in_flight=3, queued=0)
