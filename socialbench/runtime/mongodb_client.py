"""The services' MongoDB client: OP_MSG commands over pipelining connections.

Ours because PyMongo spent 3-4 times its CPU per command on the three MongoDB writes of
every compose (docs/performance.md, ``bench store-clients``). It has the commands the
services use, in PyMongo's shape (``client[db][collection]``: ``insert_one``,
``insert_many`` unordered, ``find_one``, ``find`` with ``sort``/``limit``,
``update_one``, ``delete_one``, ``delete_many``, ``count_documents``, ``create_index``;
:meth:`MongoClient.ping`), BSON by PyMongo's ``bson``. Connections, bounds and the one
retry of a lost command are :mod:`~socialbench.runtime.pipelining`'s; a retry is safe
for what the services send (an insert's ``_id`` is chosen before the first try). One
server a URL, ``mongodb://[user:password@]host[:port][/db][?authSource=&authMechanism=]``,
logged in with SCRAM once per connection (docs/stores.md, "Credentials"); the rest is
PyMongo's (:mod:`~socialbench.runtime.mongodb_pymongo`). Errors, below pipelining's:
``StoreReplyError`` > :class:`MongoCommandError` (the server's code and message) >
:class:`DuplicateKeyError` (a unique index; ``indexes`` names the documents).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import itertools
import os
import struct
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Self
from urllib.parse import parse_qsl, unquote, urlsplit

import bson
from bson import Binary, ObjectId
from bson.errors import BSONError
from pymongo.saslprep import saslprep

from socialbench.runtime.pipelining import (
    INCOMPLETE,
    PipelinedClient,
    PipelinedConnection,
    StoreClientError,
    StoreConnectionError,
    StoreReplyError,
)

Document = dict[str, Any]
IndexKeys = str | Sequence[tuple[str, int]]

OP_MSG = 2013
DUPLICATE_KEY = 11000  # a unique index's duplicate
AUTHENTICATION_FAILED = 18
SCRAM_MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-1": "sha1"}
_HEADER = struct.Struct("<iiiiI")  # length, request id, response to, op code, flag bits
_HEADER_AND_KIND = _HEADER.size + 1
_CHECKSUM_PRESENT = 1
_MAX_MESSAGE = 48 * 1024 * 1024  # a server's maxMessageSizeBytes
_BATCH_SIZE = 10_000  # documents a find asks for at once (each batch is also <= 16 MiB)


class MongoCommandError(StoreReplyError):
    """The server refused a command (``ok: 0``, or a write error)."""

    def __init__(self, message: str, code: int | None = None,
                 details: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.details: Mapping[str, Any] = details or {}


class DuplicateKeyError(MongoCommandError):
    """A write hit a unique index; ``indexes``: the positions of the documents that did."""

    def __init__(self, message: str, indexes: Sequence[int] = (0,),
                 details: Mapping[str, Any] | None = None) -> None:
        super().__init__(message, DUPLICATE_KEY, details)
        self.indexes = list(indexes)


def encode_message(request_id: int, command: Mapping[str, Any]) -> bytes:
    """``command`` as one OP_MSG: its header, no flags, one body section."""
    body = bson.encode(command)
    return _HEADER.pack(_HEADER_AND_KIND + len(body), request_id, 0, OP_MSG, 0) + b"\x00" + body


def topology_of_hello(hello: Mapping[str, Any]) -> str:
    """What a server's ``hello`` says it is: ``sharded`` (a mongos: ``msg: isdbgrid``),
    ``replica-set`` (a member: ``setName``) or ``single``."""
    if hello.get("msg") == "isdbgrid":
        return "sharded"
    return "replica-set" if "setName" in hello else "single"


def check_reply(reply: Document) -> Document:
    """``reply``, if the command succeeded; else :class:`MongoCommandError`."""
    if reply.get("ok") != 1:
        code = reply.get("code")
        message = str(reply.get("errmsg", reply))
        if code == DUPLICATE_KEY:
            raise DuplicateKeyError(message, details=reply)
        raise MongoCommandError(message, code, reply)
    return reply


def check_write(reply: Document) -> Document:
    """``reply`` of a write (its ``ok`` checked by :meth:`MongoClient.command`), if every
    document was written; else its first error."""
    errors: list[Document] = reply.get("writeErrors") or []
    if errors:
        if all(error.get("code") == DUPLICATE_KEY for error in errors):
            raise DuplicateKeyError(str(errors[0].get("errmsg")),
                                    [int(error["index"]) for error in errors], reply)
        first = next(error for error in errors if error.get("code") != DUPLICATE_KEY)
        raise MongoCommandError(str(first.get("errmsg")), first.get("code"), reply)
    concern = reply.get("writeConcernError")
    if concern:
        raise MongoCommandError(str(concern.get("errmsg")), concern.get("code"), reply)
    return reply


class MongoConnection(PipelinedConnection):
    """A connection that reads OP_MSG replies, each one BSON document."""

    store = "MongoDB"

    def __init__(self, client: PipelinedClient) -> None:
        super().__init__(client)
        self._buffer = bytearray()

    def feed(self, data: bytes) -> None:
        self._buffer += data

    def read_reply(self, expect: Any) -> Any:
        buffer = self._buffer
        if len(buffer) < _HEADER_AND_KIND:
            return INCOMPLETE
        length, _, _, op_code, flags = _HEADER.unpack_from(buffer)
        if op_code != OP_MSG or not _HEADER_AND_KIND < length <= _MAX_MESSAGE:
            raise StoreConnectionError(
                f"MongoDB sent no OP_MSG reply (op code {op_code}, {length} bytes)")
        if len(buffer) < length:
            return INCOMPLETE
        end = length - 4 if flags & _CHECKSUM_PRESENT else length
        if buffer[_HEADER.size] != 0:
            raise StoreConnectionError("MongoDB's reply does not begin with its body")
        try:
            reply = bson.decode(bytes(buffer[_HEADER_AND_KIND:end]))
        except BSONError as exc:
            raise StoreConnectionError(f"MongoDB sent an unreadable reply: {exc}") from None
        finally:
            del buffer[:length]
        return reply

    def has_unread(self) -> bool:
        return bool(self._buffer)


class MongoClient(PipelinedClient):
    """Commands to one MongoDB server over up to ``max_connections`` pipelining connections."""

    connection_class = MongoConnection

    def __init__(self, host: str, port: int, *, credentials: Credentials | None = None,
                 **options: Any) -> None:
        super().__init__(host, port, **options)
        self.credentials = credentials
        self._request_ids = itertools.count(1)

    @classmethod
    def from_url(cls, url: str, **options: Any) -> Self:
        """A client of ``mongodb://[user:password@]host[:port][/database]``, with no option
        but ``authSource`` and ``authMechanism`` (SCRAM-SHA-256 or SCRAM-SHA-1)."""
        parts = urlsplit(url)
        if parts.scheme != "mongodb" or not parts.hostname or "," in parts.netloc:
            raise ValueError(f"not a mongodb://host[:port] URL of one server: {url!r}")
        given = {name.lower(): value for name, value in parse_qsl(parts.query)}
        mechanism = given.pop("authmechanism", "SCRAM-SHA-256")
        source = given.pop("authsource", None) or unquote(parts.path.strip("/")) or "admin"
        if given or mechanism not in SCRAM_MECHANISMS:
            raise ValueError(f"{parts.hostname}: the services' MongoDB client takes "
                             "mongodb://[user:password@]host[:port] with no option but "
                             "authSource and a SCRAM authMechanism; the others are PyMongo's "
                             "(runtime/mongodb_pymongo.py)")
        credentials = None
        if parts.username is not None:
            credentials = Credentials(unquote(parts.username), unquote(parts.password or ""),
                                      source, mechanism)
        return cls(parts.hostname, parts.port or 27017, credentials=credentials, **options)

    async def handshake(self, connection: PipelinedConnection) -> None:
        """Log in, when there are credentials (SCRAM: two or three round trips)."""
        if self.credentials is None:
            return
        credentials = self.credentials
        try:
            await credentials.log_in(
                lambda command: self._connection_command(connection, command))
        except MongoCommandError as exc:
            refusal = MongoCommandError(
                f"MongoDB at {self.host}:{self.port} refused user {credentials.username!r} "
                f"(authSource {credentials.source}, {credentials.mechanism}): {exc}",
                exc.code, exc.details)
            connection.abort(refusal)
            raise refusal from None
        except StoreClientError as exc:
            connection.abort(exc)
            raise

    async def _connection_command(self, connection: PipelinedConnection,
                                  command: Mapping[str, Any]) -> Document:
        payload = encode_message(next(self._request_ids), command)
        return check_reply(await connection.send(payload, None))

    def __getitem__(self, name: str) -> Database:
        return Database(self, name)

    async def command(self, database: str, command: Mapping[str, Any]) -> Document:
        """The reply to ``command`` (its name the first key) run in ``database``; a
        refusal raises :class:`MongoCommandError`."""
        payload = encode_message(next(self._request_ids), {**command, "$db": database})
        return check_reply(await self.send(payload, None))

    async def ping(self) -> bool:
        return bool((await self.command("admin", {"ping": 1})).get("ok") == 1)

    async def describe(self) -> dict[str, str]:
        """``{"client": "socialbench", "topology": ...}``: what the server's ``hello``
        says it is (:func:`topology_of_hello`), or ``unknown`` when it does not answer."""
        try:
            topology = topology_of_hello(await self.command("admin", {"hello": 1}))
        except StoreClientError:
            topology = "unknown"
        return {"client": "socialbench", "topology": topology}


class Credentials:
    """A user's name and password, where and how it logs in; SCRAM's salted keys, kept."""

    def __init__(self, username: str, password: str, source: str,
                 mechanism: str = "SCRAM-SHA-256") -> None:
        if mechanism not in SCRAM_MECHANISMS:
            raise ValueError(f"not a SCRAM mechanism: {mechanism!r}")
        self.username, self.source, self.mechanism = username, source, mechanism
        self.digest = SCRAM_MECHANISMS[mechanism]
        if mechanism == "SCRAM-SHA-1":  # MongoDB's SHA-1 password
            password = hashlib.md5(f"{username}:mongo:{password}".encode()).hexdigest()
        else:
            password = saslprep(password)
        self._password = password.encode()
        self._keys: dict[tuple[bytes, int], tuple[bytes, bytes]] = {}

    def __repr__(self) -> str:  # never the password
        return f"Credentials({self.username!r}, source={self.source!r}, {self.mechanism})"

    async def log_in(self, command: Any) -> None:
        """SCRAM's conversation, each step sent by ``command``; a refusal raises
        :class:`MongoCommandError`, as does a server that cannot prove it knows the key."""
        nonce = base64.b64encode(os.urandom(24)).decode()
        user = self.username.replace("=", "=3D").replace(",", "=2C")
        first_bare = f"n={user},r={nonce}"
        reply = await command({
            "saslStart": 1, "mechanism": self.mechanism,
            "payload": Binary(f"n,,{first_bare}".encode()),
            "autoAuthorize": 1, "options": {"skipEmptyExchange": True}, "$db": self.source})
        server_first = bytes(reply["payload"]).decode()
        fields = dict(field.split("=", 1) for field in server_first.split(","))
        iterations = int(fields.get("i", 0))
        if not fields.get("r", "").startswith(nonce) or "s" not in fields or iterations < 4096:
            raise MongoCommandError(f"MongoDB's SCRAM reply is not valid: {server_first!r}",
                                    AUTHENTICATION_FAILED)
        client_key, server_key = self._salted_keys(base64.b64decode(fields["s"]), iterations)
        without_proof = f"c=biws,r={fields['r']}"
        auth_message = f"{first_bare},{server_first},{without_proof}".encode()
        stored_key = hashlib.new(self.digest, client_key).digest()
        signature = hmac.digest(stored_key, auth_message, self.digest)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        reply = await command({
            "saslContinue": 1, "conversationId": reply["conversationId"],
            "payload": Binary(f"{without_proof},p={base64.b64encode(proof).decode()}".encode()),
            "$db": self.source})
        server_final = dict(field.split("=", 1)
                            for field in bytes(reply["payload"]).decode().split(",") if field)
        expected = base64.b64encode(hmac.digest(server_key, auth_message, self.digest)).decode()
        if not hmac.compare_digest(server_final.get("v", ""), expected):
            raise MongoCommandError("MongoDB's SCRAM signature is wrong: not the server the "
                                    "credentials are for", AUTHENTICATION_FAILED)
        while not reply.get("done"):  # servers that do not skip the empty last step
            reply = await command({"saslContinue": 1, "conversationId": reply["conversationId"],
                                   "payload": Binary(b""), "$db": self.source})

    def _salted_keys(self, salt: bytes, iterations: int) -> tuple[bytes, bytes]:
        """The client and server keys of the password with ``salt``, derived once."""
        keys = self._keys.get((salt, iterations))
        if keys is None:
            salted = hashlib.pbkdf2_hmac(self.digest, self._password, salt, iterations)
            keys = (hmac.digest(salted, b"Client Key", self.digest),
                    hmac.digest(salted, b"Server Key", self.digest))
            self._keys[salt, iterations] = keys
        return keys


class Database:
    """A database of a :class:`MongoClient`: ``database[collection]``."""

    def __init__(self, client: MongoClient, name: str) -> None:
        self.client = client
        self.name = name

    def __getitem__(self, name: str) -> Collection:
        return Collection(self, name)


class Collection:
    """One collection's commands, as PyMongo's ``AsyncCollection`` names them."""

    def __init__(self, database: Database, name: str) -> None:
        self.client = database.client
        self.database = database
        self.name = name

    async def command(self, command: Mapping[str, Any]) -> Document:
        return await self.client.command(self.database.name, command)

    async def insert_one(self, document: Mapping[str, Any]) -> None:
        """Insert ``document`` (an ``_id`` is given it if it has none)."""
        await self.insert_many([document])

    async def insert_many(self, documents: Sequence[Mapping[str, Any]]) -> None:
        """Insert ``documents``, unordered: each is tried, and the duplicates raise one
        :class:`DuplicateKeyError` naming them after the others are stored."""
        if not documents:
            return
        fresh_ids: dict[int, ObjectId] = {}
        stored: list[Mapping[str, Any]] = []
        for position, document in enumerate(documents):
            if "_id" not in document:
                fresh_ids[position] = ObjectId()
                document = {"_id": fresh_ids[position], **document}
            stored.append(document)
        try:
            check_write(await self.command(
                {"insert": self.name, "documents": stored, "ordered": False}))
        except DuplicateKeyError as exc:
            await self._keep_real_duplicates(exc, fresh_ids)

    async def _keep_real_duplicates(self, error: DuplicateKeyError,
                                    fresh_ids: dict[int, ObjectId]) -> None:
        """Raise ``error`` for the duplicates that are not a first try's own documents
        (its ``_id``, fresh from here, found stored), if any are left."""
        ours = {position: fresh_ids[position] for position in error.indexes
                if position in fresh_ids}
        landed: set[Any] = set()
        if ours:
            found = await self.find({"_id": {"$in": list(ours.values())}}, {"_id": 1}).to_list()
            landed = {document["_id"] for document in found}
        duplicates = [position for position in error.indexes
                      if position not in ours or ours[position] not in landed]
        if duplicates:
            raise DuplicateKeyError(str(error), duplicates, error.details)

    def find(self, filter: Mapping[str, Any],
             projection: Mapping[str, Any] | None = None) -> Cursor:
        """The documents that match ``filter``: a :class:`Cursor` to sort and limit."""
        return Cursor(self, filter, projection)

    async def find_one(self, filter: Mapping[str, Any],
                       projection: Mapping[str, Any] | None = None) -> Document | None:
        """The first document that matches ``filter``, or ``None``."""
        documents = await self.find(filter, projection).limit(1).to_list()
        return documents[0] if documents else None

    async def count_documents(self, filter: Mapping[str, Any]) -> int:
        """How many documents match ``filter``."""
        return int((await self.command({"count": self.name, "query": filter}))["n"])

    async def update_one(self, filter: Mapping[str, Any], update: Mapping[str, Any], *,
                         upsert: bool = False) -> int:
        """Apply ``update`` to the first document that matches; how many matched."""
        reply = check_write(await self.command({"update": self.name, "updates": [
            {"q": filter, "u": update, "multi": False, "upsert": upsert}]}))
        return int(reply.get("n", 0))

    async def delete_one(self, filter: Mapping[str, Any]) -> int:
        """Delete the first document that matches; how many were deleted."""
        return await self._delete(filter, limit=1)

    async def delete_many(self, filter: Mapping[str, Any]) -> int:
        """Delete every document that matches; how many were deleted."""
        return await self._delete(filter, limit=0)

    async def _delete(self, filter: Mapping[str, Any], *, limit: int) -> int:
        reply = check_write(await self.command(
            {"delete": self.name, "deletes": [{"q": filter, "limit": limit}]}))
        return int(reply.get("n", 0))

    async def create_index(self, keys: IndexKeys, *, unique: bool = False) -> str:
        """Create an index (nothing if it exists); its name, as MongoDB names it."""
        fields = [(keys, 1)] if isinstance(keys, str) else list(keys)
        name = "_".join(f"{field}_{direction}" for field, direction in fields)
        index: Document = {"key": dict(fields), "name": name}
        if unique:
            index["unique"] = True
        await self.command({"createIndexes": self.name, "indexes": [index]})
        return name


class Cursor:
    """A ``find``: ``sort`` and ``limit`` it, then read it with ``to_list`` or ``async for``
    (every batch is read first: the services read small results whole)."""

    def __init__(self, collection: Collection, filter: Mapping[str, Any],
                 projection: Mapping[str, Any] | None) -> None:
        self.collection = collection
        self.command: Document = {"find": collection.name, "filter": filter}
        if projection is not None:
            self.command["projection"] = projection

    def sort(self, field: str, direction: int = 1) -> Self:
        self.command.setdefault("sort", {})[field] = direction
        return self

    def limit(self, count: int) -> Self:
        if count:
            self.command["limit"] = count
        return self

    async def to_list(self) -> list[Document]:
        """Every document, in the server's order (the sort's, if sorted)."""
        limit = self.command.get("limit", 0)
        command = {**self.command, "batchSize": min(limit, _BATCH_SIZE) if limit else _BATCH_SIZE}
        if limit == 1:
            command["singleBatch"] = True
        cursor = (await self.collection.command(command))["cursor"]
        documents: list[Document] = list(cursor["firstBatch"])
        while cursor["id"] and (not limit or len(documents) < limit):
            cursor = (await self.collection.command({
                "getMore": cursor["id"], "collection": self.collection.name,
                "batchSize": _BATCH_SIZE}))["cursor"]
            documents += cursor["nextBatch"]
        if cursor["id"]:
            await self.collection.command(
                {"killCursors": self.collection.name, "cursors": [cursor["id"]]})
        return documents

    async def __aiter__(self) -> AsyncIterator[Document]:
        for document in await self.to_list():
            yield document
