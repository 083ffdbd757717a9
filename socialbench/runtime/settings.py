"""Settings of one service process, read from ``SOCIALBENCH_*`` environment variables."""

from __future__ import annotations

import os
from functools import lru_cache

from pydantic import Field, PrivateAttr
from pydantic_settings import BaseSettings, SettingsConfigDict

from socialbench import registry


def _service_urls_from_env() -> dict[str, str]:
    """The URLs the environment gives services, under each one's ``url_env``.

    Names match regardless of case, as for the other settings (pydantic-settings).
    """
    env = {name.upper(): value for name, value in os.environ.items()}
    return {spec.name: env[spec.url_env] for spec in registry.SERVICES if env.get(spec.url_env)}


class Settings(BaseSettings):
    """Everything a service process can be told: where it listens, its stores, its neighbours.

    A neighbour's address comes from the environment variable the registry names for it
    (``ServiceSpec.url_env``, e.g. ``SOCIALBENCH_POST_STORAGE_URL``); without one it is
    ``http://<neighbour_host>:<port>`` with the port from the registry. See :meth:`url_of`.
    """

    model_config = SettingsConfigDict(env_prefix=registry.ENV_PREFIX, extra="ignore")

    host: str = "127.0.0.1"
    port: int | None = None

    mongodb_url: str = "mongodb://127.0.0.1:27017"
    mongodb_pool_size: int = 32
    redis_url: str = "redis://127.0.0.1:6379/0"
    redis_pool_size: int = 64
    memcached_address: str = "127.0.0.1:11211"
    memcached_pool_size: int = 32
    # How long a request waits for a free store connection before a StoreError.
    store_wait_timeout_s: float = 10.0
    # Bounds on a store that is down or stuck, so a dead part answers 503s fast: to
    # connect (and, for MongoDB, to find a server: the driver's default is 30 s), and
    # for one command's answer.
    store_connect_timeout_s: float = 2.0
    store_call_timeout_s: float = 10.0

    neighbour_host: str = "127.0.0.1"
    rpc_pool_size: int = 256
    rpc_timeout_s: float = 10.0

    machine_id: int | None = None
    # The original signs with "secret"; PyJWT wants 32 bytes or more for HS256.
    jwt_secret: str = "socialbench-login-token-secret-change-me"
    login_token_ttl_s: int = 3600
    upload_max_bytes: int = 16 * 1024 * 1024

    # OTLP/HTTP collector of spans (Jaeger: http://<host>:4318/v1/traces); unset: no tracing.
    tracing_endpoint: str | None = None
    # Share of requests at front-end routes that start a trace (others follow their caller).
    tracing_sample_ratio: float = Field(default=0.01, ge=0.0, le=1.0)

    # Neighbour URLs set in the environment, by service name; read with the other settings.
    _service_urls: dict[str, str] = PrivateAttr(default_factory=_service_urls_from_env)

    def url_of(self, service: str) -> str:
        """Base URL of service ``service``: its registry variable, else neighbour host and port."""
        spec = registry.get(service)
        return self._service_urls.get(spec.name) or f"http://{self.neighbour_host}:{spec.port}"

    @property
    def memcached_host_port(self) -> tuple[str, int]:
        host, _, port = self.memcached_address.rpartition(":")
        return host or "127.0.0.1", int(port)


@lru_cache
def get_settings() -> Settings:
    """The process's settings, read once."""
    return Settings()
