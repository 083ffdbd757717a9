"""Where the driver and the stack run: the same CPUs (shared) or disjoint ones (split).

``split`` gives the driver ⌈n/4⌉ of the n CPUs this process may use (the highest
numbered; or the ones ``--driver-cpus`` names) and the stack the rest, so the driver's
send lag is not the stack's doing. It needs at least 2 CPUs. The driver's worker
processes pin themselves (``LoadConfig.cpus``); the local stack is pinned by
``socialbench.stack.local.LocalStack.placed``.
"""

from __future__ import annotations

import math
import re
from enum import StrEnum

from pydantic import BaseModel, Field

from socialbench.workloads.driver.hostload import usable_cpus


class PlacementMode(StrEnum):
    SHARED = "shared"  # driver and stack on every CPU, as the OS schedules them
    SPLIT = "split"  # driver and stack on disjoint CPUs


class Placement(BaseModel):
    """Which CPUs the driver had and which the stack had, and why."""

    mode: PlacementMode
    driver_cpus: list[int]
    stack_cpus: list[int] | None = Field(
        description="None: the stack was not placed (not the local stack).")
    reason: str = ""

    @property
    def driver_affinity(self) -> tuple[int, ...] | None:
        """``LoadConfig.cpus``: None when the driver may run anywhere."""
        return tuple(self.driver_cpus) if self.mode is PlacementMode.SPLIT else None

    def describe(self) -> str:
        """One line for people."""
        if self.mode is PlacementMode.SHARED:
            text = f"shared: driver and stack on the same CPUs ({cpu_list(self.driver_cpus)})"
        else:
            stack = cpu_list(self.stack_cpus) if self.stack_cpus else "not placed"
            text = (f"split: driver on CPU {cpu_list(self.driver_cpus)}, "
                    f"stack on CPU {stack}")
        return f"{text}; {self.reason}" if self.reason else text


def cpu_list(cpus: list[int] | None) -> str:
    return ",".join(map(str, cpus or []))


def parse_cpus(text: str) -> list[int]:
    """``0``, ``0,2``, ``0-3``, ``0-1,6`` -> sorted CPU numbers."""
    cpus: set[int] = set()
    for part in filter(None, (p.strip() for p in text.split(","))):
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if match is None:
            raise ValueError(f"{text!r} is not a CPU list like 0, 0,2 or 0-3")
        low, high = int(match[1]), int(match[2] or match[1])
        if high < low:
            raise ValueError(f"{part!r}: a range goes from low to high")
        cpus.update(range(low, high + 1))
    if not cpus:
        raise ValueError("no CPU named")
    return sorted(cpus)


def plan_placement(mode: PlacementMode, driver_cpus: list[int] | None = None,
                   available: list[int] | None = None, reason: str = "",
                   stack_cpus: list[int] | None = None) -> Placement:
    """The placement asked for on the CPUs ``available`` (default: this process's).

    ``stack_cpus``: the CPUs the stack already runs on (``up --cpus``): it stays there,
    and a split gives the driver the other CPUs (or those of ``driver_cpus``).
    """
    cpus = available or usable_cpus()
    if stack_cpus:
        return _around_the_stack(mode, driver_cpus, cpus, reason, sorted(stack_cpus))
    if mode is PlacementMode.SHARED:
        if driver_cpus:
            raise ValueError("--driver-cpus goes with --cpu-placement split")
        return Placement(mode=mode, driver_cpus=cpus, stack_cpus=cpus, reason=reason)
    if len(cpus) < 2:
        raise ValueError(f"split placement needs at least 2 CPUs; this process may use "
                         f"{len(cpus)} ({cpu_list(cpus)})")
    if driver_cpus:
        unknown = sorted(set(driver_cpus) - set(cpus))
        if unknown:
            raise ValueError(f"CPU {cpu_list(unknown)} is not among the usable CPUs "
                             f"({cpu_list(cpus)})")
        driver = sorted(driver_cpus)
    else:
        driver = cpus[-math.ceil(len(cpus) / 4):]
    stack = [cpu for cpu in cpus if cpu not in driver]
    if not stack:
        raise ValueError("--driver-cpus leaves no CPU for the stack")
    return Placement(mode=mode, driver_cpus=driver, stack_cpus=stack, reason=reason)


def _around_the_stack(mode: PlacementMode, driver_cpus: list[int] | None, cpus: list[int],
                      reason: str, stack: list[int]) -> Placement:
    note = f"the stack on CPU {cpu_list(stack)}, as up --cpus started it"
    reason = "; ".join(filter(None, [reason, note]))
    if mode is PlacementMode.SHARED:
        if driver_cpus:
            raise ValueError("--driver-cpus goes with --cpu-placement split")
        return Placement(mode=mode, driver_cpus=cpus, stack_cpus=stack, reason=reason)
    driver = sorted(driver_cpus) if driver_cpus else [c for c in cpus if c not in stack]
    if not driver:
        raise ValueError(f"the stack runs on every usable CPU ({cpu_list(stack)}): a split "
                         "needs CPUs left for the driver (up --cpus fewer)")
    if set(driver) & set(stack):
        raise ValueError(f"--driver-cpus {cpu_list(driver)} overlaps the stack's CPUs "
                         f"({cpu_list(stack)}, up --cpus)")
    return Placement(mode=mode, driver_cpus=driver, stack_cpus=stack, reason=reason)
