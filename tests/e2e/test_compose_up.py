"""`docker compose up` on one box: the compose stack from the built images, end to end.

Against a Docker engine (DOCKER_HOST, or the default socket) or, where none runs, podman's
Docker API (scripts/containers/podman-service.sh, started here), with the images of
scripts/build-images.sh: the socialbench image and the local stand-ins of the store and
nginx images (compose/standins.env). Debian's docker-compose drives it.

Every test runs once per platform of the images: this machine's own (``native``), and
with ``SOCIALBENCH_TEST_ARM64=1`` again with every image built for linux/arm64 (tags
``-arm64``), under QEMU's user emulation on an amd64 machine (scripts/containers/arm64.sh
--e2e registers it and runs this; slow, not in CI). Each platform's stack is seeded,
loaded through nginx with no error allowed, checked (`socialbench check` in the image,
on the stack's network) and loaded by the driver in the image, whose result must name
the image's architecture. ``SOCIALBENCH_TEST_IMAGE_SUFFIX`` tags the native images with a
suffix of their own (beside another checkout whose ``socialbench:dev`` differs).
"""

from __future__ import annotations

import json
import os
import platform
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import httpx
import pytest
from docker.errors import DockerException

from socialbench.deploy import compose
from socialbench.deploy import stack_spec as stack
from socialbench.stack.servers import free_ports
from socialbench.workloads.driver import LoadConfig, LoadResult, run_load
from socialbench.workloads.probes.containers import (
    PROJECT_LABEL,
    SERVICE_LABEL,
    compose_sampler_factory,
)
from socialbench.workloads.reports.ramp_report import REPORT, RESOURCES_PLOT
from socialbench.workloads.results.files import read_bundle
from tests.e2e.support import compose as compose_post
from tests.e2e.support import follow, new_user, timeline

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROOT = stack.REPO_ROOT
COMPOSE_FILE = stack.COMPOSE_DIR / compose.COMPOSE_FILE
SEED_USERS = 60
DRIVER_RATE = 20  # req/s: modest, on a shared 2-core machine, and held under emulation
IDLE_S = 10.0  # the containers' idle CPU is read this long before the driver's run
LONG_RUNNING = {*compose.component_kinds()}
ARM64_ENV = "SOCIALBENCH_TEST_ARM64"
NATIVE_SUFFIX_ENV = "SOCIALBENCH_TEST_IMAGE_SUFFIX"
OCI_ARCHITECTURE = {"x86_64": "amd64", "aarch64": "arm64"}


@dataclass(frozen=True)
class Platform:
    """The images of one stack: what they are built as, and what runs in them."""

    name: str
    build_options: tuple[str, ...]  # scripts/build-images.sh's
    suffix: str  # of every image's tag
    machine: str  # `uname -m` in its containers
    patience: float  # how many times native's waits it may take


def _native() -> Platform:
    suffix = os.environ.get(NATIVE_SUFFIX_ENV, "")
    return Platform("native", ("--suffix", suffix) if suffix else (), suffix,
                    platform.machine(), 1.0)


ARM64 = Platform("arm64", ("--platform", "linux/arm64", "--suffix", "-arm64"), "-arm64",
                 "aarch64", 6.0)


def arm64_unavailable() -> str | None:
    """Why the arm64 stack cannot run here, or None."""
    if os.environ.get(ARM64_ENV) != "1":
        return (f"arm64 under emulation is opt-in ({ARM64_ENV}=1; about 12 minutes, more "
                "when socialbench:dev-arm64 must be built; docs/arm64.md)")
    if platform.machine() != "aarch64" and not Path(
            "/proc/sys/fs/binfmt_misc/qemu-aarch64").exists():
        return ("no QEMU user emulation for arm64 registered: apt-get install "
                "qemu-user-static arch-test, then scripts/containers/arm64.sh --e2e "
                "(it registers it with binfmt_misc)")
    return None


@pytest.fixture(scope="module", params=["native", "arm64"])
def images_platform(request: pytest.FixtureRequest) -> Platform:
    if request.param == "native":
        return _native()
    if (why := arm64_unavailable()) is not None:
        pytest.skip(why)
    return ARM64


@dataclass(frozen=True)
class Engine:
    """A Docker API: its address and whose it is (``docker`` or ``podman``)."""

    docker_host: str
    name: str


