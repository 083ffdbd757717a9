"""``ramp --plan``: the steps a ramp will offer and the time it will take, before any load.

A ramp stops at its first failed step (or, with ``stop_after_declines``, after that many
declines in a row: :func:`stop_rule`), which nobody knows beforehand, so the plan gives,
for each step it may reach, the time of the whole run if it stops there: every repeat,
each step's start, warm-up, window, pause and calibration, and the bisection and
confirmation of ``--refine``. Waits for the target to go idle are not counted (zero on an
idle target; at most ``settle_max_s`` a step).
"""

from __future__ import annotations

from dataclasses import dataclass

from socialbench.workloads.driver.config import duration_text
from socialbench.workloads.ramp.calibration import START_CALIBRATIONS
from socialbench.workloads.ramp.engine import STARTUP_S, RampConfig

CALIBRATION_S = 0.3  # one calibration on a quiet host (about 0.2 s; docs/performance.md)
SHOWN_STEPS = 12  # rows of the plan past which only the last is shown


@dataclass(frozen=True)
class PlannedStep:
    index: int
    rate: float
    run_s: float  # the whole run's time if the ramp stops at this step


@dataclass(frozen=True)
class RampPlan:
    config: RampConfig
    steps: list[PlannedStep]
    step_s: float  # one ramp step, all included
    refine_s: float  # the bisection and confirmation after the knee, per repeat

    def run_s(self, steps: int) -> float:
        """The run's time when every repeat stops at its ``steps``-th step."""
        config = self.config
        per_repeat = steps * self.step_s + (self.refine_s if config.refine else 0.0)
        start = START_CALIBRATIONS * CALIBRATION_S if config.calibrate else 0.0
        return start + config.repeat * per_repeat

    def lines(self) -> list[str]:
        """The plan as text: the procedure, then a row per step it may stop at."""
        config = self.config
        lines = [
            f"Plan: {config.repeat} repeat(s) of steps from {config.start_rate:,.6g} req/s by "
            f"{config.step_rate:,.6g}, {config.step_duration_s:g} s each after "
            f"{config.warmup_s:g} s warm-up ({self.step_s:,.1f} s a step with the start, "
            "pause and calibration)"
            + (f"; then, per repeat, bisection and a {config.confirm_duration:g} s "
               f"confirmation (about {self.refine_s:,.0f} s)" if config.refine else ""),
            stop_rule(config) + "; if it stops at step N, the whole run takes:",
        ]
        shown = self.steps if len(self.steps) <= SHOWN_STEPS else [
            *self.steps[: SHOWN_STEPS - 1], self.steps[-1]]
        for step in shown:
            if step is self.steps[-1] and len(self.steps) > SHOWN_STEPS:
                lines.append("  ...")
            lines.append(f"  step {step.index:>3}  {step.rate:>10,.6g} req/s  "
                         f"{duration_text(step.run_s)}")
        lines.append(f"At most {len(self.steps)} steps a repeat (--max-steps "
                     f"{config.max_steps}" + (f", --max-rate {config.max_rate:,.6g}"
                                              if config.max_rate else "") + "). No load sent.")
        return lines


def stop_rule(config: RampConfig) -> str:
    """When the ramp ``config`` runs stops, in the words of engine.Ramp._ramp."""
    limits = f"--max-steps {config.max_steps}" + (
        f" or --max-rate {config.max_rate:,.6g}" if config.max_rate else "")
    if config.stop_after_declines:
        return (f"The ramp stops after {config.stop_after_declines} declines in a row (steps "
                "whose achieved req/s fell below the step before's) or at " + limits
                + "; a failed step (SLA, errors, achieved rate) does not stop it, and the "
                "answer is the highest step that passed")
    return "The ramp stops at its first failed step (SLA, errors, achieved rate) or at " + limits


def _bisections(config: RampConfig) -> int:
    runs, width = 0, config.step_rate / 2
    while width > config.resolution:
        width /= 2
        runs += 1
    return runs + 1


def plan_ramp(config: RampConfig) -> RampPlan:
    """The steps ``config`` may offer, each with the run's time if it stops there."""
    overhead = STARTUP_S + config.pause_s + (CALIBRATION_S if config.calibrate else 0.0)
    step_s = overhead + config.warmup_s + config.step_duration_s
    confirm_s = overhead + config.warmup_s + config.confirm_duration
    refine_s = _bisections(config) * step_s + confirm_s
    rates: list[float] = []
    rate = config.start_rate
    while len(rates) < config.max_steps:
        rates.append(rate)
        if config.max_rate is not None and rate >= config.max_rate:
            break
        rate += config.step_rate
        if config.max_rate is not None:
            rate = min(rate, config.max_rate)
    plan = RampPlan(config, [], step_s, refine_s)
    plan.steps.extend(PlannedStep(index, rate, plan.run_s(index))
                      for index, rate in enumerate(rates, 1))
    return plan
