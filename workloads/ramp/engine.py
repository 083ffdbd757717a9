"""The SLA ramp: the highest offered rate at which a target holds a latency SLA.

:class:`Ramp` offers ``start_rate`` for a step (warm-up, then the measured duration),
raises it by ``step_rate``, and stops at the first step that fails (:func:`judge_step`):
a percentile above its SLA (``--sla p99=2s``), achieved below ``min_achieved_ratio`` of
the realised schedule, errors above ``max_error_ratio``, or a driver result not to be
trusted (:func:`driver_doubts`; a contended host is a caveat, not a stop). The answer is
the last passing step; ``refine`` bisects to ``resolution`` and confirms with a longer
run (after a failure, :func:`confirmation_after`; ``MAX_CONFIRM_ATTEMPTS`` at most);
``repeat`` runs it all again after ``reset``. Each step starts on an idle target (the
settle) and after a measure of the host's speed (:mod:`.calibration`). The procedure in
full: workloads/ramp/README.md.
"""

from __future__ import annotations

import contextlib
import re
import secrets
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from socialbench.workloads.driver import DriverError, LoadConfig, LoadResult, SecondStats, run_load
from socialbench.workloads.driver.verdict import MATERIAL_LAG_SHARE, Contention, lag_is_material
from socialbench.workloads.probes.energy import EnergyReading, IntervalMeter, Unavailable
from socialbench.workloads.probes.resources import ComponentUsage, ResourceSampler, SamplerFactory
from socialbench.workloads.ramp.calibration import (
    Calibration,
    CalibrationError,
    calibrate,
    calibrate_start,
)

DEFAULT_SLA = "p99=2s"
STARTUP_S = 1.0  # starting the driver's processes, for time-left estimates
SETTLE_PROBE_S = 0.5  # the window over which the target's CPU is measured before a step
MAX_CONFIRM_ATTEMPTS = 3
CONFIRM_BACKOFF = 0.05  # after a failed confirmation, the next is at least this share lower

_SLA_PATTERN = re.compile(
    r"\s*p(?P<percentile>\d+(?:\.\d+)?)\s*(?:<=|=|<)\s*(?P<value>\d+(?:\.\d*)?|\.\d+)\s*"
    r"(?P<unit>us|µs|ms|s)?\s*"
)
_UNIT_MS = {"us": 0.001, "µs": 0.001, "ms": 1.0, "s": 1000.0, None: 1.0}


def format_ms(ms: float, digits: int = 3) -> str:
    """A latency for people: 850 µs, 12.3 ms, 2 s (``digits`` significant digits)."""
    if ms < 1:
        return f"{ms * 1000:.{digits}g} µs"
    if ms < 1000:
        return f"{ms:.{digits}g} ms"
    return f"{ms / 1000:.{digits}g} s"


def format_above(ms: float, limit_ms: float) -> str:
    """``ms``, which is above ``limit_ms``, with 3 significant digits, or as many more as
    it takes not to read as the limit (500.2 ms against 500 ms, not "500 ms")."""
    for digits in range(3, 8):
        text = format_ms(ms, digits)
        if text != format_ms(limit_ms, digits):
            return text
    return text