def _engine_at(docker_host: str) -> Engine | None:
    try:
        client = docker.DockerClient(base_url=docker_host, timeout=10)
        components = client.version().get("Components") or []
    except (DockerException, OSError):
        return None
    podman = any("podman" in str(c.get("Name", "")).lower() for c in components)
    return Engine(docker_host, "podman" if podman else "docker")


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    found = _engine_at(os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock"))
    if found is not None:
        yield found
        return
    if shutil.which("podman") is None:
        pytest.skip("no Docker engine and no podman (scripts/setup.sh --test installs podman)")
    directory = tmp_path_factory.mktemp("podman")
    socket_path = directory / "docker.sock"
    log = (directory / "service.log").open("w")
    service = subprocess.Popen([str(ROOT / "scripts/containers/podman-service.sh"),
                                str(socket_path)], stdout=log, stderr=subprocess.STDOUT,
                               start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while (found := _engine_at(f"unix://{socket_path}")) is None:
            assert service.poll() is None, (directory / "service.log").read_text()
            assert time.monotonic() < deadline, "podman's Docker API did not answer in 60 s"
            time.sleep(0.5)
        yield found
    finally:
        service.terminate()
        service.wait(timeout=60)
        log.close()


def _standins() -> dict[str, str]:
    lines = (stack.COMPOSE_DIR / compose.STANDINS_FILE).read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


@pytest.fixture(scope="module")
def images(engine: Engine, images_platform: Platform) -> Platform:
    """Every image of the platform, built (or found current) by the build script."""
    env = {**os.environ, "SOCIALBENCH_ENGINE": engine.name, "DOCKER_HOST": engine.docker_host}
    out = subprocess.run([str(ROOT / "scripts/build-images.sh"), *images_platform.build_options],
                         env=env, cwd=ROOT, capture_output=True, text=True, timeout=3600,
                         check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    print(out.stdout)
    return images_platform


@dataclass
class ComposeStack:
    """One compose project of the stack, up."""

    project: str
    env: dict[str, str]
    url: str
    client: docker.DockerClient
    platform: Platform
    up_seconds: float = 0.0
    seeded_seconds: float = 0.0

    def compose(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["docker-compose", "-p", self.project, "-f", str(COMPOSE_FILE),
                               *args], env=self.env, capture_output=True, text=True,
                              timeout=timeout, check=False)

    def containers(self, **filters: str) -> list[docker.models.containers.Container]:
        labels = [f"{PROJECT_LABEL}={self.project}",
                  *(f"{SERVICE_LABEL}={service}" for service in filters.values())]
        found: list[docker.models.containers.Container] = self.client.containers.list(
            all=True, filters={"label": labels})
        return found

    def diagnosis(self) -> str:
        return self.compose("ps").stdout + self.compose("logs", "--tail", "40").stdout

    def in_image(self, *args: str, out: Path, timeout: float = 300) -> tuple[int, str]:
        """`socialbench ARGS` in a container of the socialbench image on the stack's
        network, ``out`` mounted at /out: its exit status and output. (Through the
        Docker API: docker-compose 1.29's `run` wants podman's network made anew.)"""
        hosts = {c.labels[SERVICE_LABEL]: address for c in self.containers()
                 for address in [next(iter(c.attrs["NetworkSettings"]["Networks"].values()),
                                      {}).get("IPAddress")] if address}
        container = self.client.containers.run(
            self.env["SOCIALBENCH_IMAGE"], list(args), detach=True,
            network=f"{self.project}_default", extra_hosts=hosts,
            volumes={str(out): {"bind": "/out", "mode": "rw"}})
        try:
            status = container.wait(timeout=timeout * self.platform.patience)
            return int(status["StatusCode"]), container.logs().decode()
        finally:
            container.remove(force=True)


def free_subnet_prefix(client: docker.DockerClient) -> str:
    """A 10.213.X prefix no network of the engine uses (a killed run may leave its own)."""
    used = set()
    for network in client.networks.list():
        for config in (network.attrs.get("IPAM") or {}).get("Config") or []:
            used.add(str(config.get("Subnet", "")).rsplit(".", 1)[0])
    return next(p for x in range(256) if (p := f"10.213.{x}") not in used)


@pytest.fixture(scope="module")
def compose_stack(engine: Engine, images: Platform) -> Iterator[ComposeStack]:
    if shutil.which("docker-compose") is None:
        pytest.skip("docker-compose is not installed (scripts/setup.sh installs Debian's)")
    gateway_port, media_port = free_ports(2)
    client = docker.DockerClient(base_url=engine.docker_host, timeout=60)
    env = {
        **os.environ, **{name: tag + images.suffix for name, tag in _standins().items()},
        "SOCIALBENCH_IMAGE": f"socialbench:dev{images.suffix}",
        "DOCKER_HOST": engine.docker_host,
        stack.SECRET_ENV: secrets.token_hex(32),
        "SOCIALBENCH_GATEWAY_PORT": str(gateway_port),
        "SOCIALBENCH_MEDIA_PORT": str(media_port),
        "SOCIALBENCH_SEED_GRAPH": f"synthetic:{SEED_USERS}:4",
        compose.SUBNET_PREFIX_ENV: free_subnet_prefix(client),
    }
    running = ComposeStack(f"sbe2e{os.getpid()}{images.name}", env,
                           f"http://127.0.0.1:{gateway_port}", client, images)
    try:
        start = time.monotonic()
        up = running.compose("up", "-d", "--no-build", timeout=900 * images.patience)
        running.up_seconds = time.monotonic() - start
        assert up.returncode == 0, up.stderr + running.diagnosis()
        patience = 300 * images.patience
        deadline = time.monotonic() + patience
        while True:
            (seed,) = running.containers(service="seed")
            seed.reload()
            if seed.status == "exited":
                break
            assert time.monotonic() < deadline, (
                f"the seed job ran {patience:.0f} s\n{running.diagnosis()}")
            time.sleep(1)
        running.seeded_seconds = time.monotonic() - start
        print(f"\n{images.name} ({images.machine}) compose up -d: {running.up_seconds:.1f} s "
              f"(every service healthy, nginx healthy); seeded {SEED_USERS} users at "
              f"{running.seeded_seconds:.1f} s")
        yield running
    finally:
        running.compose("down", "--volumes", "--remove-orphans", "--timeout", "10")


def test_every_container_is_healthy_and_the_graph_is_seeded(compose_stack: ComposeStack) -> None:
    by_service = {c.labels[SERVICE_LABEL]: c for c in compose_stack.containers()}
    assert set(by_service) == LONG_RUNNING | {"seed"}
    for name in LONG_RUNNING:
        state = by_service[name].attrs["State"]
        assert state["Status"] == "running", name
        assert state["Health"]["Status"] == "healthy", name
    seed = by_service["seed"]
    assert seed.attrs["State"]["ExitCode"] == 0, seed.logs().decode()
    assert f"{SEED_USERS} users" in seed.logs().decode()


def test_a_composed_post_reaches_a_followers_home_timeline(compose_stack: ComposeStack) -> None:
    with httpx.Client(base_url=compose_stack.url, timeout=30) as client:
        author, author_name = new_user(client)
        reader, _ = new_user(client)
        stranger, _ = new_user(client)
        follow(client, reader, author)
        text = f"through compose {secrets.token_hex(4)}"
        compose_post(client, author, author_name, text)
        assert [p["text"] for p in timeline(client, "home", reader)] == [text]
        assert [p["text"] for p in timeline(client, "user", author)] == [text]
        assert timeline(client, "home", stranger) == []


def test_the_driver_through_the_compose_front_end_has_no_errors(
    compose_stack: ComposeStack, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DOCKER_HOST", compose_stack.env["DOCKER_HOST"])
    factory, _ = compose_sampler_factory(compose_stack.project, compose.component_kinds())
    idle, why = factory()
    assert idle is not None, why
    with idle:  # what the containers spend with no request (healthchecks, timers)
        time.sleep(IDLE_S)
    sampler, why = factory()
    assert sampler is not None, why
    with sampler:  # every container's CPU over the whole run, warm-up included
        start = time.monotonic()
        result = run_load(LoadConfig(url=compose_stack.url, workload="mixed",
                                     rate=DRIVER_RATE, duration_s=20, warmup_s=3,
                                     users=SEED_USERS, seed=1, processes=1))
        elapsed = time.monotonic() - start
    answered = sum(second.completed for second in result.timeline)
    cpu, idle_cpu = sampler.total_cpu_seconds, idle.total_cpu_seconds * elapsed / IDLE_S
    print(f"\n{compose_stack.platform.name}: driver, mixed at {DRIVER_RATE} req/s for 20 s "
          f"through compose's nginx: {result.completed} answers, achieved "
          f"{result.achieved_rps:.1f} req/s, p50 {result.latency.p50_ms:.1f} ms, p99 "
          f"{result.latency.p99_ms:.1f} ms, errors {result.errors.total}; the containers' "
          f"CPU {cpu:.2f} s in {elapsed:.1f} s for {answered} answers (warm-up included): "
          f"{cpu * 1000 / max(answered, 1):.2f} ms per request, "
          + (f"{(cpu - idle_cpu) * 1000 / max(answered, 1):.2f} ms less the idle CPU "
             if idle_cpu < cpu else "the idle CPU not subtracted: it was not below the loaded ")
          + f"({idle.total_cpu_seconds / IDLE_S:.3f} CPU-s/s over {IDLE_S:.0f} s before)")
    seconds = [(s.second, s.errors, s.latency_p99_us // 1000) for s in result.timeline if s.errors]
    assert result.errors.total == 0, (
        f"{result.errors}\nseconds with errors (second, errors, p99 ms): {seconds}\n"
        f"{compose_stack.diagnosis()}")
    assert result.completed == result.ok > 0


def test_the_container_sampler_measures_every_container(compose_stack: ComposeStack,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", compose_stack.env["DOCKER_HOST"])
    factory, source = compose_sampler_factory(compose_stack.project, compose.component_kinds())
    assert compose_stack.project in source
    sampler, why = factory()
    assert sampler is not None, why
    with sampler, httpx.Client(base_url=compose_stack.url, timeout=30) as client:
        for user_id in range(200):
            response = client.get("/wrk2-api/home-timeline/read",
                                  params={"user_id": user_id % SEED_USERS, "start": 0, "stop": 10})
            assert response.status_code == 200
        time.sleep(1.5)  # a second memory sample inside the interval
    usage = {u.name: u for u in sampler.usage}
    assert set(usage) == LONG_RUNNING  # the seed job has exited: no container of it runs
    kinds = compose.component_kinds()
    for name, component in usage.items():
        assert component.kind == kinds[name]
        assert component.peak_rss_bytes > 1 << 20, name
        assert component.processes >= 1, name
    # The containers the requests went through used CPU; the sum is the stack's.
    for name in (stack.GATEWAY_HOST, "home-timeline", "redis", "post-storage"):
        assert usage[name].cpu_seconds > 0, name
    assert sampler.total_cpu_seconds == pytest.approx(sum(u.cpu_seconds for u in usage.values()))


def test_the_sampler_says_why_without_an_engine_or_a_project(
    compose_stack: ComposeStack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DOCKER_HOST", compose_stack.env["DOCKER_HOST"])
    factory, _ = compose_sampler_factory("no-such-project")
    assert factory() == (None, "no running container of compose project 'no-such-project'")
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/nothing.sock")
    factory, _ = compose_sampler_factory(compose_stack.project)
    sampler, why = factory()
    assert sampler is None and "set DOCKER_HOST" in why


def test_a_ramp_bundle_has_every_containers_cpu_and_memory(compose_stack: ComposeStack,
                                                           tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "socialbench.cli", "ramp", compose_stack.url, "--quick",
         "--workload", "read-home-timeline", "--users", str(SEED_USERS),
         "--start-rate", "20", "--step", "20", "--max-steps", "1", "--step-duration", "4s",
         "--warmup", "1s", "--containers", compose_stack.project,
         "--results-dir", str(tmp_path), "--quiet", "--processes", "1"],
        env=compose_stack.env, capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    (bundle,) = tmp_path.iterdir()
    rows = (bundle / "resources.csv").read_text().splitlines()
    header = rows[0].split(",")
    names = {dict(zip(header, row.split(","), strict=True))["component"] for row in rows[1:]}
    assert names == LONG_RUNNING
    assert (bundle / REPORT).is_file()
    assert (bundle / RESOURCES_PLOT).is_file()  # the same plot as the local stack's
    # Ceilings as for the local stack: each container's CPU split over the units its
    # command declares (the service's workers, memcached's threads, Redis's one).
    [step] = read_bundle(bundle).steps
    rows = {row.component: row for row in step.ceilings}
    assert {"home-timeline", "post-storage", "redis", "memcached"} <= set(rows)
    assert all(row.basis.startswith("declared") for row in step.ceilings)
    assert rows["redis"].role == "command thread" and rows["redis"].capacity_cores == 1
    assert rows["memcached"].unit == "each of 4 worker threads"


def test_every_container_runs_the_images_architecture(compose_stack: ComposeStack) -> None:
    expected = compose_stack.platform.machine
    containers = compose_stack.containers()
    assert {c.labels[SERVICE_LABEL] for c in containers} == LONG_RUNNING | {"seed"}
    for container in containers:
        name = container.labels[SERVICE_LABEL]
        image = compose_stack.client.images.get(container.attrs["Image"])
        assert image.attrs["Architecture"] == OCI_ARCHITECTURE.get(expected, expected), name
        if name == "seed":  # exited: nothing to run in it
            continue
        assert _uname(container) == (0, expected), name


def _uname(container: docker.models.containers.Container) -> tuple[int, str]:
    """`uname -m` in the container. Podman 4's exec sometimes returns no output at all
    (exit 0, nothing read): asked again then, at most 5 times."""
    for _ in range(5):
        code, out = container.exec_run(["uname", "-m"])
        if code != 0 or out.strip():
            break
        time.sleep(0.5)
    return code, out.decode().strip()


def test_the_driver_in_the_image_writes_a_result_of_its_architecture(
    compose_stack: ComposeStack, tmp_path: Path,
) -> None:
    tmp_path.chmod(0o777)  # the image's user writes the result
    status, output = compose_stack.in_image(
        "load", "http://nginx:8080", "--workload", "mixed", "--users", str(SEED_USERS),
        "--rate", str(DRIVER_RATE), "--duration", "10s", "--warmup", "2s", "--seed", "3",
        "--processes", "1", "--max-errors", "0%", "--quiet", "--json", "/out/result.json",
        out=tmp_path)
    assert status == 0, output + compose_stack.diagnosis()
    result = LoadResult.model_validate_json((tmp_path / "result.json").read_text())
    assert result.host.architecture == compose_stack.platform.machine
    # Under QEMU the kernel's CPUs are the host's kind: the result says it is emulated.
    assert result.host.emulated is (platform.machine() != compose_stack.platform.machine)
    assert result.errors.total == 0 and result.completed == result.ok > 0
    print(f"\n{compose_stack.platform.name}: driver in socialbench:dev"
          f"{compose_stack.platform.suffix} ({result.host.architecture}, emulated "
          f"{result.host.emulated}), mixed at "
          f"{DRIVER_RATE} req/s for 10 s: {result.ok} answers, p99 {result.latency.p99_ms:.1f} "
          f"ms, driver CPU {result.driver_cpu_s:.2f} s")


def test_the_stores_pass_the_check_after_the_load(compose_stack: ComposeStack,
                                                  tmp_path: Path) -> None:
    tmp_path.chmod(0o777)
    status, output = compose_stack.in_image(
        "check", "--mongodb-url", "mongodb://mongodb:27017", "--redis-url",
        "redis://redis:6379/0", "--full", "--json", "/out/check.json", out=tmp_path)
    assert status == 0, output
    assert "Check passed" in output
    checked = json.loads((tmp_path / "check.json").read_text())
    # The seeded users and what the loads above posted, all read back.
    assert checked["users"] >= SEED_USERS and checked["posts"] > 0, checked


def test_down_leaves_no_container_network_or_volume(compose_stack: ComposeStack) -> None:
    down = compose_stack.compose("down", "--volumes", "--remove-orphans", "--timeout", "10")
    assert down.returncode == 0, down.stderr
    label = {"label": f"{PROJECT_LABEL}={compose_stack.project}"}
    client = compose_stack.client
    assert client.containers.list(all=True, filters=label) == []
    assert client.networks.list(filters=label) == []
    assert client.volumes.list(filters=label) == []
