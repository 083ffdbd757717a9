"""Fixtures of the deployment checks: the helm binary and rendered manifests."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from socialbench.deploy import stack_spec as stack

KUBE_VERSION = "1.30.0"  # a cluster the chart supports (kubeVersion >= 1.24)

Manifests = list[dict[str, Any]]


def find_helm() -> str | None:
    """helm on PATH or where scripts/build-helm.sh puts it ($GOBIN, $GOPATH/bin, ~/go/bin)."""
    dirs = [os.environ.get("GOBIN", ""), str(Path(os.environ.get("GOPATH", "~/go")) / "bin")]
    search = os.pathsep.join([os.environ.get("PATH", ""),
                              *(str(Path(d).expanduser()) for d in dirs if d)])
    return shutil.which("helm", path=search)


@pytest.fixture(scope="session")
def helm() -> str:
    found = find_helm()
    if found is None:
        pytest.skip("helm is not installed (scripts/setup.sh builds it: scripts/build-helm.sh)")
    return found


@pytest.fixture(scope="session")
def render(helm: str) -> Callable[..., Manifests]:
    """``render("--set", "a=b", ...)``: the chart's manifests from ``helm template``, parsed."""
    cache: dict[tuple[str, ...], Manifests] = {}

    def _render(*args: str) -> Manifests:
        if args not in cache:
            out = subprocess.run(
                [helm, "template", "sn", str(stack.CHART_DIR), "--namespace", "bench",
                 "--kube-version", KUBE_VERSION, *args],
                capture_output=True, text=True, check=False, timeout=60,
            )
            assert out.returncode == 0, out.stderr
            cache[args] = [doc for doc in yaml.safe_load_all(out.stdout) if doc]
        return cache[args]

    return _render

