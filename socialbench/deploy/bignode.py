"""A big node: the chart's values and a compose override with the choices of ``up`` on it.

``helm/values-big-node.yaml`` and ``compose/docker-compose.big-node.yml`` (with
``compose/nginx.big-node.conf``) carry what :func:`socialbench.stack.sizing.size_stack`
chooses for :data:`BIG_NODE_CPUS` CPUs, the same as ``socialbench up --cpus 128`` (``up
--plan --cpus 128`` prints it): each service's workers, nginx's workers, memcached's threads
and processes, the store layout, Redis Clusters for the Redis instances it names, FerretDB's
GOMAXPROCS, the driver's processes and connections. The chart's CPU requests follow each
part's largest share of the stack's CPU in the reference (:func:`cpu_requests`) and add up
to the node less :data:`NODE_RESERVED_CPUS`. ``socialbench deploy generate`` writes them and
``deploy check`` flags them stale when the sizing or its reference changes.
"""

from __future__ import annotations

import copy
import math
import textwrap
from dataclasses import dataclass
from typing import Any

from socialbench import registry
from socialbench.deploy import GENERATE_COMMAND, compose, stack_spec
from socialbench.deploy.yamltext import Inline, dump
from socialbench.gateway import nginx
from socialbench.registry import Store, StoreInstance
from socialbench.runtime.settings import setting_env
from socialbench.stack.servers import REDIS_CLUSTER_NODE_TIMEOUT_MS, REDIS_CLUSTER_OPTIONS
from socialbench.stack.sizing import Reference, StackSize, largest_share, size_stack

BIG_NODE_CPUS = 128
# Left out of the stack's CPU requests: the kubelet's and the system's reservations, the
# DaemonSets (kube-proxy, the network plugin) and the chart's Jobs (seed, cluster forming).
NODE_RESERVED_CPUS = 4
# The least a pod requests, and the step requests are rounded down to (CPUs).
MIN_CPU = 0.1
# Memory a service worker requests (a worker's RSS is about 135 MB idle); its limit is
# twice what it requests.
WORKER_MEMORY_MI = 192
# As compose's Redis: a replica per master (up's --redis-replicas default).
REDIS_REPLICAS = 1
# The load Job's driver pods (on another node): the sizing's processes split over them.
DRIVER_PODS = 2

VALUES_FILE = "values-big-node.yaml"  # beside the chart, as values-tuned.yaml
COMPOSE_FILE = "docker-compose.big-node.yml"
NGINX_FILE = "nginx.big-node.conf"


def big_node_size(cpus: int = BIG_NODE_CPUS) -> StackSize:
    """What ``up`` starts on ``cpus`` CPUs (the sizing from the kept reference)."""
    return size_stack(cpus)


@dataclass(frozen=True)
class PodRequest:
    """The CPU each pod of a part requests, and its pods."""

    part: str
    pods: int
    cpu: float

    @property
    def total(self) -> float:
        return self.pods * self.cpu

    @property
    def quantity(self) -> str:
        """As Kubernetes writes it: ``"3"`` or ``"2700m"``."""
        millis = round(self.cpu * 1000)
        return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def instance_pods(size: StackSize, instance: StoreInstance) -> tuple[int, int]:
    """``(pods, units)`` of ``instance`` on ``size``: its processes, and those its load is
    spread over (a Redis Cluster's masters, a memcached pool's members)."""
    if instance.store is Store.REDIS and instance.name in size.redis_clusters:
        masters = size.redis_clusters[instance.name]
        return masters * (1 + REDIS_REPLICAS), masters
    if instance.store is Store.MEMCACHED:
        return size.memcached_instances, size.memcached_instances
    return 1, 1


def cpu_requests(size: StackSize, reference: Reference | None = None) -> dict[str, PodRequest]:
    """Each part's CPU request on a node of ``size.cpus``: its largest share of the stack's
    CPU over the reference workloads (a Redis Cluster's or memcached pool's split over its
    masters or members; a cluster's replicas as much as their masters), scaled so that the
    requests add up to the node less :data:`NODE_RESERVED_CPUS`; at least
    :data:`MIN_CPU` a pod, rounded down to it."""
    reference = reference or Reference.load()
    weights: dict[str, tuple[int, float]] = {}  # part -> (pods, share per pod)
    for spec in registry.SERVICES:
        weights[spec.name] = (1, largest_share(reference, spec.name))
    weights[stack_spec.GATEWAY_HOST] = (1, largest_share(reference, "nginx"))
    for instance in registry.store_instances(size.store_layout):
        pods, units = instance_pods(size, instance)
        weights[instance.name] = (pods, largest_share(reference, instance.name) / units)
    pods = sum(count for count, _ in weights.values())
    budget = size.cpus - NODE_RESERVED_CPUS - MIN_CPU * pods
    total = sum(count * share for count, share in weights.values())
    scale = budget / total if total else 0.0
    steps = round(1 / MIN_CPU)
    return {part: PodRequest(part, count,
                             MIN_CPU + math.floor(share * scale * steps + 1e-9) / steps)
            for part, (count, share) in weights.items()}


