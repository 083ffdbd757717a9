"""The chart against the registry: `helm lint`, and the manifests of `helm template` parsed."""

from __future__ import annotations

import base64
import dataclasses
import re
import subprocess
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from socialbench import registry
from socialbench.deploy import stack_spec as stack
from socialbench.gateway import nginx
from socialbench.registry import Store, StoreLayout
from socialbench.runtime.redis_client import parse_redis_urls
from socialbench.runtime.settings import Settings
from socialbench.stack.launcher import StackConfig

Manifests = list[dict[str, Any]]
Render = Callable[..., Manifests]
ALL_ON = ("--set", "load.enabled=true", "--set", "locust.enabled=true")
WORKLOADS = ("Deployment", "StatefulSet", "Job")


def by_kind(manifests: Manifests, kind: str) -> dict[str, dict[str, Any]]:
    return {m["metadata"]["name"]: m for m in manifests if m["kind"] == kind}


def pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = workload["spec"]["template"]["spec"]
    return spec


def containers(workload: dict[str, Any]) -> list[dict[str, Any]]:
    spec = pod_spec(workload)
    return [*spec.get("initContainers", []), *spec["containers"]]


def env_of(container: dict[str, Any]) -> dict[str, str]:
    """The container's plain variables (not those from a Secret)."""
    return {item["name"]: item["value"] for item in container.get("env", []) if "value" in item}


def secret_refs(container: dict[str, Any]) -> dict[str, dict[str, str]]:
    """The container's variables from a Secret: name -> its secretKeyRef."""
    return {item["name"]: item["valueFrom"]["secretKeyRef"] for item in container.get("env", [])
            if "valueFrom" in item}


def template(helm: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [helm, "template", "sn", str(stack.CHART_DIR), "--kube-version", "1.30.0", *args],
        capture_output=True, text=True, check=False, timeout=60,
    )


def test_helm_lint_passes(helm: str) -> None:
    for extra in ((), ALL_ON):
        out = subprocess.run(
            [helm, "lint", "--strict", str(stack.CHART_DIR), "--kube-version", "1.30.0", *extra],
            capture_output=True, text=True, check=False, timeout=60,
        )
        assert out.returncode == 0, out.stdout + out.stderr


def test_every_registry_service_is_a_deployment_and_a_service(render: Render) -> None:
    manifests = render()
    deployments, services = by_kind(manifests, "Deployment"), by_kind(manifests, "Service")
    for spec in registry.SERVICES:
        container = pod_spec(deployments[spec.name])["containers"][0]
        assert container["args"][:2] == ["serve", spec.name]
        assert container["args"][container["args"].index("--port") + 1] == str(spec.port)
        assert [p["containerPort"] for p in container["ports"]] == [spec.port]
        assert [p["port"] for p in services[spec.name]["spec"]["ports"]] == [spec.port]
        selector = services[spec.name]["spec"]["selector"]
        labels = deployments[spec.name]["spec"]["template"]["metadata"]["labels"]
        assert selector.items() <= labels.items()


@pytest.mark.parametrize("layout", list(StoreLayout))
def test_services_get_the_launchers_environment_names(render: Render,
                                                      layout: StoreLayout) -> None:
    config = StackConfig(store_layout=layout.value)
    manifests = render("--set", f"stores.layout={layout.value}")
    deployments = by_kind(manifests, "Deployment")
    store_services = set(by_kind(manifests, "StatefulSet"))
    for spec in registry.SERVICES:
        env = env_of(pod_spec(deployments[spec.name])["containers"][0])
        assert set(env) == set(config.service_env(spec)) - {"SOCIALBENCH_NEIGHBOUR_HOST"}
        assert env == stack.neighbour_env() | stack.store_env(spec, layout)
        for neighbour in map(registry.get, spec.neighbours):
            assert env[neighbour.url_env] == stack.service_url(neighbour)
        for store in spec.stores:
            assert registry.store_instance(spec, store, layout).name in store_services


def test_the_default_layout_runs_an_instance_per_service_as_the_original(
    render: Render,
) -> None:
    manifests = render()
    statefulsets = by_kind(manifests, "StatefulSet")
    instances = registry.store_instances(StoreLayout.PER_SERVICE)
    assert set(statefulsets) == {instance.name for instance in instances}
    assert set(by_kind(manifests, "Service")) >= set(statefulsets)
    for instance in instances:
        store = stack.STORE_BY_NAME[instance.store.value]
        container = pod_spec(statefulsets[instance.name])["containers"][0]
        assert container["image"] == store.image == stack.PINNED_IMAGES[store.name]
        assert container["args"] == list(store.command)
        # Port names are at most 15 characters: the store's, not the instance's.
        assert [port["name"] for port in container["ports"]] == [instance.store.value]


def test_an_unknown_layout_is_refused(helm: str) -> None:
    out = template(helm, "--set", "stores.layout=sharded")
    assert out.returncode != 0
    assert "stores.layout" in out.stderr and "per-service" in out.stderr


