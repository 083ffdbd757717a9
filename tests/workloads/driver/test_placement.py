"""CPU placement: the split planned, the stack's processes pinned (and restarts with them),
the driver pinned, and all of it recorded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from socialbench.cli import app
from socialbench.stack import launcher
from socialbench.stack.local import LocalStack, pin_process_trees
from socialbench.workloads.driver import LoadResult
from socialbench.workloads.driver.hostload import usable_cpus
from socialbench.workloads.driver.placement import PlacementMode, parse_cpus, plan_placement
from socialbench.workloads.runs.demo import choose_placement
from tests.workloads.conftest import CapacityServer

two_cpus = pytest.mark.skipif(len(usable_cpus()) < 2, reason="needs 2 CPUs to split")

# A process with a second thread and a child: what a service with workers is like.
TREE = """\
import subprocess, sys, threading, time
threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
print(child.pid, flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize(("cpus", "driver", "stack"), [
    ([0, 1], [1], [0]),
    ([0, 1, 2, 3], [3], [0, 1, 2]),
    ([0, 1, 2, 3, 4, 5, 6, 7], [6, 7], [0, 1, 2, 3, 4, 5]),
])
def test_split_gives_the_driver_a_quarter_of_the_cpus(cpus: list[int], driver: list[int],
                                                      stack: list[int]) -> None:
    placement = plan_placement(PlacementMode.SPLIT, available=cpus)
    assert (placement.driver_cpus, placement.stack_cpus) == (driver, stack)
    assert placement.driver_affinity == tuple(driver)
    shared = plan_placement(PlacementMode.SHARED, available=cpus)
    assert shared.driver_affinity is None and shared.stack_cpus == cpus


def test_impossible_placements_are_refused_clearly() -> None:
    with pytest.raises(ValueError, match="at least 2 CPUs"):
        plan_placement(PlacementMode.SPLIT, available=[0])
    with pytest.raises(ValueError, match="not among the usable CPUs"):
        plan_placement(PlacementMode.SPLIT, [5], available=[0, 1])
    with pytest.raises(ValueError, match="no CPU for the stack"):
        plan_placement(PlacementMode.SPLIT, [0, 1], available=[0, 1])
    with pytest.raises(ValueError, match="not a CPU list"):
        parse_cpus("0-x")
    assert parse_cpus("0-2,5") == [0, 1, 2, 5]


def test_the_demo_says_what_it_chose_and_why() -> None:
    two = choose_placement([0, 1])
    assert two.mode is PlacementMode.SHARED
    assert "would leave the stack 1" in two.reason
    eight = choose_placement(list(range(8)))
    assert eight.mode is PlacementMode.SPLIT
    assert eight.driver_cpus == [6, 7] and "driver's send lag is its own" in eight.reason


def _affinities(pid: int) -> set[frozenset[int]]:
    return {frozenset(os.sched_getaffinity(int(tid))) for tid in os.listdir(f"/proc/{pid}/task")}


@pytest.fixture(params=[None], ids=["every-cpu"])
def fake_stack(tmp_path: Path, request: pytest.FixtureRequest
               ) -> Iterator[tuple[LocalStack, list[int]]]:
    """A "stack" of real processes in a state file: a supervisor and a component with a
    thread and a child, started on the CPUs of ``request.param`` (None: every CPU). Yields
    the stack and every pid (the supervisor's first)."""
    supervisor = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    component = subprocess.Popen([sys.executable, "-c", TREE], stdout=subprocess.PIPE)
    try:
        assert component.stdout is not None
        child = int(component.stdout.readline())
        launcher.StackState(
            status="ready", message="", supervisor_pid=supervisor.pid,
            url="http://127.0.0.1:1",
            components=[launcher.Component("home-timeline", "service", [], 1,
                                           pid=component.pid)],
        ).write(tmp_path)
        (tmp_path / launcher.CONFIG_FILE).write_text(
            launcher.StackConfig(data_dir=tmp_path, cpus=request.param).to_json())
        if request.param:
            pin_process_trees([supervisor.pid, component.pid], request.param)
        yield LocalStack(tmp_path), [supervisor.pid, component.pid, child]
    finally:
        for process in (supervisor, component):
            process.kill()
            process.wait()


@two_cpus
def test_every_thread_of_the_stack_is_placed_and_put_back(
    fake_stack: tuple[LocalStack, list[int]],
) -> None:
    stack, pids = fake_stack
    everywhere = frozenset(usable_cpus())
    time.sleep(0.2)  # the component's thread has started

    with stack.placed([0]):
        assert all(_affinities(pid) == {frozenset({0})} for pid in pids)
        assert len(_affinities(pids[1])) == 1 and len(os.listdir(f"/proc/{pids[1]}/task")) >= 2

    assert all(_affinities(pid) == {everywhere} for pid in pids)
    # The next start is on every CPU again (the placement was for that run only).
    assert stack.config.cpus is None


@two_cpus
@pytest.mark.parametrize("fake_stack", [[0]], ids=["up-cpus-0"], indirect=True)
def test_a_stack_up_put_on_its_cpus_goes_back_there(
    fake_stack: tuple[LocalStack, list[int]],
) -> None:
    stack, pids = fake_stack
    time.sleep(0.2)
    with stack.placed([0]):  # where it is: left alone
        assert all(_affinities(pid) == {frozenset({0})} for pid in pids)
    with stack.placed([1]):
        assert all(_affinities(pid) == {frozenset({1})} for pid in pids)
    assert all(_affinities(pid) == {frozenset({0})} for pid in pids)
    assert stack.config.cpus == [0]


def test_a_split_around_a_stack_on_its_own_cpus_gives_the_driver_the_others() -> None:
    split = plan_placement(PlacementMode.SPLIT, available=[0, 1, 2, 3], stack_cpus=[0, 1])
    assert (split.driver_cpus, split.stack_cpus) == ([2, 3], [0, 1])
    assert "as up --cpus started it" in split.reason
    shared = plan_placement(PlacementMode.SHARED, available=[0, 1, 2, 3], stack_cpus=[0])
    assert (shared.driver_cpus, shared.stack_cpus) == ([0, 1, 2, 3], [0])
    with pytest.raises(ValueError, match="needs CPUs left for the driver"):
        plan_placement(PlacementMode.SPLIT, available=[0, 1], stack_cpus=[0, 1])
    with pytest.raises(ValueError, match="overlaps the stack's CPUs"):
        plan_placement(PlacementMode.SPLIT, [1, 2], available=[0, 1, 2], stack_cpus=[0, 1])


def test_the_supervisor_runs_the_stack_on_its_cpus(tmp_path: Path) -> None:
    """The launcher's supervisor pins itself first: what it starts, and restarts, inherit."""
    cpu = usable_cpus()[0]
    config = launcher.StackConfig(data_dir=tmp_path, cpus=[cpu])
    path = tmp_path / launcher.CONFIG_FILE
    path.write_text(config.to_json())
    probe = (
        "import os, subprocess, sys\n"
        "from pathlib import Path\n"
        "from socialbench.stack import launcher\n"
        "class Spawner:\n"
        "    def __init__(self, config): pass\n"
        "    def run(self):\n"  # as Supervisor._spawn starts a component
        "        return subprocess.run([sys.executable, '-c', 'import os; "
        "print(sorted(os.sched_getaffinity(0)))']).returncode\n"
        "launcher.Supervisor = Spawner\n"
        f"sys.exit(launcher.supervise(Path({str(path)!r})))\n"
    )
    spawned = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                             check=True)
    assert json.loads(spawned.stdout) == [cpu]


@two_cpus
def test_load_places_the_driver_and_records_it(capacity_server: CapacityServer,
                                               tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    cli = CliRunner().invoke(app, [
        "load", capacity_server.url, "-R", "50", "-d", "1s", "--warmup", "0s",
        "--cpu-placement", "split", "--driver-cpus", "0", "--json", str(out),
        "--data-dir", str(tmp_path / "no-stack"),
    ])

    assert cli.exit_code == 0, cli.output
    assert "CPU placement: split: driver on CPU 0" in cli.output
    assert "Driver verdict:" in cli.output
    result = LoadResult.model_validate_json(out.read_text())
    assert result.config.cpus == (0,) and result.config.processes == 1
    assert result.driver is not None and [w.cpus for w in result.driver.workers] == [[0]]
    assert result.placement is not None
    assert result.placement.driver_cpus == [0]
    assert result.placement.stack_cpus is None  # not the local stack: not placed
    assert "not the local stack" in result.placement.reason
