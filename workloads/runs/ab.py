"""A/B on one machine: two configurations measured alternately, at the same rates.

A host whose speed drifts by a third within the hour cannot compare a figure measured now
with one measured an hour ago. So both configurations run at once (two local stacks, each
from its own data directory: two option sets of ``socialbench up``, or two checkouts),
and the driver offers them the same load in turn, step by step: at each rate, pair 1 runs
A then B, pair 2 B then A, and so on (ABBA), so that a drift linear in time falls on both
alike. An idle stack costs the other next to nothing.

Each step measures what the ramp measures: latency from the intended send time, achieved
rate, errors, and the CPU of the stack's own processes per response. Each pair gives the
ratio B / A of every measure; the answer is their geometric mean with a 95% confidence
interval from Student's t on the pairs' logarithms. A paired ratio of stack CPU per
request resolves a few percent in a handful of pairs on a host whose absolute figures
wander by a third.
"""

from __future__ import annotations

import contextlib
import csv
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field
from rich.console import Console
from rich.table import Table

from socialbench.errors import SocialbenchError
from socialbench.workloads.driver import DriverError, LoadConfig, LoadResult, run_load
from socialbench.workloads.probes.resources import SamplerFactory
from socialbench.workloads.ramp.engine import wait_until_idle

ARMS = ("A", "B")
CONFIDENCE = 0.95
# Student's t, two-sided 95%, by degrees of freedom (beyond the table: the normal's).
_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
        9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131,
        16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086, 25: 2.060, 30: 2.042}
METRICS = {
    "cpu_ms_per_request": "stack CPU per request",
    "p50_ms": "p50 latency",
    "p99_ms": "p99 latency",
    "achieved_rps": "achieved rate",
}


class AbError(SocialbenchError, RuntimeError):
    """The A/B run could not go on (a target down, the driver failed)."""


def t95(degrees: int) -> float:
    if degrees in _T95:
        return _T95[degrees]
    below = [d for d in _T95 if d < degrees]
    return _T95[max(below)] if degrees <= 30 else 1.96


@dataclass(frozen=True)
class Arm:
    """One configuration: its front end and how to sample its processes."""

    name: str  # A or B
    url: str
    description: str  # what it is, for the report (its data directory, its options)
    sampler: SamplerFactory


class AbConfig(BaseModel):
    """The alternation: ``load`` is every step's driver configuration (its url, rate,
    durations and seed are set per step)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    load: LoadConfig
    rates: tuple[float, ...] = Field(min_length=1)
    pairs: int = Field(default=5, ge=2, description="A-B pairs per rate (ABBA order).")
    step_duration_s: float = Field(default=20.0, gt=0)
    warmup_s: float = Field(default=5.0, ge=0)
    pause_s: float = Field(default=1.0, ge=0)
    settle_cores: float = Field(default=0.25, ge=0)
    settle_max_s: float = Field(default=30.0, ge=0)


class AbStep(BaseModel):
    """One arm's step: what the driver and the sampler measured."""

    arm: str
    pair: int
    rate: float
    started_at: datetime
    achieved_rps: float
    requests: int
    errors: int
    p50_ms: float
    p99_ms: float
    stack_cpu_seconds: float | None
    responses_in_span: int
    cpu_ms_per_request: float | None
    settle_s: float


class PairedRatio(BaseModel):
    """B / A of one measure over the pairs at one rate (or all rates)."""

    metric: str
    rate: float | None = Field(description="None: every rate's pairs together.")
    ratios: list[float]
    geometric_mean: float | None
    low: float | None = Field(description=f"{CONFIDENCE:.0%} confidence interval, low end.")
    high: float | None

    @property
    def clear(self) -> bool:
        """The interval excludes 1.0: B differs from A."""
        return (self.low is not None and self.high is not None
                and not self.low <= 1.0 <= self.high)

    def text(self) -> str:
        if self.geometric_mean is None:
            return "—"
        interval = ("" if self.low is None or self.high is None
                    else f" [{self.low:.3f}, {self.high:.3f}]")
        return f"{self.geometric_mean:.3f}{interval}"