@pytest.mark.parametrize("extra", [(), ALL_ON], ids=["default", "load-and-locust"])
def test_every_workload_has_an_image_resources_and_probes(render: Render,
                                                          extra: tuple[str, ...]) -> None:
    manifests = render(*extra)
    workloads = [m for m in manifests if m["kind"] in WORKLOADS]
    assert workloads
    for workload in workloads:
        name = f"{workload['kind']}/{workload['metadata']['name']}"
        for container in containers(workload):
            assert re.fullmatch(r"[\w./-]+:[\w.-]+", container["image"]), name
            assert container["resources"]["requests"], name
            assert container["resources"]["limits"]["memory"], name
        if workload["kind"] != "Job":  # long-running: probed
            for container in pod_spec(workload)["containers"]:
                assert "readinessProbe" in container, name
                assert "livenessProbe" in container, name


@pytest.mark.parametrize("extra", [(), ALL_ON], ids=["default", "load-and-locust"])
def test_every_address_in_the_stack_is_a_service(render: Render, extra: tuple[str, ...]) -> None:
    """Environment URLs, nginx upstreams and command-line URLs all name a Service and its port."""
    manifests = render(*extra)
    ports = {name: {p["port"] for p in svc["spec"]["ports"]}
             for name, svc in by_kind(manifests, "Service").items()}
    addresses: list[str] = []
    for workload in (m for m in manifests if m["kind"] in WORKLOADS):
        for container in containers(workload):
            addresses += env_of(container).values()
            addresses += [arg for arg in container.get("command", []) + container.get("args", [])
                          if "://" in arg]
    config = by_kind(manifests, "ConfigMap")["nginx-config"]["data"]["nginx.conf"]
    addresses += [f"tcp://{server}" for server in re.findall(r"^\s*server (\S+);", config, re.M)]
    assert len(addresses) > len(registry.SERVICES) * len(registry.SERVICES)
    for address in addresses:
        parts = urlsplit(address if "://" in address else f"tcp://{address}")
        assert parts.hostname in ports, address
        assert parts.port in ports[parts.hostname], address


def test_nginx_config_map_is_the_rendered_template(render: Render) -> None:
    config_map = by_kind(render(), "ConfigMap")["nginx-config"]
    assert config_map["data"]["nginx.conf"] == stack.render_gateway()
    nginx = pod_spec(by_kind(render(), "Deployment")["nginx"])
    assert nginx["containers"][0]["image"] == stack.GATEWAY_IMAGE
    mounts = {m["mountPath"] for m in nginx["containers"][0]["volumeMounts"]}
    assert {"/etc/nginx/nginx.conf", str(stack.PAGES_DIR)} <= mounts
    # The pages come from the image, not from a git clone.
    init = nginx["initContainers"][0]
    assert "/opt/socialbench/gateway/pages" in " ".join(init["command"])
    assert not re.search(r"\bgit\b", yaml.safe_dump(render(*ALL_ON)))


def test_nginx_runs_the_worker_processes_values_give(render: Render, helm: str) -> None:
    manifests = render("--set", "gateway.workerProcesses=15")
    config = by_kind(manifests, "ConfigMap")["nginx-config"]["data"]["nginx.conf"]
    assert config == nginx.render(dataclasses.replace(stack.gateway_config(),
                                                      worker_processes="15"))
    annotation = "checksum/config"
    rolled = by_kind(manifests, "Deployment")["nginx"]["spec"]["template"]["metadata"]
    default = by_kind(render(), "Deployment")["nginx"]["spec"]["template"]["metadata"]
    assert rolled["annotations"][annotation] != default["annotations"][annotation]
    out = template(helm, "--set", "gateway.workerProcesses=0")
    assert out.returncode != 0
    assert 'gateway.workerProcesses: "0" is not auto or a count of 1 or more' in out.stderr


def test_the_shared_layout_is_a_statefulset_per_store_on_pinned_images(render: Render) -> None:
    statefulsets = by_kind(render("--set", "stores.layout=shared"), "StatefulSet")
    assert set(statefulsets) == {store.name for store in stack.STORES}
    for store in stack.STORES:
        container = pod_spec(statefulsets[store.name])["containers"][0]
        assert container["image"] == store.image == stack.PINNED_IMAGES[store.name]
        assert container["args"] == list(store.command)
        assert container["readinessProbe"]["exec"]["command"] == list(store.healthcheck)


def test_an_external_store_replaces_its_statefulset(render: Render) -> None:
    url = "mongodb://mongo.example.net:27017"
    manifests = render("--set", "stores.mongodb.enabled=false",
                       "--set", f"stores.mongodb.external={url}")
    assert "mongodb" not in by_kind(manifests, "StatefulSet")
    assert "mongodb" not in by_kind(manifests, "Service")
    for spec in registry.SERVICES:
        env = env_of(pod_spec(by_kind(manifests, "Deployment")[spec.name])["containers"][0])
        assert env.get("SOCIALBENCH_MONGODB_URL") == (url if Store.MONGODB in spec.stores
                                                      else None)


