"""The driver against a real server: rate, coordinated omission, errors, pool, CLI."""

from __future__ import annotations

import json
import platform
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from socialbench.cli import app
from socialbench.stack.servers import ServerProcess, free_port
from socialbench.workloads.driver import (
    Distribution,
    DriverError,
    LoadConfig,
    LoadResult,
    SecondStats,
    run_load,
)
from socialbench.workloads.driver.runner import StoppedBeforeWindow, _start_worker
from tests.support import skip_unless_quiet

# Timing on a quiet host: make test runs these alone, after the rest (pyproject markers).
pytestmark = pytest.mark.serial


def accounted(result: LoadResult) -> int:
    """Outcomes of the measured requests: every one must end in exactly one."""
    errors = result.errors
    return (
        result.ok + sum(errors.status.values()) + errors.connect + errors.read + errors.timeout
        + errors.dropped
    )


@pytest.mark.parametrize(
    ("distribution", "processes"),
    [(Distribution.CONSTANT, 1), (Distribution.EXPONENTIAL, 2)],
)
def test_achieved_rate_is_within_2_percent_of_offered_at_2000_rps(
    target: str, distribution: Distribution, processes: int
) -> None:
    skip_unless_quiet("the driver's rate within 2%")  # other work delays its sends
    config = LoadConfig(
        url=f"{target}/ok", rate=2000, duration_s=3, warmup_s=0.5, distribution=distribution,
        processes=processes, connections=16, seed=1,
    )
    result = run_load(config)

    if distribution is Distribution.CONSTANT:
        assert result.scheduled == 6000
    else:  # a Poisson count: within 3 standard deviations (about 4%) of 6,000
        assert abs(result.scheduled - 6000) <= 3 * 6000**0.5
    shown = f"{result.achieved_rps=} {result.scheduled_rps=} {result.send_lag.percentiles_us=}"
    assert abs(result.achieved_rps - result.scheduled_rps) / result.scheduled_rps <= 0.02, shown
    assert abs(result.achieved_rps - 2000) / 2000 <= 0.02 + 3 / 6000**0.5, shown
    assert result.ok == result.sent == result.scheduled == accounted(result)
    assert result.latency.count == result.service_time.count == result.scheduled
    assert result.send_lag.count == result.scheduled
    assert len(result.timeline) >= 3
    assert sum(s.sent for s in result.timeline) >= result.scheduled  # warm-up sends too


def test_a_stall_shows_in_intended_time_latency_not_in_service_time(
    stalling_target: str,
) -> None:
    """Coordinated omission: 1 s without answers in a 5 s run at 1,000 req/s."""
    config = LoadConfig(
        url=f"{stalling_target}/stall", rate=1000, duration_s=5,
        distribution=Distribution.CONSTANT, processes=1, connections=10, seed=2,
    )
    result = run_load(config)

    assert result.scheduled == 5000 == result.ok
    # About a fifth of the requests were due during the stall: hundreds of ms late.
    assert result.latency.percentiles_us["90"] >= 300_000
    assert result.latency.max_us >= 900_000
    # Only the 10 requests in flight when it began waited on the server.
    assert result.service_time.percentiles_us["90"] < 100_000
    assert result.queued >= 900


@pytest.mark.parametrize(
    ("path", "kind"),
    [("/status/500", "status"), ("/close", "read"), ("/hang", "timeout")],
)
def test_errors_are_counted_in_their_class_and_the_run_ends_on_time(
    target: str, path: str, kind: str
) -> None:
    config = LoadConfig(
        url=f"{target}{path}", rate=200, duration_s=1.5, timeout_s=0.5, processes=1,
        connections=8, seed=3,
    )
    result = run_load(config)

    errors = result.errors.model_dump()
    assert result.scheduled == accounted(result) > 250
    if kind == "status":
        assert errors["status"] == {500: result.scheduled}
        assert result.latency.count == result.scheduled  # error answers are still timed
    else:
        assert errors[kind] == result.scheduled
        assert result.latency.count == 0
    assert result.ok == 0
    assert result.elapsed_s <= config.duration_s + config.timeout_s + 1.0


def test_a_growing_pool_stops_at_its_maximum_and_counts_the_drops(target: str) -> None:
    config = LoadConfig(
        url=f"{target}/hang", rate=100, duration_s=1, timeout_s=1.5, processes=1,
        connections=1, max_connections=4, seed=4,
    )
    result = run_load(config)

    assert result.peak_connections == 4
    assert result.errors.timeout == 4  # the four in flight, unanswered at the end
    assert result.errors.dropped == result.scheduled - 4
    assert result.saturated
    assert any("dropped" in warning for warning in result.warnings)


def test_a_target_that_goes_away_gives_connect_errors_until_the_end(
    own_target: ServerProcess,
) -> None:
    config = LoadConfig(
        url=f"http://{own_target.command.address}/ok", rate=200, duration_s=2, timeout_s=0.5,
        processes=1, connections=4, seed=5,
    )

    def stop_after_the_first_second(second: SecondStats) -> None:
        if second.second == 1:
            own_target.stop()

    result = run_load(config, on_second=stop_after_the_first_second)

    assert 150 <= result.ok <= 250  # about the first second's
    assert result.errors.connect >= 150  # the rest: refused
    assert result.scheduled == accounted(result)
    assert result.saturated  # far fewer answers than offered
    assert result.elapsed_s <= config.duration_s + config.timeout_s + 1.0