class Sla(BaseModel):
    """A latency percentile and the most it may be, e.g. p99 <= 2 s."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    percentile: float = Field(gt=0, le=100)
    threshold_ms: float = Field(gt=0)

    @classmethod
    def parse(cls, text: str) -> Sla:
        """``p99=2s``, ``p99.9<=50ms``, ``p50=800us`` (a bare number is milliseconds)."""
        match = _SLA_PATTERN.fullmatch(text)
        if match is None:
            raise ValueError(f"{text!r} is not an SLA like p99=2s, p99.9=50ms or p50<=800us")
        threshold = float(match["value"]) * _UNIT_MS[match["unit"]]
        return cls(percentile=float(match["percentile"]), threshold_ms=threshold)

    @property
    def key(self) -> str:
        """``p99``, ``p99.9``: the name of the percentile."""
        return f"p{self.percentile:g}"

    def __str__(self) -> str:
        return f"{self.key} <= {format_ms(self.threshold_ms)}"


class StopReason(StrEnum):
    """Why a step failed, or why a ramp stopped."""

    SLA = "sla"  # a latency percentile above its threshold
    ACHIEVED = "achieved"  # achieved below the minimum share of the offered rate
    ERRORS = "errors"  # errors above the maximum share of the requests
    SATURATED = "driver-saturated"  # the driver's result is not to be trusted (driver_doubts)
    MAX_RATE = "max-rate"  # the configured maximum rate held the SLA
    MAX_STEPS = "max-steps"  # the configured number of steps held the SLA
    DRIVER_ERROR = "driver-error"  # the driver could not run (target down, worker died)
    INTERRUPTED = "interrupted"  # stopped by the user
    DECLINES = "declines"  # achieved fell stop_after_declines steps in a row (PerfKit's rule)


class Phase(StrEnum):
    """Which part of the procedure a step belongs to."""

    RAMP = "ramp"
    REFINE = "refine"
    CONFIRM = "confirm"


class RampConfig(BaseModel):
    """The whole procedure. ``load`` is the driver's configuration of every step; its
    ``rate``, ``duration_s`` and ``warmup_s`` (and its ``seed``, derived) are set per step."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    load: LoadConfig
    start_rate: float = Field(default=1000.0, gt=0, description="Offered req/s of the first step.")
    step_rate: float = Field(default=500.0, gt=0, description="Added to the rate after each step.")
    step_duration_s: float = Field(default=300.0, gt=0, description="Measured time of each step.")
    warmup_s: float = Field(default=30.0, ge=0, description="Load sent before each step's window.")
    slas: tuple[Sla, ...] = Field(default=(Sla.parse(DEFAULT_SLA),), min_length=1)
    max_error_ratio: float = Field(default=0.01, ge=0, le=1)
    min_achieved_ratio: float = Field(default=0.95, gt=0, le=1)
    stop_on_saturation: bool = Field(
        default=True, description="A step whose driver result cannot be trusted (driver out "
                                  "of CPU, or send lag material to the SLA) fails.")
    max_rate: float | None = Field(default=None, gt=0, description="Never offer more than this.")
    max_steps: int = Field(default=50, ge=1, description="Ramp steps per repeat at most.")
    refine: bool = False
    resolution_rps: float | None = Field(default=None, gt=0, description="Default: step_rate / 10.")
    confirm_duration_s: float | None = Field(default=None, gt=0, description="Default: 2 steps.")
    repeat: int = Field(default=1, ge=1)
    pause_s: float = Field(default=2.0, ge=0, description="Idle between steps (the target drains).")
    settle_cores: float = Field(
        default=0.25, ge=0, description="Before each step, wait until the target's processes "
                                        "use less CPU than this, in cores (0: do not wait).")
    settle_max_s: float = Field(
        default=120.0, ge=0, description="Wait at most this long; then the step starts anyway "
                                         "(recorded with it).")
    calibrate: bool = Field(
        default=True, description="Measure the host's speed before each step and after the "
                                  "last (about 0.2 s each; workloads/ramp/calibration.py).")
    host_drift: float = Field(
        default=0.10, gt=0, description="Flag a step when the host's speed moved more than "
                                        "this share from the run's first measurement.")
    stop_after_declines: int | None = Field(
        default=None, ge=1, description="Stop after this many steps in a row whose achieved "
        "req/s fell below the step before's, and not at a failed step (PerfKit's rule); the "
        "answer is the highest step that passed. None: stop at the first failed step.")

    @property
    def resolution(self) -> float:
        return self.resolution_rps or self.step_rate / 10

    @property
    def confirm_duration(self) -> float:
        return self.confirm_duration_s or 2 * self.step_duration_s

    @property
    def seed(self) -> int:
        """The seed step seeds derive from (fixed in :meth:`Ramp.__init__` when None)."""
        return self.load.seed or 0


