"""The SLA ramp against a server of known capacity (200 req/s): where it stops, and why."""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from rich.console import Console
from typer.testing import CliRunner

from socialbench import registry
from socialbench.cli import app
from socialbench.stack import launcher
from socialbench.stack.launcher import StackConfig
from socialbench.stack.local import LocalStack
from socialbench.stack.servers import free_port
from socialbench.workloads.driver import Errors, LoadConfig, LoadResult
from socialbench.workloads.driver.verdict import Contention
from socialbench.workloads.probes.resources import ResourceSampler
from socialbench.workloads.ramp import engine
from socialbench.workloads.ramp.engine import (
    CONFIRM_BACKOFF,
    MAX_CONFIRM_ATTEMPTS,
    Phase,
    Ramp,
    RampObserver,
    RampOutcome,
    RampRun,
    Sla,
    StopReason,
    format_above,
    judge_step,
    no_sampler,
)
from socialbench.workloads.reports.live import print_headline
from socialbench.workloads.results.schema import Dataset
from socialbench.workloads.results.summary import RampReport
from socialbench.workloads.runs.ramp_job import RampJob, execute
from tests.workloads.conftest import (
    CAPACITY_RPS,
    RESOLUTION_RPS,
    CapacityServer,
    scripted_ramp,
    skip_if_busy_before,
    small_ramp,
)

# Timing on a quiet host: make test runs these alone, after the rest (pyproject markers).
pytestmark = pytest.mark.serial


def only_run(ramp: RampReport) -> RampRun:
    (run,) = ramp.outcome.runs
    return run


@pytest.mark.parametrize(
    ("text", "percentile", "threshold_ms"),
    [("p99=2s", 99, 2000), ("p99.9<=50ms", 99.9, 50), ("p50 = 800us", 50, 0.8),
     ("p90=15", 90, 15), ("p99.99<1.5s", 99.99, 1500)],
)
def test_an_sla_is_any_percentile_and_threshold(
    text: str, percentile: float, threshold_ms: float
) -> None:
    sla = Sla.parse(text)
    assert (sla.percentile, sla.threshold_ms) == (percentile, pytest.approx(threshold_ms))


@pytest.mark.parametrize("text", ["99=2s", "p99", "p101=1s", "p99=fast", "p0=1s"])
def test_a_malformed_sla_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        Sla.parse(text)


def test_the_ramp_stops_at_the_first_step_past_capacity(refined_ramp: RampReport) -> None:
    skip_if_busy_before("refined_ramp")
    run = only_run(refined_ramp)
    ramp_steps = [step for step in run.steps if step.phase is Phase.RAMP]

    assert [step.rate for step in ramp_steps] == [120, 170, 220]
    assert [step.passed for step in ramp_steps] == [True, True, False]
    failed = ramp_steps[-1]
    # 220 req/s offered to a 200 req/s server: a growing queue, and a shortfall.
    assert failed.verdict.failures[:2] == (StopReason.SLA, StopReason.ACHIEVED)
    assert run.stop_reason is StopReason.SLA
    assert "at 220 req/s" in run.stop_detail and "breaks the SLA p99 <= 120 ms" in run.stop_detail


def test_refine_lands_within_the_resolution_of_the_knee(refined_ramp: RampReport) -> None:
    skip_if_busy_before("refined_ramp")
    run = only_run(refined_ramp)
    refine_rates = [step.rate for step in run.steps if step.phase is Phase.REFINE]

    assert run.refined and run.confirmed
    assert refine_rates and all(170 < rate < 220 for rate in refine_rates)
    assert run.answer is not None and run.answer.phase is Phase.CONFIRM
    assert run.answer.passed and run.answer.result.window_s == 4.0
    assert abs(run.answer.rate - CAPACITY_RPS) <= RESOLUTION_RPS, run.answer.rate
    # The bisection stopped once the bracket was within the resolution.
    passing = max(s.rate for s in run.steps if s.phase is not Phase.CONFIRM and s.passed)
    failing = min(s.rate for s in run.steps if s.phase is not Phase.CONFIRM and not s.passed)
    assert 0 < failing - passing <= RESOLUTION_RPS


