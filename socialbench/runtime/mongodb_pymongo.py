"""PyMongo's ``AsyncMongoClient`` behind the services' MongoDB interface, and which client a
URL gets.

:func:`mongodb_client` chooses per URL: one server (``mongodb://host[:port][/db]``, with
or without credentials, ``authSource`` and a SCRAM ``authMechanism``) gets ours
(:mod:`~socialbench.runtime.mongodb_client`, 3-4 times cheaper per command: docs/stores.md,
"What the choice costs"); anything else (several hosts, ``mongodb+srv://``, any other
option such as ``tls=true`` or ``replicaSet=``) gets :class:`PyMongoClient`.

:class:`PyMongoClient` has our interface and raises our errors (``ConnectionFailure`` ->
``StoreConnectionError`` or ``StoreTimeout``, ``OperationFailure`` -> ``MongoCommandError``
or ``DuplicateKeyError``, any other ``PyMongoError`` -> ``StoreReplyError``). Our bounds
become PyMongo's options (an option the URL gives wins; waiting for a server is the call
timeout, so an election is waited through); with a tracer, a command listener makes a
span of each command of a traced request.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Self
from urllib.parse import parse_qsl, urlsplit

from bson import ObjectId
from opentelemetry.trace import Span, SpanKind, StatusCode, Tracer
from pymongo import AsyncMongoClient, monitoring
from pymongo import version as pymongo_version
from pymongo.errors import (
    BulkWriteError,
    ConfigurationError,
    ConnectionFailure,
    OperationFailure,
    PyMongoError,
)
from pymongo.errors import DuplicateKeyError as PyMongoDuplicateKeyError

from socialbench.runtime.mongodb_client import (
    DUPLICATE_KEY,
    Collection,
    Document,
    DuplicateKeyError,
    IndexKeys,
    MongoClient,
    MongoCommandError,
)
from socialbench.runtime.pipelining import (
    StoreClientError,
    StoreConnectionError,
    StoreReplyError,
    StoreTimeout,
)
from socialbench.runtime.tracing import in_traced_request

_BATCH_SIZE = 10_000  # documents a find asks for at once, as ours
# PyMongo's topology types, as describe() names them (loadBalanced fronts mongos routers).
_TOPOLOGIES = {"Single": "single", "ReplicaSetWithPrimary": "replica-set",
               "ReplicaSetNoPrimary": "replica-set", "Sharded": "sharded",
               "LoadBalanced": "sharded"}


def uses_our_client(url: str) -> bool:
    """Whether ``url`` is one server our client serves: ``mongodb://[user:password@]host
    [:port][/database]``, with no option but ``authSource`` and a SCRAM ``authMechanism``."""
    parts = urlsplit(url)
    if parts.scheme != "mongodb" or not parts.hostname or "," in parts.netloc:
        return False
    options = {name.lower(): value for name, value in parse_qsl(parts.query,
                                                                keep_blank_values=True)}
    mechanism = options.pop("authmechanism", "SCRAM-SHA-256")
    options.pop("authsource", None)
    return not options and mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-1")


def mongodb_client(url: str, *, tracer: Tracer | None = None,
                   **options: Any) -> MongoClient | PyMongoClient:
    """The client of ``url`` (see the module's doc for which), with our bounds ``options``
    (``max_connections``, ``connect_timeout_s``, ``call_timeout_s``); with ``tracer``, its
    commands are spans in traced requests."""
    if uses_our_client(url):
        if tracer is None:
            return MongoClient.from_url(url, **options)
        from socialbench.runtime.store_spans import TracedMongoClient
        return TracedMongoClient.from_url(url, tracer=tracer, **options)
    return PyMongoClient.from_url(url, tracer=tracer, **options)


async def describe_mongodb(url: str, *, timeout_s: float = 2.0) -> dict[str, str]:
    """What a service given ``url`` runs (for a results manifest): the ``describe()`` of a
    client made for it, then closed; ``topology`` ``unknown`` if no server answered."""
    client = mongodb_client(url, max_connections=1, connect_timeout_s=timeout_s,
                            call_timeout_s=timeout_s)
    try:
        return await client.describe()
    finally:
        await client.close()


def store_error(exc: PyMongoError) -> StoreClientError:
    """PyMongo's ``exc`` as the services' store errors."""
    message = f"MongoDB: {str(exc)[:400]}"
    if isinstance(exc, BulkWriteError):
        errors: list[Document] = exc.details.get("writeErrors") or []
        if errors and all(error.get("code") == DUPLICATE_KEY for error in errors):
            return DuplicateKeyError(str(errors[0].get("errmsg")),
                                     [int(error["index"]) for error in errors], exc.details)
        first = next((error for error in errors if error.get("code") != DUPLICATE_KEY), {})
        return MongoCommandError(str(first.get("errmsg", message)), first.get("code"),
                                 exc.details)
    if isinstance(exc, PyMongoDuplicateKeyError):
        return DuplicateKeyError(message, details=exc.details)
    if isinstance(exc, OperationFailure):
        return MongoCommandError(message, exc.code, exc.details)
    if isinstance(exc, ConnectionFailure | ConfigurationError):
        return StoreTimeout(message) if exc.timeout else StoreConnectionError(message)
    return StoreReplyError(message)


class PyMongoClient:
    """PyMongo's ``AsyncMongoClient`` with the services' interface and errors."""

    def __init__(self, url: str, *, max_connections: int, connect_timeout_s: float,
                 call_timeout_s: float, reconnect_for_s: float | None = None,
                 tracer: Tracer | None = None) -> None:
        del reconnect_for_s  # PyMongo's own: its retryable reads and writes
        given = {name.lower() for name, _ in parse_qsl(urlsplit(url).query)}
        bounds = {"maxPoolSize": max_connections,
                  "connectTimeoutMS": round(connect_timeout_s * 1000),
                  "socketTimeoutMS": round(call_timeout_s * 1000),
                  "serverSelectionTimeoutMS": round(call_timeout_s * 1000),
                  "waitQueueTimeoutMS": round(call_timeout_s * 1000)}
        options: dict[str, Any] = {name: value for name, value in bounds.items()
                                   if name.lower() not in given}
        if tracer is not None:
            options["event_listeners"] = [CommandSpans(tracer)]
        try:
            with warnings.catch_warnings():
                # PyMongo only warns of an option's bad value, then goes without it.
                warnings.simplefilter("error", UserWarning)
                self.client: AsyncMongoClient[Document] = AsyncMongoClient(url, **options)
        except (ConfigurationError, ValueError, TypeError, OSError, UserWarning) as exc:
            # (OSError: a file the URL names, e.g. its tlsCAFile, cannot be read.)
            raise ValueError(f"a MongoDB URL PyMongo cannot use: {exc}") from None

    @classmethod
    def from_url(cls, url: str, **options: Any) -> Self:
        return cls(url, **options)

    def __getitem__(self, name: str) -> PyMongoDatabase:
        return PyMongoDatabase(self, name)

    async def command(self, database: str, command: Mapping[str, Any]) -> Document:
        """The reply to ``command`` (its name the first key) run in ``database``."""
        try:
            reply: Document = await self.client[database].command(dict(command))
        except PyMongoError as exc:
            raise store_error(exc) from None
        return reply

    async def ping(self) -> bool:
        return bool((await self.command("admin", {"ping": 1})).get("ok") == 1)

    async def close(self) -> None:
        await self.client.close()

    async def describe(self) -> dict[str, str]:
        """``{"client": "pymongo <version>", "topology": ...}``: ``single``,
        ``replica-set``, ``sharded`` (mongos routers, or a load balancer in front of them)
        as PyMongo found it after a ``ping``, or ``unknown`` when no server answered."""
        with contextlib.suppress(StoreClientError):
            await self.ping()
        description = self.client.topology_description
        topology = _TOPOLOGIES.get(description.topology_type_name, "unknown")
        if topology == "single":  # one server, connected to directly: what it is
            kinds = {server.server_type_name
                     for server in description.server_descriptions().values()}
            topology = ("sharded" if "Mongos" in kinds else
                        "replica-set" if kinds & {"RSPrimary", "RSSecondary"} else "single")
        return {"client": f"pymongo {pymongo_version}", "topology": topology}


class PyMongoDatabase:
    """A database of a :class:`PyMongoClient`: ``database[collection]``."""

    def __init__(self, client: PyMongoClient, name: str) -> None:
        self.client = client
        self.name = name

    def __getitem__(self, name: str) -> PyMongoCollection:
        return PyMongoCollection(self, name)


class PyMongoCollection:
    """One collection's commands, as :class:`~socialbench.runtime.mongodb_client.Collection`
    answers them."""

    def __init__(self, database: PyMongoDatabase, name: str) -> None:
        self.client = database.client
        self.database = database
        self.name = name
        self.collection = database.client.client[database.name][name]

    async def command(self, command: Mapping[str, Any]) -> Document:
        return await self.client.command(self.database.name, command)

    async def insert_one(self, document: Mapping[str, Any]) -> None:
        """Insert ``document`` (an ``_id`` is given it if it has none; it is not changed)."""
        try:
            await self.collection.insert_one(_with_id(document))
        except PyMongoError as exc:
            raise store_error(exc) from None

    async def insert_many(self, documents: Sequence[Mapping[str, Any]]) -> None:
        """Insert ``documents``, unordered: the duplicates raise one
        :class:`DuplicateKeyError` naming them after the others are stored."""
        if not documents:
            return
        try:
            await self.collection.insert_many([_with_id(document) for document in documents],
                                              ordered=False)
        except PyMongoError as exc:
            raise store_error(exc) from None

    def find(self, filter: Mapping[str, Any],
             projection: Mapping[str, Any] | None = None) -> PyMongoCursor:
        """The documents that match ``filter``: a cursor to sort and limit."""
        return PyMongoCursor(self, filter, projection)

    async def find_one(self, filter: Mapping[str, Any],
                       projection: Mapping[str, Any] | None = None) -> Document | None:
        """The first document that matches ``filter``, or ``None``."""
        try:
            return await self.collection.find_one(filter, projection)
        except PyMongoError as exc:
            raise store_error(exc) from None

    async def count_documents(self, filter: Mapping[str, Any]) -> int:
        """How many documents match ``filter``."""
        try:
            return await self.collection.count_documents(filter)
        except PyMongoError as exc:
            raise store_error(exc) from None

    async def update_one(self, filter: Mapping[str, Any], update: Mapping[str, Any], *,
                         upsert: bool = False) -> int:
        """Apply ``update`` to the first document that matches; the server's ``n`` (the
        document matched, or upserted), as ours."""
        try:
            result = await self.collection.update_one(filter, update, upsert=upsert)
        except PyMongoError as exc:
            raise store_error(exc) from None
        return int((result.raw_result or {}).get("n", 0))

    async def delete_one(self, filter: Mapping[str, Any]) -> int:
        """Delete the first document that matches; how many were deleted."""
        try:
            return (await self.collection.delete_one(filter)).deleted_count
        except PyMongoError as exc:
            raise store_error(exc) from None

    async def delete_many(self, filter: Mapping[str, Any]) -> int:
        """Delete every document that matches; how many were deleted."""
        try:
            return (await self.collection.delete_many(filter)).deleted_count
        except PyMongoError as exc:
            raise store_error(exc) from None

    async def create_index(self, keys: IndexKeys, *, unique: bool = False) -> str:
        """Create an index (nothing if it exists); its name, as MongoDB names it."""
        fields = [(keys, 1)] if isinstance(keys, str) else list(keys)
        try:
            return await self.collection.create_index(fields, unique=unique)
        except PyMongoError as exc:
            raise store_error(exc) from None


def _with_id(document: Mapping[str, Any]) -> Document:
    """``document`` with an ``_id`` (PyMongo would add one to the caller's own dict)."""
    if "_id" in document:
        return document if isinstance(document, dict) else dict(document)
    return {"_id": ObjectId(), **document}


class PyMongoCursor:
    """A ``find``: ``sort`` and ``limit`` it, then read it whole with ``to_list`` or
    ``async for``."""

    def __init__(self, collection: PyMongoCollection, filter: Mapping[str, Any],
                 projection: Mapping[str, Any] | None) -> None:
        self.collection = collection
        self.filter = filter
        self.projection = projection
        self.order: list[tuple[str, int]] = []
        self.count = 0

    def sort(self, field: str, direction: int = 1) -> Self:
        self.order.append((field, direction))
        return self

    def limit(self, count: int) -> Self:
        self.count = count
        return self

    async def to_list(self) -> list[Document]:
        """Every document, in the server's order (the sort's, if sorted)."""
        cursor = self.collection.collection.find(
            self.filter, self.projection, sort=self.order or None, limit=self.count,
            batch_size=min(self.count, _BATCH_SIZE) if self.count else _BATCH_SIZE)
        try:
            return await cursor.to_list()
        except PyMongoError as exc:
            raise store_error(exc) from None

    async def __aiter__(self) -> AsyncIterator[Document]:
        for document in await self.to_list():
            yield document


class CommandSpans(monitoring.CommandListener):
    """A client span of each command PyMongo sends for a traced request."""

    def __init__(self, tracer: Tracer) -> None:
        self.tracer = tracer
        self.spans: dict[tuple[int, Any], Span] = {}

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if not in_traced_request():
            return
        operation = event.command_name
        target = event.command.get(operation)
        attributes: dict[str, Any] = {"db.system.name": "mongodb",
                                      "db.operation.name": operation,
                                      "db.namespace": event.database_name}
        name = f"mongodb {operation}"
        if isinstance(target, str):
            attributes["db.collection.name"] = target
            name += f" {target}"
        self.spans[event.request_id, event.connection_id] = self.tracer.start_span(
            name, kind=SpanKind.CLIENT, attributes=attributes)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        span = self.spans.pop((event.request_id, event.connection_id), None)
        if span is not None:
            span.end()

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        span = self.spans.pop((event.request_id, event.connection_id), None)
        if span is not None:
            span.set_status(StatusCode.ERROR, str((event.failure or {}).get("errmsg", ""))[:200])
            span.end()


MongoDB = MongoClient | PyMongoClient
"""A client of the services' MongoDB, ours or PyMongo's."""
MongoCollection = Collection | PyMongoCollection
"""A collection of either."""
