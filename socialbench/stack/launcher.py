"""The local launcher: one supervisor process owns every process of the stack.

``socialbench up`` starts a detached supervisor (:func:`supervise`) and waits for it to
report the stack ready. The supervisor starts the stores, then the services all at once
(each gated on its ``/healthz``), then nginx; it restarts any process that dies, a store
as a service (with backoff), and, on SIGTERM, stops everything in reverse order. Its state
(pids, ports, logs, restarts) is in ``<data dir>/state.json``; logs in ``<data dir>/logs``.

The services sign login tokens with a secret made once per data directory and kept in
``<data dir>/jwt-secret`` (mode 0600), so a restart keeps sessions valid; they get it in
their environment only (never in the state file, the config file or a log).
``SOCIALBENCH_JWT_SECRET`` in the environment of ``socialbench up`` takes its place.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from socialbench import registry
from socialbench.gateway import nginx
from socialbench.registry import Store
from socialbench.runtime.settings import JWT_SECRET_ENV, STORE_SETTINGS, setting_env
from socialbench.runtime.tracing import EXPORT_INTERVAL_MS
from socialbench.stack.servers import (
    ServerCommand,
    find_binary,
    form_redis_cluster,
    jaeger_command,
    memcached_command,
    mongodb_command,
    port_open,
    redis_cluster_commands,
    redis_command,
    redis_replica_command,
)
from socialbench.workloads.check.contents import StoreAddresses
from socialbench.workloads.driver.hostload import usable_cpus

STATE_FILE = "state.json"
CONFIG_FILE = "stack-config.json"
SECRET_FILE = "jwt-secret"


def login_secret(data_dir: Path) -> str:
    """The login-token secret of the stack in ``data_dir``.

    ``SOCIALBENCH_JWT_SECRET`` when the environment gives one; else the one kept in
    ``<data dir>/jwt-secret``, made (random, mode 0600) the first time.
    """
    given = os.environ.get(JWT_SECRET_ENV, "")
    if given:
        return given
    path = data_dir / SECRET_FILE
    data_dir.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        os.chmod(path, 0o600)  # in case someone loosened it
        secret = path.read_text().strip()
        if secret:
            return secret
        path.unlink()
        return login_secret(data_dir)
    secret = secrets.token_hex(32)
    with os.fdopen(fd, "w") as out:
        out.write(secret + "\n")
    return secret


UNIX_PATH_MAX = 108  # a Unix domain socket's address, with its final NUL (Linux's sun_path)


@dataclass
class StackConfig:
    """Where the local stack listens and how big it is."""

    data_dir: Path = Path(".socialbench")
    host: str = "127.0.0.1"
    gateway_port: int = 8080
    media_port: int = 8081
    redis_port: int = 6390
    memcached_port: int = 11222
    mongodb_port: int = 27027
    # memcached processes, on consecutive ports from memcached_port, each with
    # memcached_memory_mb: the services spread their keys over them (runtime/memcached_pool.py).
    memcached_instances: int = 1
    memcached_memory_mb: int = 1024
    # Worker threads of each memcached process (memcached's -t; socialbench/stack/sizing.py
    # sizes it for the CPUs).
    memcached_threads: int = 4
    # registry.StoreLayout: one instance of each store, or one per service as the original.
    store_layout: str = registry.StoreLayout.SHARED.value
    # Each Redis instance: one server (standalone), a primary and redis_replicas read
    # replicas (replicated), or a Redis Cluster of redis_cluster_masters masters with
    # redis_replicas replicas each (cluster); runtime/redis_client.py, docs/stores.md.
    redis_mode: str = "standalone"
    redis_cluster_masters: int = 3
    redis_replicas: int = 1
    # Redis instances (by name, e.g. home-timeline-redis) run as Redis Clusters whatever
    # redis_mode says: the hottest, sharded (up --redis-cluster, or the sizing's choice).
    redis_cluster_instances: list[str] = field(default_factory=list)
    # Masters of each of those clusters where it differs from redis_cluster_masters (the
    # sizing's: the hottest gets more).
    redis_cluster_sizes: dict[str, int] = field(default_factory=dict)
    # What `up` chose for the CPU count and why (sizing's choices), for the manifest.
    sizing: dict[str, str] = field(default_factory=dict)
    # Worker processes: those of the services named here, then default_workers of every
    # other; None: each its share of the CPUs (registry.default_workers, cpu_count).
    workers: dict[str, int] = field(default_factory=dict)
    default_workers: int | None = None
    # The CPU count the workers are chosen for; None until the stack first starts, which
    # fixes it (the CPUs it may use then), so that restarts and re-pinning keep the counts.
    worker_cpus: int | None = None
    nginx_workers: str = "auto"
    # Added to every service's registry port: a second stack (e.g. the tests') beside the first.
    service_port_offset: int = 0
    # The services and nginx call the services over Unix domain sockets (socket_dir), which
    # cost less CPU a message than loopback TCP (docs/performance.md); each service listens
    # on its TCP port too (health checks, callers from elsewhere). False: TCP only.
    unix_sockets: bool = True
    # Jaeger beside the stack, and every service sending it this share of its requests.
    tracing: bool = False
    trace_sample_ratio: float = 0.01
    jaeger_otlp_port: int = 4318
    jaeger_ui_port: int = 16686
    # The CPUs every process of the stack runs on (None: all). The supervisor pins itself
    # before it starts anything, so every component, and every restart, inherits them.
    cpus: list[int] | None = None
    # An OTLP/HTTP endpoint of the caller's (the ramp's span receiver) that gets the spans
    # of trace_sample_ratio of the requests instead of Jaeger (which is then not started).
    trace_collector: str | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.gateway_port}"

    @property
    def memcached_bytes(self) -> int:
        """What the services' cache holds at most: each memcached's limit, over the pool."""
        return self.memcached_memory_mb * self.memcached_instances * 2**20

    @property
    def jaeger_url(self) -> str:
        """Jaeger's UI and API."""
        return f"http://{self.host}:{self.jaeger_ui_port}"

    @property
    def log_dir(self) -> Path:
        return self.data_dir / "logs"

    @property
    def cpu_count(self) -> int:
        """The CPU count the workers are chosen for: :attr:`worker_cpus` once fixed, else
        the CPUs the stack may use (``cpus`` when set, else those this process may use)."""
        if self.worker_cpus is not None:
            return self.worker_cpus
        return len(self.cpus) if self.cpus else len(usable_cpus())

    def with_worker_cpus(self) -> StackConfig:
        """This configuration with :attr:`worker_cpus` fixed (kept if it already is)."""
        return self if self.worker_cpus is not None else replace(self, worker_cpus=self.cpu_count)

    def workers_of(self, service: str) -> int:
        """Worker processes of ``service``: its own count, else default_workers, else the
        registry's for :attr:`cpu_count` CPUs."""
        if service in self.workers:
            return self.workers[service]
        if self.default_workers is not None:
            return self.default_workers
        return registry.default_workers(registry.get(service), self.cpu_count)

    def service_workers(self) -> dict[str, int]:
        """Worker processes of every service, by name (registry order)."""
        return {spec.name: self.workers_of(spec.name) for spec in registry.SERVICES}

    @property
    def workers_chosen(self) -> str:
        """How the worker counts were chosen: "given" (every count given by an option) or
        "cpu-count" (some from the CPU count)."""
        given = self.default_workers is not None or all(
            spec.name in self.workers for spec in registry.SERVICES)
        return "given" if given else "cpu-count"

    @property
    def layout(self) -> registry.StoreLayout:
        return registry.StoreLayout(self.store_layout)

    def store_instances(self) -> tuple[registry.StoreInstance, ...]:
        """Every store instance of its layout (registry.store_instances)."""
        return registry.store_instances(self.layout)

    def redis_mode_of(self, instance: registry.StoreInstance) -> str:
        """The mode of Redis ``instance``: cluster when named in redis_cluster_instances,
        else redis_mode."""
        return "cluster" if instance.name in self.redis_cluster_instances else self.redis_mode

    def cluster_masters(self, name: str) -> int:
        """The masters of Redis instance ``name`` when it runs as a cluster."""
        return self.redis_cluster_sizes.get(name, self.redis_cluster_masters)

    def redis_servers_of(self, instance: registry.StoreInstance) -> int:
        """The redis-server processes of Redis ``instance``, in its mode."""
        mode = self.redis_mode_of(instance)
        if mode == "cluster":
            return self.cluster_masters(instance.name) * (1 + self.redis_replicas)
        if mode == "replicated":
            return 1 + self.redis_replicas
        return 1

    @property
    def redis_servers(self) -> int:
        """The redis-server processes of every Redis instance, added."""
        return sum(self.redis_servers_of(instance) for instance in self.store_instances()
                   if instance.store is Store.REDIS)

    def redis_modes(self) -> dict[str, str]:
        """Each Redis instance's mode, by name."""
        return {instance.name: self.redis_mode_of(instance)
                for instance in self.store_instances() if instance.store is Store.REDIS}

    def instance_ports(self, instance: registry.StoreInstance) -> list[int]:
        """The ports of ``instance``'s processes: one for MongoDB, one per server of the
        Redis mode (the primary or the cluster's masters first), one per pool member for
        memcached; the instances of a store on consecutive ports from its port option."""
        same_store = [i for i in self.store_instances() if i.store is instance.store]
        index = same_store.index(instance)
        if instance.store is Store.MEMCACHED:
            first = self.memcached_port + index * self.memcached_instances
            return list(range(first, first + self.memcached_instances))
        if instance.store is Store.REDIS:
            first = self.redis_port + sum(self.redis_servers_of(i) for i in same_store[:index])
            return list(range(first, first + self.redis_servers_of(instance)))
        return [self.mongodb_port + index]

    @property
    def memcached_ports(self) -> list[int]:
        """The ports of every memcached process, of every instance."""
        return [port for instance in self.store_instances()
                if instance.store is Store.MEMCACHED for port in self.instance_ports(instance)]

    def store_component_name(self, instance: registry.StoreInstance, port: int) -> str:
        """The component name of ``instance``'s process on ``port``: the instance's name,
        with ``-1``, ``-2``, ... for each member of a memcached pool."""
        ports = self.instance_ports(instance)
        return instance.name if len(ports) == 1 else f"{instance.name}-{ports.index(port) + 1}"

    def store_address(self, spec: registry.ServiceSpec, store: Store) -> str:
        """What ``spec``'s settings say of its instance of ``store`` (URL or host:port list)."""
        instance = registry.store_instance(spec, store, self.layout)
        ports = self.instance_ports(instance)
        if store is Store.MONGODB:
            return f"mongodb://{self.host}:{ports[0]}"
        if store is Store.REDIS:
            if self.redis_mode_of(instance) == "cluster":  # every node a seed
                return ",".join(f"redis://{self.host}:{port}" for port in ports)
            return f"redis://{self.host}:{ports[0]}/0"  # the primary
        return ",".join(f"{self.host}:{port}" for port in ports)

    def redis_env(self, spec: registry.ServiceSpec) -> dict[str, str]:
        """The Redis mode's settings of ``spec`` besides its URL (none when standalone)."""
        if Store.REDIS not in spec.stores:
            return {}
        instance = registry.store_instance(spec, Store.REDIS, self.layout)
        mode = self.redis_mode_of(instance)
        if mode == "standalone":
            return {}
        env = {setting_env("redis_mode"): mode}
        if mode == "replicated":
            env[setting_env("redis_replica_urls")] = ",".join(
                f"redis://{self.host}:{port}/0" for port in self.instance_ports(instance)[1:])
        return env

    def service_port(self, spec: registry.ServiceSpec) -> int:
        return spec.port + self.service_port_offset

    @property
    def socket_dir(self) -> Path:
        """Where the services' Unix domain sockets are: ``<data dir>/sockets``, or, when that
        path is too long for a socket's address (108 bytes), a directory of the temporary
        directory named after the data directory."""
        data = self.data_dir.resolve()
        longest = max(len(spec.name) for spec in registry.SERVICES) + len(".sock") + 1
        local = data / "sockets"
        if len(os.fsencode(local)) + longest < UNIX_PATH_MAX:
            return local
        digest = hashlib.sha256(os.fsencode(data)).hexdigest()[:16]
        return Path(tempfile.gettempdir()) / f"socialbench-{digest}"

    def service_socket(self, spec: registry.ServiceSpec) -> str | None:
        """The Unix domain socket ``spec`` listens on (None: TCP only)."""
        if not self.unix_sockets:
            return None
        return str(self.socket_dir / f"{spec.name}.sock")

    def service_address(self, spec: registry.ServiceSpec) -> str:
        """Where the stack's neighbours call ``spec``: ``unix:/path`` or ``http://host:port``."""
        path = self.service_socket(spec)
        return f"unix:{path}" if path else f"http://{self.host}:{self.service_port(spec)}"

    def service_env(self, spec: registry.ServiceSpec) -> dict[str, str]:
        """Environment of ``spec``'s process: its stores and its neighbours."""
        prefix = registry.ENV_PREFIX
        env = {setting_env(STORE_SETTINGS[store]): self.store_address(spec, store)
               for store in spec.stores}
        env.update(self.redis_env(spec))
        env[f"{prefix}NEIGHBOUR_HOST"] = self.host
        for neighbour in registry.SERVICES:
            env[neighbour.url_env] = self.service_address(neighbour)
        if self.trace_collector:
            env[f"{prefix}TRACING_ENDPOINT"] = self.trace_collector
            env[f"{prefix}TRACING_SAMPLE_RATIO"] = str(self.trace_sample_ratio)
            # The receiver tables each step's spans when it ends: export them each second.
            env["OTEL_BSP_SCHEDULE_DELAY"] = str(EXPORT_INTERVAL_MS)
        elif self.tracing:
            env[f"{prefix}TRACING_ENDPOINT"] = (
                f"http://{self.host}:{self.jaeger_otlp_port}/v1/traces"
            )
            env[f"{prefix}TRACING_SAMPLE_RATIO"] = str(self.trace_sample_ratio)
        return env

    def store_addresses(self) -> StoreAddresses:
        """Where the check reads the social network's data in this stack."""
        return StoreAddresses.of_services(self.store_address)

    def to_json(self) -> str:
        data = asdict(self)
        data["data_dir"] = str(self.data_dir)
        return json.dumps(data, indent=2)

    @classmethod
    def from_json(cls, text: str) -> StackConfig:
        data = json.loads(text)
        data["data_dir"] = Path(data["data_dir"])
        return cls(**data)


