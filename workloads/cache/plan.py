"""``cache run|scale --plan``: the runs a cache benchmark will make and the time it will
take, before any load.

A timed run is its warm-up and test time (prefilling is not counted: it takes as long as
the server sets the range's keys); a run of ``--requests`` has no known time. A scale
run's length depends on where the SLA breaks: the plan gives the time if every instance
count needs one probe (its closed-loop max held) and if each tries every fraction.
"""

from __future__ import annotations

from socialbench.workloads.cache.config import CacheConfig
from socialbench.workloads.cache.scale import ScaleConfig
from socialbench.workloads.driver.config import duration_text

START_S = 0.5  # starting the generator's processes, per run


def plan_runs(configs: list[CacheConfig], runs: int) -> list[str]:
    """``cache run``: each depth ``runs`` times."""
    lines = [f"Plan: {len(configs)} pipeline depth(s) x {runs} run(s)"]
    total = 0.0
    for config in configs:
        if config.test_time_s is None:
            lines.append(f"  pipeline {config.pipeline:>4}: {config.requests_per_client:,} "
                         f"requests per client, {runs} run(s): time not known beforehand")
            continue
        each = START_S + config.warmup_s + config.test_time_s
        total += runs * each
        lines.append(f"  pipeline {config.pipeline:>4}: {runs} x {duration_text(each)}")
    lines.append(f"About {duration_text(total)} of timed runs (prefill not counted). "
                 "No load sent.")
    return lines


def plan_scale(config: ScaleConfig, runs: int) -> list[str]:
    """``cache scale``: up to ``max_instances`` counts, each one to 1 + fractions probes."""
    probe = START_S + config.step_s
    fewest = config.max_instances * probe
    most = config.max_instances * (1 + len(config.fractions)) * probe
    return [
        f"Plan: {runs} run(s) of the scale procedure; instances 1..{config.max_instances} "
        f"of {config.server}, each count probed closed loop, then at up to "
        f"{len(config.fractions)} fractions of its max until one holds p99 <= "
        f"{config.sla_p99_ms:g} ms; {config.step_s:g} s a probe",
        f"If every count runs to {config.max_instances}: {duration_text(runs * fewest)} "
        f"(one probe a count) to {duration_text(runs * most)} (every fraction tried); it stops "
        "sooner when an instance breaks the SLA or adds no throughput. No load sent.",
    ]
