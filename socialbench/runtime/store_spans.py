"""Client spans of store calls (Redis, MongoDB, memcached), inside traced requests only.

:meth:`~socialbench.runtime.stores.Stores.connect` uses these clients when tracing is on.
Each checks first whether the current request is traced and, if not, is the plain
client: a call outside a traced request costs one context lookup and makes no span.
Spans are named ``<store> <operation>`` (``redis ZADD``, ``redis pipeline``, ``redis
each_key ZADD``, ``mongodb insert post``, ``memcached get``) with the OpenTelemetry
database attributes: Redis through ``execute_command`` (one span a command or pipeline,
whichever server or cluster node answers: :class:`TracedRedis`), MongoDB through
``command`` (a connection's login untraced; PyMongo's client makes the same spans with
:class:`~socialbench.runtime.mongodb_pymongo.CommandSpans`), memcached's ``get``,
``multi_get`` (one span per server of a pool), ``set``, ``add`` and ``delete``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from opentelemetry.trace import SpanKind, Tracer

from socialbench.runtime.memcached_client import MemcachedClient
from socialbench.runtime.mongodb_client import Document, MongoClient
from socialbench.runtime.redis_client import Arg, Command, Redis, RedisClient
from socialbench.runtime.redis_cluster import ClusterRedis
from socialbench.runtime.redis_replicated import ReplicatedRedis
from socialbench.runtime.tracing import in_traced_request

REDIS = {"db.system.name": "redis"}
MONGODB = {"db.system.name": "mongodb"}
MEMCACHED = {"db.system.name": "memcached"}


class TracedRedis(Redis):
    """Spans of a Redis client's commands, pipelines and each-key commands in traced
    requests: the first base of a Redis client class (``tracer`` set by its maker)."""

    tracer: Tracer

    async def execute_command(self, *args: Arg) -> Any:
        if not in_traced_request():
            return await super().execute_command(*args)
        operation = _operation(args[0])
        with self.tracer.start_as_current_span(
            f"redis {operation}", kind=SpanKind.CLIENT,
            attributes={**REDIS, "db.operation.name": operation},
        ):
            return await super().execute_command(*args)

    async def pipeline(self, *commands: Command) -> list[Any]:
        if not in_traced_request():
            return await super().pipeline(*commands)
        operations = sorted({_operation(command[0]) for command in commands})
        with self.tracer.start_as_current_span(
            "redis pipeline", kind=SpanKind.CLIENT,
            attributes={**REDIS, "db.operation.name": "PIPELINE " + " ".join(operations),
                        "db.operation.batch.size": len(commands)},
        ):
            return await super().pipeline(*commands)

    async def each_key(self, keys: Sequence[Arg], command: Command) -> None:
        if not in_traced_request():
            return await super().each_key(keys, command)
        operation = _operation(command[0])
        with self.tracer.start_as_current_span(
            f"redis each_key {operation}", kind=SpanKind.CLIENT,
            attributes={**REDIS, "db.operation.name": f"EACH_KEY {operation}",
                        "db.operation.batch.size": len(keys)},
        ):
            return await super().each_key(keys, command)


class TracedRedisClient(TracedRedis, RedisClient):
    """A client of one Redis server whose commands are spans in traced requests."""

    def __init__(self, *args: Any, tracer: Tracer, **options: Any) -> None:
        super().__init__(*args, **options)
        self.tracer = tracer


class TracedReplicatedRedis(TracedRedis, ReplicatedRedis):
    """A primary and its replicas, whose commands are spans in traced requests."""

    def __init__(self, *args: Any, tracer: Tracer, **options: Any) -> None:
        super().__init__(*args, **options)
        self.tracer = tracer


class TracedClusterRedis(TracedRedis, ClusterRedis):
    """A Redis Cluster, whose commands are spans in traced requests."""

    def __init__(self, *args: Any, tracer: Tracer, **options: Any) -> None:
        super().__init__(*args, **options)
        self.tracer = tracer


def _operation(name: Arg) -> str:
    return (name.decode() if isinstance(name, bytes) else str(name)).upper()


class TracedMongoClient(MongoClient):
    """A MongoDB client whose commands are spans in traced requests."""

    def __init__(self, *args: Any, tracer: Tracer, **options: Any) -> None:
        super().__init__(*args, **options)
        self.tracer = tracer

    async def command(self, database: str, command: Mapping[str, Any]) -> Document:
        if not in_traced_request():
            return await super().command(database, command)
        operation = next(iter(command))
        target = command[operation]
        attributes: dict[str, Any] = {**MONGODB, "db.operation.name": operation,
                                      "db.namespace": database}
        name = f"mongodb {operation}"
        if isinstance(target, str):
            attributes["db.collection.name"] = target
            name += f" {target}"
        with self.tracer.start_as_current_span(name, kind=SpanKind.CLIENT,
                                               attributes=attributes):
            return await super().command(database, command)


class TracedMemcachedClient(MemcachedClient):
    """A memcached client whose calls are spans in traced requests."""

    def __init__(self, *args: Any, tracer: Tracer, **options: Any) -> None:
        super().__init__(*args, **options)
        self.tracer = tracer

    async def _call(
        self, operation: str, keys: int, call: Callable[..., Awaitable[Any]], *args: Any
    ) -> Any:
        if not in_traced_request():
            return await call(*args)
        with self.tracer.start_as_current_span(
            f"memcached {operation}", kind=SpanKind.CLIENT,
            attributes={**MEMCACHED, "db.operation.name": operation,
                        "db.operation.batch.size": keys},
        ):
            return await call(*args)

    async def get(self, key: bytes) -> bytes | None:
        result: bytes | None = await self._call("get", 1, super().get, key)
        return result

    async def multi_get(self, *keys: bytes) -> tuple[bytes | None, ...]:
        result: tuple[bytes | None, ...] = await self._call(
            "multi_get", len(keys), super().multi_get, *keys)
        return result

    def get_sent(self, keys: Sequence[bytes]) -> asyncio.Future[Any]:
        if not in_traced_request():
            return super().get_sent(keys)
        return asyncio.ensure_future(self._call("multi_get", len(keys), super().get_sent, keys))

    async def set(self, key: bytes, value: bytes, exptime: int = 0) -> bool:
        return bool(await self._call("set", 1, super().set, key, value, exptime))

    async def add(self, key: bytes, value: bytes, exptime: int = 0) -> bool:
        return bool(await self._call("add", 1, super().add, key, value, exptime))

    async def delete(self, key: bytes) -> bool:
        return bool(await self._call("delete", 1, super().delete, key))
