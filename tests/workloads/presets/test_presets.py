"""The published procedures by name: each preset's parameters, overrides as deviations,
recorded and compared, PerfKit's two-declines stop, and --plan against a real run's time."""

from __future__ import annotations

import io
import time
from pathlib import Path
from typing import Any

import pytest
import typer.main
from rich.console import Console
from typer.testing import CliRunner

from socialbench.cli import app
from socialbench.workloads import presets
from socialbench.workloads.driver import LoadConfig, LoadResult
from socialbench.workloads.presets import Deviation
from socialbench.workloads.ramp import engine
from socialbench.workloads.ramp.engine import Ramp, StopReason, no_sampler
from socialbench.workloads.ramp.plan import plan_ramp
from socialbench.workloads.reports.differences import differences
from socialbench.workloads.reports.live import print_headline
from socialbench.workloads.results.files import read_bundle
from socialbench.workloads.results.schema import Dataset
from socialbench.workloads.results.summary import RampReport
from socialbench.workloads.runs.ramp_job import RampJob, execute
from tests.support import skip_unless_quiet
from tests.workloads.conftest import CapacityServer, scripted_ramp, small_ramp

# Timing on a quiet host: make test runs these alone, after the rest (pyproject markers).
pytestmark = pytest.mark.serial


RUNNER = CliRunner()
ROOT = typer.main.get_command(app)

# What each procedure names (issue 43, from the seed documents and PerfKit's README).
PUBLISHED: dict[str, dict[str, Any]] = {
    "dsb-ampere": {"workload": "compose-post", "connections": 5000, "start_rate": 1000,
                   "step": 500, "step_duration": "5m", "repeat": 5, "sla": ["p99=2s"]},
    "perfkit-dsb-social": {"workload": "mixed", "start_rate": 500, "step": 100,
                           "step_duration": "5m", "stop_after_declines": 2,
                           "sla": ["p99=30ms"], "max_errors": "5%"},
    "memcached-ampere": {"kind": "memcached", "ratio": "1:10", "data_size": 128,
                         "pipeline": 126, "step_time": 120, "sla_p99_ms": 1, "runs": 3},
    "redis-ampere": {"kind": "redis", "ratio": "10:1", "pipeline": 45, "step_time": 180,
                     "sla_p99_ms": 1, "runs": 3},
    "memcached-yitian": {"threads": 8, "clients": 80, "pipeline": [1, 50, 100],
                         "data_size": 128, "key_pattern": "R", "protocol": "memcache_text",
                         "runs": 3},
}


def command_of(preset: presets.Preset) -> Any:
    command = ROOT
    for part in preset.command.split():
        command = command.commands[part]  # type: ignore[attr-defined]
    return command


@pytest.mark.parametrize("preset", presets.PRESETS, ids=lambda p: p.name)
def test_each_preset_sets_what_its_procedure_names(preset: presets.Preset) -> None:
    values = {p.option: p.value for p in preset.parameters}
    assert values == PUBLISHED[preset.name]
    options = {param.name for param in command_of(preset).params}
    assert set(values) <= options, f"{preset.name} names options its command lacks"
    assert preset.source and preset.reports and all(p.published for p in preset.parameters)


@pytest.mark.parametrize("preset", presets.PRESETS, ids=lambda p: p.name)
def test_each_preset_plans_without_load(preset: presets.Preset) -> None:
    done = RUNNER.invoke(app, [*preset.command.split(), "--preset", preset.name, "--plan"])
    assert done.exit_code == 0, done.output
    assert f"{preset.title}, no deviation" in done.output
    assert "Plan:" in done.output and "No load sent." in done.output


def test_presets_lists_each_with_its_source_and_mappings() -> None:
    done = RUNNER.invoke(app, ["presets"])
    assert done.exit_code == 0, done.output
    for preset in presets.PRESETS:
        assert f"--preset {preset.name}" in done.output and preset.source in done.output
    assert "wrk2's threads are its event loops" in done.output
    assert "the memcached brief's 1:10 is set:get" in done.output