def paired_ratio(metric: str, rate: float | None, a: Sequence[float | None],
                 b: Sequence[float | None]) -> PairedRatio:
    """Geometric mean of b/a over the pairs where both are known and positive, with a t
    interval on their logarithms (none below two pairs)."""
    ratios = [y / x for x, y in zip(a, b, strict=True)
              if x is not None and y is not None and x > 0 and y > 0]
    if not ratios:
        return PairedRatio(metric=metric, rate=rate, ratios=[], geometric_mean=None,
                           low=None, high=None)
    logs = [math.log(r) for r in ratios]
    mean = statistics.mean(logs)
    low = high = None
    if len(logs) >= 2:
        half = t95(len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
        low, high = math.exp(mean - half), math.exp(mean + half)
    return PairedRatio(metric=metric, rate=rate, ratios=ratios,
                       geometric_mean=math.exp(mean), low=low, high=high)


class AbResult(BaseModel):
    """Every step, and the paired ratios B / A."""

    config: AbConfig
    arms: dict[str, str] = Field(description="A and B: what each was.")
    steps: list[AbStep]
    ratios: list[PairedRatio]
    completed: bool

    def overall(self, metric: str) -> PairedRatio:
        return next(r for r in self.ratios if r.metric == metric and r.rate is None)


def arm_order(pair: int) -> tuple[int, int]:
    """A then B on odd pairs, B then A on even ones (ABBA)."""
    return (0, 1) if pair % 2 == 1 else (1, 0)


def compute_ratios(steps: Sequence[AbStep], rates: Sequence[float]) -> list[PairedRatio]:
    """Per measure: the ratio at each rate, then over every rate's pairs together."""
    found = []
    for metric in METRICS:
        everything: tuple[list[float | None], list[float | None]] = ([], [])
        for rate in rates:
            pairs = sorted({s.pair for s in steps if s.rate == rate})
            a: list[float | None] = []
            b: list[float | None] = []
            for pair in pairs:
                by_arm = {s.arm: s for s in steps if s.rate == rate and s.pair == pair}
                if set(by_arm) != set(ARMS):
                    continue  # a pair cut short
                a.append(getattr(by_arm["A"], metric))
                b.append(getattr(by_arm["B"], metric))
            found.append(paired_ratio(metric, rate, a, b))
            everything[0].extend(a)
            everything[1].extend(b)
        found.append(paired_ratio(metric, None, *everything))
    return found


class AbRunner:
    """Runs an :class:`AbConfig` over two arms, telling ``note`` of each step."""

    def __init__(self, config: AbConfig, arms: tuple[Arm, Arm],
                 note: Callable[[str], None] = lambda _: None) -> None:
        self.config = config
        self.arms = arms
        self.note = note
        self.steps: list[AbStep] = []

    def run(self) -> AbResult:
        """Every pair at every rate; Ctrl-C ends it with the pairs measured so far."""
        completed = True
        try:
            for rate in self.config.rates:
                for pair in range(1, self.config.pairs + 1):
                    for index in arm_order(pair):
                        self.steps.append(self._step(self.arms[index], pair, rate))
        except KeyboardInterrupt:
            completed = False
        return AbResult(
            config=self.config,
            arms={arm.name: f"{arm.url} ({arm.description})" for arm in self.arms},
            steps=self.steps, ratios=compute_ratios(self.steps, self.config.rates),
            completed=completed,
        )

    def _settle(self, arm: Arm) -> float:
        """Wait until the arm's processes are idle (a step leaves nothing queued for the
        next): the seconds waited."""
        settle = wait_until_idle(arm.sampler, self.config.settle_cores, self.config.settle_max_s)
        return settle.waited_s if settle is not None else 0.0

    def _step(self, arm: Arm, pair: int, rate: float) -> AbStep:
        config = self.config
        if self.steps and config.pause_s:
            time.sleep(config.pause_s)
        settle_s = max(self._settle(self.arms[0]), self._settle(self.arms[1]))
        load = config.load.model_copy(update={
            "url": arm.url, "rate": rate, "duration_s": config.step_duration_s,
            "warmup_s": config.warmup_s,
            "seed": ((config.load.seed or 0) + len(self.steps)) % 2**32,
        })
        sampler, why = arm.sampler()
        started = time.perf_counter()
        try:
            with sampler if sampler is not None else contextlib.nullcontext():
                result = run_load(load)
        except DriverError as exc:
            raise AbError(f"{arm.name} at {rate:,.6g} req/s: the driver could not run: "
                          f"{exc}") from exc
        span = time.perf_counter() - started
        step = self._record(arm, pair, rate, result, sampler.total_cpu_seconds
                            if sampler is not None else None, settle_s)
        cpu = ("" if step.cpu_ms_per_request is None
               else f", stack CPU {step.cpu_ms_per_request:.3f} ms/req")
        self.note(f"  pair {pair} {arm.name} {rate:>8,.6g} req/s: achieved "
                  f"{step.achieved_rps:,.1f}, p50 {step.p50_ms:.2f} ms, p99 {step.p99_ms:.2f} ms, "
                  f"errors {step.errors}{cpu}" + (f" ({why})" if why else "")
                  + f" [{span:.0f} s]")
        return step

    @staticmethod
    def _record(arm: Arm, pair: int, rate: float, result: LoadResult,
                cpu_seconds: float | None, settle_s: float) -> AbStep:
        responses = sum(second.completed for second in result.timeline)
        return AbStep(
            arm=arm.name, pair=pair, rate=rate, started_at=result.started_at,
            achieved_rps=result.achieved_rps, requests=result.scheduled,
            errors=result.errors.total, p50_ms=result.latency.p50_ms,
            p99_ms=result.latency.p99_ms, stack_cpu_seconds=cpu_seconds,
            responses_in_span=responses,
            cpu_ms_per_request=cpu_seconds * 1000 / responses
            if cpu_seconds is not None and responses else None,
            settle_s=settle_s,
        )


AB_JSON = "ab.json"
AB_CSV = "ab.csv"
STEP_COLUMNS = tuple(AbStep.model_fields)


class AbBundle(BaseModel):
    """ab.json: the result, what ran and where."""

    label: str
    created_at: datetime
    command_line: list[str]
    git: dict[str, object]
    hardware: dict[str, object]
    software: dict[str, object]
    stacks: dict[str, dict[str, object] | None] = Field(
        description="Each arm's stack configuration (workers, durability), when local.")
    result: AbResult


def write_bundle(directory: Path, bundle: AbBundle) -> Path:
    """ab.json and ab.csv (one row per step) in ``directory``."""
    directory.mkdir(parents=True, exist_ok=False)
    (directory / AB_JSON).write_text(bundle.model_dump_json(indent=2))
    with (directory / AB_CSV).open("w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=STEP_COLUMNS)
        writer.writeheader()
        for step in bundle.result.steps:
            writer.writerow(step.model_dump(mode="json"))
    return directory


def print_result(result: AbResult, console: Console) -> None:
    """The paired ratios B / A, per rate and overall, and what they say."""
    table = Table("measure", "rate (req/s)", "pairs", "B / A (geometric mean)",
                  f"{CONFIDENCE:.0%} interval", "verdict",
                  title="B / A, paired (ABBA order)")
    for ratio in result.ratios:
        low_high = ("—" if ratio.low is None or ratio.high is None
                    else f"{ratio.low:.3f} to {ratio.high:.3f}")
        verdict = ("B differs" if ratio.clear else "no clear difference"
                   ) if ratio.low is not None else "too few pairs"
        table.add_row(METRICS[ratio.metric], "all" if ratio.rate is None else f"{ratio.rate:,.6g}",
                      str(len(ratio.ratios)),
                      "—" if ratio.geometric_mean is None else f"{ratio.geometric_mean:.3f}",
                      low_high, verdict)
    console.print(table)
    for name, what in result.arms.items():
        console.print(f"{name}: {what}")
    cpu = result.overall("cpu_ms_per_request")
    if cpu.geometric_mean is not None:
        change = cpu.geometric_mean - 1
        console.print(
            f"[bold]B costs {abs(change):.1%} {'more' if change >= 0 else 'less'} stack CPU per "
            f"request than A[/] ({cpu.text()}, {CONFIDENCE:.0%} interval, {len(cpu.ratios)} "
            "pairs)" + ("" if cpu.clear else ": the interval holds 1.0, no clear difference"))
    if not result.completed:
        console.print("[yellow]Interrupted: the ratios are of the pairs measured.[/]")