def _mi(value: int) -> str:
    return f"{value}Mi"


def _wrapped(prefix: str, text: str, indent: str = "    ") -> list[str]:
    return textwrap.wrap(prefix + text, 88, subsequent_indent=indent,
                         break_long_words=False, break_on_hyphens=False)


def _header(size: StackSize, usage: list[str], values: list[tuple[str, str]]) -> str:
    lines = _wrapped("", f"A big node: the stack on one {size.cpus}-CPU node, with the "
                         f"choices `socialbench up --cpus {size.cpus}` makes "
                         "(socialbench/stack/sizing.py; `socialbench up --plan --cpus "
                         f"{size.cpus}` prints them with the projected ceilings; "
                         "docs/scaling.md, and docs/deploy.md, \"A big node\").", indent="")
    lines += [f"Generated by `{GENERATE_COMMAND}` from the sizing "
              "(socialbench/deploy/bignode.py):",
              "edit those, not this file; `socialbench deploy check` flags it stale when the",
              "sizing or its reference changes."]
    lines += ["", *usage, "", "What each value is:"]
    for key, meaning in values:
        lines += _wrapped(f"  {key}: ", meaning)
    reference = Reference.load()
    lines += ["", *_wrapped("", "Why, as the sizing says it (what it projects is an "
                                f"estimate, from the reference measured {reference.measured} "
                                f"on {reference.machine} at {reference.commit}):", indent="")]
    for choice in size.choices:
        lines += _wrapped(f"  {choice.what}: ", f"{choice.value}. Why: {choice.why}")
    return "\n".join(lines)


def _services_memory(workers: int) -> dict[str, Any]:
    return {"requests": {"memory": _mi(WORKER_MEMORY_MI * workers)},
            "limits": {"memory": _mi(2 * WORKER_MEMORY_MI * workers)}}


def _memcached_args(size: StackSize) -> list[str]:
    return ["-t", str(size.memcached_threads)]


def _driver_split(size: StackSize) -> tuple[int, int, int]:
    """The load Job's pods, and each one's processes and connections."""
    pods = min(DRIVER_PODS, size.driver_processes)
    return (pods, math.ceil(size.driver_processes / pods),
            math.ceil(size.driver_connections / pods))


def values_data(size: StackSize, reference: Reference | None = None) -> dict[str, Any]:
    """The chart's values for a node of ``size``."""
    requests = cpu_requests(size, reference)
    services: dict[str, Any] = {}
    for spec in registry.SERVICES:
        workers = size.workers[spec.name]
        resources = _services_memory(workers)
        resources["requests"] = {"cpu": requests[spec.name].quantity,
                                 **resources["requests"]}
        services[spec.name] = {"workers": workers, "resources": resources}
    instances: dict[str, Any] = {}
    for instance in registry.store_instances(size.store_layout):
        own: dict[str, Any] = {}
        if instance.name in size.redis_clusters:
            own.update(mode="cluster", replicas=REDIS_REPLICAS,
                       cluster={"masters": size.redis_clusters[instance.name]})
        own["resources"] = {"requests": {"cpu": requests[instance.name].quantity}}
        instances[instance.name] = own
    pods, processes, connections = _driver_split(size)
    return {
        "serviceDefaults": {"replicas": 1},
        "services": services,
        "gateway": {
            "replicas": 1,
            "workerProcesses": size.nginx_workers,
            "resources": {"requests": {"cpu": requests[stack_spec.GATEWAY_HOST].quantity,
                                       "memory": "256Mi"},
                          "limits": {"memory": "1Gi"}},
        },
        "stores": {
            "layout": size.store_layout.value,
            "mongodb": {"env": {"GOMAXPROCS": str(size.mongodb_procs)}},
            "redis": {"mode": "standalone", "replicas": REDIS_REPLICAS},
            "memcached": {"replicas": size.memcached_instances,
                          "extraArgs": Inline(_memcached_args(size))},
            "instances": instances,
        },
        "load": {"drivers": pods, "processes": processes, "connections": connections,
                 "resources": {"requests": {"cpu": str(processes), "memory": "1Gi"},
                               "limits": {"memory": "4Gi"}}},
    }