@dataclass(frozen=True)
class Verdict:
    """Whether a step passed, and if not every criterion it failed, most telling first."""

    failures: tuple[StopReason, ...] = ()
    reasons: tuple[str, ...] = ()
    doubts: tuple[str, ...] = ()  # why the driver's result cannot be trusted, stop or not

    @property
    def passed(self) -> bool:
        return not self.failures


def sla_text(slas: Sequence[Sla]) -> str:
    """The SLAs as data, in one order: equal sets of SLAs give equal text."""
    return " / ".join(str(sla) for sla in sorted(slas, key=lambda s: (s.percentile,
                                                                       s.threshold_ms)))


def tightest_sla(slas: Sequence[Sla]) -> Sla:
    """The SLA with the lowest threshold: the one the driver's send lag is judged against."""
    return min(slas, key=lambda sla: sla.threshold_ms)


def sla_values_ms(result: LoadResult, slas: Sequence[Sla]) -> dict[str, float]:
    """Each SLA's percentile of the step's latency (from the intended send time), in ms."""
    return {sla.key: result.latency.percentile_us(sla.percentile) / 1000 for sla in slas}


def driver_doubts(result: LoadResult, slas: Sequence[Sla]) -> list[str]:
    """Why the step's result cannot be trusted against its SLA (empty: it can).

    The driver out of CPU, or its send-lag p99 a material share (over 10%, and over
    0.5 ms) of the tightest SLA threshold: lag only adds to latencies counted from the
    intended send time, so it can fail a step, and a pass holds whatever the lag.
    """
    driver = result.driver
    if driver is None:  # a result from before the verdict: its own flag
        return [f"the driver reports itself saturated: {result.warnings[0]}"
                if result.warnings else "the driver reports itself saturated"
                ] if result.saturated else []
    doubts = []
    if driver.verdict is Contention.DRIVER_CPU:
        doubts.append(f"{driver.explanation}; {driver.advice}")
    tightest = tightest_sla(slas)
    if lag_is_material(driver.send_lag_p99_ms * 1000, tightest.threshold_ms * 1000):
        doubts.append(
            f"send lag p99 {format_ms(driver.send_lag_p99_ms)} is "
            f"{driver.send_lag_p99_ms / tightest.threshold_ms:.0%} of the SLA {tightest} "
            f"(more than {MATERIAL_LAG_SHARE:.0%}): the driver's lateness may decide the "
            f"step ({driver.verdict.value}: {driver.advice or driver.explanation})"
        )
    return doubts


def judge_step(result: LoadResult, config: RampConfig) -> Verdict:
    """Apply the stop criteria to one step's result."""
    failures: list[StopReason] = []
    reasons: list[str] = []
    values = sla_values_ms(result, config.slas)
    broken = [sla for sla in config.slas if values[sla.key] > sla.threshold_ms]
    if broken:
        failures.append(StopReason.SLA)
        reasons.extend(f"{s.key} {format_above(values[s.key], s.threshold_ms)} breaks the SLA {s}"
                       for s in broken)
    expected = result.scheduled_rps or result.offered_rps
    if result.achieved_rps < config.min_achieved_ratio * expected:
        failures.append(StopReason.ACHIEVED)
        reasons.append(
            f"achieved {result.achieved_rps:,.1f} req/s is below {config.min_achieved_ratio:.0%} "
            f"of the {expected:,.1f} req/s offered"
        )
    if result.error_ratio > config.max_error_ratio:
        failures.append(StopReason.ERRORS)
        reasons.append(
            f"{result.errors.total:,} errors ({result.error_ratio:.2%} of the requests) exceed "
            f"{config.max_error_ratio:.2%}"
        )
    doubts = driver_doubts(result, config.slas)
    if doubts and config.stop_on_saturation:
        failures.append(StopReason.SATURATED)
        reasons.extend(f"the driver's result cannot be trusted: {doubt}" for doubt in doubts)
    return Verdict(tuple(failures), tuple(reasons), tuple(doubts))


