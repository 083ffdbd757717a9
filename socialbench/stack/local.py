"""The local stack of one data directory, as an object: start, stop, restart, describe, sample.

``socialbench up``/``down`` and the ramp's ``--fresh``, its manifest and its per-process
CPU figures all go through :class:`LocalStack`, so none of them calls a command.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil

from socialbench import registry
from socialbench.errors import SocialbenchError
from socialbench.stack import launcher
from socialbench.stack.servers import store_durability
from socialbench.workloads.driver.config import Target
from socialbench.workloads.driver.hostload import usable_cpus
from socialbench.workloads.probes.records import StackRecord
from socialbench.workloads.probes.resources import ResourceSampler, SamplerFactory
from socialbench.workloads.seeding.seed import default_state_path, journal_dir

STATS_TIMEOUT_S = 2.0

LOCAL_HOSTS = ("127.0.0.1", "localhost")
NOT_SAMPLED = (
    "per-process CPU and memory need the local stack (socialbench up); they are not "
    "measured for other targets (the Docker SDK variant for compose is not implemented)"
)
PSUTIL_SOURCE = (
    "psutil: CPU seconds (user + system) and peak RSS (sampled each second) of each "
    "component's process tree, found from the local stack's state file"
)


class StackError(SocialbenchError, RuntimeError):
    """The local stack did not start or stop as asked; the message says why and where to look."""


class LocalStack:
    """The stack the launcher runs (or ran) from ``data_dir``."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir.resolve()

    @property
    def config(self) -> launcher.StackConfig:
        """The configuration it last started with (the defaults if it never started)."""
        path = self.data_dir / launcher.CONFIG_FILE
        if path.exists():
            return launcher.StackConfig.from_json(path.read_text())
        return launcher.StackConfig(data_dir=self.data_dir)

    def state(self) -> launcher.StackState | None:
        return launcher.StackState.read(self.data_dir)

    def running_state(self) -> launcher.StackState | None:
        """Its state while its supervisor runs, else None."""
        state = self.state()
        return state if state is not None and state.supervisor_running else None

    # ------------------------------------------------------------ lifecycle

    def start(self, config: launcher.StackConfig, *, fresh: bool = False,
              timeout_s: float = 180.0,
              on_progress: Callable[[str], None] | None = None) -> launcher.StackConfig:
        """Start the stack with ``config`` and wait until every part is healthy.

        ``fresh`` empties the stores first (stopping a running stack). ``on_progress``
        hears which component the supervisor is waiting for, each time that changes.
        """
        if self.running_state() is not None:
            if not fresh:
                return self.config
            self.stop()
        if fresh:
            for store_dir in launcher.store_dirs(self.config) + launcher.store_dirs(config):
                shutil.rmtree(store_dir, ignore_errors=True)
            # New stores, new login secret: no token of a deleted user stays valid.
            (self.data_dir / launcher.SECRET_FILE).unlink(missing_ok=True)
            # ... and no record of a seeding of the stores that are gone.
            seed_state = default_state_path(self.data_dir)
            seed_state.unlink(missing_ok=True)
            shutil.rmtree(journal_dir(seed_state), ignore_errors=True)
        config = config.with_worker_cpus()
        config.log_dir.mkdir(parents=True, exist_ok=True)
        launcher.plan(config)  # raises ServerNotInstalled here, before anything starts
        config_path = self.data_dir / launcher.CONFIG_FILE
        config_path.write_text(config.to_json())
        (self.data_dir / launcher.STATE_FILE).unlink(missing_ok=True)
        with open(config.log_dir / "supervisor.log", "ab") as log:
            subprocess.Popen(
                [sys.executable, "-m", "socialbench.stack.launcher", str(config_path)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        started = time.monotonic()
        last_message = ""
        while time.monotonic() - started < timeout_s:
            state = self.state()
            if state is not None:
                if state.status == "ready":
                    return config
                if state.status in ("failed", "stopped"):
                    raise StackError(f"the stack failed to start: {state.message}")
                if state.message != last_message and on_progress is not None:
                    on_progress(f"{state.message} ({time.monotonic() - started:.0f} s)")
                last_message = state.message
            time.sleep(0.2)
        self.stop()
        raise StackError(f"the stack was not ready after {timeout_s:.0f} s "
                         f"({last_message or 'the supervisor wrote no state'}); "
                         f"see {config.log_dir}")

    def restart_fresh(self, on_progress: Callable[[str], None] | None = None, *,
                      cpus: list[int] | None = None) -> launcher.StackConfig:
        """Stop it, empty its stores, start it again with its last configuration, on
        ``cpus`` (None: every CPU)."""
        config = dataclasses.replace(self.config, cpus=cpus)
        return self.start(config, fresh=True, on_progress=on_progress)

    def restart(self, config: launcher.StackConfig,
                on_progress: Callable[[str], None] | None = None) -> launcher.StackConfig:
        """Stop it and start it again with ``config``, keeping its stores."""
        self.stop()
        return self.start(config, on_progress=on_progress)

    def stop(self) -> int | None:
        """Stop everything, in reverse order; the leftover process groups it had to kill.

        None when there was no stack state here (nothing to stop).
        """
        state = self.state()
        if state is None:
            return None
        supervisor = state.supervisor_pid
        if launcher.pid_alive(supervisor):
            os.kill(supervisor, signal.SIGTERM)
            deadline = time.monotonic() + 60
            while launcher.pid_alive(supervisor) and time.monotonic() < deadline:
                time.sleep(0.1)
        leftovers = [c for c in state.components if launcher.pid_alive(c.pid)]
        for component in leftovers:
            assert component.pid is not None
            launcher.kill_group(component.pid, signal.SIGKILL)
        if launcher.pid_alive(supervisor):
            os.kill(supervisor, signal.SIGKILL)
        return len(leftovers)

    # ------------------------------------------------------------ CPU placement

    def pin(self, cpus: list[int] | None) -> int:
        """Run every process of the running stack on ``cpus`` (None: every usable CPU).

        The supervisor too, so the processes it restarts inherit them; every thread of
        every process, since an affinity is per thread. Returns the threads pinned (0 when
        the stack is not running).
        """
        state = self.running_state()
        if state is None:
            return 0
        roots = [state.supervisor_pid, *(c.pid for c in state.components if c.pid)]
        return pin_process_trees(roots, cpus or usable_cpus())

    @contextlib.contextmanager
    def placed(self, cpus: list[int] | None) -> Iterator[None]:
        """The running stack on ``cpus`` for the block (restarts in it included: see
        :meth:`restart_fresh`), back where ``up`` put it after it (every CPU, or those of
        ``up --cpus``), and when it next starts. None, or the CPUs it has: left as it is."""
        original = self.config.cpus
        moved = bool(cpus) and sorted(cpus or []) != sorted(original or [])
        if moved:
            self.pin(cpus)
        try:
            yield
        finally:
            if moved:
                self.pin(original)
                path = self.data_dir / launcher.CONFIG_FILE
                if path.exists():
                    path.write_text(dataclasses.replace(self.config, cpus=original).to_json())

    # ------------------------------------------------------------ measuring it

    def serves(self, url: str) -> bool:
        """Whether ``url`` is this stack's front end."""
        target = Target.parse(url)
        return target.host in LOCAL_HOSTS and target.port == self.config.gateway_port

    def pinned_cpus(self, url: str) -> list[int] | None:
        """The CPUs ``up --cpus`` put the running stack on, when ``url`` is its front end."""
        if not self.serves(url) or self.running_state() is None:
            return None
        return self.config.cpus

    def record(self, url: str) -> StackRecord | None:
        """Its configuration for a results manifest, when ``url`` is its front end."""
        if not self.serves(url):
            return None
        config = self.config
        tracing = config.tracing or bool(config.trace_collector)
        return StackRecord(
            workers=config.service_workers(), default_workers=config.default_workers,
            workers_chosen=config.workers_chosen, workers_cpus=config.cpu_count,
            nginx_workers=config.nginx_workers, memcached_servers=config.memcached_instances,
            tracing=tracing,
            trace_sample_ratio=config.trace_sample_ratio if tracing else None,
            durability=store_durability(self._mongodb_binary(), cpus=config.cpu_count),
            store_layout=config.store_layout,
            redis_mode=config.redis_mode, redis_servers=config.redis_servers,
            redis_modes=config.redis_modes(), memcached_threads=config.memcached_threads,
            sizing=config.sizing, cpus=config.cpus,
            store_instances={
                instance.name: [spec.name for spec in registry.services_of(instance, config.layout)]
                for instance in config.store_instances()},
            store_clients=self.store_clients(),
        )

    def store_clients(self) -> dict[str, dict[str, dict[str, str]]]:
        """Which client and topology serve each store of each service, as the services'
        ``/stats`` say (a service that does not answer is left out)."""
        clients: dict[str, dict[str, dict[str, str]]] = {}
        for spec in registry.SERVICES:
            if not spec.stores:
                continue
            url = f"http://{self.config.host}:{self.config.service_port(spec)}/stats"
            with contextlib.suppress(OSError, ValueError, KeyError, TypeError), \
                    urllib.request.urlopen(url, timeout=STATS_TIMEOUT_S) as answer:
                clients[spec.name] = json.load(answer)["clients"]
        return clients

    def _mongodb_binary(self) -> str | None:
        """The MongoDB-wire server's program the running stack started (None: not known)."""
        state = self.state()
        components = state.components if state is not None else []
        mongodb = next((c for c in components if c.name.endswith("mongodb")), None)
        return mongodb.argv[0] if mongodb is not None and mongodb.argv else None

    def sampler(self, interval_s: float = 1.0) -> ResourceSampler | None:
        """A sampler of its processes (each with its children); None if it is not running."""
        state = self.running_state()
        if state is None:
            return None
        components = {c.name: (c.kind, c.pid) for c in state.components if c.pid}
        return ResourceSampler(components, interval_s)

    def sampler_factory(self, url: str) -> SamplerFactory:
        """Each ramp step's sampler of its processes, when ``url`` is its front end."""

        def factory() -> tuple[ResourceSampler | None, str]:
            if not self.serves(url):
                return None, f"{url} is not the local stack's front end; {NOT_SAMPLED}"
            sampler = self.sampler()
            if sampler is None:
                return None, f"no local stack runs from {self.data_dir}; {NOT_SAMPLED}"
            return sampler, ""

        return factory

    def resources_source(self, url: str) -> str:
        """How the bundle's per-process figures are measured, or why they are not."""
        return PSUTIL_SOURCE if self.serves(url) else f"unavailable: {NOT_SAMPLED}"


def pin_process_trees(pids: list[int], cpus: list[int]) -> int:
    """Set the affinity of every thread of ``pids`` and of all their descendants."""
    processes: dict[int, psutil.Process] = {}
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(pid)
            for process in (root, *root.children(recursive=True)):
                processes[process.pid] = process
    pinned = 0
    for pid in processes:
        try:
            threads = [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
        except OSError:
            continue  # gone meanwhile
        for tid in threads:
            with contextlib.suppress(ProcessLookupError):
                os.sched_setaffinity(tid, cpus)
                pinned += 1
    return pinned