def render_values(size: StackSize | None = None, reference: Reference | None = None) -> str:
    size = size or big_node_size()
    data = values_data(size, reference)
    requested = round(sum(r.total for r in cpu_requests(size, reference).values()), 1)
    pods, processes, connections = _driver_split(size)
    clusters = ", ".join(size.redis_clusters) or "none"
    usage = [f"    helm install sn helm/socialnetwork -f helm/{VALUES_FILE}",
             "    (the drivers on another node: --set-string load.nodeSelector.<label>=<value>)"]
    meanings = [
        ("services.<name>.workers", "the service's uvicorn worker processes, as `up` runs "
                                    "them (the sizing's workers)"),
        ("services.<name>.resources", "CPU requested: the service's largest share of the "
                                      "stack's CPU in the reference, scaled so that the "
                                      f"stack's requests add up to {requested:g} of the "
                                      f"node's {size.cpus} CPUs ({NODE_RESERVED_CPUS} left "
                                      "to the kubelet, the system, the DaemonSets and the "
                                      f"Jobs; no CPU limit); memory {WORKER_MEMORY_MI}Mi a "
                                      "worker, its limit twice that"),
        ("gateway.workerProcesses", "nginx's worker processes (the sizing's nginx workers), "
                                    "in one pod; its CPU as the services'"),
        ("stores.layout", "the sizing's store layout"),
        ("stores.instances.<redis>.mode/cluster", "a Redis Cluster of cluster.masters "
                                                  f"masters, {REDIS_REPLICAS} replica each, "
                                                  f"for each Redis the sizing names "
                                                  f"({clusters}); the other Redis instances "
                                                  "stay standalone"),
        ("stores.memcached", "extraArgs -t: each memcached's worker threads; replicas: its "
                             "processes (a pool the services hash keys over)"),
        ("stores.mongodb.env.GOMAXPROCS", "FerretDB's Go threads (the sizing's), for a "
                                          "FerretDB stand-in image; mongod (the official "
                                          "image) ignores it and takes every core"),
        ("stores.instances.<instance>.resources", "each instance's CPU request as the "
                                                  "services' (a Redis Cluster's per pod: "
                                                  "its share over its masters)"),
        ("load", f"the sizing's driver (-P {size.driver_processes} -c "
                 f"{size.driver_connections}) as {pods} pods of {processes} processes and "
                 f"{connections} connections, a core a process"),
    ]
    header = _header(size, usage, meanings)
    header += f"\n\n({requested:g} CPUs requested)"
    return dump(data, header)


# Compose: the layout's file, with this one over it.

def render_nginx(size: StackSize) -> str:
    """compose's nginx.conf with the sizing's worker processes."""
    config = stack_spec.gateway_config()
    config.worker_processes = str(size.nginx_workers)
    return nginx.render(config)


def _nodes(size: StackSize, instance: StoreInstance) -> list[str]:
    """The containers of ``instance``: its own (the base file's), then ``<instance>-1``, ..."""
    pods, _ = instance_pods(size, instance)
    return [instance.name, *(f"{instance.name}-{n}" for n in range(1, pods))]


def _users(size: StackSize, instance: StoreInstance) -> list[registry.ServiceSpec]:
    """The services whose store ``instance`` is in the sized layout."""
    return [spec for spec in registry.SERVICES
            if instance.store in spec.stores
            and registry.store_instance(spec, instance.store, size.store_layout) == instance]


def _store_command(size: StackSize, instance: StoreInstance) -> list[str]:
    """``instance``'s command: memcached with the sizing's threads, a cluster node's flags."""
    command = list(stack_spec.STORE_BY_NAME[instance.store.value].command)
    if instance.store is Store.MEMCACHED:
        at = command.index("-t")
        command[at:at + 2] = _memcached_args(size)
    if instance.name in size.redis_clusters:
        command += [*REDIS_CLUSTER_OPTIONS, "--cluster-node-timeout",
                    str(REDIS_CLUSTER_NODE_TIMEOUT_MS)]
    return command