def test_pinning_the_architecture_reaches_every_pod(render: Render) -> None:
    manifests = render(*ALL_ON,
                       "--set-string", r"scheduling.nodeSelector.kubernetes\.io/arch=arm64",
                       "--set-string", r"services.text.nodeSelector.disktype=ssd")
    workloads = [m for m in manifests if m["kind"] in WORKLOADS]
    for workload in workloads:
        selector = pod_spec(workload).get("nodeSelector", {})
        assert selector.get("kubernetes.io/arch") == "arm64", workload["metadata"]["name"]
    text = pod_spec(by_kind(manifests, "Deployment")["text"])
    assert text["nodeSelector"] == {"kubernetes.io/arch": "arm64", "disktype": "ssd"}


def test_per_service_values_override_the_defaults(render: Render) -> None:
    manifests = render("--set", "services.compose-post.replicas=3",
                       "--set", "services.compose-post.workers=4",
                       "--set", "services.compose-post.resources.requests.cpu=2",
                       "--set", "services.compose-post.env.SOCIALBENCH_RPC_POOL_SIZE=512")
    deployment = by_kind(manifests, "Deployment")["compose-post"]
    container = pod_spec(deployment)["containers"][0]
    assert deployment["spec"]["replicas"] == 3
    assert container["args"][-2:] == ["--workers", "4"]
    defaults = yaml.safe_load((stack.CHART_DIR / "values.yaml").read_text())["serviceDefaults"]
    memory = defaults["resources"]["requests"]["memory"]
    assert container["resources"]["requests"] == {"cpu": 2, "memory": memory}
    assert env_of(container)["SOCIALBENCH_RPC_POOL_SIZE"] == "512"
    assert pod_spec(by_kind(manifests, "Deployment")["text"])["containers"][0]["args"][-1] == "1"


def test_tracing_reaches_every_service_only_when_an_endpoint_is_set(render: Render) -> None:
    endpoint = "http://jaeger-collector:4318/v1/traces"
    traced = by_kind(render("--set", f"tracing.endpoint={endpoint}",
                            "--set", "tracing.sampleRatio=0.25"), "Deployment")
    untraced = by_kind(render(), "Deployment")
    for spec in registry.SERVICES:
        env = env_of(pod_spec(traced[spec.name])["containers"][0])
        assert env["SOCIALBENCH_TRACING_ENDPOINT"] == endpoint, spec.name
        assert float(env["SOCIALBENCH_TRACING_SAMPLE_RATIO"]) == 0.25
        assert not set(stack.TRACING_DEFAULTS) & set(
            env_of(pod_spec(untraced[spec.name])["containers"][0])
        )


def test_unknown_service_in_values_is_refused(helm: str) -> None:
    out = subprocess.run(
        [helm, "template", "sn", str(stack.CHART_DIR), "--kube-version", "1.30.0",
         "--set", "services.compose-posts.replicas=2"],
        capture_output=True, text=True, check=False, timeout=60,
    )
    assert out.returncode != 0
    assert "services.compose-posts: no such service" in out.stderr


def test_load_job_runs_n_indexed_drivers_at_r_over_n(render: Render) -> None:
    manifests = render("--set", "load.enabled=true", "--set", "load.drivers=4",
                       "--set", "load.rate=1000000", "--set", "load.run=r7")
    jobs = by_kind(manifests, "Job")
    drivers = jobs["load-r7"]
    assert drivers["spec"]["completionMode"] == "Indexed"
    assert drivers["spec"]["completions"] == drivers["spec"]["parallelism"] == 4
    driver = pod_spec(drivers)["containers"][0]
    assert "command" not in driver  # the image's entry point: socialbench
    command = driver["args"]
    assert command[:2] == ["loadjob", "drive"]
    assert command[command.index("--drivers") + 1] == "4"
    assert command[command.index("--rate") + 1] == "1000000"  # the total; each sends R/N
    assert command[command.index("--") + 1] == stack.GATEWAY_URL
    collector = pod_spec(jobs["load-r7-collector"])["containers"][0]["args"]
    assert collector[:2] == ["loadjob", "collect"]
    assert collector[collector.index("--drivers") + 1] == "4"
    assert f"http://load-r7-collector:{8000}" in command
    assert "load-r7-collector" in by_kind(manifests, "Service")


def test_seed_job_waits_for_every_service_then_seeds_through_nginx(render: Render) -> None:
    jobs = by_kind(render(), "Job")
    (seed,) = (job for name, job in jobs.items() if name.startswith("seed-"))
    init = pod_spec(seed)["initContainers"][0]
    assert "command" not in init  # the image's entry point: socialbench
    wait = init["args"]
    assert wait[:2] == ["probe", "--wait"]
    for spec in registry.SERVICES:
        assert f"http://{spec.name}:{spec.port}/healthz" in wait
    args = pod_spec(seed)["containers"][0]["args"]
    assert args[:3] == ["seed", "--url", stack.GATEWAY_URL]
    # nginx not yet Ready behind its Service: each item sent again as long as the wait.
    assert args[args.index("--retry-for") + 1] == "600s"
    # Changing what it runs renames it, so `helm upgrade` never patches a Job.
    other = by_kind(render("--set", "seed.graph=synthetic:100"), "Job")
    assert seed["metadata"]["name"] not in other


