"""What to run: the target, the rate and its arrival process, connections, processes, workload."""

from __future__ import annotations

import os
import re
from enum import StrEnum
from typing import Self
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, model_validator

DEFAULT_CONNECTIONS = 64
# Connections a driver process keeps by default, when the processes are many: enough for
# the rates of a big machine's cores (docs/scaling.md, "The driver at a big machine's rates").
CONNECTIONS_PER_PROCESS = 32
DEFAULT_TIMEOUT_S = 10.0
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "": 1.0}


def parse_duration(text: str) -> float:
    """Seconds from ``500ms``, ``30s``, ``5m``, ``1h`` or a bare number of seconds."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h|)\s*", text)
    if match is None:
        raise ValueError(f"{text!r} is not a duration like 500ms, 30s, 5m or 1h")
    return float(match.group(1)) * _DURATION_UNITS[match.group(2)]


def duration_text(seconds: float) -> str:
    """``1 h 05 min``, ``4 min 30 s``, ``12 s``."""
    seconds = round(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    if minutes:
        return f"{minutes} min {secs:02d} s"
    return f"{secs} s"


class Distribution(StrEnum):
    """Inter-arrival times: all equal (wrk2's default) or exponential (Poisson, wrk2 ``-D exp``)."""

    CONSTANT = "constant"
    EXPONENTIAL = "exp"


def default_processes() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def driver_size(cpus: int, processes: int | None = None, connections: int | None = None
                ) -> tuple[int, int]:
    """The driver's processes and connections on ``cpus`` CPUs, each as given or by default:
    a process per CPU, and connections for them all (:data:`DEFAULT_CONNECTIONS`, or
    :data:`CONNECTIONS_PER_PROCESS` a process when that is more), so that neither stays
    fixed while the machine grows. Given connections fewer than the CPUs, one process each."""
    if processes is None:
        processes = cpus if connections is None else min(cpus, connections)
    if connections is None:
        connections = max(DEFAULT_CONNECTIONS, CONNECTIONS_PER_PROCESS * processes)
    return processes, connections


class Target(BaseModel):
    """Where requests go: host and port to connect to, and how the request line names it."""

    model_config = ConfigDict(frozen=True)

    host: str
    port: int
    path: str
    authority: str  # the URL's host[:port] as written: the Host header and absolute-form prefix

    @classmethod
    def parse(cls, url: str) -> Target:
        parts = urlsplit(url)
        if parts.scheme != "http":
            raise ValueError(f"the driver speaks plain http://, got {url!r}")
        if not parts.hostname:
            raise ValueError(f"no host in {url!r}")
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        return cls(host=parts.hostname, port=parts.port or 80, path=path, authority=parts.netloc)


class LoadConfig(BaseModel):
    """One open-loop run. Rates are totals over all processes; times are in seconds."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    url: str = Field(description="Target, e.g. http://127.0.0.1:8080 (the front end).")
    rate: float = Field(gt=0, description="Offered requests per second, all processes together.")
    duration_s: float = Field(gt=0, description="Measured time, after the warm-up.")
    warmup_s: float = Field(0.0, ge=0, description="Load sent first and left out of the results.")
    workload: str = Field("url", description="A built-in workload name or path.py:Name.")
    users: int = Field(962, ge=2, description="Social-network users: ids in [0, users).")
    distribution: Distribution = Distribution.EXPONENTIAL
    connections: int = Field(DEFAULT_CONNECTIONS, ge=1, description="Connections at the start.")
    max_connections: int | None = Field(
        None, description="Grow the pool up to this many; beyond, requests are dropped."
    )
    processes: int = Field(default_factory=default_processes, ge=1)
    timeout_s: float = Field(DEFAULT_TIMEOUT_S, gt=0, description="Per request, from its send.")
    seed: int | None = Field(None, description="Seed of every random draw; None picks one.")
    absolute_form: bool = Field(
        True, description="Request line with http://host:port/path, as wrk2's Lua scripts send."
    )
    cpus: tuple[int, ...] | None = Field(
        None, min_length=1,
        description="CPUs the worker processes run on (sched_setaffinity); None: any.",
    )

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        Target.parse(self.url)
        if self.connections < self.processes:
            raise ValueError(
                f"connections ({self.connections}) must be at least processes ({self.processes})"
            )
        if self.max_connections is not None and self.max_connections < self.connections:
            raise ValueError(
                f"max_connections ({self.max_connections}) is below connections "
                f"({self.connections})"
            )
        return self

    @property
    def target(self) -> Target:
        return Target.parse(self.url)

    @property
    def growing(self) -> bool:
        """True when the pool grows on demand (``max_connections`` set) and drops beyond it."""
        return self.max_connections is not None


def share(total: int, parts: int, index: int) -> int:
    """Part ``index`` of ``total`` split as evenly as possible into ``parts``."""
    return total // parts + (1 if index < total % parts else 0)
