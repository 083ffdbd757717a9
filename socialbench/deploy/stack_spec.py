"""The containerised stack as data: store images, environment, gateway configuration.

Compose and helm both deploy each service under its registry name (the host name
neighbours use) on its registry port, and each store instance of the layout under its
instance's name (``mongodb``, or ``user-mongodb`` per service: registry.store_instance);
this module says so once, and :mod:`socialbench.deploy.compose` and
:mod:`socialbench.deploy.helm` write it out.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from socialbench import registry
from socialbench.gateway import nginx
from socialbench.registry import Store, StoreInstance, StoreLayout
from socialbench.runtime.settings import JWT_SECRET_ENV, STORE_SETTINGS, Settings, setting_env
from socialbench.stack.servers import REDIS_PERSISTENCE

REPO_ROOT = Path(__file__).resolve().parents[2]
COMPOSE_DIR = REPO_ROOT / "compose"
CHART_DIR = REPO_ROOT / "helm" / "socialnetwork"

GATEWAY_HOST = "nginx"
GATEWAY_PORT = 8080
MEDIA_PORT = 8081
GATEWAY_URL = f"http://{GATEWAY_HOST}:{GATEWAY_PORT}"
# Where the official nginx image serves static files from; the pages are mounted there.
PAGES_DIR = Path("/usr/share/nginx/html")
# Where the socialbench image links its installed package (pages, locustfile).
IMAGE_PACKAGE_DIR = "/opt/socialbench"
SERVICE_WORKERS = 1

JAEGER_IMAGE = "jaegertracing/all-in-one:1.62.0"


@dataclass(frozen=True)
class StoreDeployment:
    """One store server in a container: its pinned official image and how it is told to run."""

    store: Store
    image: str
    port: int
    command: tuple[str, ...]
    healthcheck: tuple[str, ...]
    data_dir: str | None = None

    @property
    def name(self) -> str:
        return self.store.value

    @property
    def env_name(self) -> str:
        """The variable that points a service at its instance, e.g. ``SOCIALBENCH_REDIS_URL``."""
        return setting_env(STORE_SETTINGS[self.store])

    def address(self, host: str) -> str:
        """The value of :attr:`env_name` for the instance reached as ``host``."""
        if self.store is Store.MONGODB:
            return f"mongodb://{host}:{self.port}"
        if self.store is Store.REDIS:
            return f"redis://{host}:{self.port}/0"
        return f"{host}:{self.port}"


# Same server flags as the local launcher's (socialbench.stack.servers).
STORES: tuple[StoreDeployment, ...] = (
    StoreDeployment(
        Store.MONGODB,
        image="mongo:7.0.16",
        port=27017,
        command=("mongod", "--bind_ip_all", "--quiet"),
        # mongosh costs a second of CPU a run: too much every few seconds beside a benchmark.
        healthcheck=("bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/27017"),
        data_dir="/data/db",
    ),
    StoreDeployment(
        Store.REDIS,
        image="redis:7.4.2",
        port=6379,
        # The home timelines live here only: an append-only file on its volume.
        command=("redis-server", *REDIS_PERSISTENCE, "--dir", "/data",
                 "--protected-mode", "no", "--maxclients", "10000"),
        healthcheck=("redis-cli", "ping"),
        data_dir="/data",
    ),
    StoreDeployment(
        Store.MEMCACHED,
        image="memcached:1.6.38",
        port=11211,
        command=("memcached", "-U", "0", "-m", "1024", "-t", "4", "-c", "4096"),
        # The Debian-based image has bash but no nc: a `stats` over /dev/tcp.
        healthcheck=("bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/11211 && "
                     "printf 'stats\\r\\nquit\\r\\n' >&3 && grep -q uptime <&3"),
    ),
)
STORE_BY_NAME = {store.name: store for store in STORES}


# The collections a sharded MongoDB (mongos) splits, on a hashed key, as the original's
# post-install hook: (database, collection, key). Each key has the services' unique index.
SHARDED_COLLECTIONS: tuple[tuple[str, str, str], ...] = (
    ("post", "post", "post_id"),
    ("user", "user", "user_id"),
    ("media", "media", "media_id"),
    ("url-shorten", "url-shorten", "shortened_url"),
)


def store_address(instance: StoreInstance) -> str:
    """Where services reach ``instance`` inside the stack's network (by its name)."""
    return STORE_BY_NAME[instance.store.value].address(instance.name)

GATEWAY_IMAGE = "nginx:1.28.0-alpine"

# Pinned third-party images; compose and the chart's values must use exactly these.
PINNED_IMAGES: dict[str, str] = {
    **{store.name: store.image for store in STORES},
    "nginx": GATEWAY_IMAGE,
    "jaeger": JAEGER_IMAGE,
}


# The login-token secret every service shares; compose and helm give it a value of the
# deployment's own (never a default in a generated file).
SECRET_ENV = JWT_SECRET_ENV

# Tracing settings of every service and their defaults: no endpoint, tracing off.
TRACING_DEFAULTS = {
    setting_env("tracing_endpoint"): "",
    setting_env("tracing_sample_ratio"): str(
        Settings.model_fields["tracing_sample_ratio"].default
    ),
}


def service_url(spec: registry.ServiceSpec) -> str:
    """Where neighbours reach ``spec`` inside the stack's network."""
    return f"http://{spec.name}:{spec.port}"


def neighbour_env() -> dict[str, str]:
    """Every service's URL, as neighbours read it (the same for every service container).

    The names are the local launcher's (``StackConfig.service_env``) except
    ``SOCIALBENCH_NEIGHBOUR_HOST``, the fallback for a stack on one host: here every
    neighbour has its own URL.
    """
    return {spec.url_env: service_url(spec) for spec in registry.SERVICES}


def store_env(spec: registry.ServiceSpec, layout: StoreLayout) -> dict[str, str]:
    """Where ``spec`` finds each store it uses, in ``layout``."""
    return {STORE_BY_NAME[store.value].env_name:
            store_address(registry.store_instance(spec, store, layout)) for store in spec.stores}


def service_command(spec: registry.ServiceSpec, workers: int | str = SERVICE_WORKERS) -> list[str]:
    """Arguments of the socialbench image that run service ``spec``."""
    return ["serve", spec.name, "--host", "0.0.0.0", "--port", str(spec.port),
            "--workers", str(workers)]


def http_healthcheck(port: int, path: str = "/healthz") -> list[str]:
    """Exit 0 when ``GET path`` on the local ``port`` answers 200.

    A bash, not a Python start: compose runs it every few seconds in every container, and
    a Python start costs about 0.1 s of CPU.
    """
    script = (f"exec 3<>/dev/tcp/127.0.0.1/{port} && "
              f"printf 'GET {path} HTTP/1.0\\r\\nHost: localhost\\r\\n\\r\\n' >&3 && "
              "head -n 1 <&3 | grep -q ' 200 '")
    return ["bash", "-c", script]


def gateway_config() -> nginx.GatewayConfig:
    """The front end of compose and helm: every service by name, pages from the nginx image."""
    return nginx.GatewayConfig(
        service_addresses={spec.name: [f"{spec.name}:{spec.port}"] for spec in registry.SERVICES},
        listen_host="0.0.0.0",
        port=GATEWAY_PORT,
        media_port=MEDIA_PORT,
        pages_dir=PAGES_DIR,
        run_as_root=False,
    )


def render_gateway() -> str:
    """nginx.conf for compose and helm (the same text for both)."""
    return nginx.render(gateway_config())