@dataclass
class Component:
    """One process the supervisor owns."""

    name: str
    kind: str  # "store", "tracing", "service" or "gateway"
    argv: list[str]
    port: int
    health_url: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    pid: int | None = None
    restarts: int = 0
    log: str = ""

    def is_healthy(self, host: str) -> bool:
        if self.health_url is None:
            return port_open(host, self.port)
        try:
            with urllib.request.urlopen(self.health_url, timeout=2) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError):
            return False


def free_service_offset(host: str = "127.0.0.1") -> int:
    """A ``service_port_offset`` whose every service port is free now (a stack beside others).

    Tried from a random point, so that stacks started at the same time rarely pick the same;
    every port stays below Linux's ephemeral range (32768 up), where an outgoing connection
    could take a port between this check and the service's start.
    """
    first = 10000 + 100 * secrets.randbelow(137)
    for offset in [*range(first, 23700, 100), *range(10000, first, 100)]:
        if not any(port_open(host, spec.port + offset) for spec in registry.SERVICES):
            return offset
    raise RuntimeError("no free range of service ports")


def store_commands(config: StackConfig) -> list[ServerCommand]:
    """The store servers of ``config``'s layout: each instance's processes, each MongoDB and
    Redis with its own data directory (``<data dir>/<instance>``)."""
    data = config.data_dir.resolve()
    commands: list[ServerCommand] = []
    for instance in config.store_instances():
        ports = config.instance_ports(instance)
        for port in ports:
            name = config.store_component_name(instance, port)
            if instance.store is Store.REDIS and config.redis_mode_of(instance) == "cluster":
                [command] = redis_cluster_commands([port], data / instance.name, config.host)
            elif instance.store is Store.REDIS and port != ports[0]:  # replicated
                command = redis_replica_command(port, data / instance.name / str(port),
                                                f"{config.host}:{ports[0]}", host=config.host)
            elif instance.store is Store.REDIS:
                command = redis_command(port, data / instance.name, host=config.host)
            elif instance.store is Store.MONGODB:
                command = mongodb_command(port, data / instance.name, host=config.host,
                                          cpus=config.cpu_count)
            else:
                command = memcached_command(port, host=config.host,
                                            memory_mb=config.memcached_memory_mb,
                                            threads=config.memcached_threads)
            commands.append(replace(command, name=name))
    return commands