@dataclass
class StepPlan:
    """A step about to run."""

    repeat: int
    repeats: int
    index: int
    phase: Phase
    load: LoadConfig
    runs_left: int | None = None  # planned runs after this one in this repeat, when known

    @property
    def expected_s(self) -> float:
        return STARTUP_S + self.load.warmup_s + self.load.duration_s


@dataclass
class Usage:
    """CPU and memory of the target's processes over one step, or why they are unknown."""

    components: list[ComponentUsage] | None
    note: str = ""
    cpus: list[int] | None = None  # the CPUs the target's processes could run on
    cpus_busy_cores: float | None = None  # how busy those were (anyone's work and steal)

    @property
    def cpu_seconds(self) -> float | None:
        if self.components is None:
            return None
        return sum(c.cpu_seconds for c in self.components)


@dataclass(frozen=True)
class Settle:
    """The wait before a step for the target to go idle."""

    waited_s: float
    busy_cores: float  # the target's CPU in the last window before the step started
    first_busy_cores: float  # ... and in the first (what the last step left behind)
    idle: bool  # False: still busy at settle_max_s, and the step started anyway


@dataclass
class StepRun:
    """One step: what the driver measured, the target's resources and energy, the verdict."""

    repeat: int
    index: int
    phase: Phase
    result: LoadResult
    verdict: Verdict
    sla_values_ms: dict[str, float]
    usage: Usage
    energy: EnergyReading
    span_s: float  # wall time the resources and energy were measured over
    responses_in_span: int  # every response in that time, warm-up included
    slas: tuple[Sla, ...] = ()  # what it was judged against
    settle: Settle | None = None  # None: not waited for (no process list, or settle_cores 0)
    calibration: Calibration | None = None  # the host's speed just before the step

    @property
    def rate(self) -> float:
        return self.result.offered_rps

    @property
    def passed(self) -> bool:
        return self.verdict.passed

    @property
    def name(self) -> str:
        """A file-name stem: ``r1-s03-ramp-2000rps``."""
        return f"r{self.repeat}-s{self.index:02d}-{self.phase.value}-{self.rate:g}rps"


@dataclass
class RampRun:
    """One repeat of the whole ramp."""

    repeat: int
    steps: list[StepRun] = field(default_factory=list)
    stop_reason: StopReason = StopReason.MAX_STEPS
    stop_detail: str = ""
    answer: StepRun | None = None  # the step whose rate and latency are the answer
    refined: bool = False
    confirmed: bool | None = None  # None: no confirmation was asked for

    @property
    def max_rate_rps(self) -> float | None:
        return self.answer.rate if self.answer else None

    @property
    def lowest_failed_rps(self) -> float | None:
        """The lowest rate whose ramp or bisection step failed: where the knee was seen."""
        return min((step.rate for step in self.steps
                    if not step.passed and step.phase is not Phase.CONFIRM), default=None)

    @property
    def max_throughput_rps(self) -> float | None:
        """The highest achieved req/s of any step of the ramp (PerfKit's max throughput)."""
        return max((step.result.achieved_rps for step in self.steps
                    if step.phase is Phase.RAMP), default=None)

    @property
    def gap_below_failure(self) -> float | None:
        """How far below the lowest failed rate the answer is, as a share of that rate."""
        failed = self.lowest_failed_rps
        if self.answer is None or not failed:
            return None
        return 1 - self.answer.rate / failed


@dataclass
class RampOutcome:
    """Every repeat, and the statistics of their answers."""

    runs: list[RampRun]
    final_calibration: Calibration | None = None  # the host's speed after the last step

    @property
    def answers(self) -> list[float]:
        """Each finished repeat's maximum rate at the SLA (0 where no tested rate held it,
        or, refined, none held it again in its confirmation runs)."""
        return [run.max_rate_rps or 0.0 for run in self.runs
                if run.stop_reason is not StopReason.INTERRUPTED]

    @property
    def best(self) -> RampRun | None:
        """The repeat with the highest answer (the lowest p99 among equals)."""
        held = [(run.answer.rate, -run.answer.result.latency.p99_ms, run)
                for run in self.runs if run.answer is not None]
        if not held:
            return None
        return max(held, key=lambda item: item[:2])[2]

    @property
    def median_rps(self) -> float | None:
        return statistics.median(self.answers) if self.answers else None

    @property
    def mean_rps(self) -> float | None:
        return statistics.mean(self.answers) if self.answers else None

    @property
    def coefficient_of_variation(self) -> float | None:
        """Sample standard deviation over mean of the answers (None below two repeats)."""
        answers = self.answers
        if len(answers) < 2 or statistics.mean(answers) == 0:
            return None
        return statistics.stdev(answers) / statistics.mean(answers)

    @property
    def interrupted(self) -> bool:
        return any(run.stop_reason is StopReason.INTERRUPTED for run in self.runs)


