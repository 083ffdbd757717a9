"""The one list of services: names, ports, neighbours, stores.

The local launcher, the nginx configuration, compose and helm all read it (or
are tested against it); adding a service or moving a port is one edit here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum


class Store(StrEnum):
    MONGODB = "mongodb"
    REDIS = "redis"
    MEMCACHED = "memcached"


class StoreLayout(StrEnum):
    """How many instances of each store a deployment runs.

    ``shared``: one MongoDB, one Redis and one memcached (or pool) for every service, the
    default on one box, where it measured cheaper (a process per instance costs memory and
    idle CPU, and on 2 cores eleven store processes take turns for the same cores; see
    docs/stores.md). ``per-service``: an instance of each store for each service that uses
    it, as the original deploys them (:func:`store_instance`).
    """

    SHARED = "shared"
    PER_SERVICE = "per-service"


@dataclass(frozen=True)
class StoreInstance:
    """One store server of a deployment: ``mongodb`` (shared) or ``user-mongodb`` (the
    user service's, in the per-service layout)."""

    store: Store
    owner: str | None = None  # the service whose instance it is; None: every service's

    @property
    def name(self) -> str:
        return self.store.value if self.owner is None else f"{self.owner}-{self.store.value}"


@dataclass(frozen=True)
class ServiceSpec:
    """One microservice of the social network."""

    name: str
    port: int
    neighbours: tuple[str, ...] = ()
    stores: tuple[Store, ...] = ()
    # Front-end routes (paths under nginx) that this service answers itself.
    gateway_routes: tuple[str, ...] = field(default=())
    # Its share of the whole stack's CPU on the mixed workload (see SERVICES): what
    # default_workers sizes it by (0: one worker).
    cpu_share: float = 0.0
    # The service whose store instances it reads and writes in the per-service layout
    # (None: its own): user-mention resolves names in user's collection and cache.
    store_owner: str | None = None

    @property
    def module(self) -> str:
        """Import path of the service module, e.g. ``socialbench.services.compose_post``."""
        return "socialbench.services." + self.name.replace("-", "_")

    @property
    def env_name(self) -> str:
        """Upper-snake name used in environment variables, e.g. ``COMPOSE_POST``."""
        return self.name.replace("-", "_").upper()

    @property
    def url_env(self) -> str:
        """Environment variable that points neighbours at this service."""
        return f"{ENV_PREFIX}{self.env_name}_URL"


ENV_PREFIX = "SOCIALBENCH_"

# cpu_share: each service's largest share of the CPU of every process of the stack over
# the reference workloads (mixed 60/30/10 and compose-post, each on the shared and the
# per-service stores): socialbench/stack/scaling_reference.json, docs/scaling.md
# (tests/stack/test_sizing.py checks the two agree). The largest, so that no workload finds
# a service's workers full before the machine's cores.
SERVICES: tuple[ServiceSpec, ...] = (
    ServiceSpec("unique-id", 9001, cpu_share=0.028),
    ServiceSpec("url-shorten", 9002, stores=(Store.MONGODB,), gateway_routes=("/api/url/expand",),
                cpu_share=0.063),
    ServiceSpec("user-mention", 9003, stores=(Store.MEMCACHED, Store.MONGODB), cpu_share=0.052,
                store_owner="user"),
    ServiceSpec("media", 9004, stores=(Store.MONGODB,),
                gateway_routes=("/upload-media", "/get-media"), cpu_share=0.032),
    ServiceSpec(
        "user", 9005, neighbours=("social-graph",), stores=(Store.MEMCACHED, Store.MONGODB),
        gateway_routes=("/wrk2-api/user/register", "/api/user/register", "/api/user/login"),
        cpu_share=0.03,
    ),
    ServiceSpec(
        "social-graph", 9006, neighbours=("user",), stores=(Store.REDIS, Store.MONGODB),
        gateway_routes=(
            "/wrk2-api/user/follow", "/wrk2-api/user/unfollow",
            "/api/user/follow", "/api/user/unfollow",
            "/api/user/get_follower", "/api/user/get_followee",
        ),
        cpu_share=0.046,
    ),
    ServiceSpec("post-storage", 9007, stores=(Store.MEMCACHED, Store.MONGODB), cpu_share=0.16),
    ServiceSpec(
        "user-timeline", 9008, neighbours=("post-storage",), stores=(Store.REDIS, Store.MONGODB),
        gateway_routes=("/wrk2-api/user-timeline/read", "/api/user-timeline/read"),
        cpu_share=0.097,
    ),
    ServiceSpec(
        "home-timeline", 9009, neighbours=("post-storage", "social-graph"), stores=(Store.REDIS,),
        gateway_routes=("/wrk2-api/home-timeline/read", "/api/home-timeline/read"),
        cpu_share=0.18,
    ),
    ServiceSpec("text", 9010, neighbours=("url-shorten", "user-mention"), cpu_share=0.077),
    ServiceSpec(
        "compose-post", 9011,
        neighbours=(
            "text", "user", "media", "unique-id",
            "post-storage", "user-timeline", "home-timeline",
        ),
        gateway_routes=("/wrk2-api/post/compose", "/api/post/compose"),
        cpu_share=0.147,
    ),
)

BY_NAME: dict[str, ServiceSpec] = {spec.name: spec for spec in SERVICES}


# The MongoDB-wire server's share, measured the same way: 0.14-0.18 in a mixed ramp from
# 100 req/s to its knee (1,175 req/s, 2026-12-02), the largest of any process near the
# knee; 0.22 of compose-post's (the shared layout of the scaling reference). What
# FerretDB's Go scheduler is sized by (stack.servers.ferretdb_max_procs).
MONGODB_CPU_SHARE = 0.22


def get(name: str) -> ServiceSpec:
    """The spec of service ``name``; a clear error when there is none."""
    try:
        return BY_NAME[name]
    except KeyError:
        known = ", ".join(BY_NAME)
        raise KeyError(f"unknown service {name!r}; known services: {known}") from None


def store_instance(spec: ServiceSpec, store: Store, layout: StoreLayout) -> StoreInstance:
    """The instance of ``store`` that ``spec`` uses in ``layout``.

    Per service, as the original's 13 instances, less those of a cache our services do
    not use: url-shorten and media read MongoDB only, so their memcached are not deployed
    (11 instances: 6 MongoDB, 3 Redis, 2 memcached).
    """
    if store not in spec.stores:
        raise ValueError(f"{spec.name} uses no {store.value}")
    if layout is StoreLayout.SHARED:
        return StoreInstance(store)
    return StoreInstance(store, spec.store_owner or spec.name)


def store_instances(layout: StoreLayout) -> tuple[StoreInstance, ...]:
    """Every store instance of ``layout``, each once: by store (MongoDB, Redis, memcached),
    then in registry order."""
    instances = (store_instance(spec, store, layout)
                 for store in Store for spec in SERVICES if store in spec.stores)
    return tuple(dict.fromkeys(instances))


def services_of(instance: StoreInstance, layout: StoreLayout) -> tuple[ServiceSpec, ...]:
    """The services that use ``instance`` in ``layout``."""
    return tuple(spec for spec in SERVICES
                 if instance.store in spec.stores
                 and store_instance(spec, instance.store, layout) == instance)


# Above a share of the cores: the reference's CPU per request, taken at a modest rate, is up
# to 1.25 times that at a ramp's top, where the machine's rate is measured (docs/scaling.md).
WORKERS_HEADROOM = 1.3


def default_workers(spec: ServiceSpec, cpus: int) -> int:
    """Worker processes of ``spec`` on ``cpus`` CPUs: the cores its share of them comes to,
    with :data:`WORKERS_HEADROOM`, rounded up.

    A worker is one process, so at most one core: a service gets as many as its largest
    share of the stack's CPU (``cpu_share``) of the machine needs, and at least one. On
    2 CPUs every service gets 1 (more workers there only cost CPU per request: +11%
    measured); on 16, home-timeline, post-storage and compose-post 4; on 128,
    home-timeline 30.
    """
    return max(1, math.ceil(cpus * spec.cpu_share * WORKERS_HEADROOM - 1e-9))


def start_order() -> list[ServiceSpec]:
    """Services ordered so that every service starts after the neighbours it calls.

    user and social-graph call each other (register inserts into the graph, follow by
    name resolves ids), so the cycle is broken by name order; both tolerate a neighbour
    that is not up yet because RPC pools connect lazily.
    """
    ordered: list[ServiceSpec] = []
    placed: set[str] = set()
    pending = list(SERVICES)
    while pending:
        for spec in pending:
            if all(n in placed or (n, spec.name) in _MUTUAL for n in spec.neighbours):
                ordered.append(spec)
                placed.add(spec.name)
                pending.remove(spec)
                break
        else:  # pragma: no cover - only a registry edit creating a new cycle gets here
            raise RuntimeError(f"dependency cycle among {[s.name for s in pending]}")
    return ordered


_MUTUAL = {("social-graph", "user")}
