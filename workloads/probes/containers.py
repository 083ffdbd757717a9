"""Where the CPU went in a container stack: CPU time and peak memory of every container.

The compose stack's counterpart of the local stack's process sampler: a
:class:`ContainerSampler` is a :class:`ResourceSampler` (the same interface, so the ramp
bundle gets the same ``resources.csv`` columns and the same plots) that reads each
container's figures through the Docker Engine API with the Docker SDK: a Docker engine,
or podman's service (``scripts/containers/podman-service.sh``), named by ``DOCKER_HOST``.
CPU is the container's cgroup CPU time; memory is its usage less the inactive file
cache (what ``docker stats`` shows; podman 4 reports the usage alone, page cache
included), sampled each second; processes are the tasks of its pids cgroup (threads
included: the engines' process lists are not portable, podman 4's answers nothing).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import docker
from docker.errors import DockerException

from socialbench.errors import SocialbenchError
from socialbench.workloads.probes.ceilings import DeclaredUnits, declared_units
from socialbench.workloads.probes.resources import (
    NOTHING,
    Reading,
    ReadingSampler,
    ResourceSampler,
    SamplerFactory,
)

PROJECT_LABEL = "com.docker.compose.project"
SERVICE_LABEL = "com.docker.compose.service"
NUMBER_LABEL = "com.docker.compose.container-number"

SOURCE = (
    "Docker Engine API (docker SDK, DOCKER_HOST): CPU seconds (the container's cgroup CPU "
    "time), peak memory (usage less inactive file cache where the engine reports it, as "
    "docker stats; sampled each second) and tasks (pids cgroup, threads included) of each "
    "running container of compose project {project}"
)


class ContainerError(SocialbenchError, RuntimeError):
    """The engine could not be reached or the project has no running container."""


def parse_stats(raw: Mapping[str, Any]) -> Reading:
    """A reading from the engine's ``/containers/ID/stats`` answer (cgroup v1 or v2)."""
    cpu_ns = raw.get("cpu_stats", {}).get("cpu_usage", {}).get("total_usage", 0) or 0
    memory = raw.get("memory_stats", {}) or {}
    details = memory.get("stats", {}) or {}
    # cgroup v1 names it total_inactive_file, v2 inactive_file (docker CLI's rule).
    inactive = details.get("total_inactive_file", details.get("inactive_file", 0)) or 0
    usage = memory.get("usage", 0) or 0
    pids = raw.get("pids_stats", {}).get("current", 0) or 0
    return Reading(cpu_seconds=cpu_ns / 1e9,
                   memory_bytes=max(0, usage - inactive) if inactive < usage else usage,
                   processes=int(pids))


class ContainerSampler(ReadingSampler):
    """Measure containers over one interval (use as a context manager)."""

    def __init__(self, client: docker.DockerClient, containers: Mapping[str, tuple[str, str]],
                 interval_s: float = 1.0,
                 declared: Mapping[str, DeclaredUnits] | None = None) -> None:
        """``containers``: component name -> (kind, container id); ``declared``: the units
        each container's command declares."""
        super().__init__({name: kind for name, (kind, _) in containers.items()}, interval_s,
                         declared)
        self.client = client
        self.container_ids = {name: cid for name, (_, cid) in containers.items()}

    def _read_one(self, container_id: str) -> Reading:
        try:
            raw = self.client.api.stats(container_id, stream=False)
        except (DockerException, OSError):
            return NOTHING  # gone or restarting: counted as nothing, as a vanished process
        return parse_stats(raw)

    def _read(self) -> dict[str, Reading]:
        names = list(self.container_ids)
        readings = self._pool.map(self._read_one, (self.container_ids[n] for n in names))
        return dict(zip(names, readings, strict=True))


def project_containers(client: docker.DockerClient, project: str,
                       kinds: Mapping[str, str] | None = None) -> dict[str, tuple[str, str]]:
    """The running containers of compose ``project``: service name -> (kind, id).

    ``kinds`` gives each compose service's kind (store, service, gateway); others are
    ``container``. A service scaled to several replicas gives ``name-2``, ``name-3``, ….
    """
    kinds = kinds or {}
    found: dict[str, tuple[str, str]] = {}
    containers = client.containers.list(filters={"label": f"{PROJECT_LABEL}={project}"})
    for container in sorted(containers, key=lambda c: (c.labels.get(SERVICE_LABEL, c.name),
                                                       c.labels.get(NUMBER_LABEL, "1"))):
        service = container.labels.get(SERVICE_LABEL, container.name)
        number = container.labels.get(NUMBER_LABEL, "1")
        name = service if number == "1" else f"{service}-{number}"
        found[name] = (kinds.get(service, "container"), container.id)
    return found


def container_declared_units(attrs: Mapping[str, Any], host_cpus: int) -> DeclaredUnits | None:
    """The units a container's entrypoint, command and environment declare."""
    config = attrs.get("Config") or {}
    argv = [*(config.get("Entrypoint") or []), *(config.get("Cmd") or [])]
    env = dict(item.split("=", 1) for item in config.get("Env") or [] if "=" in item)
    return declared_units(argv, env, host_cpus)


def compose_sampler_factory(
    project: str, kinds: Mapping[str, str] | None = None, interval_s: float = 1.0,
) -> tuple[SamplerFactory, str]:
    """Each ramp step's sampler of ``project``'s containers, and how it measures.

    The factory answers ``(None, why)`` when the engine or the containers are not there,
    so the ramp goes on without the figures and the bundle says why.
    """

    def factory() -> tuple[ResourceSampler | None, str]:
        try:
            client = docker.from_env()
            containers = project_containers(client, project, kinds)
        except (DockerException, OSError) as exc:
            return None, f"the container engine did not answer ({exc}); set DOCKER_HOST"
        if not containers:
            return None, f"no running container of compose project {project!r}"
        try:
            host_cpus = int(client.info().get("NCPU") or 1)
            declared = {name: units for name, (_, cid) in containers.items()
                        if (units := container_declared_units(
                            client.containers.get(cid).attrs, host_cpus)) is not None}
        except (DockerException, OSError):
            declared = {}  # no ceilings: their CPU is still measured
        return ContainerSampler(client, containers, interval_s, declared), ""

    return factory, SOURCE.format(project=project)
