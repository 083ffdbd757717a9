"""What a ramp shows on the console: a live panel of the step, a line per step, the headline."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.text import Text

from socialbench.workloads.driver import SecondStats
from socialbench.workloads.driver.verdict import UNTRUSTED, Contention
from socialbench.workloads.probes.ceilings import describe as describe_ceiling
from socialbench.workloads.ramp.engine import (
    RampObserver,
    RampRun,
    StepPlan,
    StepRun,
    StopReason,
    format_ms,
)

if TYPE_CHECKING:
    from socialbench.workloads.results.summary import RampReport


def step_line(step: StepRun) -> str:
    result = step.result
    mark = "[green]pass[/]" if step.passed else "[red]FAIL[/]"
    cpu = step.usage.cpu_seconds
    cpu_text = (f", stack CPU {cpu * 1000 / step.responses_in_span:.2f} ms/req"
                if cpu is not None and step.responses_in_span else "")
    line = (
        f"  {mark} r{step.repeat} step {step.index:>2} {step.phase.value:<7} "
        f"{step.rate:>10,.6g} req/s: achieved {result.achieved_rps:,.1f}, "
        f"p50 {format_ms(result.latency.p50_ms)}, p99 {format_ms(result.latency.p99_ms)}, "
        f"errors {result.errors.total:,} ({result.error_ratio:.2%}){cpu_text}"
    )
    line += driver_flag(step)
    if not step.passed:
        line += "\n         " + "; ".join(step.verdict.reasons)
    elif step.verdict.doubts:  # recorded, not a stop (--ignore-driver-saturation)
        line += "\n         [yellow]not to be trusted[/]: " + "; ".join(step.verdict.doubts)
    return line


def driver_flag(step: StepRun) -> str:
    """The driver's verdict on the step, when it is not clean: which case, in short."""
    driver = step.result.driver
    if driver is None:
        return " [yellow](driver saturated)[/]" if step.result.saturated else ""
    lag = f"send lag p99 {format_ms(driver.send_lag_p99_ms)}"
    if driver.verdict is Contention.DRIVER_CPU:
        busiest = driver.busiest
        cpu = f"{busiest.cpu_share:.0%} of a core" if busiest else ""
        return f" [red](driver out of CPU: {cpu}, {lag})[/]"
    if driver.verdict is Contention.HOST_CONTENDED:
        host = driver.host
        busy = f"CPUs {host.busy_share:.0%} busy, steal {host.steal_share:.0%}, " if host else ""
        return f" [yellow](host contended: {busy}{lag})[/]"
    return ""


