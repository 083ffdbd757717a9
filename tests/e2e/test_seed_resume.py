"""Seeding a heavy-tailed graph through a real stack of its own, interrupted and resumed:
the stores end as the plan says, as one uninterrupted run leaves them (``kill -9`` of the
bulk path, Ctrl-C of the api path), and ``socialbench check`` passes."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from socialbench.stack.local import LocalStack
from socialbench.workloads.seeding import graph
from socialbench.workloads.seeding.seed import SeedPlan
from tests.e2e.store_contents import planned_contents, read_contents
from tests.e2e.support import stack_on_free_ports
from tests.support import socialbench

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture
def own_stack(tmp_path: Path) -> Iterator[tuple[Path, list[str]]]:
    data_dir = tmp_path / "stack"
    with stack_on_free_ports(data_dir) as (args, _):
        yield data_dir, args


def seed_args(source: str, seed: int, data_dir: Path, path: str) -> list[str]:
    return ["seed", "--graph", source, "--posts-per-user", "2", "--seed", str(seed),
            "--path", path, "--data-dir", str(data_dir)]


def interrupted(args: list[str], state: Path, stop: signal.Signals) -> None:
    """Run ``socialbench ARGS`` and send it ``stop`` once a chunk of posts is recorded."""
    seeding = subprocess.Popen([sys.executable, "-m", "socialbench.cli", *args],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while seeding.poll() is None and time.monotonic() < deadline:
        try:
            if json.loads(state.read_text())["phases"]["posts"]["done"]:
                break
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.02)
    assert seeding.poll() is None, f"it ended before it could be stopped: {seeding.stdout}"
    seeding.send_signal(stop)
    output, _ = seeding.communicate(timeout=60)
    record = json.loads(state.read_text())
    assert not record["complete"], output
    if stop is signal.SIGINT:
        assert seeding.returncode == 130 and "Stopped" in output, output


def check_passes(data_dir: Path) -> None:
    check = socialbench("check", "--data-dir", str(data_dir), "--full")
    assert check.returncode == 0, check.stdout + check.stderr
    assert "Check passed" in check.stdout


def test_bulk_seeding_killed_and_run_again_leaves_the_stores_of_one_run(
        own_stack: tuple[Path, list[str]]) -> None:
    data_dir, _ = own_stack
    source, seed = "twitter:3000:8", 4
    args = seed_args(source, seed, data_dir, "bulk")
    interrupted(args, data_dir / "seed-state.json", signal.SIGKILL)
    again = socialbench(*args)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "Continued the seeding" in again.stdout and "in 2 run(s)" in again.stdout
    assert "--path bulk" in again.stdout

    plan = SeedPlan.make(graph.load(source, seed=seed), source, 2, seed)
    followers = plan.graph.followers()
    assert max(followers) > 300 > 10 * sorted(followers)[len(followers) // 2]  # heavy tail
    stored = read_contents(LocalStack(data_dir))
    assert stored.differences(planned_contents(plan)) == {}
    assert stored.cached_user_timelines == stored.user_timelines
    check_passes(data_dir)
    done = socialbench(*args)
    assert done.returncode == 0 and "Already seeded" in done.stdout, done.stdout


def test_api_seeding_stopped_and_run_again_leaves_the_stores_of_one_run(
        own_stack: tuple[Path, list[str]]) -> None:
    data_dir, _ = own_stack
    source, seed = "twitter:800:5", 9
    args = seed_args(source, seed, data_dir, "api")
    interrupted(args, data_dir / "seed-state.json", signal.SIGINT)
    again = socialbench(*args)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "Continued the seeding" in again.stdout and "--path api" in again.stdout

    plan = SeedPlan.make(graph.load(source, seed=seed), source, 2, seed)
    assert read_contents(LocalStack(data_dir)).differences(planned_contents(plan)) == {}
    check_passes(data_dir)
