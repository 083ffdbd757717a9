"""``compose/docker-compose.yml`` and ``compose/services.env``, generated from the registry.

``docker-compose.yml`` runs the shared store layout (one MongoDB, Redis and memcached);
``docker-compose.per-service.yml`` the original's, an instance of each store per service
that uses it (registry.store_instance); both share ``services.env`` (the neighbours'
URLs) and give each service its stores' addresses in its own environment. Every service
runs from the one socialbench image under its registry name and port, after its stores
and the neighbours it calls are healthy; nginx after every service, the seed job after
nginx; the driver (profile ``load``) and Jaeger (``tracing``) only when asked for.
Containers find each other through ``/etc/hosts`` (fixed addresses in the project's /24,
``SOCIALBENCH_SUBNET_PREFIX``, listed in ``extra_hosts``), not the engine's DNS, whose
lookups failed while containers came and went (docs/deploy.md).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Any

from socialbench import registry
from socialbench.deploy import GENERATE_COMMAND, stack_spec
from socialbench.deploy.yamltext import Inline, dump
from socialbench.registry import StoreInstance, StoreLayout

COMPOSE_FILES = {StoreLayout.SHARED: "docker-compose.yml",
                 StoreLayout.PER_SERVICE: "docker-compose.per-service.yml"}
COMPOSE_FILE = COMPOSE_FILES[StoreLayout.SHARED]
ENV_FILE = "services.env"
NGINX_FILE = "nginx.conf"
STANDINS_FILE = "standins.env"

# Local stand-ins for the official store and nginx images, with the same roles, ports,
# commands and healthchecks: built from Debian's packages (FerretDB for MongoDB) by
# scripts/build-images.sh from scripts/containers/NAME.Dockerfile, for a machine that
# cannot pull from Docker Hub. Compose takes them through SOCIALBENCH_NAME_IMAGE.
STANDIN_IMAGES = {
    **{store.name: f"localhost/socialbench/{store.name}:bookworm" for store in stack_spec.STORES},
    stack_spec.GATEWAY_HOST: f"localhost/socialbench/{stack_spec.GATEWAY_HOST}:bookworm",
}

IMAGE = "${SOCIALBENCH_IMAGE:-socialbench:dev}"
SUBNET_PREFIX_ENV = "SOCIALBENCH_SUBNET_PREFIX"
SUBNET_PREFIX = f"${{{SUBNET_PREFIX_ENV}:-10.213.0}}"  # the first three octets of the /24
FIRST_HOST = 10  # .1 is the network's gateway
BUILD = {"context": "..", "dockerfile": "Dockerfile", "target": "runtime"}
# A failed check counts only after start_period, and a passed one ends it: a service
# under QEMU on a busy host took over the 150 s of the retries to listen (issue 48).
HEALTH_TIMING = {"interval": "5s", "timeout": "3s", "retries": 30, "start_period": "5m"}
HEADER = """\
Generated from socialbench/registry.py by `{command}`:
edit the registry or socialbench/deploy/compose.py, not this file (tests compare them).
Stores: {layout} ({instances} instances).

    echo "SOCIALBENCH_JWT_SECRET=$(openssl rand -hex 32)" >> compose/.env   # once
    docker compose -f compose/{file} up -d       # build, start, seed
    docker compose -f compose/{file} --profile load run --rm driver
See docs/deploy.md for the variables (SOCIALBENCH_WORKERS, SOCIALBENCH_LOAD_RATE, ...).
"""
ENV_HEADER = f"""\
Neighbours' URLs, for every service container (the local launcher's names).
Generated from socialbench/registry.py by `{GENERATE_COMMAND}`."""
STANDINS_HEADER = f"""\
The local stand-ins for the official images (scripts/build-images.sh builds them):
    set -a; . compose/{STANDINS_FILE}; set +a    # then docker compose ... as usual