def test_a_failed_confirmation_tries_the_next_passing_rate_then_backs_off(
    refined_ramp: RampReport, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = scripted_ramp(refined_ramp, monkeypatch, step_limit=300, confirm_limit=280)
    (run,) = Ramp(config).run().runs

    confirmations = [step for step in run.steps if step.phase is Phase.CONFIRM]
    passing = sorted(step.rate for step in run.steps
                     if step.phase is not Phase.CONFIRM and step.passed)
    assert max(passing) <= 300 < min(
        step.rate for step in run.steps if step.phase is not Phase.CONFIRM and not step.passed)
    assert confirmations[0].rate == max(passing)
    first, second, *_ = confirmations
    # One failure gives away one passing rate at most (a resolution, at the knee) ...
    assert not first.passed
    assert second.rate == max(r for r in passing if r < first.rate)
    # ... a second failure backs off past the rates just below it.
    for failed, after in itertools.pairwise(confirmations[1:]):
        assert not failed.passed
        assert after.rate == max(r for r in passing if r <= failed.rate * (1 - CONFIRM_BACKOFF))
    assert len(confirmations) == MAX_CONFIRM_ATTEMPTS
    assert run.confirmed and run.answer is confirmations[-1]
    assert run.answer.rate <= 280
    assert "Confirmation failed at" in run.stop_detail
    assert all(f"{step.rate:,.6g} req/s (" in run.stop_detail for step in confirmations[:-1])
    lowest_failed = min(step.rate for step in run.steps
                        if step.phase is not Phase.CONFIRM and not step.passed)
    assert run.lowest_failed_rps == lowest_failed
    assert run.gap_below_failure == pytest.approx(1 - run.answer.rate / lowest_failed)


def test_a_confirmation_failed_once_gives_away_one_resolution(
    refined_ramp: RampReport, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The case of the issue: 1,050 failed its confirmation, 1,000 had passed its step and
    would have held; the answer is 1,000, not the back-off's 800."""
    config = scripted_ramp(refined_ramp, monkeypatch, step_limit=300, confirm_limit=299)
    (run,) = Ramp(config).run().runs

    confirmations = [step for step in run.steps if step.phase is Phase.CONFIRM]
    passing = sorted(step.rate for step in run.steps
                     if step.phase is not Phase.CONFIRM and step.passed)
    assert [step.passed for step in confirmations] == [False, True]
    assert confirmations[1].rate == passing[-2]
    assert confirmations[0].rate - confirmations[1].rate <= config.resolution


def test_a_ramp_whose_confirmations_all_fail_says_its_steps_overstated_the_knee(
    refined_ramp: RampReport, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = scripted_ramp(refined_ramp, monkeypatch, step_limit=300, confirm_limit=100)
    job = RampJob(
        config=config, label="overstated", results_dir=tmp_path, sampler=no_sampler,
        resources_source="none", dataset=Dataset(fresh=False, users=962, note="scripted"),
        mongodb_server="mongod",
    )
    output = io.StringIO()
    console = Console(file=output, width=200)
    result = execute(job, console)
    print_headline(result, console)

    (run,) = result.outcome.runs
    assert run.confirmed is False and run.answer is None
    assert len([s for s in run.steps if s.phase is Phase.CONFIRM]) == MAX_CONFIRM_ATTEMPTS
    assert result.summary.max_rate_rps is None
    held = max(step.rate for step in run.steps if step.passed)
    text = " ".join(output.getvalue().split())
    assert (f"No rate held p99 <= 120 ms again in its confirmation run (steps held up to "
            f"{held:,.6g} req/s)") in text
    assert "No tested rate held" not in text


def test_each_stop_criterion_fails_a_step(
    refined_ramp: RampReport, capacity_server: CapacityServer
) -> None:
    """Judged on a real passing step's result, changed one criterion at a time."""
    good = only_run(refined_ramp).steps[0].result
    config = small_ramp(capacity_server.url)
    assert judge_step(good, config).passed

    errors = good.model_copy(update={"errors": Errors(timeout=good.scheduled // 50)})
    short = good.model_copy(update={"achieved_rps": 0.9 * good.scheduled_rps})
    assert judge_step(errors, config).failures == (StopReason.ERRORS,)
    assert judge_step(short, config).failures == (StopReason.ACHIEVED,)
    assert good.driver is not None

    def driver(**changes: object) -> LoadResult:
        assert good.driver is not None
        return good.model_copy(update={"driver": good.driver.model_copy(update=changes)})

    out_of_cpu = driver(verdict=Contention.DRIVER_CPU, lag_material=False,
                        explanation="driver process 0 used 97% of a core", send_lag_p99_ms=3.0)
    contended = driver(verdict=Contention.HOST_CONTENDED, send_lag_p99_ms=3.0,
                       explanation="the host was contended")
    lagging = driver(verdict=Contention.HOST_CONTENDED, send_lag_p99_ms=30.0)  # SLA: 120 ms
    stopping = config.model_copy(update={"stop_on_saturation": True})
    assert judge_step(out_of_cpu, config).passed  # recorded, not a stop, when told so
    assert judge_step(out_of_cpu, config).doubts
    verdict = judge_step(out_of_cpu, stopping)
    assert verdict.failures == (StopReason.SATURATED,)
    assert "97% of a core" in verdict.reasons[0]
    # A contended host is a caveat; lag that eats a quarter of the SLA is not.
    assert judge_step(contended, stopping).passed and not judge_step(contended, stopping).doubts
    verdict = judge_step(lagging, stopping)
    assert verdict.failures == (StopReason.SATURATED,)
    assert "send lag p99 30 ms is 25% of the SLA p99 <= 120 ms" in verdict.reasons[0]
    tight = config.model_copy(update={"slas": (Sla.parse("p50=1ms"),)})
    assert judge_step(good, tight).failures == (StopReason.SLA,)


def test_the_command_repeats_stops_at_max_rate_and_writes_a_bundle(
    capacity_server: CapacityServer, tmp_path: Path
) -> None:
    result = CliRunner().invoke(app, [
        "ramp", capacity_server.url, "-w", "url", "--start-rate", "100", "--max-rate", "100",
        "--repeat", "2", "--step-duration", "1.5s", "--warmup", "0.5s", "--pause", "0.2s",
        "--sla", "p99=200ms", "--sla", "p50=150ms", "--ignore-driver-saturation", "-P", "1",
        "-D", "constant", "--timeout", "3s", "--label", "cli run", "--results-dir",
        str(tmp_path), "--cpu-placement", "split", "--driver-cpus", "0",
    ])

    assert result.exit_code == 0, result.output
    (bundle,) = tmp_path.iterdir()
    assert bundle.name.endswith("-cli-run")
    summary = json.loads((bundle / "summary.json").read_text())
    assert summary["sla"] == ["p99 <= 200 ms", "p50 <= 150 ms"]
    assert [r["stop_reason"] for r in summary["repeats"]] == ["max-rate", "max-rate"]
    assert [r["answer"]["max_rate_rps"] for r in summary["repeats"]] == [100, 100]
    assert summary["max_rate_rps"] == summary["median_max_rate_rps"] == 100
    assert summary["mean_max_rate_rps"] == 100 and summary["repeat_max_rates_rps"] == [100, 100]
    assert summary["coefficient_of_variation"] == 0
    assert "Repeats: 100, 100 req/s; mean 100.0, median 100, coefficient of variation 0.0%" in (
        result.output)
    assert sum(summary["driver_verdicts"].values()) == 2
    steps = json.loads((bundle / "steps.json").read_text())
    assert {step["driver"]["verdict"] for step in steps} <= {"clean", "host-contended"}
    assert all(step["driver"]["cpus"] == [0] for step in steps)  # the driver was placed
    placement = json.loads((bundle / "manifest.json").read_text())["placement"]
    assert placement["mode"] == "split" and placement["driver_cpus"] == [0]
    assert placement["stack_cpus"] is None  # not the local stack
    # The stack's memory projected for its data (unknown: the workload's users, no posts
    # composed by a url workload), with the measured figures and the machine's memory.
    memory = json.loads((bundle / "manifest.json").read_text())["memory"]
    assert memory["posts"] == 0 and memory["stack_bytes"] == 0 and memory["warning"] is None
    assert set(memory["projected"]) == set(memory["growth"]) >= {"redis", "mongodb"}
    assert memory["machine_bytes"] > memory["available_bytes"] > 0
    html = (bundle / "report.html").read_text()
    assert "Run-to-run variation" in html and "The driver's verdict" in html
    assert "driver-cpu: a driver process used 85% or more of a core" in html
    assert set(summary["best"]["sla_values_ms"]) == {"p99", "p50"}
    assert "Max 100 req/s with p99 <= 200 ms, p50 <= 150 ms" in result.output
    # Not the local stack: CPU and memory are said to be unavailable, and why; its
    # configuration is not recorded, and the report says so.
    assert "per-process CPU and memory need the local stack" in summary["resources_note"]
    assert json.loads((bundle / "manifest.json").read_text())["stack"] is None
    assert "not the local stack: its configuration is not recorded" in (
        bundle / "report.html").read_text()


def test_one_repeat_that_holds_a_rate_is_said_to_hold_it_and_nothing_else(
    capacity_server: CapacityServer, tmp_path: Path
) -> None:
    result = CliRunner().invoke(app, [
        "ramp", capacity_server.url, "-w", "url", "--start-rate", "100", "--max-rate", "100",
        "--step-duration", "1.5s", "--warmup", "0.5s", "--sla", "p99=200ms",
        "--ignore-driver-saturation", "-P", "1", "-D", "constant", "--timeout", "3s",
        "--results-dir", str(tmp_path),
    ])

    assert result.exit_code == 0, result.output
    assert "Max 100 req/s with p99 <= 200 ms" in result.output
    assert "No tested rate held" not in result.output
    assert "Repeats:" not in result.output


def test_a_fresh_restart_keeps_the_stacks_configuration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = StackConfig(data_dir=tmp_path, gateway_port=18080, workers={"text": 2},
                         default_workers=3, service_port_offset=100, tracing=True,
                         trace_sample_ratio=0.05, jaeger_ui_port=26686, jaeger_otlp_port=24318)
    (tmp_path / launcher.CONFIG_FILE).write_text(config.to_json())
    started: list[tuple[StackConfig, bool]] = []

    def start(self: LocalStack, config: StackConfig, *, fresh: bool = False,
              **options: object) -> StackConfig:
        started.append((config, fresh))
        return config

    monkeypatch.setattr(LocalStack, "start", start)

    LocalStack(tmp_path).restart_fresh()

    (restarted, fresh), = started
    assert fresh is True
    assert restarted == config
    # Its record names every service's workers: text its own, the rest the given default.
    record = LocalStack(tmp_path).record("http://127.0.0.1:18080")
    assert record is not None
    assert record.workers == {s.name: 3 for s in registry.SERVICES} | {"text": 2}
    assert (record.default_workers, record.workers_chosen) == (3, "given")


def test_the_stacks_record_holds_the_worker_counts_chosen_from_its_cpus(
    tmp_path: Path,
) -> None:
    config = StackConfig(data_dir=tmp_path, gateway_port=18080, cpus=list(range(16)))
    (tmp_path / launcher.CONFIG_FILE).write_text(config.to_json())

    record = LocalStack(tmp_path).record("http://127.0.0.1:18080")

    assert record is not None
    assert record.workers == config.service_workers()
    assert set(record.workers) == set(registry.BY_NAME)
    assert record.workers["home-timeline"] == registry.default_workers(
        registry.get("home-timeline"), 16) > 1
    assert (record.default_workers, record.workers_chosen, record.workers_cpus) == (
        None, "cpu-count", 16)


def test_a_target_that_refuses_connections_stops_the_ramp_with_the_reason(
    tmp_path: Path,
) -> None:
    result = CliRunner().invoke(app, [
        "ramp", f"http://127.0.0.1:{free_port()}/", "-w", "url", "--start-rate", "50",
        "--quick", "-P", "1", "--results-dir", str(tmp_path),
    ])

    assert result.exit_code == 1, result.output
    (bundle,) = tmp_path.iterdir()
    summary = json.loads((bundle / "summary.json").read_text())
    assert summary["stop_reason"] == "driver-error"
    assert summary["max_rate_rps"] is None
    assert "the driver could not run" in summary["repeats"][0]["stop_detail"]
    assert "No tested rate held p99 <= 2 s" in " ".join(result.output.split())
    assert json.loads((bundle / "steps.json").read_text()) == []


def test_bad_options_are_refused_before_anything_runs(tmp_path: Path) -> None:
    runner = CliRunner()
    for options in (["--sla", "p99"], ["--max-errors", "150%"], ["-w", "no-such-workload"]):
        result = runner.invoke(app, ["ramp", "http://127.0.0.1:1/", *options,
                                     "--results-dir", str(tmp_path)])
        assert result.exit_code == 2, (options, result.output)
    assert not list(tmp_path.iterdir())


class BusyTarget(ResourceSampler):
    """A target whose CPU, probe after probe, is ``readings`` (then its last reading)."""

    def __init__(self, readings: list[float]) -> None:
        super().__init__({})
        self.readings = readings
        self.closed = False

    def close(self) -> None:
        self.closed = True

    def busy_cores(self, window_s: float) -> float:
        time.sleep(window_s)
        return self.readings.pop(0) if len(self.readings) > 1 else self.readings[0]


class Notes(RampObserver):
    def __init__(self) -> None:
        self.notes: list[str] = []

    def note(self, message: str) -> None:
        self.notes.append(message)


def test_a_step_waits_until_the_backlog_of_the_last_is_worked_off(
    capacity_server: CapacityServer,
) -> None:
    readings = [1.6, 0.9, 0.1]  # a core and a half busy, then less, then idle
    notes = Notes()
    probes: list[BusyTarget] = []

    def sampler() -> tuple[ResourceSampler | None, str]:
        probes.append(BusyTarget(readings))
        return probes[-1], ""

    config = small_ramp(capacity_server.url, max_rate=120, settle_cores=0.25)

    outcome = Ramp(config, sampler=sampler, observers=[notes]).run()

    (step,) = only_run_of(outcome).steps
    assert step.passed
    assert step.settle is not None and step.settle.idle
    assert (step.settle.first_busy_cores, step.settle.busy_cores) == (1.6, 0.1)
    assert step.settle.waited_s >= 1.4  # three probes of 0.5 s
    assert notes.notes == ["waited 1.5 s for the target to go idle: it was still working off "
                           "the last step (1.60 cores busy)"]
    assert len(probes) == 2 and all(probe.closed for probe in probes)  # the wait's, the step's


def test_a_target_that_stays_busy_is_waited_for_no_longer_than_the_bound(
    capacity_server: CapacityServer, tmp_path: Path
) -> None:
    notes = Notes()
    config = small_ramp(capacity_server.url, max_rate=120, settle_max_s=1.0)

    outcome = Ramp(config, sampler=lambda: (BusyTarget([0.7]), ""), observers=[notes]).run()

    (step,) = only_run_of(outcome).steps
    assert step.result.completed > 0  # it ran anyway
    assert step.settle is not None and not step.settle.idle
    assert step.settle.busy_cores == 0.7 and 1.0 <= step.settle.waited_s < 2.5
    assert len(notes.notes) == 1 and "still used 0.70 cores after 1 s" in notes.notes[0]
    assert "the step starts on its backlog" in notes.notes[0]


def test_no_wait_without_the_targets_processes_or_with_settle_cores_0(
    capacity_server: CapacityServer,
) -> None:
    probed: list[BusyTarget] = []

    def sampler() -> tuple[ResourceSampler | None, str]:
        probed.append(BusyTarget([2.0]))
        return probed[-1], ""

    config = small_ramp(capacity_server.url, max_rate=120, settle_cores=0)
    (step,) = only_run_of(Ramp(config, sampler=sampler).run()).steps
    assert step.settle is None
    (step,) = only_run_of(Ramp(config.model_copy(update={"settle_cores": 0.25})).run()).steps
    assert step.settle is None  # no sampler: nothing to wait for


def only_run_of(outcome: RampOutcome) -> RampRun:
    (run,) = outcome.runs
    return run


def test_repeats_give_the_best_the_median_and_the_variation(refined_ramp: RampReport) -> None:
    passing = [step for step in only_run(refined_ramp).steps if step.passed][:3]
    rates = [step.rate for step in passing]
    runs = [RampRun(i + 1, answer=step, stop_reason=StopReason.SLA)
            for i, step in enumerate(passing)]
    runs.append(RampRun(4, stop_reason=StopReason.SLA))  # no rate held: counts as 0
    runs.append(RampRun(5, stop_reason=StopReason.INTERRUPTED))  # unfinished: left out

    outcome = RampOutcome(runs)

    assert outcome.answers == [*rates, 0.0]
    assert outcome.best is runs[rates.index(max(rates))]
    assert outcome.median_rps == statistics.median([*rates, 0.0])
    assert outcome.coefficient_of_variation == pytest.approx(
        statistics.stdev([*rates, 0.0]) / statistics.mean([*rates, 0.0]))
    assert outcome.interrupted


def left_in_session(session: int) -> list[psutil.Process]:
    """The processes still alive in ``session`` (a ramp's driver workers, say)."""
    left = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error, ProcessLookupError):
            if os.getsid(process.pid) == session and process.status() != psutil.STATUS_ZOMBIE:
                left.append(process)
    return left


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_ctrl_c_or_sigterm_keeps_the_steps_measured_and_writes_the_report(
    capacity_server: CapacityServer, tmp_path: Path, how: str
) -> None:
    command = [
        sys.executable, "-m", "socialbench.cli", "ramp", capacity_server.url, "-w", "url",
        "--start-rate", "100", "--step", "1", "--step-duration", "1.5s", "--warmup", "0.2s",
        "--pause", "0s", "--sla", "p99=10s", "--ignore-driver-saturation", "-P", "1",
        "-D", "constant", "--results-dir",
        str(tmp_path),
    ]
    ramp = subprocess.Popen(  # as a terminal runs it: its own group, SIGINT not ignored
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 60
        steps: list[object] = []
        while len(steps) < 2 and time.monotonic() < deadline and ramp.poll() is None:
            time.sleep(0.2)
            files = list(tmp_path.glob("*/steps.json"))
            steps = json.loads(files[0].read_text()) if files else []
        if how == "ctrl-c":  # a terminal's: to the whole group
            os.killpg(ramp.pid, signal.SIGINT)
        else:  # kill's, timeout's, a CI job's end: to the ramp only
            ramp.send_signal(signal.SIGTERM)
        output = ramp.communicate(timeout=60)[0].decode()
        assert left_in_session(ramp.pid) == []
    finally:
        if ramp.poll() is None:
            os.killpg(ramp.pid, signal.SIGKILL)

    assert ramp.returncode == 130, output
    (bundle,) = tmp_path.iterdir()
    summary = json.loads((bundle / "summary.json").read_text())
    assert summary["completed"] is False and summary["stop_reason"] == "interrupted"
    assert summary["max_rate_rps"] is None
    assert len(json.loads((bundle / "steps.json").read_text())) >= 2
    assert (bundle / "report.html").exists()
    assert "Interrupted" in output


@pytest.mark.parametrize(("ms", "limit_ms", "text"), [
    (1104.895, 500, "1.1 s"),
    (1104.895, 1000, "1.1 s"),
    (500.2, 500, "500.2 ms"),
    (2000.4, 2000, "2.0004 s"),
    (73.456, 50, "73.5 ms"),
])
def test_a_broken_sla_reads_like_every_other_figure(ms: float, limit_ms: float,
                                                    text: str) -> None:
    assert format_above(ms, limit_ms) == text


def test_every_repeat_draws_the_same_requests_step_by_step(
    refined_ramp: RampReport, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = scripted_ramp(refined_ramp, monkeypatch, step_limit=300, confirm_limit=300,
                           repeat=2)
    scripted = engine.run_load
    seeds: list[int | None] = []

    def recording_load(load: LoadConfig, on_second: object = None) -> LoadResult:
        seeds.append(load.seed)
        return scripted(load, on_second)

    monkeypatch.setattr(engine, "run_load", recording_load)
    first, second = Ramp(config).run().runs

    assert len(first.steps) == len(second.steps)
    assert seeds[:len(first.steps)] == seeds[len(first.steps):]
    assert len(set(seeds[:len(first.steps)])) == len(first.steps)  # each step its own draws