class LiveView(RampObserver):
    """A live panel of the running step (on a terminal) and one line per finished step."""

    def __init__(self, console: Console, quiet: bool = False) -> None:
        self.console = console
        self.quiet = quiet
        self.plan: StepPlan | None = None
        self.seconds: list[SecondStats] = []
        self.started = 0.0
        self.live: Live | None = None

    def __enter__(self) -> LiveView:
        if self.console.is_terminal and not self.quiet:
            self.live = Live(self, console=self.console, refresh_per_second=2, transient=True)
            self.live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.stop()

    def repeat_started(self, repeat: int, repeats: int) -> None:
        if repeats > 1:
            self.console.rule(f"repeat {repeat} of {repeats}")

    def step_started(self, plan: StepPlan) -> None:
        self.plan, self.seconds, self.started = plan, [], time.monotonic()
        if self.live is None and not self.quiet:
            self.console.print(
                f"  … r{plan.repeat} step {plan.index:>2} {plan.phase.value:<7} "
                f"{plan.load.rate:>10,.6g} req/s for {plan.load.duration_s:g} s after "
                f"{plan.load.warmup_s:g} s warm-up"
            )

    def second(self, stats: SecondStats) -> None:
        self.seconds.append(stats)

    def step_finished(self, step: StepRun) -> None:
        self.plan = None
        self.console.print(step_line(step))

    def repeat_finished(self, run: RampRun) -> None:
        answer = "no tested rate held the SLA"
        if run.confirmed is False and any(step.passed for step in run.steps):
            answer = "no rate that passed held the SLA again in its confirmation run"
        if run.stop_reason is StopReason.INTERRUPTED:
            answer = f"interrupted after {len(run.steps)} steps"
        elif run.answer is not None:
            p99 = format_ms(run.answer.result.latency.p99_ms)
            answer = f"{run.answer.rate:,.6g} req/s, p99 {p99}"
        self.console.print(f"  Repeat {run.repeat}: {answer}; stopped: [bold]"
                           f"{run.stop_reason.value}[/] ({run.stop_detail})")

    def note(self, message: str) -> None:
        self.console.print(message)

    def __rich__(self) -> RenderableType:
        plan = self.plan
        if plan is None:
            return Text("")
        load = plan.load
        elapsed = time.monotonic() - self.started
        left = max(0.0, plan.expected_s - elapsed)
        window_end = load.warmup_s + load.duration_s
        measured = [s for s in self.seconds if not s.warmup and s.second <= window_end]
        last = self.seconds[-1] if self.seconds else None
        phase = "starting" if last is None else "warm-up" if last.warmup else "measuring"
        if last is not None and last.second > window_end:
            phase = "draining"
        achieved = sum(s.completed for s in measured) / len(measured) if measured else 0.0
        errors = sum(s.errors for s in self.seconds)
        worst = max((s.latency_p99_us for s in measured), default=0)
        more = f" (+{plan.runs_left} more runs)" if plan.runs_left else ""
        head = Text.from_markup(
            f"[bold]repeat {plan.repeat}/{plan.repeats} · {plan.phase.value} step {plan.index}"
            f" · offered {load.rate:,.6g} req/s[/] · {phase} · "
            f"{elapsed:.0f} s of ~{plan.expected_s:.0f} s · step time left {left:.0f} s{more}"
        )
        if last is None:
            return head
        body = Text(
            f"achieved {achieved:,.1f} req/s · p50 {format_ms(last.latency_p50_us / 1000)} · "
            f"p99 {format_ms(last.latency_p99_us / 1000)} (worst second "
            f"{format_ms(worst / 1000) if worst else '—'}) · errors {errors:,} · send lag p99 "
            f"{format_ms(last.send_lag_p99_us / 1000)} · in flight {last.in_flight:,} · "
            f"driver CPU {last.driver_cpu_max:.0%}"
            + (f" · host busy {last.host_busy:.0%}" if last.host_busy is not None else "")
        )
        return Group(head, body)



