"""The chart's generated files: ``files/registry.yaml`` and ``files/nginx.conf``.

The chart's templates read the services, ports, neighbours and environment names from
``files/registry.yaml`` (never from a list of their own), and the nginx ConfigMap from
``files/nginx.conf``, rendered from the same template as local mode and compose.
"""

from __future__ import annotations

from typing import Any

from socialbench import registry
from socialbench.deploy import GENERATE_COMMAND, stack_spec
from socialbench.deploy.yamltext import Inline, dump
from socialbench.registry import StoreLayout
from socialbench.runtime.settings import setting_env
from socialbench.stack.servers import (
    REDIS_CLUSTER_NODE_TIMEOUT_MS,
    REDIS_CLUSTER_OPTIONS,
    REDIS_REPLICA_OPTIONS,
)

REGISTRY_FILE = "files/registry.yaml"
NGINX_FILE = "files/nginx.conf"
HEADER = f"""\
Generated from socialbench/registry.py by `{GENERATE_COMMAND}`;
do not edit (tests compare them). The templates read services and stores from here."""


def registry_data() -> dict[str, Any]:
    """What the templates need to know about every service and store."""
    return {
        "gateway": {"host": stack_spec.GATEWAY_HOST, "port": stack_spec.GATEWAY_PORT,
                    "mediaPort": stack_spec.MEDIA_PORT},
        # The login-token secret's variable; its value comes from the chart's Secret.
        "secretEnv": stack_spec.SECRET_ENV,
        "services": [
            {
                "name": spec.name,
                "port": spec.port,
                "urlEnv": spec.url_env,
                "stores": Inline(store.value for store in spec.stores),
                # The instance of each of its stores, by layout (stores.layout in values).
                "instances": {
                    layout.value: {store.value: registry.store_instance(spec, store, layout).name
                                   for store in spec.stores}
                    for layout in StoreLayout
                },
                "neighbours": Inline(spec.neighbours),
            }
            for spec in registry.SERVICES
        ],
        # Every store instance of each layout: a StatefulSet and a Service each.
        "layouts": {
            layout.value: [{"name": instance.name, "store": instance.store.value}
                           for instance in registry.store_instances(layout)]
            for layout in StoreLayout
        },
        # What the shard Job splits on an external mongos (stores.mongodb.sharding).
        "sharding": [{"database": database, "collection": collection, "key": key}
                     for database, collection, key in stack_spec.SHARDED_COLLECTIONS],
        # stores.redis.mode: the settings that tell the services which mode runs, and the
        # flags of a read replica (besides --replicaof) and of a cluster node.
        "redisModes": {
            "modeEnv": setting_env("redis_mode"),
            "replicaUrlsEnv": setting_env("redis_replica_urls"),
            "replicaArgs": Inline(REDIS_REPLICA_OPTIONS),
            "clusterArgs": Inline([*REDIS_CLUSTER_OPTIONS, "--cluster-node-timeout",
                                   str(REDIS_CLUSTER_NODE_TIMEOUT_MS)]),
        },
        "stores": {
            store.name: {
                "port": store.port,
                "env": store.env_name,
                # printf with the instance's name (its Service) gives the address.
                "addressFormat": store.address("%s"),
                "command": Inline(store.command),
                "healthcheck": Inline(store.healthcheck),
                "dataDir": store.data_dir or "",
            }
            for store in stack_spec.STORES
        },
    }


def files() -> dict[str, str]:
    """Every generated file of the chart: path inside the chart -> text."""
    return {
        REGISTRY_FILE: dump(registry_data(), HEADER),
        NGINX_FILE: stack_spec.render_gateway(),
    }
