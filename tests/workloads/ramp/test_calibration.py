"""The host's calibration: fixed work measured before each step, and the steps flagged
when a CPU-burning process starts halfway through a ramp (and none on a quiet run).

This project's machine moves by itself: with nothing else running, its fixed work ran up
to 40% faster for a few seconds at a time, one calibration's speed with a spread of about
10% (December 2026). So these ramps flag past HOST_DRIFT, above that, while the burners
(two per CPU) took the speed to 0.1-0.25 of the quiet host's. The quiet run's host is
faked steady: whether the real one is quiet depends on what else runs on it."""

from __future__ import annotations

import functools
import io
import itertools
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console

from socialbench.workloads.driver import LoadConfig, LoadResult
from socialbench.workloads.ramp import calibration, engine
from socialbench.workloads.ramp.calibration import Calibration, CalibrationError, calibrate
from socialbench.workloads.ramp.engine import Ramp, RampObserver, StepRun, no_sampler
from socialbench.workloads.reports.live import print_headline
from socialbench.workloads.results.files import read_bundle
from socialbench.workloads.results.schema import Dataset
from socialbench.workloads.results.summary import RampReport
from socialbench.workloads.runs import ramp_job as job_module
from socialbench.workloads.runs.ramp_job import RampJob, execute
from tests.workloads.conftest import scripted_ramp

# Timing on a quiet host: make test runs these alone, after the rest (pyproject markers).
pytestmark = pytest.mark.serial


BURN = "while True: pass"
HOST_DRIFT = 0.5


def test_a_calibration_measures_each_part_and_compares_by_geometric_mean() -> None:
    measured = calibrate()

    assert measured.cpu_processes == calibration.machine_cpus()
    for value in measured.parts().values():
        assert value > 0
    assert measured.speed_relative_to(measured) == pytest.approx(1.0)
    half_cpu = measured.model_copy(update={"cpu_rounds_per_s": measured.cpu_rounds_per_s / 2})
    assert half_cpu.ratios_to(measured) == pytest.approx(
        {"cpu": 0.5, "loopback": 1.0, "memory": 1.0})
    assert half_cpu.speed_relative_to(measured) == pytest.approx(0.5 ** (1 / 3))


def test_a_calibration_whose_child_fails_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(calibration, "_CPU_CHILD", "import sys; sys.exit(3)")
    with pytest.raises(CalibrationError, match="CPU process gave no answer"):
        calibration.measure_cpu(1)


class BurnerAfter(RampObserver):
    """Starts two CPU-burning processes per CPU once ``steps`` steps have finished."""

    def __init__(self, steps: int) -> None:
        self.steps = steps
        self.burners: list[subprocess.Popen[bytes]] = []

    def step_finished(self, step: StepRun) -> None:
        if step.index == self.steps:  # two a CPU: unmistakable on a busy host too
            self.burners = [subprocess.Popen([sys.executable, "-c", BURN])
                            for _ in range(2 * calibration.machine_cpus())]

    def stop(self) -> None:
        for burner in self.burners:
            burner.kill()
            burner.wait()


@pytest.fixture
def burner() -> Iterator[BurnerAfter]:
    observer = BurnerAfter(steps=2)
    try:
        yield observer
    finally:
        observer.stop()


def calibrated_ramp(refined_ramp: RampReport, monkeypatch: pytest.MonkeyPatch,
                    tmp_path: Path, *observers: RampObserver) -> tuple[RampReport, str]:
    """Four passing steps (a scripted driver, no waiting) calibrated for real, then the
    headline printed."""
    config = scripted_ramp(refined_ramp, monkeypatch, step_limit=10_000, confirm_limit=10_000,
                           refine=False, max_steps=4, calibrate=True, host_drift=HOST_DRIFT)
    job = RampJob(config=config, label="calibrated", results_dir=tmp_path, sampler=no_sampler,
                  resources_source="none", mongodb_server="mongod",
                  dataset=Dataset(fresh=False, users=962, note="scripted"),
                  observers=observers)
    output = io.StringIO()
    console = Console(file=output, width=300)
    result = execute(job, console)
    print_headline(result, console)
    return result, " ".join(output.getvalue().split())


def steady_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """The calibration's three measurements faked as a steady host's, within 3% of each
    other: the real host's speed depends on whatever else runs on it."""
    wobble = itertools.cycle([1.0, 0.97, 1.03, 0.99, 1.01])
    monkeypatch.setattr(calibration, "measure_cpu", lambda processes: 2e7 * next(wobble))
    monkeypatch.setattr(calibration, "measure_loopback", lambda: 2e4 * next(wobble))
    monkeypatch.setattr(calibration, "measure_memory", lambda: 5e9 * next(wobble))