def test_a_deleted_pod_drains_then_has_its_shutdown_before_it_is_killed(render: Render
                                                                       ) -> None:
    for drain in (10, 45):
        deployments = by_kind(render("--set", f"drainSeconds={drain}"), "Deployment")
        for name in [spec.name for spec in registry.SERVICES] + [stack.GATEWAY_HOST]:
            spec = pod_spec(deployments[name])
            (container,) = (c for c in spec["containers"] if c["name"] == name)
            assert container["lifecycle"]["preStop"]["exec"]["command"] == ["sleep", str(drain)]
            # Kubernetes' default 30 s would kill a 45 s drain before its end.
            assert spec["terminationGracePeriodSeconds"] == drain + 30, name


def test_locust_is_optional(render: Render) -> None:
    assert "locust-master" not in by_kind(render(), "Deployment")
    deployments = by_kind(render(*ALL_ON), "Deployment")
    master = pod_spec(deployments["locust-master"])["containers"][0]["command"]
    assert "--master" in master and stack.GATEWAY_URL in master
    assert deployments["locust-worker"]["spec"]["replicas"] == 2
    worker = pod_spec(deployments["locust-worker"])["containers"][0]
    for probe in ("readinessProbe", "livenessProbe"):
        assert worker[probe]["exec"]["command"] == [
            "socialbench", "probe", "tcp://locust-master:5557"]


@pytest.mark.parametrize("extra", [(), ALL_ON], ids=["default", "load-and-locust"])
def test_every_socialbench_container_runs_a_command_of_the_cli(render: Render,
                                                               extra: tuple[str, ...]) -> None:
    """The image's entry point is `socialbench`: each container's args name one of its
    commands, and the exec probes run that command too."""
    import typer.main

    from socialbench.cli import app

    cli = typer.main.get_command(app)
    commands = cli.commands  # type: ignore[attr-defined]
    image = by_kind(render(), "Deployment")[registry.SERVICES[0].name]
    socialbench_image = pod_spec(image)["containers"][0]["image"]
    seen = set()
    for workload in (m for m in render(*extra) if m["kind"] in WORKLOADS):
        for container in containers(workload):
            if container["image"] != socialbench_image or "command" in container:
                continue
            args = container["args"]
            assert args[0] in commands, (workload["metadata"]["name"], args)
            group = commands[args[0]]
            if hasattr(group, "commands"):
                assert args[1] in group.commands, args
            seen.add(args[0])
    assert {"serve", "seed", "probe"} <= seen
    if extra:
        assert "loadjob" in seen


def test_every_service_gets_the_login_secret_from_the_charts_secret(render: Render) -> None:
    manifests = render()
    [secret] = by_kind(manifests, "Secret").values()
    assert secret["metadata"]["name"] == "sn-login-secret"
    value = base64.b64decode(secret["data"]["jwt-secret"]).decode()
    assert re.fullmatch(r"[A-Za-z0-9]{64}", value)
    assert value != "socialbench-login-token-secret-change-me"
    for deployment in by_kind(manifests, "Deployment").values():
        for container in pod_spec(deployment)["containers"]:
            refs = secret_refs(container)
            if container.get("args", [""])[0] == "serve":
                assert refs == {stack.SECRET_ENV: {"name": "sn-login-secret",
                                                   "key": "jwt-secret"}}
            else:
                assert stack.SECRET_ENV not in refs


def test_each_install_gets_its_own_random_secret_and_upgrades_keep_it(helm: str) -> None:
    values = []
    for _ in range(2):
        out = template(helm, "--show-only", "templates/secret.yaml")
        assert out.returncode == 0, out.stderr
        values.append(yaml.safe_load(out.stdout)["data"]["jwt-secret"])
    assert values[0] != values[1]
    # An upgrade reads the release's Secret back instead of making a new one.
    text = (stack.CHART_DIR / "templates" / "secret.yaml").read_text()
    assert 'lookup "v1" "Secret" .Release.Namespace $name' in text


def test_a_given_or_existing_login_secret_is_used(helm: str) -> None:
    given = "g" * 40
    out = template(helm, "--set", f"loginSecret.value={given}")
    assert out.returncode == 0, out.stderr
    [secret] = [d for d in yaml.safe_load_all(out.stdout) if d and d["kind"] == "Secret"]
    assert base64.b64decode(secret["data"]["jwt-secret"]).decode() == given
    short = template(helm, "--set", "loginSecret.value=short")
    assert short.returncode != 0 and "32 characters or more" in short.stderr
    mine = template(helm, "--set", "loginSecret.existingSecret=mine",
                    "--set", "loginSecret.existingSecretKey=token-key")
    assert mine.returncode == 0, mine.stderr
    manifests = [d for d in yaml.safe_load_all(mine.stdout) if d]
    assert not by_kind(manifests, "Secret")
    container = pod_spec(by_kind(manifests, "Deployment")["user"])["containers"][0]
    assert secret_refs(container)[stack.SECRET_ENV] == {"name": "mine", "key": "token-key"}