def test_a_preset_of_another_command_or_no_preset_is_refused() -> None:
    done = RUNNER.invoke(app, ["ramp", "--preset", "memcached-ampere", "--plan"])
    assert done.exit_code == 2 and "cache scale" in done.output
    done = RUNNER.invoke(app, ["cache", "run", "--preset", "nothing", "--plan"])
    assert done.exit_code == 2 and "no preset 'nothing'" in done.output


def test_options_given_beside_a_preset_override_it_as_deviations() -> None:
    values, record = presets.resolve(presets.get("dsb-ampere"),
                                     {"step_duration": "20s", "repeat": 5, "connections": 64})
    assert values["step_duration"] == "20s" and values["connections"] == 64
    assert values["start_rate"] == 1000.0  # not given: the preset's
    assert record.deviations == [  # repeat 5 is the preset's own value: no deviation
        Deviation(option="step_duration", preset="5m", given="20s"),
        Deviation(option="connections", preset=5000, given=64)]
    assert record.headline() == ("Ampere DSB method, 2 deviations: --step-duration 20s "
                                 "(preset: 5m); --connections 64 (preset: 5000)")

    done = RUNNER.invoke(app, ["ramp", "--preset", "perfkit-dsb-social", "--step-duration",
                               "20s", "--warmup", "5s", "--plan"])
    assert done.exit_code == 0, done.output
    assert "PerfKit dsb_social method, 1 deviation: --step-duration 20s" in done.output
    assert "from 500 req/s by 100, 20 s each after 5 s warm-up" in done.output
    assert "stops after 2 declines in a row" in done.output
    done = RUNNER.invoke(app, ["cache", "scale", "--preset", "redis-ampere", "--step-time",
                               "10", "--max-instances", "2", "--plan"])
    assert done.exit_code == 0, done.output
    assert "Ampere Redis method, 1 deviation: --step-time 10.0 (preset: 180.0)" in done.output


def test_the_perfkit_plan_states_the_rule_that_runs() -> None:
    # The engine with stop_after_declines goes on past failed steps (the scripted ramp
    # below): the plan must not say it stops at the first.
    done = RUNNER.invoke(app, ["ramp", "--preset", "perfkit-dsb-social", "--plan"])
    assert done.exit_code == 0, done.output
    text = " ".join(done.output.split())
    assert "The ramp stops after 2 declines in a row" in text
    assert "a failed step (SLA, errors, achieved rate) does not stop it" in text
    assert "first failed step" not in text
    done = RUNNER.invoke(app, ["ramp", "--quick", "--plan", "--max-rate", "3000"])
    text = " ".join(done.output.split())
    assert "The ramp stops at its first failed step (SLA, errors, achieved rate) or at " \
           "--max-steps 50 or --max-rate 3,000" in text, text
    assert "declines" not in text
    # --refine bisects below a first failure that never stops this ramp: refused.
    done = RUNNER.invoke(app, ["ramp", "--preset", "perfkit-dsb-social", "--refine", "--plan"])
    assert done.exit_code == 2 and "--stop-after-declines" in done.output


def test_quick_is_refused_beside_a_preset() -> None:
    done = RUNNER.invoke(app, ["ramp", "--preset", "dsb-ampere", "--quick", "--plan"])
    assert done.exit_code == 2 and "--step-duration" in done.output


def scripted_results(refined_ramp: RampReport, monkeypatch: pytest.MonkeyPatch,
                     script: dict[float, tuple[float, bool]]) -> None:
    """The driver's result at each rate: (achieved req/s, whether it holds the SLA)."""
    (run,) = refined_ramp.outcome.runs
    held = next(step for step in run.steps if step.passed).result
    broke = next(step for step in run.steps if not step.passed and
                 step.verdict.failures == (StopReason.SLA,)).result

    def scripted(load: LoadConfig, on_second: object = None) -> LoadResult:
        achieved, holds = script[load.rate]
        return (held if holds else broke).model_copy(
            update={"offered_rps": load.rate, "scheduled_rps": load.rate,
                    "achieved_rps": achieved})

    monkeypatch.setattr(engine, "run_load", scripted)