Generated from socialbench/deploy/compose.py by `{GENERATE_COMMAND}`."""


def image_env(name: str) -> str:
    """The variable that picks the image of compose service ``name``."""
    return f"SOCIALBENCH_{name.upper().replace('-', '_')}_IMAGE"


def _image(name: str, official: str) -> str:
    """The official image unless the caller names another (e.g. a local stand-in)."""
    return f"${{{image_env(name)}:-{official}}}"


def healthcheck(argv: Sequence[str]) -> dict[str, Any]:
    """A healthcheck running ``argv``: as one shell line (``CMD-SHELL``, ``/bin/sh -c``),
    quoted. Not ``CMD`` and its list: podman's Docker API (4.3) splits each of its items
    at spaces, which made ``bash -c SCRIPT`` into ``bash -c exec ...``, a check that
    passed at once, so every service counted as healthy before it listened (issue 48)."""
    return {"test": Inline(["CMD-SHELL", shlex.join(argv)]), **HEALTH_TIMING}


def healthy(*names: str) -> dict[str, dict[str, str]]:
    """``depends_on`` entries: each of ``names`` started and healthy."""
    return {name: {"condition": "service_healthy"} for name in names}


def socialbench_container(command: list[str], **extra: Any) -> dict[str, Any]:
    """A container of the socialbench image running ``command``."""
    return {"image": IMAGE, "build": dict(BUILD), "command": Inline(command), **extra}


def _store(instance: StoreInstance) -> dict[str, Any]:
    store = stack_spec.STORE_BY_NAME[instance.store.value]
    service: dict[str, Any] = {
        # Every instance of a store runs its store's image (one variable picks it).
        "image": _image(store.name, store.image),
        "command": Inline(store.command),
        "healthcheck": healthcheck(store.healthcheck),
        "restart": "unless-stopped",
    }
    if store.data_dir:
        service["volumes"] = [f"{instance.name}-data:{store.data_dir}"]
    return service


def _dependencies(spec: registry.ServiceSpec, layout: StoreLayout) -> list[str]:
    """Stores, then the neighbours the launcher starts first (user <-> social-graph is a cycle)."""
    started_before = [s.name for s in registry.start_order()]
    earlier = started_before[: started_before.index(spec.name)]
    stores = [registry.store_instance(spec, store, layout).name for store in spec.stores]
    return stores + [n for n in spec.neighbours if n in earlier]


# The login-token secret: the deployment's own, from the caller's environment or
# compose/.env; no default (a default in this public file would let anyone forge logins).
SECRET_VALUE = (f"${{{stack_spec.SECRET_ENV}:?set {stack_spec.SECRET_ENV} to a random secret of 32 "
                "characters or more in compose/.env (openssl rand -hex 32), see docs/deploy.md}")


def _service(spec: registry.ServiceSpec, layout: StoreLayout) -> dict[str, Any]:
    service = socialbench_container(
        stack_spec.service_command(spec, "${SOCIALBENCH_WORKERS:-1}"),
        env_file=[ENV_FILE],
        # From the caller's environment: tracing is off unless it sets the endpoint.
        environment={**stack_spec.store_env(spec, layout),
                     **{name: f"${{{name}:-{default}}}"
                        for name, default in stack_spec.TRACING_DEFAULTS.items()},
                     stack_spec.SECRET_ENV: SECRET_VALUE},
        healthcheck=healthcheck(stack_spec.http_healthcheck(spec.port)),
        restart="unless-stopped",
    )
    if dependencies := _dependencies(spec, layout):
        service["depends_on"] = healthy(*dependencies)
    return service


def _gateway() -> dict[str, Any]:
    return {
        "image": _image(stack_spec.GATEWAY_HOST, stack_spec.GATEWAY_IMAGE),
        "ports": [f"${{SOCIALBENCH_GATEWAY_PORT:-{stack_spec.GATEWAY_PORT}}}:"
                  f"{stack_spec.GATEWAY_PORT}",
                  f"${{SOCIALBENCH_MEDIA_PORT:-{stack_spec.MEDIA_PORT}}}:{stack_spec.MEDIA_PORT}"],
        "volumes": [f"./{NGINX_FILE}:/etc/nginx/nginx.conf:ro",
                    f"../gateway/pages:{stack_spec.PAGES_DIR}:ro"],
        "healthcheck": healthcheck(["wget", "-q", "-O", "/dev/null",
                                    f"http://127.0.0.1:{stack_spec.GATEWAY_PORT}/healthz"]),
        "depends_on": healthy(*(spec.name for spec in registry.SERVICES)),
        "restart": "unless-stopped",
    }


def _seed() -> dict[str, Any]:
    return socialbench_container(
        ["seed", "--url", stack_spec.GATEWAY_URL,
         "--graph", "${SOCIALBENCH_SEED_GRAPH:-synthetic}",
         # A service gone since nginx was healthy (restarted, slow under emulation).
         "--retry-for", "${SOCIALBENCH_SEED_RETRY_FOR:-10m}"],
        depends_on=healthy(stack_spec.GATEWAY_HOST),
        restart="no",
    )


def _driver() -> dict[str, Any]:
    return socialbench_container(
        ["load", stack_spec.GATEWAY_URL,
         "--workload", "${SOCIALBENCH_LOAD_WORKLOAD:-mixed}",
         "--rate", "${SOCIALBENCH_LOAD_RATE:-500}",
         "--duration", "${SOCIALBENCH_LOAD_DURATION:-60s}",
         "--warmup", "${SOCIALBENCH_LOAD_WARMUP:-10s}",
         "--json", "/results/compose-load.json"],
        profiles=["load"],
        # Results land in the checkout's results/, written as the caller's user.
        user="${SOCIALBENCH_UID:-10001}:${SOCIALBENCH_GID:-10001}",
        volumes=["../results:/results"],
        depends_on={stack_spec.GATEWAY_HOST: {"condition": "service_healthy"},
                    "seed": {"condition": "service_completed_successfully"}},
    )


def _jaeger() -> dict[str, Any]:
    return {
        "image": stack_spec.JAEGER_IMAGE,
        "profiles": ["tracing"],
        "environment": {"COLLECTOR_OTLP_ENABLED": "true"},
        "ports": ["16686:16686"],
    }


def component_kinds(layout: StoreLayout = StoreLayout.SHARED) -> dict[str, str]:
    """The kind of each long-running compose service, as the local stack names its parts."""
    kinds = {instance.name: "store" for instance in registry.store_instances(layout)}
    kinds.update({spec.name: "service" for spec in registry.SERVICES})
    kinds[stack_spec.GATEWAY_HOST] = "gateway"
    return kinds


def addresses(layout: StoreLayout = StoreLayout.SHARED) -> dict[str, str]:
    """The fixed address of each container others connect to: name -> address."""
    names = [*component_kinds(layout), "jaeger"]
    return {name: f"{SUBNET_PREFIX}.{FIRST_HOST + n}" for n, name in enumerate(names)}


def compose_file(layout: StoreLayout = StoreLayout.SHARED) -> dict[str, Any]:
    """The compose file of ``layout`` as data."""
    instances = registry.store_instances(layout)
    services: dict[str, Any] = {instance.name: _store(instance) for instance in instances}
    services.update({spec.name: _service(spec, layout) for spec in registry.start_order()})
    services[stack_spec.GATEWAY_HOST] = _gateway()
    services["seed"] = _seed()
    services["driver"] = _driver()
    services["jaeger"] = _jaeger()
    table = addresses(layout)
    hosts = [f"{name}:{address}" for name, address in table.items()]
    for name, service in services.items():
        if name in table:
            service["networks"] = {"default": {"ipv4_address": table[name]}}
        service["extra_hosts"] = list(hosts)
    volumes: dict[str, dict[str, str]] = {
        f"{instance.name}-data": {} for instance in instances
        if stack_spec.STORE_BY_NAME[instance.store.value].data_dir
    }
    network = {"ipam": {"config": [{"subnet": f"{SUBNET_PREFIX}.0/24"}]}}
    return {"services": services, "networks": {"default": network}, "volumes": volumes}


def render_compose(layout: StoreLayout = StoreLayout.SHARED) -> str:
    header = HEADER.format(command=GENERATE_COMMAND, layout=layout.value,
                           instances=len(registry.store_instances(layout)),
                           file=COMPOSE_FILES[layout])
    return dump(compose_file(layout), header)


def _env_text(header: str, values: dict[str, str]) -> str:
    lines = [f"# {line}" for line in header.splitlines()]
    lines += [f"{name}={value}" for name, value in values.items()]
    return "\n".join(lines) + "\n"


def render_env() -> str:
    return _env_text(ENV_HEADER, stack_spec.neighbour_env())


def render_standins() -> str:
    return _env_text(STANDINS_HEADER,
                     {image_env(name): image for name, image in STANDIN_IMAGES.items()})


def files() -> dict[str, str]:
    """Every generated file of ``compose/``: name -> text."""
    return {
        **{name: render_compose(layout) for layout, name in COMPOSE_FILES.items()},
        ENV_FILE: render_env(),
        NGINX_FILE: stack_spec.render_gateway(),
        STANDINS_FILE: render_standins(),
    }