def test_redis_keeps_an_append_only_file_in_data(render: Render) -> None:
    redis = by_kind(render(), "StatefulSet")["home-timeline-redis"]
    container = pod_spec(redis)["containers"][0]
    args = container["args"]
    assert args[args.index("--appendonly") + 1] == "yes"
    assert args[args.index("--appendfsync") + 1] == "everysec"
    assert args[args.index("--dir") + 1] == "/data"
    assert container["volumeMounts"] == [{"name": "data", "mountPath": "/data"}]
    # By default on a claimed volume (of the default StorageClass), as every MongoDB's.
    [claim] = redis["spec"]["volumeClaimTemplates"]
    assert claim["metadata"]["name"] == "data" and "storageClassName" not in claim["spec"]
    assert "volumes" not in pod_spec(redis)
    emptied = by_kind(render("--set", "stores.redis.persistence.enabled=false"),
                      "StatefulSet")["home-timeline-redis"]
    assert pod_spec(emptied)["volumes"] == [{"name": "data", "emptyDir": {}}]
    assert "volumeClaimTemplates" not in emptied["spec"]


def test_every_mongodb_and_redis_claims_a_volume_by_default_memcached_none(
    render: Render,
) -> None:
    statefulsets = by_kind(render(), "StatefulSet")
    claimed = {name for name, s in statefulsets.items() if "volumeClaimTemplates" in s["spec"]}
    assert claimed == {name for name in statefulsets if not name.endswith("-memcached")}
    assert len(claimed) == 9


def test_an_instance_takes_its_own_settings_over_its_stores(render: Render) -> None:
    statefulsets = by_kind(render(
        "--set", "stores.redis.persistence.enabled=false",
        "--set", "stores.instances.home-timeline-redis.persistence.enabled=true",
        "--set", "stores.instances.post-storage-mongodb.resources.requests.cpu=3",
        "--set-json", 'stores.instances.user-memcached.extraArgs=["-m","64"]'), "StatefulSet")
    assert "volumeClaimTemplates" in statefulsets["home-timeline-redis"]["spec"]
    assert "volumeClaimTemplates" not in statefulsets["user-timeline-redis"]["spec"]
    requests = {name: containers(s)[0]["resources"]["requests"]
                for name, s in statefulsets.items()}
    assert requests["post-storage-mongodb"] == {"cpu": 3, "memory": "512Mi"}
    assert requests["user-mongodb"] == {"cpu": "200m", "memory": "512Mi"}
    assert containers(statefulsets["user-memcached"])[0]["args"][-2:] == ["-m", "64"]
    assert "64" not in containers(statefulsets["post-storage-memcached"])[0]["args"]


def test_a_stores_environment_reaches_its_containers_beside_the_password(
        render: Render) -> None:
    statefulsets = by_kind(render(
        "--set", "stores.mongodb.env.GOMAXPROCS=29",
        "--set", "stores.instances.post-storage-mongodb.env.GOMAXPROCS=8",
        "--set", "stores.mongodb.auth.enabled=true"), "StatefulSet")
    for name, statefulset in statefulsets.items():
        container = containers(statefulset)[0]
        expected = ({"GOMAXPROCS": "8" if name == "post-storage-mongodb" else "29",
                     "MONGO_INITDB_ROOT_USERNAME": "root"}
                    if name.endswith("-mongodb") else {})
        assert env_of(container) == expected, name
        if name.endswith("-mongodb"):
            assert set(secret_refs(container)) == {"MONGO_INITDB_ROOT_PASSWORD"}


@pytest.mark.parametrize(("setting", "message"), [
    ("stores.instances.mongodb.resources.requests.cpu=1",
     '"mongodb" is not an instance of the per-service layout'),
    ("stores.instances.user-mongodb.image=mongo:8",
     "stores.instances.user-mongodb.image: an instance may set only resources"),
    ("stores.instances.user-mongodb.replicas=2",
     "stores.instances.user-mongodb.replicas: only a Redis instance has its own replicas "
     "(user-mongodb is a mongodb instance)"),
    ("stores.instances.user-memcached.mode=cluster",
     "stores.instances.user-memcached.mode: only a Redis instance has its own mode "
     "(user-memcached is a memcached instance)"),
    ("stores.instances.home-timeline-redis.mode=sentinel",
     'stores.instances.home-timeline-redis.mode: "sentinel" is not one of cluster, '
     "replicated, standalone"),
])
def test_an_instance_setting_the_chart_cannot_apply_is_refused(helm: str, setting: str,
                                                               message: str) -> None:
    out = template(helm, "--set", setting)
    assert out.returncode != 0 and message in out.stderr, out.stderr



def _cpu(quantity: str | int | float) -> float:
    text = str(quantity)
    return float(text[:-1]) / 1000 if text.endswith("m") else float(text)


