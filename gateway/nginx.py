"""Render the nginx front end's configuration from the service registry.

One template (``nginx.conf.j2``) serves local mode, compose and helm: the front-end
routes of every service come from :data:`socialbench.registry.SERVICES`, so moving a
route or a port is one edit in the registry.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import jinja2

from socialbench import registry
from socialbench.runtime.settings import Settings

GATEWAY_DIR = Path(__file__).resolve().parent
PAGES_DIR = GATEWAY_DIR / "pages"
TEMPLATE = "nginx.conf.j2"


@dataclass(frozen=True)
class Route:
    path: str
    upstream: str


@dataclass(frozen=True)
class Upstream:
    name: str
    servers: Sequence[str]


@dataclass
class GatewayConfig:
    """What differs between deployments of the front end."""

    # service name -> addresses of its instances: "host:port", or "unix:/path" (same box)
    service_addresses: Mapping[str, Sequence[str]]
    listen_host: str = "127.0.0.1"
    port: int = 8080
    media_port: int | None = 8081
    pages_dir: Path = PAGES_DIR
    worker_processes: str = "auto"
    worker_connections: int = 16384
    upstream_keepalive: int = 512
    # As the services' own RPC pools (rpc_connection_requests; 0: no bound): a service
    # of several replicas behind one address gets a share of the requests, not of the
    # connections nginx opened first.
    upstream_keepalive_requests: int = field(
        default_factory=lambda: Settings.model_fields["rpc_connection_requests"].default)
    proxy_read_timeout: str = "60s"
    client_max_body_size: str = "16m"
    mime_types: str = "/etc/nginx/mime.types"
    # Local mode: run in the foreground with our own pid, logs and temp files.
    foreground: bool = False
    pid_path: Path | None = None
    error_log: str = "stderr"
    temp_dir: Path | None = None
    resolver: str | None = None
    run_as_root: bool = field(default_factory=lambda: os.geteuid() == 0)


def local_addresses(host: str = "127.0.0.1", port_offset: int = 0) -> dict[str, list[str]]:
    """Every service at ``host`` on its registry port (plus ``port_offset``)."""
    return {spec.name: [f"{host}:{spec.port + port_offset}"] for spec in registry.SERVICES}


def routes() -> list[Route]:
    """Every front-end route and the service that answers it."""
    return [
        Route(path, spec.name) for spec in registry.SERVICES for path in spec.gateway_routes
    ]


def render(config: GatewayConfig) -> str:
    """The nginx.conf text for ``config``."""
    missing = [spec.name for spec in registry.SERVICES
               if spec.gateway_routes and spec.name not in config.service_addresses]
    if missing:
        raise ValueError(f"no address for services with front-end routes: {missing}")
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(GATEWAY_DIR),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    used = sorted({route.upstream for route in routes()})
    upstreams = [Upstream(name, config.service_addresses[name]) for name in used]
    return environment.get_template(TEMPLATE).render(
        **{k: getattr(config, k) for k in config.__dataclass_fields__},
        routes=routes(),
        upstreams=upstreams,
    )