def test_a_quiet_run_flags_no_step(
    refined_ramp: RampReport, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    steady_host(monkeypatch)
    result, text = calibrated_ramp(refined_ramp, monkeypatch, tmp_path)

    bundle = read_bundle(result.directory)
    hosts = [step.host for step in bundle.steps]
    assert all(host is not None for host in hosts)
    assert [host.flagged for host in hosts if host] == [False] * 4, [
        f"{host.speed:.2f} {host.parts}" for host in hosts if host]
    assert bundle.summary.comparable and not bundle.summary.not_comparable
    assert bundle.summary.host_calibration_end is not None
    assert bundle.summary.calibration_seconds > 0
    assert "Host speed (fixed work before each step)" in text and "Not comparable" not in text
    assert (result.directory / "host-speed.png").exists()
    assert 'id="host"' in (result.directory / "report.html").read_text()


def test_a_cpu_burner_started_halfway_flags_the_steps_after_it(
    refined_ramp: RampReport, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
    burner: BurnerAfter,
) -> None:
    result, text = calibrated_ramp(refined_ramp, monkeypatch, tmp_path, burner)
    burner.stop()

    bundle = read_bundle(result.directory)
    hosts = [step.host for step in bundle.steps]
    assert all(host is not None for host in hosts)
    speeds = [round(host.speed, 2) for host in hosts if host]
    flags = [host.flagged for host in hosts if host]
    # Step 2 ran before the burners started, and before the calibration that saw them:
    # it is flagged with the steps after, since the host may have moved during it.
    assert flags[1:] == [True, True, True], speeds
    step_two = hosts[1]  # flagged by the calibration after it, which it names
    assert step_two is not None and step_two.speed_after == pytest.approx(speeds[2], abs=0.01)
    assert all(speed < 1 - HOST_DRIFT for speed in speeds[2:]), speeds
    summary = bundle.summary
    assert not summary.comparable
    assert "r1-s04-ramp" in summary.not_comparable  # the answer's own step
    assert "Not comparable: the host's speed moved more than 50%" in text
    page = (result.directory / "report.html").read_text()
    assert 'id="not-comparable"' in page


def test_a_ramp_without_calibration_records_none(
    refined_ramp: RampReport, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = scripted_ramp(refined_ramp, monkeypatch, step_limit=10_000, confirm_limit=10_000,
                           refine=False, max_steps=2)
    job = RampJob(config=config, label="uncalibrated", results_dir=tmp_path,
                  sampler=no_sampler, resources_source="none", mongodb_server="mongod",
                  dataset=Dataset(fresh=False, users=962, note="scripted"))
    result = execute(job, Console(file=io.StringIO()))
    bundle = read_bundle(result.directory)
    assert [step.host for step in bundle.steps] == [None, None]
    assert bundle.summary.host_calibration_start is None and bundle.summary.comparable


def test_the_host_adjusted_cv_takes_out_a_host_that_slowed_between_repeats(
    refined_ramp: RampReport, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Repeat 2 runs on a host 20% slower and finds a knee 20% lower: the repeats' CV is
    large, the host-adjusted one nil."""
    measured = calibrate()
    host = {"speed": 1.0}

    def scripted_host() -> Calibration:
        return measured.model_copy(update={
            name: value * host["speed"] for name, value in
            (("cpu_rounds_per_s", measured.cpu_rounds_per_s),
             ("loopback_round_trips_per_s", measured.loopback_round_trips_per_s),
             ("memory_bytes_per_s", measured.memory_bytes_per_s))})

    class SlowerSecondRepeat(RampObserver):
        def repeat_started(self, repeat: int, repeats: int) -> None:
            host["speed"] = 1.0 if repeat == 1 else 0.8

    config = scripted_ramp(refined_ramp, monkeypatch, step_limit=10_000, confirm_limit=10_000,
                           refine=False, calibrate=True, repeat=2, start_rate=100,
                           step_rate=100)
    scripted = engine.run_load

    def knee_by_host(load: LoadConfig, on_second: object = None) -> LoadResult:
        limit = 500 * host["speed"]  # 500 req/s, 400 on the slower host
        result = scripted(load, on_second)
        return result if load.rate <= limit else scripted(
            load.model_copy(update={"rate": 10**6}), on_second).model_copy(
            update={"offered_rps": load.rate})

    monkeypatch.setattr(engine, "run_load", knee_by_host)
    monkeypatch.setattr(job_module, "Ramp", functools.partial(
        Ramp, calibrator=scripted_host, start_calibrator=scripted_host))
    job = RampJob(config=config, label="drifting", results_dir=tmp_path, sampler=no_sampler,
                  resources_source="none", mongodb_server="mongod",
                  dataset=Dataset(fresh=False, users=962, note="scripted"),
                  observers=[SlowerSecondRepeat()])
    summary = execute(job, Console(file=io.StringIO())).summary

    assert summary.repeat_max_rates_rps == [500, 400]
    assert [r.host_speed for r in summary.repeats] == pytest.approx([1.0, 0.8])
    assert summary.coefficient_of_variation == pytest.approx(0.157, abs=0.001)
    assert summary.host_adjusted_cv == pytest.approx(0.0, abs=1e-9)
    # The best repeat ran on the host as it started; the second on the moved one.
    assert summary.comparable
    assert summary.repeats[0].host_moved == [] and summary.repeats[1].host_moved