def test_perfkit_stops_after_two_declines_in_a_row_not_at_a_failed_step(
        refined_ramp: RampReport, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    config = scripted_ramp(refined_ramp, monkeypatch, step_limit=0, confirm_limit=0,
                           refine=False, start_rate=100, step_rate=100, max_steps=20,
                           min_achieved_ratio=0.5, stop_after_declines=2)
    # 300 breaks the SLA and 400 holds it again; 500 declines once, 600 recovers (the
    # count starts again), 700 and 800 decline twice in a row: the stop.
    scripted_results(refined_ramp, monkeypatch, {
        100: (100, True), 200: (200, True), 300: (290, False), 400: (395, True),
        500: (380, False), 600: (520, False), 700: (500, False), 800: (450, False)})
    _, record = presets.resolve(presets.get("perfkit-dsb-social"), {"step_duration": "2s"})
    job = RampJob(config=config, label="perfkit", results_dir=tmp_path, sampler=no_sampler,
                  resources_source="none", mongodb_server="mongod",
                  dataset=Dataset(fresh=False, users=962, note="scripted"), preset=record)
    output = io.StringIO()
    result = execute(job, Console(file=output, width=300))
    print_headline(result, Console(file=output, width=300))

    (run,) = result.outcome.runs
    assert [step.rate for step in run.steps] == [100, 200, 300, 400, 500, 600, 700, 800]
    assert run.stop_reason is StopReason.DECLINES
    assert run.answer is not None and run.answer.rate == 400  # the highest step that held
    summary = result.summary
    assert summary.max_throughput_rps == 520  # the highest achieved, passed or not
    assert summary.best is not None and summary.best.achieved_rps == 395
    text = " ".join(output.getvalue().split())
    assert "Max throughput 520.0 req/s" in text and "395.0 req/s achieved" in text
    assert "PerfKit dsb_social method, 1 deviation: --step-duration 2s" in text

    bundle = read_bundle(result.directory)
    assert bundle.manifest.preset == record
    page = (result.directory / "report.html").read_text()
    assert 'id="preset"' in page and 'id="max-throughput"' in page
    assert "PerfKit dsb_social method, 1 deviation" in page


def test_compare_lists_another_preset_or_another_deviation(
        refined_ramp: RampReport, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    config = scripted_ramp(refined_ramp, monkeypatch, step_limit=170, confirm_limit=170,
                           refine=False, max_steps=4)
    bundles = []
    for name, given in (("a", {}), ("b", {"repeat": 1}), ("c", {})):
        record = None if name == "c" else presets.resolve(presets.get("dsb-ampere"), given)[1]
        job = RampJob(config=config, label=name, results_dir=tmp_path, sampler=no_sampler,
                      resources_source="none", mongodb_server="mongod",
                      dataset=Dataset(fresh=False, users=962, note="scripted"), preset=record)
        bundles.append(read_bundle(execute(job, Console(file=io.StringIO())).directory))

    assert [d.name for d in differences(bundles[:1] * 2)] == []
    found = {d.name: d for d in differences(bundles)}
    assert found["preset"].values == (
        "Ampere DSB method, no deviation",
        "Ampere DSB method, 1 deviation: --repeat 1 (preset: 5)", "none")


def test_the_plan_of_a_short_ramp_is_its_actual_time(capacity_server: CapacityServer) -> None:
    skip_unless_quiet("a ramp's time as planned")  # other work stretches every step
    # Real steps against the 200 req/s server: 120, 170 held, 220 breaks it.
    config = small_ramp(capacity_server.url, calibrate=False, step_duration_s=3,
                        warmup_s=1, pause_s=0.5)
    config = config.model_copy(update={"load": config.load.model_copy(
        update={"duration_s": 3, "warmup_s": 1})})
    started = time.perf_counter()
    outcome = Ramp(config, sampler=no_sampler).run()
    actual = time.perf_counter() - started

    (run,) = outcome.runs
    estimate = plan_ramp(config).run_s(len(run.steps))
    assert len(run.steps) >= 2
    assert abs(estimate - actual) <= 0.25 * actual, (estimate, actual, len(run.steps))
