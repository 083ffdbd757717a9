"""``cache scale``: the seed documents' procedure, instance by instance.

Start one instance, load it to the highest rate that holds the SLA (p99 <= 1 ms by
default); add an instance, load every instance at once the same way; go on until adding
one breaks it: the SLA cannot be held on every instance at any tested rate, or the
aggregate no longer grows. The answer is the best aggregate ops/s with the SLA held.

The search at each instance count is short: a closed-loop run (every instance driven as
hard as the generator can: its max), and if that breaks the SLA, open-loop runs at
fractions of each instance's max (0.9, 0.8, ... by default), the first that holds wins.
With a meter factory, every probe's energy is measured (one meter over all instances at
once: the machine's joules per operation of the aggregate).
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, model_validator

from socialbench.workloads.cache.config import CacheConfig
from socialbench.workloads.cache.energy import Meter, OpsEnergy
from socialbench.workloads.cache.result import CacheResult
from socialbench.workloads.cache.runner import run_many
from socialbench.workloads.cache.servers import Instance, Launcher

DEFAULT_FRACTIONS = (0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1)
MIN_ACHIEVED = 0.95  # open loop: below this share of the offered rate, the step fails


class ScaleStop(StrEnum):
    SLA_BROKEN = "sla-broken"  # no tested rate held the SLA on every instance
    NO_GAIN = "no-gain"  # the aggregate did not grow by min_gain
    MAX_INSTANCES = "max-instances"
    ERROR = "error"


class ScaleConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    server: str = Field(description="memcached or redis (what the launcher starts).")
    max_instances: int = Field(ge=1)
    run: CacheConfig = Field(description="Each instance's load; server and port are replaced.")
    step_s: float = Field(default=5.0, gt=0, description="Measured time of each probe.")
    sla_p99_ms: float = Field(default=1.0, gt=0)
    fractions: list[float] = Field(default_factory=lambda: list(DEFAULT_FRACTIONS))
    min_gain: float = Field(default=0.02, ge=-1, description=(
        "Stop unless the aggregate grows by this share (-1: never stop for that)."))
    server_cpus: list[int] | None = None

    @model_validator(mode="after")
    def _check(self) -> ScaleConfig:
        if self.run.protocol.memcached != (self.server == "memcached"):
            raise ValueError(f"{self.server} does not speak {self.run.protocol.value}")
        return self


class InstanceResult(BaseModel):
    address: str
    ops_per_s: float
    offered_ops_per_s: float | None
    p99_ms: float
    p999_ms: float
    hit_ratio: float | None
    saturated: bool
    errors: int
    passed: bool
    reasons: list[str]


class Probe(BaseModel):
    """One run of every instance at once: closed loop (fraction None) or open loop."""

    instances: int
    fraction: float | None
    passed: bool
    aggregate_ops_per_s: float
    worst_p99_ms: float
    results: list[InstanceResult]
    energy: OpsEnergy | None = Field(
        default=None, description="The machine's energy over the probe; None: not metered.")


class Level(BaseModel):
    """An instance count: its probes, and what held (None when nothing did)."""

    instances: int
    held: Probe | None
    probes: list[Probe]

    @property
    def aggregate_ops_per_s(self) -> float | None:
        return self.held.aggregate_ops_per_s if self.held else None

    @property
    def reported(self) -> Probe:
        """The probe the level reports: the one that held, else the last one tried."""
        return self.held or self.probes[-1]


class ScaleOutcome(BaseModel):
    config: ScaleConfig
    levels: list[Level]
    best_instances: int | None
    best_aggregate_ops_per_s: float | None
    stop_reason: ScaleStop
    stop_detail: str
    repeat: int = Field(default=1, description="Which run of --runs this is (the best one's "
                                               "outcome is the bundle's).")
    repeat_bests: list[float | None] = Field(
        default_factory=list, description="Each run's best aggregate ops/s (--runs).")


ProbeCallback = Callable[[Probe, list[CacheResult]], None]
MeterFactory = Callable[[], Meter]


def judge(result: CacheResult, sla_p99_ms: float) -> InstanceResult:
    reasons = []
    p99 = result.latency["all"].p99_ms
    if p99 > sla_p99_ms:
        reasons.append(f"p99 {p99:.3f} ms > {sla_p99_ms:g} ms")
    if result.saturated:
        reasons.append("generator saturated")
    if result.errors or result.lost or result.timeouts:
        reasons.append(f"{result.errors} errors, {result.lost} lost, {result.timeouts} timeouts")
    if result.offered_ops_per_s and result.ops_per_s < MIN_ACHIEVED * result.offered_ops_per_s:
        reasons.append(f"achieved {result.ops_per_s:,.0f} of {result.offered_ops_per_s:,.0f}"
                       " ops/s offered")
    return InstanceResult(
        address=result.config.address, ops_per_s=result.ops_per_s,
        offered_ops_per_s=result.offered_ops_per_s, p99_ms=p99,
        p999_ms=result.latency["all"].percentiles_us.get("99.9", 0) / 1000,
        hit_ratio=result.hit_ratio, saturated=result.saturated, errors=result.errors,
        passed=not reasons, reasons=reasons,
    )


def _probe(configs: list[CacheConfig], sla_p99_ms: float, fraction: float | None,
           on_probe: ProbeCallback | None, meter: MeterFactory | None
           ) -> tuple[Probe, list[CacheResult]]:
    probe_meter = meter() if meter is not None else None
    results = run_many(configs, probe_meter)
    judged = [judge(r, sla_p99_ms) for r in results]
    probe = Probe(
        instances=len(configs), fraction=fraction, passed=all(j.passed for j in judged),
        aggregate_ops_per_s=sum(j.ops_per_s for j in judged),
        worst_p99_ms=max(j.p99_ms for j in judged), results=judged,
        energy=None if probe_meter is None
        else OpsEnergy.of(probe_meter.reading, sum(r.ops for r in results)),
    )
    if on_probe is not None:
        on_probe(probe, results)
    return probe, results


def scale(config: ScaleConfig, launch: Launcher, on_probe: ProbeCallback | None = None,
          on_level: Callable[[Level, list[CacheResult]], None] | None = None,
          meter: MeterFactory | None = None) -> ScaleOutcome:
    """Add instances one at a time until the SLA breaks or the aggregate stops growing."""
    instances: list[Instance] = []
    levels: list[Level] = []
    best: Level | None = None
    stop, detail = ScaleStop.MAX_INSTANCES, f"reached {config.max_instances} instances"
    try:
        for count in range(1, config.max_instances + 1):
            instances.append(launch(count - 1))
            fresh = count - 1  # the one instance not prefilled yet
            base = [config.run.model_copy(update={
                "server": inst.host, "port": inst.port, "test_time_s": config.step_s,
                "requests": None, "rate": None, "prefill": config.run.prefill and i == fresh,
                "seed": (config.run.seed or 0) + i,
            }) for i, inst in enumerate(instances)]
            probes: list[Probe] = []
            probe, results = _probe(base, config.sla_p99_ms, None, on_probe, meter)
            probes.append(probe)
            held: Probe | None = probe if probe.passed else None
            held_results = results if probe.passed else []
            if held is None:
                maxima = [r.ops_per_s for r in results]
                for fraction in config.fractions:
                    rated = [c.model_copy(update={"rate": max(fraction * peak, 1.0),
                                                  "prefill": False})
                             for c, peak in zip(base, maxima, strict=True)]
                    probe, results = _probe(rated, config.sla_p99_ms, fraction, on_probe,
                                            meter)
                    probes.append(probe)
                    if probe.passed:
                        held, held_results = probe, results
                        break
            level = Level(instances=count, held=held, probes=probes)
            levels.append(level)
            if on_level is not None:
                on_level(level, held_results or results)
            if held is None:
                stop = ScaleStop.SLA_BROKEN
                detail = (f"with {count} instances no tested rate held p99 <= "
                          f"{config.sla_p99_ms:g} ms on every instance")
                break
            if best is not None and best.held is not None and held.aggregate_ops_per_s < \
                    best.held.aggregate_ops_per_s * (1 + config.min_gain):
                stop = ScaleStop.NO_GAIN
                detail = (f"{count} instances: {held.aggregate_ops_per_s:,.0f} ops/s, not "
                          f"{config.min_gain:.0%} more than {best.instances} instances' "
                          f"{best.held.aggregate_ops_per_s:,.0f}")
                break
            best = level
    finally:
        for instance in instances:
            instance.stop()
    return ScaleOutcome(
        config=config, levels=levels,
        best_instances=best.instances if best else None,
        best_aggregate_ops_per_s=best.aggregate_ops_per_s if best else None,
        stop_reason=stop, stop_detail=detail,
    )