def test_the_tuned_values_set_requests_limits_and_replicas_per_service(render: Render) -> None:
    tuned_file = stack.CHART_DIR.parent / "values-tuned.yaml"
    tuned = yaml.safe_load(tuned_file.read_text())
    manifests = render("-f", str(tuned_file))
    deployments = by_kind(manifests, "Deployment")
    defaults = tuned["serviceDefaults"]
    for spec in registry.SERVICES:
        own = {**defaults, **tuned["services"].get(spec.name, {})}
        (container,) = containers(deployments[spec.name])
        assert deployments[spec.name]["spec"]["replicas"] == own.get("replicas", 1), spec.name
        assert container["args"][-2:] == ["--workers", str(own["workers"])], spec.name
        wanted = {**defaults["resources"]["requests"], **own["resources"].get("requests", {})}
        assert {k: str(v) for k, v in container["resources"]["requests"].items()} == wanted
    statefulsets = by_kind(manifests, "StatefulSet")
    assert set(tuned["stores"]["instances"]) < set(statefulsets)
    for instance in registry.store_instances(StoreLayout.PER_SERVICE):
        own = tuned["stores"]["instances"].get(instance.name, {})
        store = tuned["stores"][instance.store.value]
        (container,) = containers(statefulsets[instance.name])
        assert container["resources"] == own.get("resources", store["resources"])
        extra = own.get("extraArgs", store.get("extraArgs", []))
        assert container["args"][len(container["args"]) - len(extra):] == extra
    requested = 0.0
    for kind in ("Deployment", "StatefulSet"):
        for name, workload in by_kind(manifests, kind).items():
            for container in pod_spec(workload)["containers"]:
                limits = container["resources"]["limits"]
                assert "memory" in limits and "cpu" not in limits, name
                requested += (_cpu(container["resources"]["requests"]["cpu"])
                              * workload["spec"]["replicas"])
    # The file's own account of what it asks for.
    assert f"({requested:g} CPUs requested)" in tuned_file.read_text()


