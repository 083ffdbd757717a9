"""One root for the tools' errors: each is a SocialbenchError, drawn in socialbench/errors.py."""

from __future__ import annotations

import importlib
import inspect

from socialbench import errors
from socialbench.errors import SocialbenchError
from socialbench.runtime.errors import ServiceError
from tests.test_layers import MODULES

# Caught where they are raised, or the runtime's store clients' (the services map them to
# a ServiceError): none reaches a tool's caller.
PRIVATE = {
    "socialbench.runtime.http_server.LifespanFailed", "socialbench.runtime.rpc._Dropped",
    "socialbench.runtime.pipelining.StoreClientError",
    "socialbench.runtime.store_check.StoreCredentialsRefused",
    "socialbench.deploy.loadjob.CollectorError",
    "socialbench.workloads.cache.protocol.ProtocolError",
    "socialbench.workloads.cache.worker.PrefillFailed",
    "socialbench.workloads.driver.pool.PoolConnectError",
    "socialbench.workloads.driver.worker.ParentGone",
}


def defined_errors() -> list[type[BaseException]]:
    """Every exception class the distribution defines (where it is defined)."""
    found = []
    for name in MODULES:
        if name.rpartition(".")[2] in ("__main__", "locustfile"):
            continue
        module = importlib.import_module(name)
        for _, value in inspect.getmembers(module, inspect.isclass):
            if issubclass(value, BaseException) and value.__module__ == name:
                found.append(value)
    return found


def test_every_tool_error_has_the_one_root_and_is_drawn() -> None:
    strays, undrawn = [], []
    for error in defined_errors():
        qualified = f"{error.__module__}.{error.__qualname__}"
        private = any(issubclass(error, base) for base in defined_errors()
                      if f"{base.__module__}.{base.__qualname__}" in PRIVATE)
        if issubclass(error, SocialbenchError):
            if error is not SocialbenchError and f" {error.__name__} " not in errors.__doc__:
                undrawn.append(qualified)
        elif not issubclass(error, ServiceError) and not private:
            strays.append(qualified)
    assert not strays, f"errors outside socialbench.errors.SocialbenchError: {strays}"
    assert not undrawn, f"errors not drawn in socialbench/errors.py's docstring: {undrawn}"


def test_the_tools_errors_keep_their_builtin_bases() -> None:
    from socialbench.stack.local import StackError
    from socialbench.workloads.definitions.core import WorkloadError

    assert issubclass(StackError, RuntimeError) and issubclass(WorkloadError, ValueError)
    assert not issubclass(ServiceError, SocialbenchError)


def test_a_command_prints_a_tools_error_and_exits_1_or_exits_with_the_status() -> None:
    import pytest
    import typer
    from rich.console import Console

    from socialbench.cli.options import run
    from socialbench.stack.local import StackError

    def fails() -> int:
        raise StackError("the stack did not start: see its logs")

    console = Console(record=True, width=200)
    with pytest.raises(typer.Exit) as stopped:
        run(fails, console)
    assert stopped.value.exit_code == 1
    assert console.export_text().strip() == "error: the stack did not start: see its logs"
    with pytest.raises(typer.Exit) as stopped:
        run(lambda: 130, console)
    assert stopped.value.exit_code == 130
    run(lambda: 0, console)  # returns: the command exits 0
