"""Every module imports, and dependencies point one way: down the layers below.

The layers, lowest first. A module may import its own layer and those below it, never one
above (imports inside functions count too); only the CLI imports typer. No two modules
import each other, directly or round a loop (KNOWN_CYCLES excepted).
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYERS: tuple[tuple[str, ...], ...] = (
    ("socialbench.registry", "socialbench.runtime", "socialbench.extras",
     "socialbench.errors"),
    ("socialbench.services", "socialbench.gateway"),
    ("socialbench.workloads.definitions", "socialbench.workloads.presets"),
    ("socialbench.workloads.seeding", "socialbench.workloads.check"),
    ("socialbench.workloads.driver", "socialbench.workloads.cache"),
    ("socialbench.workloads.probes",),
    ("socialbench.stack",),
    ("socialbench.workloads.ramp",),
    ("socialbench.workloads.results",),
    ("socialbench.workloads.reports",),
    ("socialbench.workloads.runs",),
    ("socialbench.deploy",),
    ("socialbench.bench",),
    ("socialbench.cli",),
)
CLI_ONLY = ("typer",)
# Loops older than the cycle check, each a type or a registration looking back (issue 42):
# the built-in workloads register with core, which imports them; a connection names its
# pool's type, a cache connection its phase's.
KNOWN_CYCLES = (
    {"socialbench.workloads.definitions.core", "socialbench.workloads.definitions.socialnetwork",
     "socialbench.workloads.definitions.url"},
    {"socialbench.workloads.driver.http", "socialbench.workloads.driver.pool"},
    {"socialbench.workloads.cache.client", "socialbench.workloads.cache.worker"},
)


def layer_of(module: str) -> int | None:
    """The layer of ``module`` (a socialbench module), None for the package roots."""
    for rank, prefixes in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return rank
    return None


def all_modules() -> list[str]:
    """Every module of the distribution: the installed packages, walked one by one.

    (A walk of ``socialbench`` alone would miss the folders mapped into it.)
    """
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    found: set[str] = set()
    for name in pyproject["tool"]["setuptools"]["packages"]:
        package = importlib.import_module(name)
        found.add(name)
        found.update(info.name for info in pkgutil.iter_modules(package.__path__, f"{name}.")
                     if not info.ispkg)
    return sorted(found)


def imported_names(module: str) -> set[str]:
    """Every module that ``module``'s source imports, at any depth of its code."""
    spec = importlib.util.find_spec(module)
    assert spec is not None
    if spec.origin is None:  # a namespace package (gateway/pages): no code
        return set()
    tree = ast.parse(Path(spec.origin).read_text())
    names: set[str] = set()
    package = module if spec.submodule_search_locations else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


MODULES = all_modules()


def test_the_walk_finds_every_layer() -> None:
    for prefixes in LAYERS:
        for prefix in prefixes:
            assert any(m == prefix or m.startswith(prefix + ".") for m in MODULES), prefix


@pytest.mark.parametrize("module", MODULES)
def test_module_imports_and_points_down(module: str) -> None:
    # A __main__ runs its program when imported, and the locustfile gevent-patches the process.
    if module.rpartition(".")[2] not in ("__main__", "locustfile"):
        importlib.import_module(module)
    own = layer_of(module)
    for name in sorted(imported_names(module)):
        if name.split(".")[0] in CLI_ONLY:
            assert own == layer_of("socialbench.cli"), f"{module} imports {name}"
        if own is None or not name.startswith("socialbench."):
            continue
        theirs = layer_of(name)
        assert theirs is None or theirs <= own, (
            f"{module} (layer {LAYERS[own][0]}) imports {name} "
            f"(layer {LAYERS[theirs][0]}), which is above it"
        )


def test_a_module_has_one_import_path() -> None:
    # The top-level folders are installed as socialbench.*; with the checkout on sys.path
    # they would import as top-level packages too, a second copy of every module.
    root = ROOT
    folders = {"services", "workloads", "gateway", "bench"}
    offenders = []
    for path in root.rglob("*.py"):
        if {".venv", "build"} & set(path.relative_to(root).parts):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                tops = {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                tops = {node.module.split(".")[0]}
            else:
                continue
            if tops & folders:
                offenders.append(f"{path.relative_to(root)}:{node.lineno}")
    assert not offenders, f"imported by folder name instead of socialbench.*: {offenders}"


def import_cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[set[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in graph[module]:
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component: set[str] = set()
            while module not in component:
                component.add(stack.pop())
            if len(component) > 1:
                cycles.append(component)

    for module in graph:
        if module not in index:
            visit(module)
    return cycles


def test_no_import_cycles() -> None:
    known = set(MODULES)
    graph = {m: {n for n in imported_names(m) if n in known and n != m} for m in MODULES}
    cycles = [c for c in import_cycles(graph) if c not in KNOWN_CYCLES]
    assert not cycles, f"modules that import each other: {[sorted(c) for c in cycles]}"


# The CLI's modules that are not commands: the shared options, the signal handling, and the
# package, which assembles the app from the commands.
CLI_SHARED = ("socialbench.cli", "socialbench.cli.options", "socialbench.cli.interrupts",
              "socialbench.cli.__main__")


def test_no_command_imports_another() -> None:
    # A command parses its options and calls a function outside the CLI: what two commands
    # share lives below (or in the shared modules), never in one of them.
    commands = [m for m in MODULES if m.startswith("socialbench.cli.") and m not in CLI_SHARED]
    offenders = [f"{module} imports {name}" for module in commands
                 for name in sorted(imported_names(module))
                 if name in commands and name != module]
    assert not offenders, offenders
