"""The open-loop load driver (wrk2-style): ``run_load(LoadConfig(...)) -> LoadResult``.

    from socialbench.workloads.driver import LoadConfig, run_load

    result = run_load(LoadConfig(url="http://127.0.0.1:8080", workload="mixed",
                                 rate=2000, duration_s=60, warmup_s=10))
    result.latency.p99_ms, result.achieved_rps, result.errors.total, result.saturated
"""

from socialbench.workloads.driver.config import Distribution, LoadConfig
from socialbench.workloads.driver.result import (
    Errors,
    LatencyStats,
    LoadResult,
    SecondStats,
)
from socialbench.workloads.driver.runner import DriverError, run_load

__all__ = [
    "Distribution",
    "DriverError",
    "Errors",
    "LatencyStats",
    "LoadConfig",
    "LoadResult",
    "SecondStats",
    "run_load",
]
