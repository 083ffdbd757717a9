"""``socialbench locust`` headless against the real stack: every task sent, nothing failed.

Locust itself is never imported here (it monkey-patches the process with gevent); it runs
as ``socialbench locust`` does it, in child processes.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import psutil
import pytest
from typer.testing import CliRunner

from socialbench.cli import app
from socialbench.workloads.runs.locust_run import LOCUSTFILE, bundle_dir, locust_argv
from tests.support import socialbench

GRAPH = "synthetic:40:3"
GRAPH_USERS = 40
TASKS = {"read-home-timeline": "GET", "read-user-timeline": "GET", "compose-post": "POST"}


@pytest.fixture(scope="module")
def seeded_url(base_url: str) -> str:
    """The stack's front end with users 0..39 registered and following each other."""
    seed = socialbench("seed", "--graph", GRAPH, "--url", base_url, "--seed", "7")
    assert seed.returncode == 0, seed.stdout + seed.stderr
    return base_url


def run_watched(*args: str) -> tuple[int, str, list[psutil.Process]]:
    """Run ``socialbench ARGS``; its exit code, output, and every descendant seen meanwhile."""
    command = [sys.executable, "-m", "socialbench.cli", *args]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    seen: dict[int, psutil.Process] = {}
    parent = psutil.Process(process.pid)
    try:
        while process.poll() is None:
            try:
                seen.update((p.pid, p) for p in parent.children(recursive=True))
            except psutil.NoSuchProcess:
                break
            time.sleep(0.2)
        output, _ = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    return process.returncode, output.decode(errors="replace"), list(seen.values())


def only_bundle(results: Path) -> Path:
    bundles = list(results.iterdir())
    assert len(bundles) == 1, bundles
    assert bundles[0].name.endswith("-locust-test"), bundles[0].name
    return bundles[0]


def stats_rows(bundle: Path) -> dict[str, dict[str, str]]:
    with (bundle / "locust_stats.csv").open() as file:
        return {row["Name"]: row for row in csv.DictReader(file)}


@pytest.mark.e2e
def test_headless_run_sends_every_task_without_failures(seeded_url: str, tmp_path: Path) -> None:
    code, output, children = run_watched(
        "locust", "--headless", "--host", seeded_url, "--graph-users", str(GRAPH_USERS),
        "--users", "4", "--spawn-rate", "4", "--run-time", "4s", "--label", "test",
        "--results-dir", str(tmp_path))
    assert code == 0, output
    bundle = only_bundle(tmp_path)
    rows = stats_rows(bundle)
    for name, method in TASKS.items():
        assert rows[name]["Type"] == method
        assert int(rows[name]["Request Count"]) > 0, (name, rows[name])
        assert rows[name]["Failure Count"] == "0", (name, rows[name])
    assert rows["Aggregated"]["Failure Count"] == "0"
    home, compose = (int(rows[n]["Request Count"]) for n in ("read-home-timeline", "compose-post"))
    assert home > compose  # weighted 60 / 10
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["exit_code"] == 0
    assert manifest["config"]["host"] == seeded_url
    assert manifest["hardware"]["logical_cores"] >= 1
    assert (bundle / "report.html").stat().st_size > 0
    assert children, "locust ran in no child process"
    assert not [p for p in children if p.is_running()], "locust processes left running"


@pytest.mark.e2e
def test_workers_run_the_step_ramp_then_stop(seeded_url: str, tmp_path: Path) -> None:
    code, output, children = run_watched(
        "locust", "--headless", "--host", seeded_url, "--graph-users", str(GRAPH_USERS),
        "--workers", "2", "--ramp", "--ramp-start", "1", "--ramp-step", "1",
        "--ramp-hold", "2s", "--users", "3", "--spawn-rate", "10", "--label", "test",
        "--results-dir", str(tmp_path))
    assert code == 0, output
    assert "2 ready workers" in output or "2 workers connected" in output, output
    bundle = only_bundle(tmp_path)
    with (bundle / "locust_stats_history.csv").open() as file:
        levels = [int(row["User Count"]) for row in csv.DictReader(file)
                  if row["Name"] == "Aggregated" and row["User Count"] != "0"]
    # Up by the step to the top: 1, then 2, then 3 users (then the workers stop theirs).
    assert 3 in levels, levels
    rise = levels[:levels.index(3) + 1]
    assert set(rise) == {1, 2, 3} and rise == sorted(rise), levels
    rows = stats_rows(bundle)
    assert rows["Aggregated"]["Failure Count"] == "0"
    assert all(int(rows[name]["Request Count"]) > 0 for name in TASKS), rows
    assert len(children) >= 3  # the master and two workers
    assert not [p for p in children if p.is_running()], "locust processes left running"


def test_locust_command_line() -> None:
    argv = locust_argv(host="http://h:1", users=5, spawn_rate=2.5, graph_users=40,
                       headless=True, run_time=30, bundle=Path("b"), web_host="127.0.0.1",
                       web_port=8089, ramp=None, extra=["--loglevel", "DEBUG"])
    assert argv[:5] == [sys.executable, "-m", "locust", "--locustfile", str(LOCUSTFILE)]
    assert " ".join(argv[5:]) == (
        "--host http://h:1 --users 5 --spawn-rate 2.5 --graph-users 40 --headless "
        "--run-time 30 --csv b/locust --csv-full-history --html b/report.html --loglevel DEBUG")
    ramped = locust_argv(host="http://h:1", users=5, spawn_rate=1, graph_users=40,
                         headless=True, run_time=30, bundle=None, web_host="127.0.0.1",
                         web_port=8089, ramp={"start": 1, "step": 2, "hold": 60}, extra=[])
    assert "--ramp --ramp-start 1 --ramp-step 2 --ramp-hold 60" in " ".join(ramped)
    assert "--run-time" not in ramped  # the ramp ends the run
    web = locust_argv(host="http://h:1", users=5, spawn_rate=1, graph_users=40,
                      headless=False, run_time=30, bundle=None, web_host="127.0.0.1",
                      web_port=9999, ramp=None, extra=[])
    assert "--headless" not in web and "--web-port 9999" in " ".join(web)


def test_bundle_is_named_by_utc_time_and_label() -> None:
    when = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert bundle_dir(Path("results"), "x", when) == Path("results/20260102T030405Z-locust-x")
    assert bundle_dir(Path("r"), "../up", when).parent == Path("r")


@pytest.mark.parametrize("option", [["--run-time", "soon"],
                                    ["--ramp", "--ramp-hold", "0.2s"], ["--graph-users", "1"]])
def test_bad_options_are_refused_before_locust_starts(option: list[str], tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["locust", "--headless", "--results-dir", str(tmp_path),
                                      *option])
    assert result.exit_code == 2, result.output
    assert not list(tmp_path.iterdir())


def test_the_locustfile_builds_requests_from_the_workload_definitions() -> None:
    source = LOCUSTFILE.read_text()
    assert "load_workload(" in source
    assert "/wrk2-api/" not in source  # paths and bodies: definitions/socialnetwork.py
