"""Settings of one service process, read from ``SOCIALBENCH_*`` environment variables."""

from __future__ import annotations

from functools import lru_cache

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from socialbench import registry


class Settings(BaseSettings):
    """Everything a service process can be told: where it listens, its stores, its neighbours.

    A neighbour's address comes from ``SOCIALBENCH_<NAME>_URL`` (e.g.
    ``SOCIALBENCH_POST_STORAGE_URL``); without one it is ``http://<neighbour_host>:<port>``
    with the port from the registry.
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

    neighbour_host: str = "127.0.0.1"
    rpc_pool_size: int = 256
    rpc_timeout_s: float = 10.0

    unique_id_url: str | None = None
    url_shorten_url: str | None = None
    user_mention_url: str | None = None
    media_url: str | None = None
    user_url: str | None = None
    social_graph_url: str | None = None
    post_storage_url: str | None = None
    user_timeline_url: str | None = None
    home_timeline_url: str | None = None
    text_url: str | None = None
    compose_post_url: str | None = None

    machine_id: int | None = None
    # The original signs with "secret"; PyJWT wants 32 bytes or more for HS256.
    jwt_secret: str = "socialbench-login-token-secret-change-me"
    login_token_ttl_s: int = 3600
    upload_max_bytes: int = 16 * 1024 * 1024

    # OTLP/HTTP collector of spans (Jaeger: http://<host>:4318/v1/traces); unset: no tracing.
    tracing_endpoint: str | None = None
    # Share of requests at front-end routes that start a trace (others follow their caller).
    tracing_sample_ratio: float = Field(default=0.01, ge=0.0, le=1.0)

    def url_of(self, service: str) -> str:
        """Base URL of neighbour ``service``."""
        spec = registry.get(service)
        explicit: str | None = getattr(self, spec.env_name.lower() + "_url")
        return explicit or f"http://{self.neighbour_host}:{spec.port}"

    @property
    def memcached_host_port(self) -> tuple[str, int]:
        host, _, port = self.memcached_address.rpartition(":")
        return host or "127.0.0.1", int(port)


@lru_cache
def get_settings() -> Settings:
    """The process's settings, read once."""
    return Settings()
