"""A server of known capacity, and one real refined ramp against it shared by the ramp,
bundle, report and compare tests (a ramp takes half a minute; one is enough)."""

from __future__ import annotations

import io
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from rich.console import Console

from socialbench.stack.servers import ServerCommand, ServerProcess, free_port
from socialbench.workloads.driver import Distribution, LoadConfig, LoadResult
from socialbench.workloads.probes.energy import EnergyOptions
from socialbench.workloads.probes.resources import ResourceSampler
from socialbench.workloads.ramp import engine
from socialbench.workloads.ramp.engine import RampConfig, Sla
from socialbench.workloads.results.schema import Dataset
from socialbench.workloads.results.summary import RampReport
from socialbench.workloads.runs.ramp_job import RampJob, execute
from tests.support import host_is_busy

CAPACITY_SERVER = Path(__file__).with_name("capacity_server.py")
CONCURRENCY = 10
SERVICE_MS = 50.0
CAPACITY_RPS = CONCURRENCY / (SERVICE_MS / 1000)  # 200 req/s: the true knee
RESOLUTION_RPS = 10.0
SLA = "p99=120ms"  # 50 ms of service; far above it only once a queue builds


@dataclass
class CapacityServer:
    url: str
    pid: int


@pytest.fixture(scope="session")
def capacity_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CapacityServer]:
    """A real HTTP server that answers exactly 200 req/s (10 slots x 50 ms), no more."""
    log_dir = tmp_path_factory.mktemp("capacity")
    port = free_port()
    command = ServerCommand(
        "capacity",
        [sys.executable, str(CAPACITY_SERVER), str(port), "--concurrency", str(CONCURRENCY),
         "--service-ms", str(SERVICE_MS)],
        "127.0.0.1", port,
    )
    server = ServerProcess(command, log_dir / "capacity.log")
    try:
        server.wait_ready()
        yield CapacityServer(f"http://{command.address}/", server.process.pid)
    finally:
        server.stop()


# Why the host was too busy as a session fixture measured it (None: quiet).
BUSY_BEFORE: dict[str, str | None] = {}


def skip_if_busy_before(fixture: str) -> None:
    """Skip a test of a session fixture's real measurement that ran on a busy host (the
    capacity server's p99 then moves with the host)."""
    busy = BUSY_BEFORE.get(fixture)
    if busy:
        pytest.skip(f"{busy} as {fixture} ran: its knee cannot be reproduced")


def small_ramp(url: str, **changes: object) -> RampConfig:
    """Two-second steps at low rates: 120, 170, 220 req/s… against the 200 req/s server.

    Evenly spaced arrivals (one process) so that below capacity nothing queues. The
    driver's own saturation (send lag > 1 ms) is recorded but does not stop these ramps:
    on a busy 2-core test machine it would, at any rate.
    """
    load = LoadConfig(
        url=url, rate=120, duration_s=2, warmup_s=0.5, workload="url",
        distribution=Distribution.CONSTANT, connections=64, max_connections=None,
        processes=1, timeout_s=3, seed=7, absolute_form=True,
    )
    config = RampConfig(
        load=load, start_rate=120, step_rate=50, step_duration_s=2, warmup_s=0.5,
        slas=(Sla.parse(SLA),), stop_on_saturation=False, pause_s=0.3,
        max_error_ratio=0.01, min_achieved_ratio=0.95, max_rate=None,
        resolution_rps=None, confirm_duration_s=None, repeat=1,
    )
    return config.model_copy(update=changes)


@pytest.fixture(scope="session")
def refined_ramp(
    capacity_server: CapacityServer, tmp_path_factory: pytest.TempPathFactory
) -> RampReport:
    """``ramp --refine`` against the capacity server, bundle and report written (and
    whether the host was busy with other work as it started: ``BUSY_BEFORE``)."""
    BUSY_BEFORE["refined_ramp"] = host_is_busy()
    config = small_ramp(capacity_server.url, refine=True, resolution_rps=RESOLUTION_RPS,
                        confirm_duration_s=4.0)

    def sampler() -> tuple[ResourceSampler | None, str]:
        return ResourceSampler({"capacity-server": ("service", capacity_server.pid)}), ""

    job = RampJob(
        config=config, label="capacity-200", results_dir=tmp_path_factory.mktemp("results"),
        sampler=sampler, resources_source="psutil: the capacity server's process",
        dataset=Dataset(fresh=False, users=962, note="a test server without data"),
        mongodb_server="mongod",
        energy=EnergyOptions(power_cmd="echo 42"),  # a constant 42 W: energy per request known
    )
    return execute(job, Console(file=io.StringIO(), width=200))


def scripted_ramp(
    refined_ramp: RampReport, monkeypatch: pytest.MonkeyPatch, *, step_limit: float,
    confirm_limit: float, **changes: object,
) -> RampConfig:
    """A ramp whose steps hold up to ``step_limit`` req/s and whose longer confirmation runs
    only up to ``confirm_limit`` (a knee the short steps overstate): the driver's results
    are the capacity ramp's own, a passing or a failing one, at the rate asked, at once.
    Not calibrated unless ``changes`` say so."""
    (run,) = refined_ramp.outcome.runs
    held = next(step for step in run.steps if step.passed).result
    broke = next(step for step in run.steps if not step.passed).result
    config = small_ramp("http://127.0.0.1:9/", refine=True, resolution_rps=2,
                        confirm_duration_s=4.0, pause_s=0, calibrate=False)
    config = config.model_copy(update=changes)

    def scripted_load(load: LoadConfig, on_second: object = None) -> LoadResult:
        limit = confirm_limit if load.duration_s == config.confirm_duration else step_limit
        return (held if load.rate <= limit else broke).model_copy(
            update={"offered_rps": load.rate})

    monkeypatch.setattr(engine, "run_load", scripted_load)
    return config
