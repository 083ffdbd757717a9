"""The records of what was measured or described beside the load, as result files keep them.

:class:`Strict` is the base of every result record (unknown fields refused).
:class:`StackRecord` describes the local stack a run measured (socialbench.stack.local
writes it); :class:`StoreFigures` and :class:`CacheCounters` are what
socialbench.stack.store_stats reads from the stores.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from socialbench import registry


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")



class UnitRecord(Strict):
    """The CPU of one unit of a component over a step: a part that can keep at most
    ``capacity_cores`` busy (workloads/probes/ceilings.py)."""

    unit: str = Field(description="pid 4242 (python3); pid 17 thread 21 (mc-worker); or "
                                  "'each of 4 worker threads' for a component read whole.")
    role: str = Field(description="process, command thread, worker thread, thread, go "
                                  "runtime.")
    cpu_seconds: float
    capacity_cores: float = Field(description="The cores it can use at most: 1, or a Go "
                                              "runtime's GOMAXPROCS.")
    count: int = Field(default=1, description="Identical units this one stands for (a "
                                              "container's CPU split evenly).")
    basis: str = Field(default="measured", description="measured (per process or thread, "
                                                       "from /proc) or declared (how split).")


class StackRecord(Strict):
    """How the local stack that was measured was configured (its processes and tracing)."""

    workers: dict[str, int] = Field(
        description="worker processes of every service, by name (in bundles before worker "
                    "counts came from the CPU count: only the services given their own).")
    default_workers: int | None = Field(
        default=None, description="Workers of every service not in workers, when given "
                                  "(up --default-workers); None: from the CPU count.")
    workers_chosen: str | None = Field(
        default=None, description="How the worker counts were chosen: cpu-count (each "
                                  "service its share of the stack's CPU of workers_cpus "
                                  "CPUs) or given (--workers, --default-workers); None: an "
                                  "older bundle.")
    workers_cpus: int | None = Field(
        default=None, description="The CPUs the stack could use when its worker counts "
                                  "were chosen; None: an older bundle.")
    nginx_workers: str
    memcached_servers: int | None = Field(
        default=None, description="memcached processes the services spread their cached "
                                  "keys over (up --memcached-instances); None: an older "
                                  "bundle (one).")
    tracing: bool = Field(description="Services sent spans during the run (to Jaeger, or "
                                      "to the ramp's receiver: ramp --trace-ratio).")
    trace_sample_ratio: float | None = Field(
        description="Share of front-end requests traced, when tracing.")
    durability: dict[str, dict[str, str]] = Field(
        default_factory=dict,
        description="What each store keeps over a restart, by store: Redis appendonly and "
                    "appendfsync, the MongoDB-wire server's journal settings, memcached none.")
    store_layout: str | None = Field(
        default=None, description="shared (one instance of each store for every service) "
                                  "or per-service (as the original: up --stores); None: an "
                                  "older bundle (shared).")
    store_instances: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Every store instance that ran, with the services that used it.")
    redis_mode: str | None = Field(
        default=None, description="standalone, replicated (a primary and read replicas) "
                                  "or cluster (a Redis Cluster), for each Redis instance "
                                  "(up --redis-mode); None: an older bundle (standalone).")
    redis_servers: int | None = Field(
        default=None, description="redis-server processes of every Redis instance, added "
                                  "(before the sizing: of each).")
    redis_modes: dict[str, str] = Field(
        default_factory=dict, description="Each Redis instance's mode (standalone, "
                                          "replicated, cluster); empty: an older bundle "
                                          "(redis_mode for every instance).")
    memcached_threads: int | None = Field(
        default=None, description="Worker threads of each memcached process; None: an "
                                  "older bundle (4).")
    sizing: dict[str, str] = Field(
        default_factory=dict, description="What up chose for the CPU count and why: "
                                          "workers, nginx workers, memcached, the MongoDB-wire "
                                          "server, the stores' layout, the driver "
                                          "(socialbench/stack/sizing.py); empty: not sized.")
    cpus: list[int] | None = Field(
        default=None, description="The CPUs every process of the stack ran on (up --cpus); "
                                  "None: every CPU.")
    store_clients: dict[str, dict[str, dict[str, str]]] = Field(
        default_factory=dict,
        description="Which client (ours, or PyMongo's for credentials and replica sets) and "
                    "topology served each store of each service, by service then store, as "
                    "the services' /stats said when the run began; empty: an older bundle.")

    def service_workers(self) -> dict[str, int]:
        """Worker processes of every service, older bundles' default filled in."""
        default = self.default_workers or 1
        return {spec.name: self.workers.get(spec.name, default) for spec in registry.SERVICES}



class StoreFigures(Strict):
    """What the stores held and how they were doing, measured on the stack."""

    posts: int = Field(description="Posts in post-storage's MongoDB collection.")
    users: int = Field(description="Users in user's MongoDB collection.")
    mongodb_file_bytes: int = Field(description="The MongoDB server's data files on disk "
                                                "(FerretDB: its SQLite files and their WAL).")
    redis_used_memory_bytes: int = Field(description="used_memory of every redis-server.")
    redis_keys: int = Field(description="Keys of every redis-server (timelines, cached graph).")
    post_read_indexed: bool | None = Field(
        description="post-storage's read of posts missing from memcached (find post_id $in) "
                    "searched an index, by the server's explain; None: it did not say.")
    post_read_plan: str = Field(description="The explain's plan, shortened.")


class CacheCounters(Strict):
    """memcached's counters (every instance's, added), or their growth over a ramp."""

    get_hits: int
    get_misses: int
    evictions: int
    bytes: int = Field(description="Bytes it held (at the end, for a growth).")
    limit_bytes: int

    def since(self, before: CacheCounters) -> CacheCounters:
        return CacheCounters(get_hits=self.get_hits - before.get_hits,
                             get_misses=self.get_misses - before.get_misses,
                             evictions=self.evictions - before.evictions,
                             bytes=self.bytes, limit_bytes=self.limit_bytes)

    @property
    def hit_ratio(self) -> float | None:
        gets = self.get_hits + self.get_misses
        return self.get_hits / gets if gets else None


class PodResources(Strict):
    """CPU and memory of a pod's containers together, as its spec asks."""

    cpu: float | None = Field(description="Cores; None: none (a limit: some container has "
                                          "none, so the pod is unlimited).")
    memory: int | None = Field(description="Bytes; None: none (a limit: some container has "
                                           "none, so the pod is unlimited).")


class PodRecord(Strict):
    """One pod of a Kubernetes release that was measured (ramp --pods), as the ramp began."""

    name: str = Field(description="The pod's name.")
    component: str = Field(description="Its component in resources.csv (the pod's "
                                       "app.kubernetes.io/name; name-2, name-3, … for more "
                                       "replicas, by pod name).")
    kind: str = Field(description="service, store or gateway.")
    node: str
    node_arch: str | None = Field(
        default=None, description="Its node's architecture (its label kubernetes.io/arch, "
                                  "else what its kubelet reports); None: not read (an older "
                                  "bundle, or the node could not be read).")
    node_cpus: float | None = Field(
        default=None, description="Its node's allocatable CPUs, as Kubernetes counts them.")
    node_cpuset: str | None = Field(
        default=None, description="The CPUs its node's cgroup may use, where the node says "
                                  "(annotation socialbench.io/cpus, set by "
                                  "scripts/k8s-node.sh), e.g. '1'; None: not said.")
    image: str = Field(description="Its containers' images, comma-separated when several.")
    requests: PodResources
    limits: PodResources
    restarts: int = Field(description="Restarts of its containers, together.")
