"""Settings of one service process, read from ``SOCIALBENCH_*`` environment variables."""

from __future__ import annotations

import os
from functools import lru_cache
from typing import Literal, Self

from pydantic import Field, PrivateAttr, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from socialbench import registry
from socialbench.errors import SocialbenchError
from socialbench.runtime.redis_client import parse_redis_urls


def _service_urls_from_env() -> dict[str, str]:
    """The URLs the environment gives services, under each one's ``url_env``.

    Names match regardless of case, as for the other settings (pydantic-settings).
    """
    env = {name.upper(): value for name, value in os.environ.items()}
    return {spec.name: env[spec.url_env] for spec in registry.SERVICES if env.get(spec.url_env)}


JWT_SECRET_ENV = f"{registry.ENV_PREFIX}JWT_SECRET"
MIN_SECRET_CHARS = 32
# Secrets anyone can read in public code: the original's and this port's former default.
PUBLIC_SECRETS = frozenset({"secret", "socialbench-login-token-secret-change-me"})


class LoginSecretMissing(SocialbenchError, RuntimeError):
    """A service process was started without the login-token secret."""


class Settings(BaseSettings):
    """Everything a service process can be told: where it listens, its stores, its neighbours.

    A neighbour's address comes from the environment variable the registry names for it
    (``ServiceSpec.url_env``, e.g. ``SOCIALBENCH_POST_STORAGE_URL``); without one it is
    ``http://<neighbour_host>:<port>`` with the port from the registry. See :meth:`url_of`.
    """

    model_config = SettingsConfigDict(env_prefix=registry.ENV_PREFIX, extra="ignore")

    host: str = "127.0.0.1"
    port: int | None = None

    # mongodb://[user:password@]host[:port]: one server, our client; several hosts, TLS,
    # replicaSet=, mongodb+srv://, any other option: PyMongo (runtime/mongodb_pymongo.py).
    mongodb_url: str = "mongodb://127.0.0.1:27017"
    mongodb_pool_size: int = 32
    # Redis as it is deployed (runtime/redis_client.py; docs/stores.md):
    # - standalone: redis_url is the one server;
    # - replicated: redis_url is the primary (writes), redis_replica_urls its replicas
    #   (reads), each write followed by WAIT for every replica, up to redis_wait_timeout_ms;
    # - cluster: redis_url lists seed nodes of a Redis Cluster, comma-separated redis://
    #   URLs (redis://10.0.0.1:7000,redis://10.0.0.2:7000), database 0; writes may wait for
    #   redis_cluster_wait_replicas replicas (0: none).
    redis_mode: Literal["standalone", "replicated", "cluster"] = "standalone"
    redis_url: str = "redis://127.0.0.1:6379/0"
    redis_replica_urls: str = ""
    redis_wait_timeout_ms: int = Field(default=500, ge=1)
    redis_cluster_wait_replicas: int = Field(default=0, ge=0)
    # Connections at most, each pipelining (runtime/pipelining.py).
    redis_pool_size: int = 64
    # host:port, or a pool: host:port,host:port,... (runtime/memcached_pool.py).
    memcached_address: str = "127.0.0.1:11211"
    memcached_pool_size: int = 32
    # Bounds on a store that is down or stuck, so a dead part answers 503s fast: to
    # connect, and for one command's answer.
    store_connect_timeout_s: float = 2.0
    store_call_timeout_s: float = 10.0

    neighbour_host: str = "127.0.0.1"
    rpc_pool_size: int = 256
    rpc_timeout_s: float = 10.0
    # Requests per connection to a neighbour before it is closed and another opened (0: no
    # bound). A Service of several replicas balances connections, not requests: a bound
    # spreads a caller's requests over them (socialbench.runtime.rpc).
    rpc_connection_requests: int = Field(default=100, ge=0)

    machine_id: int | None = None
    # The key login tokens are signed with (HS256), shared by every service of a deployment:
    # SOCIALBENCH_JWT_SECRET. No default: `socialbench up`, compose and helm each give one
    # per deployment, and `socialbench serve` refuses to start without it (see
    # socialbench.runtime.auth.signing_key for an app run in-process, e.g. by the tests).
    jwt_secret: SecretStr | None = None
    login_token_ttl_s: int = 3600
    upload_max_bytes: int = 16 * 1024 * 1024

    # OTLP/HTTP collector of spans (Jaeger: http://<host>:4318/v1/traces); unset: no tracing.
    tracing_endpoint: str | None = None
    # Share of requests at front-end routes that start a trace (others follow their caller).
    tracing_sample_ratio: float = Field(default=0.01, ge=0.0, le=1.0)

    # Faults on purpose, for tests of the instruments (socialbench.runtime.faults): CPU ms
    # burnt per request, by service, as JSON: SOCIALBENCH_FAULT_BUSY_MS='{"home-timeline": 20}'.
    fault_busy_ms: dict[str, float] = Field(default_factory=dict)

    # Neighbour URLs set in the environment, by service name; read with the other settings.
    _service_urls: dict[str, str] = PrivateAttr(default_factory=_service_urls_from_env)

    @field_validator("jwt_secret", mode="before")
    @classmethod
    def _usable_secret(cls, value: object) -> object:
        """Unset when empty; at least 32 characters (HS256); never the old public default."""
        raw = value.get_secret_value() if isinstance(value, SecretStr) else value
        if raw is None or raw == "":
            return None
        if not isinstance(raw, str):
            return value
        if raw in PUBLIC_SECRETS:
            raise ValueError(f"{JWT_SECRET_ENV} is a publicly known value; "
                             "set a random one (e.g. openssl rand -hex 32)")
        if len(raw) < MIN_SECRET_CHARS:
            raise ValueError(f"{JWT_SECRET_ENV} is shorter than {MIN_SECRET_CHARS} characters; "
                             "set a random one (e.g. openssl rand -hex 32)")
        return value

    @field_validator("fault_busy_ms")
    @classmethod
    def _known_services(cls, value: dict[str, float]) -> dict[str, float]:
        unknown = sorted(set(value) - {spec.name for spec in registry.SERVICES})
        if unknown:
            raise ValueError(f"no service named {', '.join(unknown)}")
        if any(ms < 0 for ms in value.values()):
            raise ValueError("a busy time is not negative")
        return value

    def url_of(self, service: str) -> str:
        """Base URL of service ``service``: its registry variable, else neighbour host and port."""
        spec = registry.get(service)
        return self._service_urls.get(spec.name) or f"http://{self.neighbour_host}:{spec.port}"

    @model_validator(mode="after")
    def _redis_deployment(self) -> Self:
        """redis_url and redis_replica_urls as ``redis_mode`` takes them."""
        servers = parse_redis_urls(self.redis_url)
        mode = self.redis_mode
        if mode != "cluster" and len(servers) > 1:
            raise ValueError(f"redis_url lists {len(servers)} servers; only redis_mode=cluster "
                             "takes several (its seed nodes)")
        if mode == "cluster" and any(server.db for server in servers):
            raise ValueError("a Redis Cluster has only database 0: redis_url must not name "
                             "another")
        if mode == "replicated":
            if not self.redis_replica_urls.strip():
                raise ValueError("redis_mode=replicated needs redis_replica_urls (the "
                                 "replicas' redis:// URLs, comma-separated)")
            replicas = parse_redis_urls(self.redis_replica_urls)
            if (servers[0].host, servers[0].port) in {(r.host, r.port) for r in replicas}:
                raise ValueError("the Redis primary (redis_url) is also in redis_replica_urls")
        elif self.redis_replica_urls.strip():
            raise ValueError(f"redis_replica_urls is for redis_mode=replicated, not {mode}")
        if self.redis_cluster_wait_replicas and mode != "cluster":
            raise ValueError(f"redis_cluster_wait_replicas is for redis_mode=cluster, not {mode}")
        return self

    @field_validator("memcached_address")
    @classmethod
    def _memcached_servers(cls, value: str) -> str:
        parse_servers(value)
        return value

    @property
    def memcached_servers(self) -> list[tuple[str, int]]:
        """Host and port of each memcached server, in the order given."""
        return parse_servers(self.memcached_address)


