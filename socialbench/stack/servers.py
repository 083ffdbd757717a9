"""How to start each server of the stack as a local process: command, readiness, install hint.

Used by the local launcher (``socialbench up``) and by the test fixtures, so that the
tests run the same servers the same way the suite does.
"""

from __future__ import annotations

import contextlib
import math
import os
import secrets
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path

from socialbench import registry
from socialbench.errors import SocialbenchError
from socialbench.workloads.driver.hostload import usable_cpus


class ServerNotInstalled(SocialbenchError, RuntimeError):
    """A server binary is missing; the message says how to install it."""


INSTALL_HINTS = {
    "redis-server": "apt-get install redis-server",
    "memcached": "apt-get install memcached",
    "nginx": "apt-get install nginx-light",
    "ferretdb": "scripts/build-ferretdb.sh (or install a mongod on PATH)",
    "jaeger": "scripts/build-jaeger.sh",
}


def find_binary(name: str, *extra_dirs: str) -> str:
    """Absolute path of server binary ``name`` or a clear error saying how to install it."""
    search = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin", *extra_dirs])
    found = shutil.which(name, path=search)
    if found is None:
        hint = INSTALL_HINTS.get(name, f"install {name}")
        raise ServerNotInstalled(f"{name} is not installed; install it with: {hint}")
    return found


def go_bin_dirs() -> list[str]:
    """Where `go install` puts binaries ($GOBIN, $GOPATH/bin, ~/go/bin)."""
    dirs = [os.environ.get("GOBIN", ""), str(Path(os.environ.get("GOPATH", "~/go")) / "bin")]
    return [str(Path(d).expanduser()) for d in dirs if d]


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free right now on ``host``."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct ports free right now (held together while chosen, so no repeats)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind((host, 0))
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def free_port_block(count: int, host: str = "127.0.0.1") -> int:
    """The first of ``count`` (at most 60) consecutive ports free right now, for a stack's
    store instances, which take consecutive ports.

    Each block is ports 40-99 of a hundred from 12040 to 22699: a stack's service ports
    (``launcher.free_service_offset``: 01-11 of a hundred) never fall in one, and neither
    does a Redis Cluster node's bus port (its port + 10000), which also stays below Linux's
    ephemeral range (32768 up), where an outgoing connection could take it between this
    check and the server's start (measured: a bus port at 39066 was taken so). The bus
    ports are checked free too. Tried from a random hundred, so that stacks started at
    the same time rarely pick the same.
    """
    if not 0 < count <= 60:
        raise ValueError(f"a block is 1 to 60 ports, not {count}")
    hundreds = list(range(120, 227))
    first = secrets.randbelow(len(hundreds))
    for hundred in hundreds[first:] + hundreds[:first]:
        start = hundred * 100 + 40
        ports = range(start, start + count)
        if not any(port_open(host, port) or port_open(host, port + 10000) for port in ports):
            return start
    raise RuntimeError(f"no {count} consecutive free ports")


def port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False


@dataclass
class ServerCommand:
    """A server to run: its command line and the TCP port that says it is ready."""

    name: str
    argv: list[str]
    host: str
    port: int
    env: dict[str, str] = field(default_factory=dict)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


# Redis holds the home timelines and nothing else holds them (as in the original), so it
# keeps an append-only file in its data dir, fsynced once a second: a restart loses at
# most the last second of writes. No RDB snapshots (the AOF is the one copy).
REDIS_PERSISTENCE = ("--appendonly", "yes", "--appendfsync", "everysec", "--save", "")


def redis_command(port: int, data_dir: Path, *, host: str = "127.0.0.1",
                  password: str | None = None) -> ServerCommand:
    """redis-server on ``host:port``, persisting to an append-only file in ``data_dir``;
    with ``password``, its clients and its replicas log in with it."""
    data_dir.mkdir(parents=True, exist_ok=True)
    argv = [
        find_binary("redis-server"), "--bind", host, "--port", str(port),
        *REDIS_PERSISTENCE, "--dir", str(data_dir),
        "--protected-mode", "no", "--maxclients", "10000",
        # A replica (redis_replica_command's, a cluster's) syncs at once, not after Redis's
        # default 5 s wait for more replicas to share the sync.
        "--repl-diskless-sync-delay", "0",
    ]
    if password is not None:
        argv += ["--requirepass", password, "--masterauth", password]
    return ServerCommand("redis", argv, host, port)


