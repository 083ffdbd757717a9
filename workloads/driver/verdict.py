"""Why the driver sent late, if it did: its own CPU, a contended host, or neither.

Three verdicts, checked in this order (README "The driver's verdict"): ``driver-cpu``, a
worker used at least ``DRIVER_CPU_BUSY`` of a core over its sending time (less the
steal), so more processes or a lower rate help; ``host-contended``, the driver's CPUs
were ``HOST_BUSY``, the hypervisor stole ``HOST_STEAL`` or the driver waited in a run
queue ``RUN_QUEUE_WAIT`` of its time (a caveat, not the driver's fault); ``clean``,
neither. Send lag is *material* when its p99 exceeds ``MATERIAL_LAG_SHARE`` of a
reference (the measured p99 for ``socialbench load``, the SLA's threshold in a ramp)
and ``LAG_FLOOR_US`` (below it is the driver's own batching and timer granularity).
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

from pydantic import BaseModel, Field

from socialbench.workloads.driver.hostload import HostLoad

DRIVER_CPU_BUSY = 0.85
HOST_BUSY = 0.85
HOST_STEAL = 0.10
RUN_QUEUE_WAIT = 0.10
MATERIAL_LAG_SHARE = 0.10
LAG_FLOOR_US = 500


class Contention(StrEnum):
    """Which of the three cases happened."""

    CLEAN = "clean"
    DRIVER_CPU = "driver-cpu"
    HOST_CONTENDED = "host-contended"


class WorkerLoad(BaseModel):
    """One worker process over its sending time (warm-up and window)."""

    worker: int
    cpus: list[int] = Field(description="The CPUs it was allowed to run on.")
    cpu_share: float = Field(description="Its CPU time over its sending time (1 = a core).")
    wait_share: float | None = Field(
        description="Its time waiting in a run queue for a CPU, over its sending time "
                    "(None where /proc/self/schedstat is missing).")


class DriverVerdict(BaseModel):
    """The verdict, what it rests on, and what to do about it."""

    verdict: Contention
    explanation: str
    advice: str = Field(description='What to do about it ("" when clean).')
    workers: list[WorkerLoad]
    host: HostLoad | None = Field(description="None where /proc/stat could not be read.")
    send_lag_p99_ms: float
    latency_p99_ms: float
    lag_material: bool = Field(
        description="Send-lag p99 is a material share of the measured p99 (see the README).")

    @property
    def busiest(self) -> WorkerLoad | None:
        return max(self.workers, key=lambda w: w.cpu_share, default=None)

    @property
    def lag_share_of_p99(self) -> float:
        return self.send_lag_p99_ms / self.latency_p99_ms if self.latency_p99_ms else 0.0


def lag_is_material(lag_p99_us: float, reference_us: float) -> bool:
    """Whether a send-lag p99 weighs on a figure of ``reference_us`` (a p99 or an SLA)."""
    return lag_p99_us > LAG_FLOOR_US and lag_p99_us > MATERIAL_LAG_SHARE * reference_us


def _ms(us: float) -> str:
    return f"{us / 1000:.3g} ms" if us < 1_000_000 else f"{us / 1e6:.3g} s"


def _contention(host: HostLoad | None, workers: Sequence[WorkerLoad]) -> list[str]:
    """What made the host contended for the driver, in words (empty: it was not)."""
    signs = []
    if host is not None:
        several = len(host.cpus) > 1
        where = f"CPU{'s' if several else ''} {','.join(map(str, host.cpus))}"
        if host.busy_share >= HOST_BUSY:
            signs.append(f"the driver's {where} {'were' if several else 'was'} "
                         f"{host.busy_share:.0%} busy")
        if host.steal_share >= HOST_STEAL:
            signs.append(f"the hypervisor stole {host.steal_share:.0%} of their time")
    waits = [w.wait_share for w in workers if w.wait_share is not None]
    if waits and max(waits) >= RUN_QUEUE_WAIT:
        signs.append(f"a driver process waited {max(waits):.0%} of its time in a run queue")
    return signs


def _contention_advice(host: HostLoad | None, workers: Sequence[WorkerLoad]) -> str:
    """What helps against contention (more driver processes or a lower rate would not)."""
    cpus = sorted({cpu for w in workers for cpu in w.cpus})
    placed = host is not None and len(cpus) < host.online_cpus
    stolen = host is not None and host.steal_share >= HOST_STEAL
    waited = max((w.wait_share or 0.0 for w in workers), default=0.0) >= RUN_QUEUE_WAIT
    shared = (host is not None and host.busy_share >= HOST_BUSY) or waited
    advice = []
    if shared and placed:
        advice.append(f"other processes ran on the driver's own CPUs "
                      f"({','.join(map(str, cpus))}): keep them off")
    elif shared:
        advice.append("the driver shares the CPUs with other processes, the stack among them: "
                      "give it CPUs of its own (--cpu-placement split) or run it on another "
                      "machine")
    if stolen:
        advice.append("the hypervisor gave the CPUs to other machines (steal): measure on a "
                      "quieter or dedicated machine")
    return "; ".join([*advice, "more driver processes or a lower rate would not help"])


def judge_driver(workers: Sequence[WorkerLoad], host: HostLoad | None, lag_p99_us: float,
                 latency_p99_us: float) -> DriverVerdict:
    """The verdict on one run from its workers' CPU, the host's load and its latencies."""
    lag = _ms(lag_p99_us)
    busiest = max(workers, key=lambda w: w.cpu_share, default=None)
    signs = _contention(host, workers)
    # Stolen time never shows as anyone's CPU time: a core's worth is what the VM got.
    available = 1.0 - min(host.steal_share, 0.5) if host is not None else 1.0
    if busiest is not None and busiest.cpu_share / available >= DRIVER_CPU_BUSY:
        verdict = Contention.DRIVER_CPU
        of_what = f" of the {available:.0%} the hypervisor left" if available < 0.99 else ""
        explanation = (f"driver process {busiest.worker} used {busiest.cpu_share:.0%} of a "
                       f"core{of_what}: the driver is out of CPU (send lag p99 {lag})")
        advice = "use more driver processes (-P) on free CPUs, or a lower rate"
    elif signs:
        verdict = Contention.HOST_CONTENDED
        explanation = ("the host was contended: " + "; ".join(signs)
                       + f" (send lag p99 {lag}; the busiest driver process used "
                       f"{busiest.cpu_share if busiest else 0:.0%} of a core)")
        advice = _contention_advice(host, workers)
    else:
        verdict = Contention.CLEAN
        explanation = (f"the driver had CPU to spare (busiest process "
                       f"{busiest.cpu_share if busiest else 0:.0%} of a core) on an "
                       f"uncontended host (send lag p99 {lag})")
        advice = ""
    return DriverVerdict(
        verdict=verdict, explanation=explanation, advice=advice, workers=list(workers),
        host=host, send_lag_p99_ms=lag_p99_us / 1000, latency_p99_ms=latency_p99_us / 1000,
        lag_material=lag_is_material(lag_p99_us, latency_p99_us),
    )


UNTRUSTED = ("the driver's result cannot be trusted (out of CPU, or send lag over "
             f"{MATERIAL_LAG_SHARE:.0%} of the SLA)")  # the stop rule, in the ramp's words


def rules_text(sla: bool = True) -> str:
    """The rules above in a sentence or three, for reports (the thresholds from here)."""
    reference = ("the tightest SLA threshold (lag only adds to latencies counted from the "
                 "intended send time, so it can fail a step, never pass one)" if sla
                 else "the measured p99")
    return (
        f"driver-cpu: a driver process used {DRIVER_CPU_BUSY:.0%} or more of a core over its "
        "sending time, so the driver is out of CPU and the step cannot be trusted. "
        f"host-contended: the driver's CPUs were {HOST_BUSY:.0%} or more busy (any process), "
        f"the hypervisor stole {HOST_STEAL:.0%} or more of their time, or a driver process "
        f"waited {RUN_QUEUE_WAIT:.0%} or more of its time in a run queue; a caveat, not a "
        "stop. clean: neither. Send lag counts against a result only when its p99 is over "
        f"{MATERIAL_LAG_SHARE:.0%} of {reference} and over {LAG_FLOOR_US / 1000:g} ms."
    )
