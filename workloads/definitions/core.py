"""What a workload is: given a random generator, the next request to send.

A workload knows nothing of scheduling or connections; the engines (the open-loop driver,
the SLA ramp, Locust) ask it for requests and decide when and how to send them. Requests
are built from parts so that every engine can send them its own way; the driver turns them
into the exact bytes wrk2's ``wrk.format`` would send.
"""

from __future__ import annotations

import importlib.util
import inspect
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple, Protocol, runtime_checkable

from socialbench.errors import SocialbenchError

FORM_CONTENT_TYPE = "application/x-www-form-urlencoded"


class Request(NamedTuple):
    """One HTTP request: origin-form ``path`` (with its query), headers in order, raw body.

    A named tuple: immutable, and built fast (the driver makes one per request).
    """

    method: str
    path: str
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes | None = None
    name: str = ""


@runtime_checkable
class Workload(Protocol):
    """Builds requests. ``fixed`` says every request is the same, so an engine may build it once."""

    name: str
    fixed: bool

    def next_request(self, rng: random.Random) -> Request:
        """The next request, drawn with ``rng`` (the engine owns and seeds it)."""
        ...


class WorkloadError(SocialbenchError, ValueError):
    """A workload name or ``path.py:Name`` spec that cannot be loaded; the message says why."""


WorkloadFactory = Callable[..., Workload]

_BUILTINS: dict[str, WorkloadFactory] = {}


def register(name: str) -> Callable[[WorkloadFactory], WorkloadFactory]:
    """Class decorator: make a workload available by ``name`` (``--workload name``)."""

    def add(factory: WorkloadFactory) -> WorkloadFactory:
        _BUILTINS[name] = factory
        return factory

    return add


def load_workload(spec: str, **options: Any) -> Workload:
    """The workload named ``spec`` (a built-in, or ``path/to/file.py:ClassName``).

    ``options`` (e.g. ``users=962``, ``path="/"``) are passed to the workload's constructor
    when it takes them; unknown ones are ignored, so every engine can pass what it has.
    """
    _import_builtins()
    if spec in _BUILTINS:
        factory = _BUILTINS[spec]
    elif ":" in spec:
        factory = _load_from_file(spec)
    else:
        known = ", ".join(sorted(_BUILTINS))
        raise WorkloadError(f"unknown workload {spec!r}; use one of {known} or path.py:Name")
    workload = factory(**_accepted(factory, options))
    if not isinstance(workload, Workload):
        raise WorkloadError(f"{spec!r} is not a workload: it needs name, fixed and next_request()")
    return workload


def _import_builtins() -> None:
    # The built-ins register themselves on import; imported lazily to avoid a cycle.
    import socialbench.workloads.definitions.socialnetwork
    import socialbench.workloads.definitions.url  # noqa: F401


def _load_from_file(spec: str) -> WorkloadFactory:
    file_name, _, attribute = spec.rpartition(":")
    path = Path(file_name).expanduser().resolve()
    if not path.is_file():
        raise WorkloadError(f"workload file {file_name!r} does not exist")
    module_spec = importlib.util.spec_from_file_location(f"socialbench_user_{path.stem}", path)
    if module_spec is None or module_spec.loader is None:
        raise WorkloadError(f"cannot import {file_name!r} as a Python module")
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    factory = getattr(module, attribute, None)
    if factory is None or not callable(factory):
        raise WorkloadError(f"{file_name!r} has no class or function {attribute!r}")
    return factory


def _accepted(factory: WorkloadFactory, options: dict[str, Any]) -> dict[str, Any]:
    try:
        parameters = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return {}
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return options
    names = {p.name for p in parameters}
    return {key: value for key, value in options.items() if key in names}
