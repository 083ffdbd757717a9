"""compose/ against the registry, and Debian's docker-compose on the file."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from socialbench import registry
from socialbench.deploy import compose
from socialbench.deploy import stack_spec as stack
from socialbench.registry import StoreLayout
from socialbench.stack.launcher import StackConfig
from socialbench.stack.servers import FERRETDB_GOGC, FERRETDB_SQLITE_PRAGMAS

COMPOSE_FILE = stack.COMPOSE_DIR / compose.COMPOSE_FILE


@pytest.fixture(scope="module")
def services() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(COMPOSE_FILE.read_text())
    return dict(data["services"])


def env_file() -> dict[str, str]:
    lines = (stack.COMPOSE_DIR / compose.ENV_FILE).read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


SECRET = "s" * 64


def docker_compose() -> str:
    binary = shutil.which("docker-compose")
    if binary is None:
        pytest.skip("docker-compose is not installed (scripts/setup.sh installs Debian's)")
    return binary


def compose_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != stack.SECRET_ENV}
    return {**env, **extra}


def test_docker_compose_accepts_the_file() -> None:
    binary = docker_compose()
    env = compose_env(**{stack.SECRET_ENV: SECRET})
    out = subprocess.run([binary, "-f", str(COMPOSE_FILE), "config", "-q"], env=env,
                         capture_output=True, text=True, check=False, timeout=60)
    assert out.returncode == 0, out.stderr
    # The resolved file: the environment file is read, variables get their defaults.
    out = subprocess.run([binary, "-f", str(COMPOSE_FILE), "config"], env=env,
                         capture_output=True, text=True, check=True, timeout=60)
    resolved = yaml.safe_load(out.stdout)["services"]
    post_storage = registry.get("post-storage")
    env = resolved["compose-post"]["environment"]
    assert env[post_storage.url_env] == stack.service_url(post_storage)
    assert env[stack.SECRET_ENV] == SECRET
    assert resolved["compose-post"]["image"] == "socialbench:dev"
    assert resolved["compose-post"]["command"][-1] == "1"


def test_docker_compose_accepts_the_per_service_file() -> None:
    path = stack.COMPOSE_DIR / compose.COMPOSE_FILES[StoreLayout.PER_SERVICE]
    out = subprocess.run([docker_compose(), "-f", str(path), "config"],
                         env=compose_env(**{stack.SECRET_ENV: SECRET}), capture_output=True,
                         text=True, check=False, timeout=60)
    assert out.returncode == 0, out.stderr
    resolved = yaml.safe_load(out.stdout)["services"]
    env = resolved["post-storage"]["environment"]
    assert env["SOCIALBENCH_MONGODB_URL"] == "mongodb://post-storage-mongodb:27017"
    assert env[registry.get("user").url_env] == stack.service_url(registry.get("user"))


def test_compose_refuses_to_start_without_a_login_secret() -> None:
    out = subprocess.run([docker_compose(), "-f", str(COMPOSE_FILE), "config", "-q"],
                         env=compose_env(), capture_output=True, text=True, check=False,
                         timeout=60)
    assert out.returncode != 0
    assert f"set {stack.SECRET_ENV} to a random secret" in out.stderr
    assert "docs/deploy.md" in out.stderr


def test_every_service_gets_the_login_secret_and_no_default(services: dict[str, Any]) -> None:
    for spec in registry.SERVICES:
        value = services[spec.name]["environment"][stack.SECRET_ENV]
        assert value == compose.SECRET_VALUE
        assert value.startswith(f"${{{stack.SECRET_ENV}:?"), spec.name
    # Clients of the front end need none.
    for name in ("seed", "driver"):
        assert stack.SECRET_ENV not in yaml.safe_dump(services[name])
    assert stack.SECRET_ENV not in env_file()


def test_redis_keeps_an_append_only_file_on_a_volume(services: dict[str, Any]) -> None:
    redis = services["redis"]
    command = redis["command"]
    assert command[command.index("--appendonly") + 1] == "yes"
    assert command[command.index("--appendfsync") + 1] == "everysec"
    assert command[command.index("--dir") + 1] == "/data"
    assert redis["volumes"] == ["redis-data:/data"]
    compose_volumes = yaml.safe_load(COMPOSE_FILE.read_text())["volumes"]
    assert "redis-data" in compose_volumes


def test_every_service_runs_from_the_image_on_its_registry_port(services: dict[str, Any]) -> None:
    for spec in registry.SERVICES:
        service = services[spec.name]
        command = service["command"]
        assert command[:2] == ["serve", spec.name]
        assert command[command.index("--port") + 1] == str(spec.port)
        assert service["env_file"] == [compose.ENV_FILE]
        assert str(spec.port) in " ".join(service["healthcheck"]["test"])
        assert service["image"] == compose.IMAGE


@pytest.mark.parametrize("layout", list(StoreLayout))
def test_services_get_the_launchers_environment_names(layout: StoreLayout) -> None:
    data = yaml.safe_load((stack.COMPOSE_DIR / compose.COMPOSE_FILES[layout]).read_text())
    services = data["services"]
    config = StackConfig(store_layout=layout.value)
    for spec in registry.SERVICES:
        launcher_env = config.service_env(spec)
        environment = services[spec.name]["environment"]
        env = env_file() | {name: value for name, value in environment.items()
                            if name in launcher_env}
        assert set(env) == set(launcher_env) - {"SOCIALBENCH_NEIGHBOUR_HOST"}, spec.name
        for value in env.values():
            host = re.sub(r"^\w+://", "", value).split(":")[0]
            assert host in services, f"{value} names no compose service"
        # The same instance as the launcher's: the same store server, by name and port.
        for store in spec.stores:
            instance = registry.store_instance(spec, store, layout)
            name = stack.STORE_BY_NAME[store.value].env_name
            assert env[name] == stack.store_address(instance)
            assert launcher_env[name].rsplit(":", 1)[-1].split("/")[0] == str(
                config.instance_ports(instance)[0])


def test_the_per_service_layout_runs_the_originals_instances() -> None:
    data = yaml.safe_load(
        (stack.COMPOSE_DIR / compose.COMPOSE_FILES[StoreLayout.PER_SERVICE]).read_text())
    stores = {name for name, service in data["services"].items()
              if "SOCIALBENCH_IMAGE" not in service["image"] and name not in ("nginx", "jaeger")}
    assert stores == {
        "url-shorten-mongodb", "user-mongodb", "media-mongodb", "social-graph-mongodb",
        "post-storage-mongodb", "user-timeline-mongodb",
        "social-graph-redis", "user-timeline-redis", "home-timeline-redis",
        "user-memcached", "post-storage-memcached"}
    # user-mention reads user's collection and cache, as the original's.
    mention = data["services"]["user-mention"]["environment"]
    assert mention["SOCIALBENCH_MONGODB_URL"] == "mongodb://user-mongodb:27017"
    assert mention["SOCIALBENCH_MEMCACHED_ADDRESS"] == "user-memcached:11211"
    assert set(data["volumes"]) == {f"{name}-data" for name in stores
                                    if not name.endswith("memcached")}


def test_tracing_is_off_unless_the_caller_sets_an_endpoint(services: dict[str, Any]) -> None:
    for spec in registry.SERVICES:
        environment = services[spec.name]["environment"]
        assert environment == stack.store_env(spec, StoreLayout.SHARED) | {
            "SOCIALBENCH_TRACING_ENDPOINT": "${SOCIALBENCH_TRACING_ENDPOINT:-}",
            "SOCIALBENCH_TRACING_SAMPLE_RATIO": "${SOCIALBENCH_TRACING_SAMPLE_RATIO:-0.01}",
            stack.SECRET_ENV: compose.SECRET_VALUE,
        }
    assert services["jaeger"]["environment"]["COLLECTOR_OTLP_ENABLED"] == "true"


@pytest.mark.parametrize("layout", list(StoreLayout))
def test_start_order_follows_stores_and_neighbours(layout: StoreLayout) -> None:
    data = yaml.safe_load((stack.COMPOSE_DIR / compose.COMPOSE_FILES[layout]).read_text())
    services = data["services"]
    for spec in registry.SERVICES:
        depends_on = services[spec.name].get("depends_on", {})
        assert {registry.store_instance(spec, store, layout).name
                for store in spec.stores} <= set(depends_on)
        assert all(dep in services for dep in depends_on)
        assert all(c == {"condition": "service_healthy"} for c in depends_on.values())
    nginx = services[stack.GATEWAY_HOST]["depends_on"]
    assert set(nginx) == {spec.name for spec in registry.SERVICES}
    assert services["seed"]["depends_on"] == {stack.GATEWAY_HOST: {"condition": "service_healthy"}}
    assert services["driver"]["depends_on"]["seed"] == {
        "condition": "service_completed_successfully"}


def test_containers_find_each_other_by_fixed_addresses_not_dns() -> None:
    binary = docker_compose()
    env = compose_env(**{stack.SECRET_ENV: SECRET, compose.SUBNET_PREFIX_ENV: "10.99.7"})
    out = subprocess.run([binary, "-f", str(COMPOSE_FILE), "config"], env=env,
                         capture_output=True, text=True, check=True, timeout=60)
    resolved = yaml.safe_load(out.stdout)
    assert resolved["networks"]["default"]["ipam"]["config"] == [{"subnet": "10.99.7.0/24"}]
    services = resolved["services"]
    fixed = {name: service["networks"]["default"]["ipv4_address"]
             for name, service in services.items() if "networks" in service}
    # Every container another one connects to, each its own address in the subnet.
    assert set(fixed) == {*compose.component_kinds(), "jaeger"}
    assert len(set(fixed.values())) == len(fixed)
    assert all(a.startswith("10.99.7.") and 1 < int(a.rsplit(".", 1)[1]) < 255
               for a in fixed.values())
    table = sorted(f"{name}:{address}" for name, address in fixed.items())
    for name, service in services.items():  # the seed job and the driver too
        assert sorted(service["extra_hosts"]) == table, name


def test_every_long_running_container_has_a_healthcheck(services: dict[str, Any]) -> None:
    for name, service in services.items():
        if name in ("seed", "driver", "jaeger"):
            continue
        # One shell line (tests/deploy/test_healthchecks.py runs each).
        assert service["healthcheck"]["test"][0] == "CMD-SHELL", name


def test_third_party_images_are_pinned_official_images(services: dict[str, Any]) -> None:
    for name, image in stack.PINNED_IMAGES.items():
        if name in compose.STANDIN_IMAGES:  # the default of its variable
            assert services[name]["image"] == f"${{{compose.image_env(name)}:-{image}}}"
        else:
            assert services[name]["image"] == image
        assert re.fullmatch(r"[a-z/-]+:\d+\.\d+\.\d+(-alpine)?", image), image


def standins() -> dict[str, str]:
    lines = (stack.COMPOSE_DIR / compose.STANDINS_FILE).read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


def test_every_store_and_nginx_has_a_local_standin_chosen_by_a_variable() -> None:
    assert set(compose.STANDIN_IMAGES) == {*stack.STORE_BY_NAME, stack.GATEWAY_HOST}
    assert standins() == {compose.image_env(name): image
                          for name, image in compose.STANDIN_IMAGES.items()}
    containers = stack.REPO_ROOT / "scripts" / "containers"
    for name, image in compose.STANDIN_IMAGES.items():
        assert image.startswith("localhost/"), image  # never pulled from a registry
        dockerfile = (containers / f"{name}.Dockerfile").read_text()
        port = stack.STORE_BY_NAME[name].port if name in stack.STORE_BY_NAME else 80
        assert re.search(rf"^EXPOSE {port}$", dockerfile, re.M), name
        assert re.search(r"^FROM \$\{DEBIAN_IMAGE\}$", dockerfile, re.M), name


def test_docker_compose_resolves_the_standins_and_keeps_the_commands() -> None:
    env = compose_env(**{stack.SECRET_ENV: SECRET}, **standins())
    out = subprocess.run([docker_compose(), "-f", str(COMPOSE_FILE), "config"], env=env,
                         capture_output=True, text=True, check=True, timeout=60)
    resolved = yaml.safe_load(out.stdout)["services"]
    official = yaml.safe_load(subprocess.run(
        [docker_compose(), "-f", str(COMPOSE_FILE), "config"],
        env=compose_env(**{stack.SECRET_ENV: SECRET}), capture_output=True, text=True,
        check=True, timeout=60).stdout)["services"]
    for name, image in compose.STANDIN_IMAGES.items():
        assert resolved[name]["image"] == image
        assert official[name]["image"] == stack.PINNED_IMAGES[name]
        # Same role: the command, healthcheck, ports and volumes do not change.
        for key in ("command", "healthcheck", "ports", "volumes"):
            assert resolved[name].get(key) == official[name].get(key), (name, key)


def test_the_ferretdb_standin_takes_mongods_command(tmp_path: Path) -> None:
    """scripts/containers/mongod: the compose command as FerretDB's flags."""
    fake = tmp_path / "ferretdb"
    fake.write_text('#!/bin/sh\nprintf "%s\\n" "$@" "GOGC=$GOGC"\n')
    fake.chmod(0o755)
    mongod = str(stack.REPO_ROOT / "scripts" / "containers" / "mongod")
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    command = stack.STORE_BY_NAME["mongodb"].command
    out = subprocess.run([mongod, *command[1:]], env=env, capture_output=True, text=True,
                         check=True, timeout=10)
    flags = out.stdout.splitlines()
    assert "--listen-addr=0.0.0.0:27017" in flags
    # The local stack's SQLite durability (synchronous=NORMAL) in the stand-in too.
    assert "--handler=sqlite" in flags
    assert f"--sqlite-url=file:/data/db/?{FERRETDB_SQLITE_PRAGMAS}" in flags
    assert "--log-level=warn" in flags  # --quiet
    assert f"GOGC={FERRETDB_GOGC}" in flags
    refused = subprocess.run([mongod, "--replSet", "rs0"], env=env, capture_output=True,
                             text=True, check=False, timeout=10)
    assert refused.returncode == 2 and "unsupported option --replSet" in refused.stderr


def test_optional_parts_are_under_profiles(services: dict[str, Any]) -> None:
    assert services["driver"]["profiles"] == ["load"]
    assert services["jaeger"]["profiles"] == ["tracing"]
    assert services["driver"]["command"][:2] == ["load", stack.GATEWAY_URL]
    assert "--json" in services["driver"]["command"]
    assert services["seed"]["restart"] == "no"


def test_nginx_serves_the_rendered_config_and_the_pages(services: dict[str, Any]) -> None:
    volumes = services[stack.GATEWAY_HOST]["volumes"]
    assert f"./{compose.NGINX_FILE}:/etc/nginx/nginx.conf:ro" in volumes
    source = volumes[1].split(":")[0]
    assert (stack.COMPOSE_DIR / source / "index.html").is_file()
    assert (stack.COMPOSE_DIR / compose.NGINX_FILE).read_text() == stack.render_gateway()