@dataclass
class _Override:
    """The override being built: containers, new volumes, and new containers' addresses."""

    base: dict[str, Any]  # the layout's compose services
    first_address: int  # the host number after the base file's last
    services: dict[str, Any]
    volumes: dict[str, dict[str, str]]
    addresses: dict[str, str]  # new container -> address
    connecting: set[str]  # base containers that reach a new one by name

    def add_node(self, instance: StoreInstance, node: str, command: list[str]) -> None:
        """Container ``node`` of ``instance``: a copy of the instance's own, on its volume."""
        store = stack_spec.STORE_BY_NAME[instance.store.value]
        service = copy.deepcopy(self.base[instance.name])
        service["command"] = Inline(command)
        if store.data_dir:
            service["volumes"] = [f"{node}-data:{store.data_dir}"]
            self.volumes[f"{node}-data"] = {}
        host = self.first_address + len(self.addresses)
        self.addresses[node] = f"{compose.SUBNET_PREFIX}.{host}"
        service["networks"] = {"default": {"ipv4_address": self.addresses[node]}}
        self.services[node] = service

    def add_instance(self, size: StackSize, instance: StoreInstance) -> None:
        """``instance`` as the sizing runs it: its command, its other nodes, a Redis
        Cluster's forming container, and its services pointed at every node."""
        store = stack_spec.STORE_BY_NAME[instance.store.value]
        command, nodes = _store_command(size, instance), _nodes(size, instance)
        if command != list(store.command):
            self.services[instance.name] = {"command": Inline(command)}
        for node in nodes[1:]:
            self.add_node(instance, node, command)
        if len(nodes) == 1:
            return
        after: dict[str, Any] = compose.healthy(*nodes)
        environment = {store.env_name: ",".join(store.address(node) for node in nodes)}
        if instance.name in size.redis_clusters:
            form = f"{instance.name}-cluster"
            self.services[form] = compose.socialbench_container(
                ["deploy", "form-redis-cluster", "--replicas", str(REDIS_REPLICAS),
                 *(f"{node}:{store.port}" for node in nodes)],
                depends_on=compose.healthy(*nodes), restart="no")
            after = {form: {"condition": "service_completed_successfully"}}
            environment[setting_env("redis_mode")] = "cluster"
        for spec in _users(size, instance):
            self.services[spec.name].update(environment=dict(environment),
                                            depends_on=dict(after))
            self.connecting.add(spec.name)

    def name_new_containers(self) -> None:
        """extra_hosts: the new names for the base containers that reach them (added to
        their lists), every name for the new containers."""
        if not self.addresses:
            return
        hosts = [f"{name}:{address}" for name, address in self.addresses.items()]
        every = [*self.base[stack_spec.GATEWAY_HOST]["extra_hosts"], *hosts]
        for name, service in self.services.items():
            if name in self.connecting:
                service["extra_hosts"] = list(hosts)
            elif name not in self.base:
                service["extra_hosts"] = list(every)


def compose_override(size: StackSize) -> dict[str, Any]:
    """The override of the layout's compose file for a node of ``size``."""
    layout = size.store_layout
    base = compose.compose_file(layout)["services"]
    services: dict[str, Any] = {
        spec.name: {"command": Inline(stack_spec.service_command(spec, size.workers[spec.name]))}
        for spec in registry.SERVICES}
    services[stack_spec.GATEWAY_HOST] = {"volumes": [f"./{NGINX_FILE}:/etc/nginx/nginx.conf:ro"]}
    override = _Override(base, compose.FIRST_HOST + len(compose.addresses(layout)), services,
                         volumes={}, addresses={}, connecting=set())
    for instance in registry.store_instances(layout):
        if instance.store is Store.MONGODB:
            services[instance.name] = {"environment": {"GOMAXPROCS": str(size.mongodb_procs)}}
        else:
            override.add_instance(size, instance)
    override.name_new_containers()
    services["driver"] = {"command": Inline([
        *base["driver"]["command"], "--processes", str(size.driver_processes),
        "--connections", str(size.driver_connections)])}
    return {"services": services, **({"volumes": override.volumes} if override.volumes else {})}


def render_compose(size: StackSize | None = None) -> str:
    size = size or big_node_size()
    base = compose.COMPOSE_FILES[size.store_layout]
    usage = [f"    docker compose -f compose/{base} -f compose/{COMPOSE_FILE} up -d",
             f"    docker compose -f compose/{base} -f compose/{COMPOSE_FILE} "
             "--profile load run --rm driver",
             f"(after compose/{base}: the layout the sizing chose; its header says the rest)"]
    clusters = ", ".join(size.redis_clusters) or "none"
    meanings = [
        ("<service>.command", "--workers: the service's uvicorn worker processes (the "
                              "sizing's workers)"),
        ("nginx.volumes", f"compose/{NGINX_FILE}: the same nginx.conf with the sizing's "
                          "worker processes"),
        ("<memcached instance>.command", "-t: memcached's worker threads; more members of a "
                                         "pool as <instance>-1, ... when the sizing runs "
                                         "several processes"),
        ("<mongodb instance>.environment.GOMAXPROCS", "FerretDB's Go threads (the stand-in "
                                                      "image); mongod ignores it"),
        ("<redis instance>-N, <redis instance>-cluster", "a Redis Cluster for each Redis the "
                                                         f"sizing names ({clusters}): the "
                                                         "instance's container and the "
                                                         "others its nodes, formed by the "
                                                         "one-shot -cluster container; its "
                                                         "services get the nodes' URLs and "
                                                         "the cluster mode"),
        ("driver.command", "the sizing's driver processes and connections"),
    ]
    return dump(compose_override(size), _header(size, usage, meanings))


def files() -> dict[str, str]:
    """The compose files of a big node: name in compose/ -> text."""
    size = big_node_size()
    return {COMPOSE_FILE: render_compose(size), NGINX_FILE: render_nginx(size)}
