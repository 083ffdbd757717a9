"""What limited a step's throughput, named from the CPU each process of the stack used.

Three answers, in this order: one component at or near all the cores it can use (a
service's worker processes are one core each, Redis one core), naming it and its worker
count and suggesting the obvious next run; else every CPU of the machine busy (the
stack and the driver together); else neither, and the latency comes from waiting
(stores, locks, queues), not from CPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

# At or above this share of the cores it can use, a component is the limit.
BUSY = 0.9
# At or above this share of its CPUs, the machine is: the scheduler, interrupts and
# everything else on it leave no more (measured: a 2-core box tops out near 1.75 cores).
CPUS_BUSY = 0.8
SINGLE_THREADED = {"redis": 1}
# Cores taken by others (processes not ours, steal) worth naming, and the share of the
# CPUs at which they, not the stack, crowd the step.
OTHERS_SHOWN = 0.05
OTHERS_CROWDING = 0.25


class Limit(StrEnum):
    PROCESS = "process"
    CPUS = "cpus"
    WAITING = "waiting"
    UNMEASURED = "unmeasured"


@dataclass(frozen=True)
class ComponentLoad:
    """One component's CPU over a step: cores kept busy on average, and how many it can use."""

    name: str
    kind: str
    cores: float
    usable_cores: float

    @property
    def busy(self) -> float:
        return self.cores / self.usable_cores if self.usable_cores else 0.0


@dataclass(frozen=True)
class Bottleneck:
    """The verdict on one step, in words a reader can act on."""

    limit: Limit
    text: str
    component: str | None = None
    suggestion: str | None = None
    cpus_busy: bool = False  # every CPU the stack may use was busy (CPUS_BUSY)


def usable_cores(name: str, kind: str, cpus: int, workers: dict[str, int]) -> float:
    """How many cores a component of the local stack can keep busy; ``workers``: each
    service's worker processes (1 where not known)."""
    if kind == "service":
        return float(min(workers.get(name, 1), cpus))
    return float(min(SINGLE_THREADED.get(name, cpus), cpus))


def find_bottleneck(components: list[ComponentLoad], cpus: int, driver_cores: float = 0.0,
                    host_cores: float | None = None) -> Bottleneck:
    """The verdict on a step from its components' loads and the machine's ``cpus``.

    ``host_cores``: the cores busy or stolen on the whole machine over the step (from
    /proc/stat), when measured over every CPU; what exceeds the stack's and the driver's
    own is other processes' and the hypervisor's, and counts towards "every CPU busy".
    """
    if not components:
        return Bottleneck(Limit.UNMEASURED, "not measured: no per-process CPU for this step")
    hottest = max(components, key=lambda c: c.busy)
    ours = sum(c.cores for c in components) + driver_cores
    total = max(ours, host_cores or 0.0)
    others = total - ours
    cpus_busy = total >= CPUS_BUSY * cpus
    if hottest.busy >= BUSY:
        workers = round(hottest.usable_cores)
        text = (f"{hottest.name} at {hottest.busy:.0%} of the {workers} core"
                f"{'s' if workers != 1 else ''} it can use")
        suggestion = None
        if hottest.kind == "service" and total < CPUS_BUSY * cpus:
            text += f" ({workers} worker{'s' if workers != 1 else ''})"
            suggestion = f"--workers {hottest.name}={workers + 1}"
        elif hottest.kind == "service":
            text += f" ({workers} worker{'s' if workers != 1 else ''}), with every CPU busy"
        return Bottleneck(Limit.PROCESS, text, hottest.name, suggestion, cpus_busy)
    if cpus_busy:
        shares = f"stack {ours - driver_cores:.2f}, driver {driver_cores:.2f}"
        if others >= OTHERS_SHOWN:
            shares += f", other processes and steal {others:.2f}"
        crowded = others >= OTHERS_CROWDING * cpus
        return Bottleneck(
            Limit.CPUS,
            f"all {cpus} CPUs busy ({total:.2f} cores: {shares}); the hottest is "
            f"{hottest.name} at {hottest.cores:.2f} cores",
            hottest.name,
            "a quiet machine: other processes or the hypervisor took "
            f"{others:.2f} cores of {cpus}" if crowded
            else "a machine with more cores, or less CPU per request",
            cpus_busy=True,
        )
    return Bottleneck(
        Limit.WAITING,
        f"no process at its limit and {total:.2f} of {cpus} CPUs busy: latency comes from "
        f"waiting (stores, locks, queues), not from CPU; the hottest is {hottest.name} at "
        f"{hottest.busy:.0%} of what it can use",
        hottest.name,
    )
