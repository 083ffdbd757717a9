"""The A/B mode on real stacks: two identical stacks give a paired ratio near 1.0, and a
stack whose home-timeline burns CPU on purpose (``SOCIALBENCH_FAULT_BUSY_MS``) a clear one.

Three local stacks run at once, each from its own data directory on its own ports, seeded
alike; ``socialbench ab`` alternates home-timeline reads between two of them. A shorter
variant of a real A/B (3 pairs of 4 s steps at one rate), enough to resolve the planted
difference; a user's run has more pairs and longer steps.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from socialbench.stack import launcher
from tests.e2e.support import up_on_free_ports

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

BUSY_MS = 3.0  # CPU burnt per home-timeline request in stack B
RATE = "60"
USERS = 40


def socialbench(*args: str, env: dict[str, str] | None = None,
                timeout_s: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "socialbench.cli", *args],
                          env=env or dict(os.environ), capture_output=True, text=True,
                          timeout=timeout_s)


def start_stack(data_dir: Path, env: dict[str, str] | None = None) -> None:
    up_args, url = up_on_free_ports(data_dir)
    up = socialbench(*up_args, "--default-workers", "1", env=env)
    assert up.returncode == 0, f"{up.stdout}\n{up.stderr}"
    seed = socialbench("seed", "--url", url, "--graph", f"synthetic:{USERS}:4",
                       "--posts-per-user", "2", "--seed", "5", "--concurrency", "4")
    assert seed.returncode == 0, f"{seed.stdout}\n{seed.stderr}"


@pytest.fixture(scope="module")
def stacks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """A, A2 (the same configuration) and B (home-timeline slowed): their data dirs."""
    root = tmp_path_factory.mktemp("ab")
    dirs = {name: root / name for name in ("a", "a2", "b")}
    slow = dict(os.environ) | {"SOCIALBENCH_FAULT_BUSY_MS": json.dumps({"home-timeline": BUSY_MS})}
    try:
        start_stack(dirs["a"])
        start_stack(dirs["a2"])
        start_stack(dirs["b"], env=slow)
        yield dirs
    finally:
        for data_dir in dirs.values():
            if launcher.StackState.read(data_dir) is not None:
                down = socialbench("down", "--data-dir", str(data_dir))
                assert down.returncode == 0, down.stderr


def run_ab(a: Path, b: Path, results: Path) -> dict[str, dict[str, object]]:
    """socialbench ab A B, short; each measure's overall paired ratio from ab.json."""
    result = socialbench("ab", str(a), str(b), "-w", "read-home-timeline", "--rate", RATE,
                         "--pairs", "3", "--step-duration", "4s", "--warmup", "1s",
                         "--users", str(USERS), "--results-dir", str(results))
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    (bundle,) = results.iterdir()
    data = json.loads((bundle / "ab.json").read_text())
    steps = data["result"]["steps"]
    assert [(s["pair"], s["arm"]) for s in steps] == [
        (1, "A"), (1, "B"), (2, "B"), (2, "A"), (3, "A"), (3, "B")]
    assert all(s["errors"] == 0 and s["cpu_ms_per_request"] for s in steps), steps
    assert (bundle / "ab.csv").read_text().count("\n") == len(steps) + 1
    assert "B / A, paired" in result.stdout
    return {r["metric"]: r for r in data["result"]["ratios"] if r["rate"] is None}


def test_two_identical_stacks_give_a_ratio_near_one(
    stacks: dict[str, Path], tmp_path: Path
) -> None:
    ratios = run_ab(stacks["a"], stacks["a2"], tmp_path)
    cpu = ratios["cpu_ms_per_request"]
    assert len(cpu["ratios"]) == 3
    assert 0.8 < cpu["geometric_mean"] < 1.25, cpu


def test_a_planted_cost_gives_a_clear_ratio(stacks: dict[str, Path], tmp_path: Path) -> None:
    ratios = run_ab(stacks["a"], stacks["b"], tmp_path)
    cpu = ratios["cpu_ms_per_request"]
    # 3 ms burnt per request on top of a read that costs the stack about 1-3 ms here.
    assert cpu["low"] > 1.3, cpu
    assert cpu["geometric_mean"] > 1.5, cpu