def redis_replica_command(
    port: int, data_dir: Path, primary: str, *, host: str = "127.0.0.1",
    password: str | None = None,
) -> ServerCommand:
    """A read-only replica of the redis-server at ``primary`` (``host:port``), on ``host:port``.

    It refuses reads (``MASTERDOWN``) while its link to the primary is down or still
    syncing (``replica-serve-stale-data no``), so a client falls back to the primary
    instead of reading an old or empty copy (runtime/redis_replicated.py).
    """
    primary_host, _, primary_port = primary.rpartition(":")
    if not primary_host or not primary_port.isdigit():
        raise ValueError(f"the primary must be host:port, got {primary!r}")
    command = redis_command(port, data_dir, host=host, password=password)
    command.argv += ["--replicaof", primary_host, primary_port, *REDIS_REPLICA_OPTIONS]
    return ServerCommand("redis-replica", command.argv, host, port)


# What makes a redis-server a read replica (besides --replicaof) or a Redis Cluster node,
# here and in the chart (deploy/helm.py): see redis_replica_command, redis_cluster_commands.
REDIS_REPLICA_OPTIONS = ("--replica-serve-stale-data", "no")
# A master is failed over after this long unreachable: Redis's default is 15 s; 5 s keeps
# a failover's window of errors short.
REDIS_CLUSTER_NODE_TIMEOUT_MS = 5000
REDIS_CLUSTER_OPTIONS = ("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                         "--cluster-require-full-coverage", "no")


def redis_cluster_commands(
    ports: list[int], data_dir: Path, host: str = "127.0.0.1", *,
    bus_ports: list[int] | None = None, node_timeout_ms: int = REDIS_CLUSTER_NODE_TIMEOUT_MS,
    password: str | None = None,
) -> list[ServerCommand]:
    """One cluster-enabled redis-server per port, each persisting in ``data_dir/<port>``;
    the nodes talk to each other on ``bus_ports`` (default: each port + 10000, Redis's).

    Not yet a cluster: :func:`form_redis_cluster` makes one of them (once; a node that
    restarts keeps its part in ``nodes.conf``). ``cluster-require-full-coverage no``:
    while a dead master's slots wait for its replica to take over, the other masters
    keep answering theirs.
    """
    if bus_ports is None:
        bus_ports = [port + 10000 for port in ports]
    every = [*ports, *bus_ports]
    if not ports or len(set(every)) != len(every) or len(bus_ports) != len(ports):
        raise ValueError(f"a Redis Cluster needs distinct ports, and a bus port for each: "
                         f"{ports}, bus {bus_ports}")
    if max(every) > 65535:
        raise ValueError(f"a port is beyond 65535 (bus ports: {bus_ports}); give bus_ports")
    commands = []
    for port, bus_port in zip(ports, bus_ports, strict=True):
        command = redis_command(port, data_dir / str(port), host=host, password=password)
        command.argv += [*REDIS_CLUSTER_OPTIONS, "--cluster-port", str(bus_port),
                         "--cluster-node-timeout", str(node_timeout_ms)]
        commands.append(ServerCommand(f"redis-cluster-{port}", command.argv, host, port))
    return commands


CLUSTER_SLOTS = 16384


def form_redis_cluster(
    addresses: list[str], replicas_per_master: int, *, password: str | None = None,
    timeout_s: float = 30.0,
) -> None:
    """Make the nodes at ``addresses`` (``host:port``, started by
    :func:`redis_cluster_commands`) one Redis Cluster, and wait until it serves every slot.

    The first ``len(addresses) // (1 + replicas_per_master)`` addresses are the masters,
    with the slots split evenly in that order; the rest are replicas, master by master:
    master 0's first, then master 1's, and so on. Nodes that already form that cluster
    (restarted with their ``nodes.conf``) are left as they are.
    """
    import redis

    if replicas_per_master < 0 or len(addresses) % (1 + replicas_per_master):
        raise ValueError(f"{len(addresses)} nodes cannot be masters with "
                         f"{replicas_per_master} replicas each")
    masters = len(addresses) // (1 + replicas_per_master)
    if masters < 1:
        raise ValueError("a Redis Cluster needs at least one master")
    clients = []
    for address in addresses:
        host, _, port = address.rpartition(":")
        clients.append(redis.Redis(host=host, port=int(port), password=password,
                                   socket_timeout=timeout_s))
    try:
        if all(_cluster_state(client) == ("ok", len(addresses)) for client in clients):
            return
        ids = [client.execute_command("CLUSTER", "MYID").decode() for client in clients]
        for epoch, client in enumerate(clients, 1):
            with _suppress_refusal():  # a node that already met others has its epoch
                client.execute_command("CLUSTER", "SET-CONFIG-EPOCH", epoch)
        first_host, _, first_port = addresses[0].rpartition(":")
        bus_port = int(clients[0].config_get("cluster-port").get("cluster-port") or 0) or (
            int(first_port) + 10000)
        for client in clients[1:]:
            client.execute_command("CLUSTER", "MEET", first_host, int(first_port), bus_port)
        for index, client in enumerate(clients[:masters]):
            first = CLUSTER_SLOTS * index // masters
            last = CLUSTER_SLOTS * (index + 1) // masters - 1
            with _suppress_refusal():  # slots it serves already
                client.execute_command("CLUSTER", "ADDSLOTSRANGE", first, last)
        _wait_for(lambda: all(_known_nodes(client) >= len(addresses) for client in clients),
                  timeout_s, "the Redis Cluster's nodes to meet")
        for index, client in enumerate(clients[masters:]):
            _replicate(client, ids[index // replicas_per_master], timeout_s)
        _wait_for(lambda: all(_cluster_state(client)[0] == "ok" for client in clients),
                  timeout_s, "the Redis Cluster to serve every slot")
        wait_replicas_linked(addresses[masters:], password=password, timeout_s=timeout_s)
    finally:
        for client in clients:
            client.close()


def wait_replicas_linked(addresses: list[str], *, password: str | None = None,
                         timeout_s: float = 30.0) -> None:
    """Block until each Redis replica at ``addresses`` has synced with its master and
    written its append-only file from that copy (until then it cannot shut down: Redis
    refuses a SIGTERM while its first AOF is being written)."""
    import redis

    for address in addresses:
        host, _, port = address.rpartition(":")
        with redis.Redis(host=host, port=int(port), password=password,
                         socket_timeout=timeout_s) as client:
            _wait_for(lambda: _synced(client.info()), timeout_s,
                      f"the Redis replica at {address} to sync")


def _synced(info: dict[str, object]) -> bool:
    return (info.get("master_link_status") == "up" and not info.get("aof_rewrite_in_progress")
            and not info.get("aof_rewrite_scheduled"))


def _cluster_state(client: object) -> tuple[str, int]:
    """A node's ``cluster_state`` and ``cluster_known_nodes``."""
    info = client.execute_command("CLUSTER", "INFO").decode()  # type: ignore[attr-defined]
    fields = dict(line.split(":", 1) for line in info.split() if ":" in line)
    return fields.get("cluster_state", ""), int(fields.get("cluster_known_nodes", 0))


def _known_nodes(client: object) -> int:
    return _cluster_state(client)[1]


def _replicate(client: object, master_id: str, timeout_s: float) -> None:
    """``CLUSTER REPLICATE``, tried again while the node has yet to learn of the master."""
    import redis

    def replicated() -> bool:
        try:
            client.execute_command("CLUSTER", "REPLICATE", master_id)  # type: ignore[attr-defined]
        except redis.ResponseError as exc:
            if "Unknown node" not in str(exc):
                raise
            return False
        return True

    _wait_for(replicated, timeout_s, f"a replica to learn of its master {master_id}")


def _suppress_refusal() -> AbstractContextManager[None]:
    import redis

    return contextlib.suppress(redis.ResponseError)


def _wait_for(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout_s:g} s for {what}")
        time.sleep(0.05)


def memcached_command(
    port: int, *, host: str = "127.0.0.1", memory_mb: int = 1024, threads: int = 4
) -> ServerCommand:
    """memcached on ``host:port`` with ``memory_mb`` of cache."""
    argv = [
        find_binary("memcached"), "-l", host, "-p", str(port), "-U", "0",
        "-m", str(memory_mb), "-t", str(threads), "-c", "4096",
    ]
    if os.geteuid() == 0:
        argv += ["-u", "root"]
    return ServerCommand("memcached", argv, host, port)


# SQLite's synchronous=NORMAL (in FerretDB's WAL mode): a commit is safe from a crash of
# FerretDB, as every write the OS has taken is, and is on disk at the next checkpoint; a
# crash of the machine may lose the last commits, as mongod's default journal (every
# 100 ms) and the local Redis (every second) may. FULL, SQLite's default, waited for a
# disk flush on every commit: compose-post p99 68-88 ms -> 38-40 ms at 20 req/s here.
FERRETDB_SQLITE_PRAGMAS = "_pragma=synchronous(normal)"

# Go's collector runs when the heap has grown by GOGC% since the last one. FerretDB's
# live heap is small (about 30 MB), so at Go's default (100) it collected every few MB of
# a write load. 400: FerretDB's CPU per insert and read by _id 1.67 -> 1.39-1.43 ms
# (-15%), its RSS 39 -> 51 MB (ad hoc, 8 callers, three rounds; GOGC=off with a 256 MiB
# GOMEMLIMIT: -19% for 265 MB).
FERRETDB_GOGC = "400"


def ferretdb_max_procs(cpus: int | None = None) -> int:
    """FerretDB's GOMAXPROCS on ``cpus`` CPUs (default: those this process may use): the
    cores its share of the stack's CPU (``registry.MONGODB_CPU_SHARE``) comes to, rounded up.

    Go's default is every CPU: then FerretDB's idle threads spin looking for work and wake
    each other for every command. On 2 CPUs, with 1 instead of 2, its CPU per
    compose-like op (two inserts and a read, 300 op/s, our client) went 1.71-2.01 ->
    1.62-1.72 ms, and the op's p99 at 100 op/s 6.1 -> 3.6 ms; in the stack, its CPU per
    compose at 150 req/s 1.86-2.09 -> 1.62-1.80 ms. Rounded up so that the Go threads are
    never fewer than the share FerretDB takes at the stack's knee.
    """
    if cpus is None:
        cpus = len(usable_cpus())
    return max(1, math.ceil(cpus * registry.MONGODB_CPU_SHARE))


def mongodb_command(
    port: int, data_dir: Path, *, host: str = "127.0.0.1", cpus: int | None = None,
    user: tuple[str, str] | None = None,
) -> ServerCommand:
    """A MongoDB-wire server: ``mongod`` when on PATH, else FerretDB with its SQLite handler,
    sized for ``cpus`` CPUs (default: those this process may use).

    ``user`` (name, password): authentication on, FerretDB's way (v1.24): its new
    authentication (``--test-enable-new-auth``: SCRAM-SHA-256 and SCRAM-SHA-1, every
    command but the handshake's refused before a login, code 13) and this user created in
    ``admin`` when the data directory is new (``--setup-database``/``--setup-username``,
    the password in ``FERRETDB_SETUP_PASSWORD``, not on the command line). FerretDB has
    no roles: the user may do anything. Clients log in with ``authSource=admin``. The
    user exists before the port opens (FerretDB creates it before it listens).
    """
    data_dir.mkdir(parents=True, exist_ok=True)
    program = mongodb_program()
    if Path(program).name == "mongod":
        if user is not None:
            raise ValueError("a MongoDB user at start is FerretDB's set-up user; with mongod, "
                             "create one with createUser (the localhost exception)")
        argv = [program, "--bind_ip", host, "--port", str(port), "--dbpath", str(data_dir),
                "--quiet"]
        return ServerCommand("mongodb", argv, host, port)
    argv = [
        program, "--handler=sqlite", f"--sqlite-url=file:{data_dir}/?{FERRETDB_SQLITE_PRAGMAS}",
        f"--listen-addr={host}:{port}", f"--state-dir={data_dir}",
        "--telemetry=disable", "--debug-addr=-", "--log-level=warn",
    ]
    env = {"GOGC": FERRETDB_GOGC, "GOMAXPROCS": str(ferretdb_max_procs(cpus))}
    if user is not None:
        name, password = user
        argv += ["--test-enable-new-auth", "--setup-database=admin",
                 f"--setup-username={name}"]
        env["FERRETDB_SETUP_PASSWORD"] = password
    return ServerCommand("mongodb", argv, host, port, env=env)


JAEGER_CONFIG = """\
# Jaeger v2 all-in-one for socialbench: OTLP/HTTP in, spans in memory, UI and API out.
service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_storage:
    backends:
      memory:
        memory:
          max_traces: {max_traces}
  jaeger_query:
    storage:
      traces: memory
    enable_tracing: false
    http:
      endpoint: "{host}:{ui_port}"
    grpc:
      endpoint: "{host}:0"  # its gRPC API is not used: any free port
receivers:
  otlp:
    protocols:
      http:
        endpoint: "{host}:{otlp_port}"
processors:
  batch:
exporters:
  jaeger_storage_exporter:
    trace_storage: memory
"""


def jaeger_command(
    otlp_port: int,
    ui_port: int,
    config_dir: Path,
    *,
    host: str = "127.0.0.1",
    max_traces: int = 10_000,
) -> ServerCommand:
    """Jaeger, spans in memory: OTLP/HTTP in on ``otlp_port``, its UI and API on ``ui_port``.

    It keeps the newest ``max_traces`` traces: a compose-post trace has about 30 spans,
    so the default bounds its memory to a few hundred MB even when every request is traced.
    """
    config_dir.mkdir(parents=True, exist_ok=True)
    config = config_dir / "jaeger.yaml"
    config.write_text(JAEGER_CONFIG.format(host=host, otlp_port=otlp_port, ui_port=ui_port,
                                           max_traces=max_traces))
    argv = [find_binary("jaeger", *go_bin_dirs()), "--config", str(config)]
    return ServerCommand("jaeger", argv, host, otlp_port)


def mongodb_program() -> str:
    """The MongoDB-wire server the local stack runs: ``mongod`` when on PATH, else FerretDB
    (:class:`ServerNotInstalled` when neither is installed)."""
    return shutil.which("mongod") or find_binary("ferretdb", *go_bin_dirs())


def mongodb_flavour() -> str:
    """``mongod`` or ``ferretdb``: which server :func:`mongodb_command` will run."""
    return "mongod" if shutil.which("mongod") else "ferretdb"


def ferretdb_build(binary: str) -> str:
    """How the FerretDB at ``binary`` was built: the stamp scripts/build-ferretdb.sh leaves
    beside it (``v1.24.2 patches <sha256 of the patches>`` or ``v1.24.2 unpatched``), or
    ``unknown`` for a binary it did not build.
    """
    try:
        return Path(f"{binary}.socialbench").read_text().strip() or "unknown"
    except OSError:
        return "unknown"


def store_durability(
    mongodb_binary: str | None = None, *, cpus: int | None = None,
) -> dict[str, dict[str, str]]:
    """What each store of the local stack keeps over a restart or a crash, by store.

    ``mongodb_binary`` is the MongoDB-wire server's program (``mongod`` or ``ferretdb``; the
    one :func:`mongodb_command` would run when not given). FerretDB's build is recorded
    too: whether our patches (reads through the indexes) were in it; and how its Go
    runtime was set: its GOGC and, for the stack's ``cpus`` (default: those this process
    may use), its GOMAXPROCS.
    """
    if mongodb_binary is None:
        try:
            mongodb_binary = mongodb_program()
        except ServerNotInstalled:  # recorded as a FerretDB of unknown build
            mongodb_binary = "ferretdb"
    if Path(mongodb_binary).name == "mongod":
        documents = {"server": "mongod", "storage": "WiredTiger", "journal": "on",
                     "note": "mongod defaults: journal committed every 100 ms"}
    else:
        documents = {"server": "ferretdb", "build": ferretdb_build(mongodb_binary),
                     "handler": "sqlite", "journal_mode": "wal", "synchronous": "normal",
                     "gogc": FERRETDB_GOGC,
                     "gomaxprocs": str(ferretdb_max_procs(cpus)),
                     "note": "safe from a crash of FerretDB; a crash of the machine may lose "
                             "the commits since the last WAL checkpoint"}
    return {
        "redis": {"appendonly": "yes", "appendfsync": "everysec", "rdb_snapshots": "off",
                  "note": "home timelines; a crash loses at most the last second of writes"},
        "mongodb": documents,
        "memcached": {"persistence": "none", "note": "a cache: empty after every restart"},
    }


class ServerProcess:
    """A started server: waits for its port, stops it (and its children) on :meth:`stop`."""

    def __init__(self, command: ServerCommand, log_path: Path) -> None:
        self.command = command
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = log_path.open("ab")
        self.process = subprocess.Popen(
            command.argv, stdout=self._log, stderr=subprocess.STDOUT,
            env={**os.environ, **command.env}, start_new_session=True,
        )

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        """Block until the port accepts connections; a clear error if the process died."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                tail = self.log_path.read_text(errors="replace")[-2000:]
                raise RuntimeError(
                    f"{self.command.name} exited with {self.process.returncode}:\n{tail}"
                )
            if port_open(self.command.host, self.command.port):
                return
            time.sleep(0.05)
        raise TimeoutError(f"{self.command.name} not ready on {self.command.address}")

    def stop(self, timeout_s: float = 10.0) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
