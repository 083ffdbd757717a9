"""What a result was measured on: hardware, kernel, software versions, the code itself.

Every bundle's manifest carries this, so that two results can be set side by side
knowing exactly what differed.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil

import socialbench
from socialbench.workloads.driver.result import emulated


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def _command_output(argv: list[str], pattern: str) -> str | None:
    """First match of ``pattern`` in what ``argv`` prints (stdout or stderr), or None."""
    if shutil.which(argv[0], path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin") is None:
        return None
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(pattern, result.stdout + result.stderr)
    return match.group(1) if match else None


def cpu_model() -> str:
    text = _read("/proc/cpuinfo") or ""
    for key in ("model name", "Model", "cpu model", "Hardware"):
        match = re.search(rf"^{key}\s*:\s*(.+)$", text, re.MULTILINE)
        if match:
            return match.group(1).strip()
    lscpu = _command_output(["lscpu"], r"Model name:\s*(.+)")
    return lscpu or platform.processor() or "unknown"


def hardware() -> dict[str, Any]:
    """CPU, cores, memory, kernel, frequency governor (where readable)."""
    governor = _read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")
    max_khz = _read("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
    return {
        "cpu_model": cpu_model(),
        "architecture": platform.machine(),
        "emulated": emulated(platform.machine(), _read("/proc/cpuinfo") or ""),
        "logical_cores": os.cpu_count(),
        "physical_cores": psutil.cpu_count(logical=False),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "memory_bytes": psutil.virtual_memory().total,
        "kernel": platform.release(),
        "os": _os_release(),
        "frequency_governor": governor or "not readable",
        "max_frequency_mhz": int(max_khz) / 1000 if max_khz and max_khz.isdigit() else None,
        "hostname": platform.node(),
    }


def _os_release() -> str:
    text = _read("/etc/os-release") or ""
    match = re.search(r'^PRETTY_NAME="?([^"\n]+)', text, re.MULTILINE)
    return match.group(1) if match else platform.platform()


def software(mongodb: str) -> dict[str, Any]:
    """Versions of Python and of every server of the stack found on this machine.

    ``mongodb`` names the MongoDB-wire server the local stack runs: ``mongod`` or ``ferretdb``.
    """
    ferretdb = shutil.which("ferretdb") or str(Path.home() / "go/bin/ferretdb")
    return {
        "socialbench": socialbench.__version__,
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "nginx": _command_output(["nginx", "-v"], r"nginx/(\S+)"),
        "memcached": _command_output(["memcached", "-V"], r"memcached (\S+)"),
        "redis": _command_output(["redis-server", "--version"], r"v=(\S+)"),
        "mongodb_server": mongodb,
        "mongodb_server_version": (
            _command_output(["mongod", "--version"], r"db version v(\S+)") if mongodb == "mongod"
            else _command_output([ferretdb, "--version"], r"version: (\S+)")
        ),
    }


def git_state(repo: Path | None = None) -> dict[str, Any]:
    """Commit and dirty flag of the code that ran (None outside a git checkout)."""
    repo = repo or Path(socialbench.__file__).resolve().parent.parent
    try:
        commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"],
                                capture_output=True, text=True, timeout=10)
        status = subprocess.run(["git", "-C", str(repo), "status", "--porcelain"],
                                capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return {"commit": None, "dirty": None}
    if commit.returncode != 0:
        return {"commit": None, "dirty": None}
    return {"commit": commit.stdout.strip(), "dirty": bool(status.stdout.strip())}


def describe(mongodb: str) -> dict[str, Any]:
    """Everything above, plus the command line that ran."""
    return {
        "command_line": sys.argv,
        "git": git_state(),
        "hardware": hardware(),
        "software": software(mongodb),
    }