def parse_servers(addresses: str) -> list[tuple[str, int]]:
    """``host:port,host:port,...`` as (host, port) pairs: at least one, none twice. A missing
    host is 127.0.0.1; an IPv6 host is in brackets (``[::1]:11211``)."""
    servers: list[tuple[str, int]] = []
    for address in filter(None, (part.strip() for part in addresses.split(","))):
        host, _, port = address.rpartition(":")
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"expected host:port, got {address!r}")
        servers.append((host.removeprefix("[").removesuffix("]") or "127.0.0.1", int(port)))
    if not servers:
        raise ValueError("no server address given")
    if len(set(servers)) != len(servers):
        raise ValueError(f"a server is given twice: {addresses}")
    return servers


def setting_env(field: str) -> str:
    """The environment variable of settings field ``field``, e.g. ``SOCIALBENCH_REDIS_URL``."""
    if field not in Settings.model_fields:
        raise KeyError(f"no settings field {field!r}")
    return registry.ENV_PREFIX + field.upper()


# The settings field that tells a service where its instance of each store is.
STORE_SETTINGS: dict[registry.Store, str] = {
    registry.Store.MONGODB: "mongodb_url",
    registry.Store.REDIS: "redis_url",
    registry.Store.MEMCACHED: "memcached_address",
}


def require_login_secret(settings: Settings) -> None:
    """Raise :class:`LoginSecretMissing`, saying how to set it, when ``settings`` has no secret."""
    if settings.jwt_secret is None:
        raise LoginSecretMissing(
            f"{JWT_SECRET_ENV} is not set: every service of a deployment must share one "
            "random secret to sign and check login tokens (e.g. "
            f"{JWT_SECRET_ENV}=$(openssl rand -hex 32)). socialbench up, the compose file "
            "and the helm chart set it; see docs/deploy.md."
        )


@lru_cache
def get_settings() -> Settings:
    """The process's settings, read once."""
    return Settings()
