"""The Dockerfile, its build context and the bake file, checked without a Docker engine."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from socialbench import registry
from socialbench.deploy import stack_spec as stack

ROOT = stack.REPO_ROOT
DOCKERFILE = (ROOT / "Dockerfile").read_text()


def stages() -> dict[str, str]:
    """Each stage's text by name (``FROM ... AS name``)."""
    parts = re.split(r"^FROM\s+\S+\s+AS\s+(\w+)\s*$", DOCKERFILE, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def context_entries() -> list[str]:
    """What .dockerignore lets into the build context (it excludes all, then allows)."""
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    assert lines[lines.index("*") if "*" in lines else 0] == "*"
    return [line[1:].rstrip("/") for line in lines if line.startswith("!")]


def test_build_and_runtime_stages_from_slim_python_by_default() -> None:
    # 3.11: the Python of Debian 12, so the Debian-made base runs the same version.
    assert re.search(r"^ARG PYTHON_VERSION=3\.11$", DOCKERFILE, re.M)
    assert re.search(r"^ARG BASE_IMAGE=python:\$\{PYTHON_VERSION\}-slim-bookworm$",
                     DOCKERFILE, re.M)
    assert re.findall(r"^FROM (\S+)", DOCKERFILE, re.M) == ["${BASE_IMAGE}"] * 2
    assert list(stages()) == ["build", "runtime"]
    bake = (ROOT / "docker-bake.hcl").read_text()
    assert re.search(r'variable "PYTHON_VERSION" \{\s*default = "3\.11"', bake)


def test_the_compiler_stays_in_the_build_stage() -> None:
    build, runtime = stages()["build"], stages()["runtime"]
    assert re.search(r"apt-get install .*\bgcc\b", build)
    assert "gcc" not in runtime and "apt-get" not in runtime
    assert "COPY --from=build /opt/venv /opt/venv" in runtime


def test_runtime_runs_socialbench_as_the_charts_non_root_user() -> None:
    runtime = stages()["runtime"]
    (user,) = re.findall(r"^USER (\d+):(\d+)$", runtime, re.M)
    values = yaml.safe_load((stack.CHART_DIR / "values.yaml").read_text())
    assert int(user[0]) != 0
    assert int(user[0]) == values["podSecurityContext"]["runAsUser"]
    assert re.search(r'^ENTRYPOINT \["socialbench"\]$', runtime, re.M)
    # The fixed path the chart copies pages from and finds the locustfile under: the
    # installed package, wherever the base's Python puts it.
    assert re.search(r"ln -s .*socialbench\.__file__.* " + re.escape(stack.IMAGE_PACKAGE_DIR),
                     runtime)


def test_every_copied_path_is_in_the_build_context() -> None:
    allowed = set(context_entries())
    sources = [line.split()[1] for line in DOCKERFILE.splitlines()
               if line.startswith("COPY ") and "--from" not in line]
    for source in sources:
        for path in source.split():
            name = path.rstrip("/").split("/")[0]
            if name in {".", "./"}:
                continue
            assert name in allowed, f"COPY {path} is excluded by .dockerignore"
            assert (ROOT / name).exists()


def test_bake_builds_the_runtime_stage_for_amd64_and_arm64() -> None:
    bake = (ROOT / "docker-bake.hcl").read_text()
    assert re.search(r'target\s*=\s*"runtime"', bake)
    assert re.search(r'platforms\s*=\s*\["linux/amd64",\s*"linux/arm64"\]', bake)


def test_the_build_context_installs_every_service_and_the_pages(tmp_path: Path) -> None:
    """What `pip install .` in the build stage sees: the context .dockerignore lets through."""
    context = tmp_path / "context"
    context.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for entry in context_entries():
        source = ROOT / entry
        if source.is_dir():
            shutil.copytree(source, context / entry, symlinks=True, ignore=ignore)
        else:
            shutil.copy2(source, context / entry)
    out = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", str(tmp_path / "dist"), str(context)],
        capture_output=True, text=True, check=False, timeout=120,
    )
    assert out.returncode == 0, out.stderr
    (wheel,) = (tmp_path / "dist").glob("socialbench-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for spec in registry.SERVICES:
        assert spec.module.replace(".", "/") + ".py" in names
    for page in (ROOT / "gateway" / "pages").iterdir():
        assert f"socialbench/gateway/pages/{page.name}" in names
    for module in ("deploy/probe.py", "deploy/loadjob.py", "workloads/driver/merge.py",
                   "gateway/nginx.conf.j2", "cli/load.py", "workloads/seeding/seed.py",
                   "workloads/reports/report.html.j2"):
        assert f"socialbench/{module}" in names


@pytest.mark.parametrize("command", [["probe"], ["loadjob", "collect"], ["loadjob", "drive"]])
def test_the_charts_helper_commands_run(command: list[str]) -> None:
    """The chart runs them through the image's entry point, the socialbench command."""
    out = subprocess.run([sys.executable, "-m", "socialbench.cli", *command, "--help"],
                         capture_output=True, text=True, check=False, timeout=60)
    assert out.returncode == 0, out.stderr
    assert f"Usage: socialbench {' '.join(command)} " in out.stdout


def test_the_charts_locustfile_is_in_the_image() -> None:
    values = yaml.safe_load((stack.CHART_DIR / "values.yaml").read_text())
    locustfile = Path(values["locust"]["locustfile"])
    relative = locustfile.relative_to(stack.IMAGE_PACKAGE_DIR)
    imports_locust = re.compile(r"^(from|import) locust\b", re.M)
    candidates = [p for p in (ROOT / "workloads").rglob("*.py")
                  if imports_locust.search(p.read_text())]
    if not candidates:
        pytest.skip("no locustfile in workloads/ yet (issue 5); the chart expects "
                    f"{relative}")
    assert (ROOT / relative).is_file(), (
        f"the chart's locust.locustfile is {locustfile}, but workloads/ has "
        f"{[str(p.relative_to(ROOT)) for p in candidates]}")