def print_headline(result: RampReport, console: Console) -> None:
    """The number, its p99, how it was found, and where the report is."""
    summary = result.summary
    sla = ", ".join(summary.sla)
    if result.preset is not None:
        console.print(f"[bold]{result.preset.headline()}[/]", soft_wrap=True)
    declines = result.config.stop_after_declines if result.config is not None else None
    if declines and summary.max_throughput_rps is not None:
        at_sla = (f"{summary.best.achieved_rps:,.1f} req/s achieved (offered "
                  f"{summary.best.max_rate_rps:,.6g})" if summary.best else "none")
        console.print(f"[bold green]Max throughput {summary.max_throughput_rps:,.1f} req/s[/] "
                      f"(the highest achieved of any step; stopped after {declines} declines "
                      f"in a row); throughput at {sla}: {at_sla}")
    if not summary.completed:
        console.print(f"[bold yellow]Interrupted[/] in repeat {len(summary.repeats)}: its "
                      f"{len(result.outcome.runs[-1].steps)} steps are in the bundle, and no "
                      "answer is claimed from it.")
    if summary.best is not None and summary.p99_ms is not None:
        console.print(
            f"[bold green]Max {summary.best.max_rate_rps:,.6g} req/s with {sla}[/]: p99 "
            f"{format_ms(summary.p99_ms)}, achieved {summary.best.achieved_rps:,.1f} req/s"
            + (f" (best of {len(summary.repeats)})" if len(summary.repeats) > 1 else "")
        )
    best = summary.best
    if best is not None and best.requests_per_joule is not None:
        band = (f", band {best.requests_per_joule_low:,.3g}-{best.requests_per_joule_high:,.3g}"
                if best.requests_per_joule_low is not None
                and best.requests_per_joule_high is not None else "")
        console.print(f"Perf per watt there: {best.requests_per_joule:,.3g} req/s per W"
                      + (f", [yellow]{best.energy_label}{band}[/]" if best.energy_estimated
                         else ""), soft_wrap=True)
    best_repeat = next((r for r in summary.repeats if r.repeat == summary.best_repeat), None)
    if best_repeat is not None and best_repeat.gap_below_failure is not None:
        console.print(f"That is {best_repeat.gap_below_failure:.1%} below "
                      f"{best_repeat.lowest_failed_rps:,.6g} req/s, the lowest rate that "
                      "failed its step.")
    if len(summary.repeat_max_rates_rps) > 1:
        rates = ", ".join(f"{rate:,.6g}" for rate in summary.repeat_max_rates_rps)
        cv = summary.coefficient_of_variation
        console.print(
            f"Repeats: {rates} req/s; mean {summary.mean_max_rate_rps or 0:,.1f}, median "
            f"{summary.median_max_rate_rps or 0:,.6g}, coefficient of variation "
            + (f"{cv:.1%}" if cv is not None else "—")
            + (f" ({summary.host_adjusted_cv:.1%} with each repeat's answer divided by its "
               "host speed)" if summary.host_adjusted_cv is not None else ""))
    if summary.completed and summary.best is None:
        held = [step.rate for run in result.outcome.runs for step in run.steps if step.passed]
        if held:
            console.print(f"[bold red]No rate held {sla} again in its confirmation run[/] "
                          f"(steps held up to {max(held):,.6g} req/s); the knee is lower than "
                          "the steps showed: try steps as long as the confirmation "
                          "(--step-duration).")
        else:
            console.print(f"[bold red]No tested rate held {sla}[/]; try a lower --start-rate.")
    if summary.host_calibration_start is not None:
        end = ("not measured after the run" if summary.host_speed_end is None
               else f"{summary.host_speed_end:.2f} of the start's after the run")
        speeds = [f"{r.host_speed:.2f}" for r in summary.repeats if r.host_speed is not None]
        console.print(f"Host speed (fixed work before each step): {end}"
                      + (f"; at each repeat's start {', '.join(speeds)}"
                         if len(speeds) > 1 else "")
                      + (f"; spread over the steps {summary.host_speed_spread:.1%}"
                         if summary.host_speed_spread is not None else "")
                      + f"; calibrating took {summary.calibration_seconds:.1f} s")
    if not summary.comparable:
        console.print(f"[bold yellow]Not comparable[/]: {summary.not_comparable}.",
                      soft_wrap=True)
    if summary.ceilings:
        lowest = "; ".join(describe_ceiling(row) for row in summary.ceilings[:3])
        console.print(f"Lowest ceilings (at {summary.ceilings_step}): {lowest}", soft_wrap=True)
        console.print(f"[bold]Ceiling verdict[/]: {summary.ceiling_verdict}.", soft_wrap=True)
    if summary.stop_reason is not None:
        console.print(f"Stopped: {summary.stop_reason.value} — {summary.repeats[0].stop_detail}"
                      if len(summary.repeats) == 1 else f"Stopped: {summary.stop_reason.value}")
    verdicts = summary.driver_verdicts
    if verdicts:
        console.print("Driver: " + ", ".join(f"{count} step(s) {verdict}"
                                             for verdict, count in verdicts.items()))
    if verdicts.get(Contention.HOST_CONTENDED.value):
        console.print("[yellow]Caveat: on a contended host the latencies include the driver's "
                      "waits for a CPU (each step's advice is in the report).[/]")
    if summary.saturated_steps:
        console.print(f"[yellow]{summary.saturated_steps} step(s) where {UNTRUSTED}; see "
                      "the report.[/]")
    console.print(f"Report: [bold]{result.report}[/]")
