"""The distribution installed without extras, as a user's `pip install` or `make demo` has
it: every module that needs no extra imports, every command's --help runs, and a command
that needs a missing extra names it.

The venv is made fresh (by uv: seconds), so a product module that
imports a test-only package, or a dependency left undeclared, fails here and not only on
CI's fresh clone.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest
from uv import find_uv_bin

from socialbench import extras
from tests.test_cli import COMMANDS

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
# The modules that need an extra, by design; each must fail to import for want of it.
NEEDS_EXTRA = {
    "socialbench.workloads.probes.containers": "docker",
    "socialbench.workloads.probes.pods": "k8s",
}
# The folders pyproject.toml installs: socialbench/ and those its package-dir maps.
SOURCE_FOLDERS = ("socialbench", *tomllib.loads((ROOT / "pyproject.toml").read_text())[
    "tool"]["setuptools"]["package-dir"].values())
# A __main__ runs its program when imported, and the locustfile gevent-patches the process.
NOT_IMPORTED = ("__main__", "locustfile")

IMPORT_EVERY_MODULE = textwrap.dedent("""
    import importlib, json, pkgutil, sys, tomllib
    pyproject = tomllib.load(open(sys.argv[1], "rb"))
    skipped = tuple(sys.argv[2:])
    outcome = {}
    for package in pyproject["tool"]["setuptools"]["packages"]:
        names = [package] + [info.name for info in pkgutil.iter_modules(
            importlib.import_module(package).__path__, package + ".") if not info.ispkg]
        for name in names:
            if name.rpartition(".")[2] in skipped:
                continue
            try:
                importlib.import_module(name)
                outcome[name] = None
            except ImportError as exc:
                outcome[name] = getattr(exc, "name", None) or str(exc)
    print(json.dumps(outcome))
""")


@pytest.fixture(scope="module")
def bare_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new venv with the project installed, no extras."""
    home = tmp_path_factory.mktemp("bare")
    # A copy of what the distribution is built from: setuptools keeps a build/ beside the
    # sources, where a module since removed would still be found.
    source = home / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for folder in SOURCE_FOLDERS:
        shutil.copytree(ROOT / folder, source / folder,
                        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    venv = home / "venv"
    # uv, not pip: the same install of the declared dependencies in seconds, not a minute.
    # It reads the system's certificates and the wheel folders pip is given.
    uv = find_uv_bin()
    env = os.environ | {"UV_NATIVE_TLS": "1"}
    if "PIP_FIND_LINKS" in os.environ:
        env["UV_FIND_LINKS"] = os.environ["PIP_FIND_LINKS"]
    subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(venv)], check=True,
                   env=env)
    done = subprocess.run(
        [uv, "pip", "install", "-q", "--python", str(venv / "bin" / "python"), str(source)],
        capture_output=True, text=True, timeout=900, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    return venv


def test_the_extras_named_in_code_are_the_declared_ones() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    assert set(extras.EXTRAS) == set(declared) - {"test"}


def test_every_module_imports_without_extras(bare_venv: Path) -> None:
    done = subprocess.run(
        [str(bare_venv / "bin" / "python"), "-c", IMPORT_EVERY_MODULE,
         str(ROOT / "pyproject.toml"), *NOT_IMPORTED],
        capture_output=True, text=True, cwd=bare_venv, timeout=300)
    assert done.returncode == 0, done.stderr
    outcome: dict[str, str | None] = json.loads(done.stdout)
    assert len(outcome) > 100
    failed = {name: missing for name, missing in outcome.items() if missing is not None}
    expected = {name: missing for name, missing in failed.items()
                if name in NEEDS_EXTRA and missing.split(".")[0] in extras.EXTRAS[
                    NEEDS_EXTRA[name]]}
    assert failed == expected, "modules that failed to import without extras (module: missing)"
    assert set(expected) == set(NEEDS_EXTRA), "modules listed as needing an extra that do not"


HELP_OF_EVERY_COMMAND = textwrap.dedent("""
    import json, sys
    from typer.testing import CliRunner
    from socialbench.cli import app
    runner = CliRunner()
    outcomes = []
    for path in json.loads(sys.argv[1]):
        result = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "80"},
                               prog_name="socialbench")
        outcomes.append((path, result.exit_code, result.output + repr(result.exception or "")))
    print(json.dumps(outcomes))
""")


def test_every_command_helps_without_extras(bare_venv: Path) -> None:
    # In one process (each command's own would take seconds to start); the entry point is
    # run once on its own.
    done = subprocess.run([str(bare_venv / "bin" / "socialbench"), "--help"],
                          capture_output=True, text=True, cwd=bare_venv, timeout=120)
    assert done.returncode == 0 and "Usage: socialbench" in done.stdout, done.stderr
    done = subprocess.run(
        [str(bare_venv / "bin" / "python"), "-c", HELP_OF_EVERY_COMMAND,
         json.dumps(COMMANDS)], capture_output=True, text=True, cwd=bare_venv, timeout=300)
    assert done.returncode == 0, done.stderr
    outcomes = json.loads(done.stdout)
    assert len(outcomes) == len(COMMANDS) > 20
    for path, code, output in outcomes:
        assert code == 0, f"socialbench {' '.join(path)} --help: {output}"
        assert "Usage: socialbench" in output, output


@pytest.mark.parametrize(("argv", "extra"), [
    (["bench", "store-clients"], "bench"),
    (["bench", "hop", "--server", "uvicorn"], "bench"),
    (["ramp", "http://127.0.0.1:9", "--containers", "sn"], "docker"),
    (["ramp", "http://127.0.0.1:9", "--pods", "sn"], "k8s"),
])
def test_a_command_that_needs_a_missing_extra_names_it(
        bare_venv: Path, argv: list[str], extra: str) -> None:
    done = subprocess.run([str(bare_venv / "bin" / "socialbench"), *argv], capture_output=True,
                          text=True, cwd=bare_venv, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"pip install 'socialbench[{extra}]'" in done.stderr
