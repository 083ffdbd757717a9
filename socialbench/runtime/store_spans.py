"""Client spans of store calls (Redis, MongoDB, memcached), inside traced requests only.

:meth:`~socialbench.runtime.stores.Stores.connect` uses these clients when tracing is on.
Each checks first whether the current request is traced and, if not, is the plain
client; so a store call outside a traced request (most of them, and start-up work)
costs one context lookup and makes no span. Span names are ``<store> <operation>``
(``redis ZADD``, ``redis pipeline``, ``mongodb find post``, ``memcached get``), with
the OpenTelemetry database attributes.

- Redis: every command goes through ``execute_command``; a pipeline is one span.
- MongoDB: PyMongo's command monitoring, which runs in the calling task.
- memcached: ``get``, ``multi_get``, ``set`` and ``delete``, the calls the services
  make; ``version`` (health) goes untraced.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from opentelemetry.trace import Span, SpanKind, StatusCode, Tracer
from pymongo import monitoring

from socialbench.runtime.memcached_client import MemcachedClient
from socialbench.runtime.redis_client import Arg, Command, RedisClient
from socialbench.runtime.tracing import in_traced_request

REDIS = {"db.system.name": "redis"}
MONGODB = {"db.system.name": "mongodb"}
MEMCACHED = {"db.system.name": "memcached"}


class TracedRedisClient(RedisClient):
    """A Redis client whose commands and pipelines are spans in traced requests."""

    def __init__(self, *args: Any, tracer: Tracer, **options: Any) -> None:
        super().__init__(*args, **options)
        self.tracer = tracer

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


def _operation(name: Arg) -> str:
    return (name.decode() if isinstance(name, bytes) else str(name)).upper()


class MongoSpans(monitoring.CommandListener):
    """A span from each MongoDB command's start to its success or failure."""

    def __init__(self, tracer: Tracer) -> None:
        self.tracer = tracer
        self._open: dict[tuple[int, Any], Span] = {}

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if not in_traced_request():
            return
        target = event.command.get(event.command_name)
        collection = target if isinstance(target, str) else None
        name = f"mongodb {event.command_name}" + (f" {collection}" if collection else "")
        attributes: dict[str, Any] = {**MONGODB, "db.operation.name": event.command_name,
                                      "db.namespace": event.database_name}
        if collection:
            attributes["db.collection.name"] = collection
        span = self.tracer.start_span(name, kind=SpanKind.CLIENT, attributes=attributes)
        self._open[(event.request_id, event.connection_id)] = span

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        span = self._open.pop((event.request_id, event.connection_id), None)
        if span is not None:
            span.end()

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        span = self._open.pop((event.request_id, event.connection_id), None)
        if span is not None:
            span.set_status(StatusCode.ERROR, str(event.failure.get("errmsg", event.failure)))
            span.end()


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

    async def set(self, key: bytes, value: bytes, exptime: int = 0) -> bool:
        return bool(await self._call("set", 1, super().set, key, value, exptime))

    async def delete(self, key: bytes) -> bool:
        return bool(await self._call("delete", 1, super().delete, key))
