"""The runs' glue to the local stack (socialbench/stack/local.py), in one place.

Entry points: :func:`stack_rss` (its processes' memory), :func:`service_settings` and
:func:`bulk_executor` (its services' settings, for the seeder's bulk path in this
process), :func:`fresh_reset` (emptied, restarted and seeded before a repeat),
:func:`found_dataset` (the data a run finds in it) and :func:`check_hook` (its stores
checked at a run's end). Each takes the :class:`LocalStack` of a data dir; none starts
it unless asked (``fresh_reset``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
from rich.console import Console

from socialbench import registry
from socialbench.registry import ServiceSpec
from socialbench.runtime.settings import Settings
from socialbench.stack.local import LocalStack
from socialbench.workloads.check.contents import CheckResult, Sampling
from socialbench.workloads.check.report import print_result
from socialbench.workloads.check.run import check
from socialbench.workloads.ramp.engine import ResetHook
from socialbench.workloads.results.schema import Dataset
from socialbench.workloads.seeding.seed import (
    BulkExecutor,
    SeedState,
    default_state_path,
    journal_dir,
    seed_graph,
)

# The bulk path's store clients: few connections (its calls are few and large, and a client
# picks a connection by scanning its pool), and a minute for a call (a batch of a thousand
# documents waits behind others on a busy FerretDB: 10 s timed out under load).
BULK_SETTINGS: dict[str, Any] = {
    "redis_pool_size": 4, "memcached_pool_size": 4, "mongodb_pool_size": 8,
    "store_call_timeout_s": 60.0}


def service_settings(stack: LocalStack) -> Callable[[ServiceSpec], Settings]:
    """Each service's settings as the local stack starts it: its stores' addresses (of the
    stack's store layout)."""
    config = stack.config
    prefix = registry.ENV_PREFIX

    def settings_of(spec: ServiceSpec) -> Settings:
        env = config.service_env(spec)
        fields: dict[str, Any] = {name[len(prefix):].lower(): value
                                  for name, value in env.items() if name.startswith(prefix)}
        return Settings(**fields, **BULK_SETTINGS)

    return settings_of


def bulk_executor(stack: LocalStack, state_path: Path) -> BulkExecutor:
    """The seeder's bulk path on the local stack's stores, journalled beside ``state_path``."""
    from socialbench.workloads.seeding.bulk import InProcessServices

    return BulkExecutor(InProcessServices(service_settings(stack)), journal_dir(state_path))


def stack_rss(stack: LocalStack) -> int:
    """The resident memory of every process of the running local stack (0: not running)."""
    state = stack.running_state()
    if state is None:
        return 0
    total = 0
    for component in state.components:
        if component.pid is None:
            continue
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(component.pid)
            for process in (root, *root.children(recursive=True)):
                with contextlib.suppress(psutil.Error):
                    total += process.memory_info().rss
    return total


def fresh_reset(stack: LocalStack, graph_spec: str, posts_per_user: int, seed_value: int,
                note: Callable[[str], None], cpus: list[int] | None = None) -> ResetHook:
    """Before each repeat: empty stores, restarted stack (on ``cpus``), the graph seeded again."""

    def reset(repeat: int) -> None:
        note(f"[bold]Repeat {repeat}[/]: restarting the local stack with empty stores and "
             "seeding it (--fresh)")
        config = stack.restart_fresh(cpus=cpus)
        seed_graph(config.url, graph_spec, posts_per_user, seed_value)

    return reset


def found_dataset(stack: LocalStack, url: str, users: int) -> Dataset:
    """The data of a stack the ramp does not reset: the seeding recorded for it in the
    local stack's data dir (socialbench seed), else unknown."""
    record = SeedState.read(default_state_path(stack.data_dir)) if stack.serves(url) else None
    if record is None or not record.complete or record.target != url.rstrip("/"):
        return Dataset(fresh=False, users=users,
                       note="the target's data as found (not reset by the ramp; use --fresh)")
    data = record.dataset
    return Dataset(fresh=False, graph=data.source, users=users,
                   posts_per_user=data.posts_per_user, seed=data.seed, path=record.path.value,
                   seeded=record, note="seeded by socialbench seed, then as found (not reset "
                                       "by the ramp; earlier runs' composes stay)")


def check_hook(stack: LocalStack, url: str, console: Console
               ) -> Callable[[], CheckResult] | None:
    """The check a ramp runs at its end: when ``url`` is the local stack's front end."""
    if not stack.serves(url):
        return None
    stores = stack.config.store_addresses()

    def run() -> CheckResult:
        console.print("Checking the stores: every post stored, in its timelines, fanned out "
                      "to its followers and mentions…")
        result = check(stores, sampling=Sampling())
        print_result(result, console, examples=5)
        return result

    return run