class RampObserver:
    """Hooks called while the ramp runs (a live view, a bundle writer). All optional."""

    def repeat_started(self, repeat: int, repeats: int) -> None: ...

    def step_started(self, plan: StepPlan) -> None: ...

    def second(self, stats: SecondStats) -> None: ...

    def step_finished(self, step: StepRun) -> None: ...

    def repeat_finished(self, run: RampRun) -> None: ...

    def note(self, message: str) -> None: ...


ResetHook = Callable[[int], None]


def no_sampler() -> tuple[ResourceSampler | None, str]:
    return None, "no process list of the target was given"


def wait_until_idle(sampler: SamplerFactory, cores: float, max_s: float) -> Settle | None:
    """Wait until the processes ``sampler`` sees use under ``cores`` of CPU, probing every
    :data:`SETTLE_PROBE_S` (at most ``max_s``); None when there is nothing to wait for
    (``cores`` 0, or no processes seen)."""
    if not cores:
        return None
    probe, _ = sampler()
    if probe is None:
        return None
    started = time.perf_counter()
    try:
        first = busy = probe.busy_cores(SETTLE_PROBE_S)
        while busy >= cores and time.perf_counter() - started < max_s:
            busy = probe.busy_cores(SETTLE_PROBE_S)
    finally:
        probe.close()
    return Settle(time.perf_counter() - started, busy, first, idle=busy < cores)


def confirmation_after(passed: Sequence[StepRun], failed_rps: float,
                       failures: int = 1) -> StepRun | None:
    """The step to confirm after ``failures`` confirmations failed, the last at
    ``failed_rps``: after the first, the highest of ``passed`` below it; after more, the
    highest at least :data:`CONFIRM_BACKOFF` lower; None when there is none."""
    if failures == 1:
        below = [step for step in passed if step.rate < failed_rps]
    else:
        ceiling = failed_rps * (1 - CONFIRM_BACKOFF)
        below = [step for step in passed if step.rate <= ceiling]
    return max(below, key=lambda step: step.rate, default=None)