def store_env(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every variable of ``container`` as its whole entry (value or valueFrom)."""
    return {item["name"]: item for item in container.get("env", [])}


def test_store_passwords_come_from_secrets_spliced_into_the_urls(render: Render) -> None:
    manifests = render("--set", "stores.layout=shared", "--set", "stores.redis.auth.enabled=true",
                       "--set", "stores.mongodb.auth.enabled=true")
    secrets = by_kind(manifests, "Secret")
    passwords = {store: base64.b64decode(secrets[f"sn-{store}-password"]["data"]["password"])
                 for store in ("redis", "mongodb")}
    assert all(len(p) == 32 and p.isalnum() for p in passwords.values())
    deployments = by_kind(manifests, "Deployment")
    for spec in registry.SERVICES:
        env = store_env(pod_spec(deployments[spec.name])["containers"][0])
        names = list(env)
        for store, variable, url in (
                (Store.REDIS, "SOCIALBENCH_REDIS_URL", "redis://:$(REDIS_PASSWORD)@redis:6379/0"),
                (Store.MONGODB, "SOCIALBENCH_MONGODB_URL",
                 "mongodb://root:$(MONGODB_PASSWORD)@mongodb:27017")):
            password = f"{store.value.upper()}_PASSWORD"
            if store not in spec.stores:
                assert password not in env and variable not in env
                continue
            assert env[password]["valueFrom"]["secretKeyRef"] == {
                "name": f"sn-{store.value}-password", "key": "password"}
            assert env[variable]["value"] == url
            # Kubernetes expands $(VAR) only from variables defined before it.
            assert names.index(password) < names.index(variable)
    statefulsets = by_kind(manifests, "StatefulSet")
    redis = pod_spec(statefulsets["redis"])["containers"][0]
    assert redis["args"][-2:] == ["--requirepass", "$(REDIS_PASSWORD)"]
    assert {item["name"] for item in redis["env"]} == {"REDIS_PASSWORD", "REDISCLI_AUTH"}
    mongodb = store_env(pod_spec(statefulsets["mongodb"])["containers"][0])
    assert mongodb["MONGO_INITDB_ROOT_USERNAME"]["value"] == "root"
    assert "secretKeyRef" in mongodb["MONGO_INITDB_ROOT_PASSWORD"]["valueFrom"]
    # No password anywhere in plain text but the Secrets'.
    text = yaml.safe_dump([m for m in manifests if m["kind"] != "Secret"])
    assert not any(p.decode() in text for p in passwords.values())


def test_without_auth_no_store_password_is_made(render: Render) -> None:
    assert set(by_kind(render(), "Secret")) == {"sn-login-secret"}


def test_an_external_store_url_can_come_from_a_secret(render: Render) -> None:
    manifests = render("--set", "stores.mongodb.enabled=false",
                       "--set", "stores.mongodb.externalSecret.name=managed-mongo")
    assert "mongodb" not in by_kind(manifests, "StatefulSet")
    container = pod_spec(by_kind(manifests, "Deployment")["post-storage"])["containers"][0]
    assert store_env(container)["SOCIALBENCH_MONGODB_URL"]["valueFrom"] == {
        "secretKeyRef": {"name": "managed-mongo", "key": "url"}}


def test_a_memcached_pool_is_a_headless_statefulset_of_replicas(render: Render) -> None:
    manifests = render("--set", "stores.layout=shared", "--set", "stores.memcached.replicas=3")
    memcached = by_kind(manifests, "StatefulSet")["memcached"]
    assert memcached["spec"]["replicas"] == 3
    assert by_kind(manifests, "Service")["memcached"]["spec"]["clusterIP"] == "None"
    container = pod_spec(by_kind(manifests, "Deployment")["user"])["containers"][0]
    address = env_of(container)["SOCIALBENCH_MEMCACHED_ADDRESS"]
    assert address == ",".join(f"memcached-{n}.memcached:11211" for n in range(3))


def test_an_external_mongos_gets_its_collections_sharded_on_hashed_keys(render: Render) -> None:
    manifests = render("--set", "stores.mongodb.enabled=false",
                       "--set", "stores.mongodb.externalSecret.name=mongos",
                       "--set", "stores.mongodb.sharding.enabled=true")
    job = by_kind(manifests, "Job")["shard-mongodb"]
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "post-install,post-upgrade"
    container = pod_spec(job)["containers"][0]
    assert container["image"] == stack.PINNED_IMAGES["mongodb"]  # its mongosh
    script = container["args"][0]
    for database, collection, key in stack.SHARDED_COLLECTIONS:
        assert f'sh.shardCollection("{database}.{collection}", {{ "{key}": "hashed" }});' in script
    # The services' URL, from the same Secret.
    assert store_env(container)["SOCIALBENCH_MONGODB_URL"]["valueFrom"] == {
        "secretKeyRef": {"name": "mongos", "key": "url"}}


def test_sharding_the_charts_own_mongodb_is_refused(helm: str) -> None:
    out = template(helm, "--set", "stores.mongodb.sharding.enabled=true")
    assert out.returncode != 0 and "needs an external mongos" in out.stderr


def test_a_replicated_redis_is_a_primary_and_replicas_the_services_read_from(
        render: Render) -> None:
    manifests = render("--set", "stores.layout=per-service",
                       "--set", "stores.redis.mode=replicated", "--set", "stores.redis.replicas=2",
                       "--set", "stores.redis.auth.enabled=true")
    registry_file = yaml.safe_load((stack.CHART_DIR / "files" / "registry.yaml").read_text())
    statefulsets, services = by_kind(manifests, "StatefulSet"), by_kind(manifests, "Service")
    for spec in registry.SERVICES:
        if Store.REDIS not in spec.stores:
            continue
        name = registry.store_instance(spec, Store.REDIS, StoreLayout.PER_SERVICE).name
        assert statefulsets[name]["spec"]["replicas"] == 3
        assert services[name]["spec"]["clusterIP"] == "None"
        assert services[name]["spec"]["publishNotReadyAddresses"] is True
        redis = pod_spec(statefulsets[name])["containers"][0]
        # Pods other than 0 replicate pod 0, with the launcher's replica flags.
        script = redis["command"][2]
        assert f"--replicaof {name}-0.{name} 6379" in script
        assert " ".join(registry_file["redisModes"]["replicaArgs"]) in script
        assert redis["args"][-4:] == ["--requirepass", "$(REDIS_PASSWORD)",
                                      "--masterauth", "$(REDIS_PASSWORD)"]
        env = env_of(pod_spec(by_kind(manifests, "Deployment")[spec.name])["containers"][0])
        login = "redis://:$(REDIS_PASSWORD)@"
        assert env["SOCIALBENCH_REDIS_MODE"] == "replicated"
        assert env["SOCIALBENCH_REDIS_URL"] == f"{login}{name}-0.{name}:6379/0"
        assert env["SOCIALBENCH_REDIS_REPLICA_URLS"] == ",".join(
            f"{login}{name}-{n}.{name}:6379/0" for n in (1, 2))
        expanded = {k: v.replace("$(REDIS_PASSWORD)", "pw") for k, v in env.items()}
        settings = Settings(redis_mode="replicated", redis_url=expanded["SOCIALBENCH_REDIS_URL"],
                            redis_replica_urls=expanded["SOCIALBENCH_REDIS_REPLICA_URLS"])
        assert len(parse_redis_urls(settings.redis_replica_urls)) == 2
    assert not [job for job in by_kind(manifests, "Job") if job.endswith("-cluster")]


def test_a_redis_cluster_is_formed_by_a_job_and_seeded_to_every_service(render: Render) -> None:
    manifests = render("--set", "stores.layout=shared", "--set", "stores.redis.mode=cluster",
                       "--set", "stores.redis.cluster.masters=3",
                       "--set", "stores.redis.replicas=1")
    registry_file = yaml.safe_load((stack.CHART_DIR / "files" / "registry.yaml").read_text())
    redis = by_kind(manifests, "StatefulSet")["redis"]
    assert redis["spec"]["replicas"] == 6
    args = pod_spec(redis)["containers"][0]["args"]
    assert " ".join(registry_file["redisModes"]["clusterArgs"]) in " ".join(args)
    nodes = [f"redis-{n}.redis:6379" for n in range(6)]
    job = by_kind(manifests, "Job")["redis-cluster"]
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "post-install,post-upgrade"
    assert pod_spec(job)["containers"][0]["args"] == [
        "deploy", "form-redis-cluster", "--replicas", "1", *nodes]
    for spec in registry.SERVICES:
        env = env_of(pod_spec(by_kind(manifests, "Deployment")[spec.name])["containers"][0])
        if Store.REDIS in spec.stores:
            assert env["SOCIALBENCH_REDIS_MODE"] == "cluster"
            assert env["SOCIALBENCH_REDIS_URL"] == ",".join(f"redis://{n}/0" for n in nodes)
            assert Settings(redis_mode="cluster", redis_url=env["SOCIALBENCH_REDIS_URL"])
        else:
            assert "SOCIALBENCH_REDIS_MODE" not in env
    per_service = render("--set", "stores.redis.mode=cluster")
    assert sorted(j for j in by_kind(per_service, "Job") if j.endswith("-cluster")) == sorted(
        f"{i.name}-cluster" for i in registry.store_instances(StoreLayout.PER_SERVICE)
        if i.store is Store.REDIS)


def test_an_unknown_redis_mode_is_refused(helm: str) -> None:
    out = template(helm, "--set", "stores.redis.mode=sentinel")
    assert out.returncode != 0 and '"sentinel" is not one of cluster, replicated' in out.stderr


def test_a_redis_instance_takes_its_own_mode(render: Render) -> None:
    """Only home-timeline-redis a Redis Cluster (as `up` sizes a big node): its pods, its
    Job and its service's environment follow it; the other instances stay standalone."""
    manifests = render("--set", "stores.instances.home-timeline-redis.mode=cluster",
                       "--set", "stores.instances.home-timeline-redis.cluster.masters=4")
    statefulsets, services = by_kind(manifests, "StatefulSet"), by_kind(manifests, "Service")
    deployments = by_kind(manifests, "Deployment")
    registry_file = yaml.safe_load((stack.CHART_DIR / "files" / "registry.yaml").read_text())
    cluster_args = " ".join(registry_file["redisModes"]["clusterArgs"])
    nodes = [f"home-timeline-redis-{n}.home-timeline-redis:6379" for n in range(8)]
    clustered = statefulsets["home-timeline-redis"]
    assert clustered["spec"]["replicas"] == 8  # 4 masters, a replica each
    assert cluster_args in " ".join(containers(clustered)[0]["args"])
    assert services["home-timeline-redis"]["spec"]["clusterIP"] == "None"
    jobs = {name: job for name, job in by_kind(manifests, "Job").items()
            if name.endswith("-cluster")}
    assert list(jobs) == ["home-timeline-redis-cluster"]
    assert containers(jobs["home-timeline-redis-cluster"])[0]["args"] == [
        "deploy", "form-redis-cluster", "--replicas", "1", *nodes]
    launcher = StackConfig(store_layout=StoreLayout.PER_SERVICE.value,
                           redis_cluster_instances=["home-timeline-redis"])
    modes = {}
    for spec in registry.SERVICES:
        if Store.REDIS not in spec.stores:
            continue
        name = registry.store_instance(spec, Store.REDIS, StoreLayout.PER_SERVICE).name
        env = env_of(containers(deployments[spec.name])[0])
        modes[name] = env.get("SOCIALBENCH_REDIS_MODE", "standalone")
        if name == "home-timeline-redis":
            assert env["SOCIALBENCH_REDIS_URL"] == ",".join(f"redis://{n}/0" for n in nodes)
            continue
        assert env["SOCIALBENCH_REDIS_URL"] == f"redis://{name}:6379/0"
        assert statefulsets[name]["spec"]["replicas"] == 1
        assert cluster_args not in " ".join(containers(statefulsets[name])[0]["args"])
        assert "clusterIP" not in services[name]["spec"]
    assert modes == launcher.redis_modes()
    assert set(modes.values()) == {"cluster", "standalone"}


def test_an_instance_mode_overrides_the_stores_mode(render: Render) -> None:
    manifests = render("--set", "stores.redis.mode=cluster",
                       "--set", "stores.instances.home-timeline-redis.mode=standalone",
                       "--set", "stores.instances.user-timeline-redis.replicas=0")
    statefulsets = by_kind(manifests, "StatefulSet")
    assert {name: statefulsets[name]["spec"]["replicas"] for name in
            ("home-timeline-redis", "user-timeline-redis", "social-graph-redis")} == {
        "home-timeline-redis": 1, "user-timeline-redis": 3, "social-graph-redis": 6}
    jobs = sorted(name for name in by_kind(manifests, "Job") if name.endswith("-cluster"))
    assert jobs == ["social-graph-redis-cluster", "user-timeline-redis-cluster"]
    home = env_of(containers(by_kind(manifests, "Deployment")["home-timeline"])[0])
    assert "SOCIALBENCH_REDIS_MODE" not in home
    assert home["SOCIALBENCH_REDIS_URL"] == "redis://home-timeline-redis:6379/0"


@pytest.mark.parametrize(("settings", "message"), [
    (("stores.instances.user-timeline-redis.mode=replicated",
      "stores.instances.user-timeline-redis.replicas=0"),
     "stores.instances.user-timeline-redis.mode=replicated needs replicas of 1 or more"),
    (("stores.redis.enabled=false", "stores.redis.external=redis://r:6379/0",
      "stores.instances.home-timeline-redis.mode=cluster"),
     "stores.instances.home-timeline-redis.mode: an external Redis (stores.redis.enabled "
     "false) takes stores.redis.mode for every instance"),
])
def test_an_instance_mode_the_chart_cannot_run_is_refused(helm: str, settings: tuple[str, ...],
                                                          message: str) -> None:
    out = template(helm, *(arg for setting in settings for arg in ("--set", setting)))
    assert out.returncode != 0 and message in out.stderr, out.stderr