def form_redis_clusters(config: StackConfig) -> None:
    """Make each Redis instance's nodes one cluster (in cluster mode; once: nodes that
    restart keep their part in their nodes.conf, and a formed cluster is left alone)."""
    for instance in config.store_instances():
        if instance.store is Store.REDIS and config.redis_mode_of(instance) == "cluster":
            nodes = [f"{config.host}:{port}" for port in config.instance_ports(instance)]
            form_redis_cluster(nodes, config.redis_replicas)


def store_dirs(config: StackConfig) -> list[Path]:
    """The data directories of its durable stores (what ``--fresh`` empties)."""
    return [config.data_dir / instance.name for instance in config.store_instances()
            if instance.store is not Store.MEMCACHED]


def nginx_address(config: StackConfig, spec: registry.ServiceSpec) -> str:
    """Where nginx reaches ``spec``: ``unix:/path`` or ``host:port`` (an upstream's server)."""
    path = config.service_socket(spec)
    return f"unix:{path}" if path else f"{config.host}:{config.service_port(spec)}"


def plan(config: StackConfig) -> list[Component]:
    """Every process of the stack, in start order: stores, Jaeger (if tracing), services, nginx."""
    data = config.data_dir.resolve()
    components = [Component(s.name, "store", s.argv, s.port, env=s.env)
                  for s in store_commands(config)]
    if config.tracing and not config.trace_collector:
        jaeger = jaeger_command(config.jaeger_otlp_port, config.jaeger_ui_port, data,
                                host=config.host)
        components.append(Component(jaeger.name, "tracing", jaeger.argv, jaeger.port,
                                    f"{config.jaeger_url}/api/services"))
    # Not in config.service_env() (the address book the deployments' tests compare with):
    # the secret only ever reaches the services' environment.
    secret = {JWT_SECRET_ENV: login_secret(data)}
    if config.unix_sockets:
        config.socket_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    for spec in registry.start_order():
        port = config.service_port(spec)
        argv = [sys.executable, "-m", "socialbench.cli", "serve", spec.name,
                "--host", config.host, "--port", str(port),
                "--workers", str(config.workers_of(spec.name))]
        socket_path = config.service_socket(spec)
        if socket_path:
            argv += ["--unix", socket_path]
        health = f"http://{config.host}:{port}/healthz"
        components.append(Component(spec.name, "service", argv, port, health,
                                    config.service_env(spec) | secret))
    conf_path = data / "nginx.conf"
    gateway = nginx.GatewayConfig(
        service_addresses={spec.name: [nginx_address(config, spec)] for spec in registry.SERVICES},
        listen_host=config.host,
        port=config.gateway_port,
        media_port=config.media_port,
        # nginx's own auto counts the machine's CPUs, not those the stack may use.
        worker_processes=(str(config.cpu_count) if config.nginx_workers == "auto"
                          else config.nginx_workers),
        foreground=True,
        pid_path=data / "nginx.pid",
        error_log=str(config.log_dir / "nginx-error.log"),
        temp_dir=data / "nginx-temp",
    )
    (data / "nginx-temp").mkdir(parents=True, exist_ok=True)
    conf_path.write_text(nginx.render(gateway))
    nginx_argv = [find_binary("nginx"), "-c", str(conf_path), "-p", str(data),
                  "-e", str(config.log_dir / "nginx-error.log")]
    components.append(Component("nginx", "gateway", nginx_argv, config.gateway_port,
                                f"{config.url}/healthz"))
    for component in components:
        component.log = str(config.log_dir / f"{component.name}.log")
    return components