class Ramp:
    """Runs a :class:`RampConfig` against its target, telling ``observers`` as it goes."""

    def __init__(
        self,
        config: RampConfig,
        *,
        sampler: SamplerFactory = no_sampler,
        meter: Callable[[], IntervalMeter] | None = None,
        reset: ResetHook | None = None,
        observers: Sequence[RampObserver] = (),
        calibrator: Callable[[], Calibration] = calibrate,
        start_calibrator: Callable[[], Calibration] = calibrate_start,
    ) -> None:
        if config.load.seed is None:
            config = config.model_copy(
                update={"load": config.load.model_copy(update={"seed": secrets.randbits(32)})}
            )
        self.config = config
        self.sampler = sampler
        # A fresh meter per step (probes.energy's plan); None: energy not measured.
        self.meter = meter or (lambda: Unavailable("no energy meter given to the ramp"))
        self.reset = reset
        self.observers = list(observers)
        self.calibrator = calibrator
        self.start_calibrator = start_calibrator
        self._calibrated = False

    def run(self) -> RampOutcome:
        """Every repeat; stops early (keeping what was measured) on Ctrl-C."""
        runs: list[RampRun] = []
        for repeat in range(1, self.config.repeat + 1):
            for observer in self.observers:
                observer.repeat_started(repeat, self.config.repeat)
            run = RampRun(repeat)
            runs.append(run)
            try:
                if self.reset is not None:
                    self.reset(repeat)
                self._ramp(run)
            except KeyboardInterrupt:
                run.stop_reason = StopReason.INTERRUPTED
                run.stop_detail = "stopped by the user"
                run.answer = None
            for observer in self.observers:
                observer.repeat_finished(run)
            if run.stop_reason is StopReason.INTERRUPTED:
                break
        final = None
        if runs and runs[-1].stop_reason is not StopReason.INTERRUPTED:
            with contextlib.suppress(KeyboardInterrupt):
                final = self._calibrate()
        return RampOutcome(runs, final_calibration=final)

    # ------------------------------------------------------------------ the procedure

    def _ramp(self, run: RampRun) -> None:
        config = self.config
        rate = config.start_rate
        last_pass: StepRun | None = None
        first_fail: StepRun | None = None
        previous: StepRun | None = None  # with stop_after_declines: the step before
        declines = 0
        while True:
            if len(run.steps) >= config.max_steps:
                run.stop_reason = StopReason.MAX_STEPS
                run.stop_detail = (f"{config.max_steps} steps (--max-steps)"
                                   if config.stop_after_declines is not None else
                                   f"{config.max_steps} steps held the SLA (--max-steps)")
                break
            step = self._step(run, Phase.RAMP, rate)
            if step is None:
                break
            if config.stop_after_declines is not None:
                declines = declines + 1 if previous is not None and (
                    step.result.achieved_rps < previous.result.achieved_rps) else 0
                previous = step
                if step.passed:
                    last_pass = step
                if declines >= config.stop_after_declines:
                    run.stop_reason = StopReason.DECLINES
                    run.stop_detail = (f"at {rate:,.6g} req/s, achieved fell {declines} steps in "
                                       "a row (--stop-after-declines)")
                    break
            elif not step.passed:
                first_fail = step
                run.stop_reason = step.verdict.failures[0]
                run.stop_detail = f"at {rate:,.6g} req/s: " + "; ".join(step.verdict.reasons)
                break
            else:
                last_pass = step
            if config.max_rate is not None and rate >= config.max_rate:
                run.stop_reason = StopReason.MAX_RATE
                run.stop_detail = (f"{rate:,.6g} req/s (--max-rate)"
                                   if config.stop_after_declines is not None else
                                   f"{rate:,.6g} req/s (--max-rate) held the SLA")
                break
            rate += config.step_rate
            if config.max_rate is not None:
                rate = min(rate, config.max_rate)
        run.answer = last_pass
        if config.refine and first_fail is not None:
            self._refine(run, last_pass, first_fail)

    def _refine(self, run: RampRun, last_pass: StepRun | None, first_fail: StepRun) -> None:
        """Bisect between the last pass (or 0) and the first failure, then confirm."""
        run.refined = True
        low = last_pass.rate if last_pass else 0.0
        high = first_fail.rate
        while high - low > self.config.resolution:
            middle = round((low + high) / 2, 3)
            step = self._step(run, Phase.REFINE, middle, runs_left=self._bisections(low, high))
            if step is None:
                return
            if step.passed:
                low = middle
            else:
                high = middle
        run.confirmed = False
        run.answer = None
        passed = [step for step in run.steps if step.passed]
        tried: list[str] = []
        candidate = max(passed, key=lambda step: step.rate, default=None)
        while candidate is not None:
            below = confirmation_after(passed, candidate.rate, failures=len(tried) + 1)
            last = below is None or len(tried) == MAX_CONFIRM_ATTEMPTS - 1
            step = self._step(
                run, Phase.CONFIRM, candidate.rate, duration_s=self.config.confirm_duration,
                runs_left=0 if last else None,
            )
            if step is None:
                return
            if step.passed:
                run.confirmed = True
                run.answer = step
                break
            tried.append(f"{candidate.rate:,.6g} req/s ({'; '.join(step.verdict.reasons)})")
            candidate = None if last else below
        if tried:
            run.stop_detail += ". Confirmation failed at " + ", ".join(tried)
        if not passed:
            run.stop_detail += ". No tested rate held the SLA"

    def _bisections(self, low: float, high: float) -> int:
        """Bisection runs after the current one, plus the confirmation."""
        runs = 0
        width = (high - low) / 2
        while width > self.config.resolution:
            width /= 2
            runs += 1
        return runs + 1

    def _step(
        self,
        run: RampRun,
        phase: Phase,
        rate: float,
        *,
        duration_s: float | None = None,
        runs_left: int | None = None,
    ) -> StepRun | None:
        """Run and judge one step; None (with the stop reason set) when the driver failed."""
        config = self.config
        load = config.load.model_copy(
            update={
                "rate": rate,
                "duration_s": duration_s or config.step_duration_s,
                "warmup_s": config.warmup_s,
                # Step k of every repeat draws the same requests: repeats then differ by
                # the system, not by the workload's random draws.
                "seed": (config.seed + len(run.steps)) % 2**32,
            }
        )
        if run.steps and config.pause_s:
            time.sleep(config.pause_s)
        settle = self._settle()
        calibration = self._calibrate()
        plan = StepPlan(run.repeat, config.repeat, len(run.steps) + 1, phase, load, runs_left)
        for observer in self.observers:
            observer.step_started(plan)
        sampler, usage_note = self.sampler()
        meter = self.meter()
        started = time.perf_counter()
        try:
            with contextlib.ExitStack() as stack:
                if sampler is not None:
                    stack.enter_context(sampler)
                stack.enter_context(meter)
                result = run_load(load, on_second=self._on_second)
        except DriverError as exc:
            run.stop_reason = StopReason.DRIVER_ERROR
            run.stop_detail = f"at {rate:,.6g} req/s the driver could not run: {exc}"
            for observer in self.observers:
                observer.note(f"[red]{run.stop_detail}[/]")
            return None
        span_s = time.perf_counter() - started
        step = StepRun(
            repeat=run.repeat,
            index=plan.index,
            phase=phase,
            result=result,
            verdict=judge_step(result, config),
            sla_values_ms=sla_values_ms(result, config.slas),
            usage=Usage(sampler.usage if sampler else None, usage_note,
                        cpus=sampler.cpus if sampler else None,
                        cpus_busy_cores=sampler.cpus_busy_cores if sampler else None),
            energy=meter.reading,
            span_s=span_s,
            responses_in_span=sum(second.completed for second in result.timeline),
            slas=config.slas,
            settle=settle,
            calibration=calibration,
        )
        run.steps.append(step)
        for observer in self.observers:
            observer.step_finished(step)
        return step

    def _settle(self) -> Settle | None:
        """Wait until the target's processes use under ``settle_cores`` of CPU (at most
        ``settle_max_s``); None when they cannot be seen."""
        config = self.config
        settle = wait_until_idle(self.sampler, config.settle_cores, config.settle_max_s)
        if settle is None:
            return None
        waited, busy, first = settle.waited_s, settle.busy_cores, settle.first_busy_cores
        if not settle.idle:
            message = (f"[yellow]the target still used {busy:.2f} cores after "
                       f"{config.settle_max_s:g} s of waiting for it to go idle (under "
                       f"{config.settle_cores:g}): the step starts on its backlog[/]")
        elif first >= config.settle_cores:
            message = (f"waited {waited:.1f} s for the target to go idle: it was still "
                       f"working off the last step ({first:.2f} cores busy)")
        else:
            return settle
        for observer in self.observers:
            observer.note(message)
        return settle

    def _calibrate(self) -> Calibration | None:
        """The host's speed now, when the config asks for it (None when it could not run)."""
        if not self.config.calibrate:
            return None
        try:
            measure = self.calibrator if self._calibrated else self.start_calibrator
            self._calibrated = True
            return measure()
        except CalibrationError as exc:
            for observer in self.observers:
                observer.note(f"[yellow]the host's calibration did not run: {exc}[/]")
            return None

    def _on_second(self, stats: SecondStats) -> None:
        for observer in self.observers:
            observer.second(stats)