def test_a_worker_whose_parent_is_gone_stops_its_load(target: str) -> None:
    config = LoadConfig(url=f"{target}/ok", rate=200, duration_s=60, warmup_s=0, seed=1)
    worker = _start_worker(0)
    try:
        worker.pipe.send(("config", config.model_dump_json()))
        assert worker.pipe.recv() == ("ready", None)
        worker.pipe.send(("start", time.perf_counter_ns()))
        kind, report = worker.pipe.recv()
        assert kind == "second" and report.sent > 0
        worker.pipe.close()  # as when the parent is killed
        assert worker.process.wait(timeout=10) == 0  # not the 60 s of its load
    finally:
        worker.process.kill()
        worker.process.wait()


def test_a_stop_ends_the_window_early_and_the_result_is_of_the_shorter_window(
    target: str,
) -> None:
    config = LoadConfig(url=f"{target}/ok", rate=500, duration_s=60, warmup_s=0.5,
                        distribution=Distribution.CONSTANT, processes=2, connections=8, seed=3)
    stop = threading.Event()

    def stop_after_3_seconds(second: SecondStats) -> None:
        if second.second == 3:
            stop.set()

    started = time.monotonic()
    result = run_load(config, stop_after_3_seconds, stop)

    assert time.monotonic() - started < 15  # not the 60 s asked
    assert result.stopped_early
    assert 2.4 < result.window_s < 3.0, result.window_s  # from the end of the warm-up
    # Every request due in the shorter window was sent and answered, and only those (the two
    # processes see the stop a few ms apart on a busy host: 10 ms of the schedule allowed).
    assert abs(result.scheduled - 500 * result.window_s) <= 5
    assert result.ok == result.sent == result.scheduled == accounted(result)
    assert abs(result.achieved_rps - 500) / 500 <= 0.05


def test_a_stop_during_the_warm_up_measures_nothing(target: str) -> None:
    config = LoadConfig(url=f"{target}/ok", rate=100, duration_s=30, warmup_s=10,
                        processes=1, connections=2, seed=4)
    stop = threading.Event()
    threading.Timer(1.0, stop.set).start()
    with pytest.raises(StoppedBeforeWindow, match="into the 10 s warm-up"):
        run_load(config, stop=stop)


def test_sigterm_to_the_load_command_keeps_the_result_measured_so_far(
    target: str, tmp_path: Path
) -> None:
    out = tmp_path / "run.json"
    command = subprocess.Popen(
        [sys.executable, "-m", "socialbench.cli", "load", f"{target}/ok", "-R", "200",
         "-d", "60s", "--warmup", "0s", "-P", "1", "-c", "4", "--json", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        assert command.stdout is not None
        before: list[str] = []
        for line in command.stdout:  # the live lines: the window has begun
            before.append(line)
            if line.startswith("[   2s]"):
                break
        command.send_signal(signal.SIGTERM)
        output, _ = command.communicate(timeout=20)
    finally:
        command.kill()
    output = "".join(before) + output
    assert command.returncode == 130, output
    assert "Stopped early: the window measured is" in output
    result = LoadResult.model_validate_json(out.read_text())
    assert result.stopped_early and 1.5 < result.window_s < 10
    assert result.ok == result.scheduled == accounted(result) > 0


def test_a_target_that_refuses_connections_fails_fast() -> None:
    config = LoadConfig(url=f"http://127.0.0.1:{free_port()}/", rate=10, duration_s=1,
                        processes=1, connections=2)
    with pytest.raises(DriverError, match="cannot connect"):
        run_load(config)


def test_the_load_command_runs_a_users_workload_and_writes_the_json(
    target: str, tmp_path: Path
) -> None:
    workload = tmp_path / "half_missing.py"
    workload.write_text(
        "from socialbench.workloads.definitions.core import Request\n"
        "class HalfMissing:\n"
        "    name, fixed = 'half-missing', False\n"
        "    def next_request(self, rng):\n"
        "        return Request('GET', '/ok' if rng.random() < 0.5 else '/status/404')\n"
    )
    out = tmp_path / "run.json"
    cli = CliRunner().invoke(
        app,
        ["load", target, "-R", "300", "-d", "1s", "-P", "1", "-c", "4", "--seed", "9",
         "--workload", f"{workload}:HalfMissing", "--origin-form", "--json", str(out),
         "--max-errors", "100%"],  # half are 404s on purpose
    )
    assert cli.exit_code == 0, cli.output
    assert "Latency distribution" in cli.output and "99.999%" in cli.output
    assert "status 404:" in cli.output
    result = LoadResult.model_validate_json(out.read_text())
    assert result.config.seed == 9
    assert result.ok > 0 and result.errors.status[404] > 0
    assert result.ok + result.errors.status[404] == result.scheduled == accounted(result)
    assert result.latency.decode().get_total_count() == result.scheduled
    assert json.loads(out.read_text())["latency"]["histogram"].startswith("HISTF")
    # What the driver ran on, as its kernel says (aarch64 in an arm64 container under QEMU).
    assert result.host.architecture == platform.machine() != ""
    assert f"CPUs ({platform.machine()})" in cli.output


def test_the_load_command_rejects_bad_options_clearly() -> None:
    cli = CliRunner().invoke(app, ["load", "https://x", "-R", "10"])
    assert cli.exit_code == 2
    assert "plain http://" in cli.output