# ---------------------------------------------------------------- state file


@dataclass
class StackState:
    """What the supervisor last wrote to ``<data dir>/state.json``."""

    status: str  # "starting", "ready", "failed", "stopping" or "stopped"
    message: str
    supervisor_pid: int
    url: str
    components: list[Component]

    @property
    def supervisor_running(self) -> bool:
        return pid_alive(self.supervisor_pid)

    @classmethod
    def read(cls, data_dir: Path) -> StackState | None:
        """The state in ``data_dir``, None if there is none (or it is being rewritten)."""
        try:
            data = json.loads((data_dir / STATE_FILE).read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None
        components = [Component(**c | {"env": {}}) for c in data.pop("components", [])]
        return cls(components=components, **data)

    def write(self, data_dir: Path) -> None:
        data = asdict(self)
        for component in data["components"]:
            component["env"] = None  # addresses and secrets stay out of the state file
        tmp = data_dir / (STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(data, indent=2))
        tmp.replace(data_dir / STATE_FILE)


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is dead for our purposes.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return True


def kill_group(pid: int, sig: int) -> None:
    """Signal the process group ``pid`` leads (every child has its own session)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


# ---------------------------------------------------------------- supervisor


class RestartBackoff:
    """How long to wait before restarting a process that died: doubling from 0.25 s to
    30 s, and back to 0.25 s once the process had run for ``healthy_after_s`` since its
    restart. The first wait is short because every second a store or a service is down
    is a second of errors; a process that keeps dying soon waits longer."""

    def __init__(self, first_s: float = 0.25, most_s: float = 30.0,
                 healthy_after_s: float = 60.0) -> None:
        self.first_s, self.most_s, self.healthy_after_s = first_s, most_s, healthy_after_s
        self.next_s = first_s
        self.started_at: float | None = None

    def started(self, now: float) -> None:
        """The process was (re)started at ``now``."""
        self.started_at = now

    def delay(self, now: float) -> float:
        """The process died at ``now``: the wait before its restart."""
        if self.started_at is not None and now - self.started_at >= self.healthy_after_s:
            self.next_s = self.first_s
        delay = self.next_s
        self.next_s = min(self.next_s * 2, self.most_s)
        return delay


def start_batches(components: list[Component]) -> list[list[Component]]:
    """The plan's components in start batches: each store, Jaeger and nginx alone, in plan
    order, and the services all together.

    No service calls a neighbour before its first request (RPC pools connect lazily and
    ``/healthz`` checks only the service's stores), so they start at once: a service's
    start is mostly Python importing, and the sum of eleven of them one by one was most
    of ``up``'s time. nginx comes after every service is healthy.
    """
    batches: list[list[Component]] = []
    for component in components:
        if component.kind == "service" and batches and batches[-1][0].kind == "service":
            batches[-1].append(component)
        else:
            batches.append([component])
    return batches


def _inherited_env() -> dict[str, str]:
    """The supervisor's environment less the login secret (only services get that)."""
    return {name: value for name, value in os.environ.items() if name != JWT_SECRET_ENV}


class Supervisor:
    """Starts, watches and stops the processes of the stack (runs in its own process)."""

    def __init__(self, config: StackConfig) -> None:
        self.config = config
        self.components = plan(config)
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.status = "starting"
        self.message = ""
        self.stopping = False

    def _save(self) -> None:
        StackState(status=self.status, message=self.message, supervisor_pid=os.getpid(),
                   url=self.config.url, components=self.components).write(self.config.data_dir)

    def _spawn(self, component: Component) -> None:
        log = open(component.log, "ab")  # noqa: SIM115 - the child owns it from here
        process = subprocess.Popen(
            component.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=_inherited_env() | component.env, start_new_session=True,
        )
        log.close()
        self.processes[component.name] = process
        component.pid = process.pid

    def _wait_healthy(self, component: Component, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        process = self.processes[component.name]
        while time.monotonic() < deadline and not self.stopping:
            if process.poll() is not None:
                raise RuntimeError(
                    f"{component.name} exited with code {process.returncode} while starting; "
                    f"see {component.log}"
                )
            if component.is_healthy(self.config.host):
                return
            time.sleep(0.1)
        if not self.stopping:
            raise RuntimeError(f"{component.name} not healthy after {timeout_s:.0f} s; "
                               f"see {component.log}")

    def start_all(self) -> None:
        """Start every component, each batch healthy before the next (see :func:`start_batches`);
        the Redis Clusters formed once their nodes are up, before the services start."""
        formed = False
        for batch in start_batches(self.components):
            if self.stopping:
                return
            if batch[0].kind != "store" and not formed:
                self.message = "forming the Redis Clusters"
                self._save()
                form_redis_clusters(self.config)
                formed = True
            for component in batch:
                if port_open(self.config.host, component.port):
                    raise RuntimeError(
                        f"port {component.port} of {component.name} is already in use; "
                        "stop what holds it or choose another port"
                    )
            for component in batch:
                self._spawn(component)
            # Processes started together share the CPUs while they start.
            timeout_s = 60.0 + 10.0 * (len(batch) - 1)
            for component in batch:
                self.message = f"starting {component.name}"
                self._save()
                self._wait_healthy(component, timeout_s)

    def watch(self) -> None:
        """Restart any process that dies, with exponential backoff, until told to stop."""
        backoff = {component.name: RestartBackoff() for component in self.components}
        next_try: dict[str, float] = {}
        while not self.stopping:
            now = time.monotonic()
            for component in self.components:
                process = self.processes[component.name]
                if process.poll() is None:
                    continue
                if component.name not in next_try:
                    delay = backoff[component.name].delay(now)
                    next_try[component.name] = now + delay
                    self.message = (f"{component.name} exited with {process.returncode}; "
                                    f"restarting in {delay:.1f} s")
                    self._save()
                elif now >= next_try[component.name]:
                    del next_try[component.name]
                    kill_group(process.pid, signal.SIGKILL)
                    component.restarts += 1
                    self._spawn(component)
                    backoff[component.name].started(time.monotonic())
                    self.message = f"restarted {component.name}"
                    self._save()
            time.sleep(0.25)

    def stop_all(self) -> None:
        self.status = "stopping"
        self._save()
        for component in reversed(self.components):
            process = self.processes.get(component.name)
            if process is None:
                continue
            kill_group(process.pid, signal.SIGTERM)
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                kill_group(process.pid, signal.SIGKILL)
                process.wait()
            # service workers and nginx workers share the group; make sure none is left.
            kill_group(process.pid, signal.SIGKILL)
        self.status = "stopped"
        self._save()

    def run(self) -> int:
        def on_signal(signum: int, frame: object) -> None:
            self.stopping = True

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        try:
            self.start_all()
            if not self.stopping:
                self.status, self.message = "ready", f"front end at {self.config.url}"
                self._save()
                self.watch()
        except Exception as exc:
            self.status, self.message = "failed", str(exc)
            self._save()
            self.stop_all()
            self.status = "failed"
            self._save()
            return 1
        self.stop_all()
        return 0


def supervise(config_path: Path) -> int:
    """Entry point of the supervisor process."""
    config = StackConfig.from_json(config_path.read_text())
    if config.cpus:
        # An affinity is per thread: any thread an import already started keeps its own.
        for tid in os.listdir("/proc/self/task"):
            with contextlib.suppress(ProcessLookupError):
                os.sched_setaffinity(int(tid), config.cpus)
    return Supervisor(config).run()


if __name__ == "__main__":
    sys.exit(supervise(Path(sys.argv[1])))
