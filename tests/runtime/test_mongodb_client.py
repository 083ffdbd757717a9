"""The services' MongoDB client against the test MongoDB server (FerretDB or mongod)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from socialbench.runtime import mongodb_client
from socialbench.runtime.mongodb_client import (
    Collection,
    DuplicateKeyError,
    MongoClient,
    MongoCommandError,
    encode_message,
)
from socialbench.runtime.pipelining import StoreConnectionError
from socialbench.stack.servers import ServerCommand
from tests.services.support import unique_name

OPTIONS: dict[str, Any] = {"max_connections": 4, "connect_timeout_s": 2.0, "call_timeout_s": 5.0}


@pytest.fixture
async def client(mongodb_server: ServerCommand) -> AsyncIterator[MongoClient]:
    client = MongoClient.from_url(f"mongodb://{mongodb_server.address}", **OPTIONS)
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
def collection(client: MongoClient) -> Collection:
    return client["client_test"][unique_name("c")]


async def test_inserted_documents_are_found_sorted_limited_and_projected(
    collection: Collection,
) -> None:
    await collection.insert_one({"user": 1, "at": 5, "text": "b"})
    await collection.insert_many([{"user": 1, "at": 9, "text": "c"},
                                  {"user": 2, "at": 7, "text": "x"},
                                  {"user": 1, "at": 1, "text": "a"}])

    newest = await (collection.find({"user": 1}, {"_id": 0, "text": 1})
                    .sort("at", -1).limit(2).to_list())
    assert newest == [{"text": "c"}, {"text": "b"}]
    every = [document["at"] async for document in collection.find({"user": 1}).sort("at")]
    assert every == [1, 5, 9]
    assert await collection.find_one({"user": 2}, {"_id": 0}) == {"user": 2, "at": 7, "text": "x"}
    assert await collection.find_one({"user": 3}) is None
    assert await collection.count_documents({"user": 1}) == 3
    found = await collection.find_one({"text": "a"})
    assert found is not None and found["_id"] is not None  # an _id was given it


async def test_a_result_larger_than_a_batch_is_read_whole(
    collection: Collection, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mongodb_client, "_BATCH_SIZE", 3)
    await collection.insert_many([{"n": n} for n in range(10)])

    assert [d["n"] for d in await collection.find({}).sort("n").to_list()] == list(range(10))
    assert [d["n"] for d in await collection.find({}).sort("n").limit(7).to_list()] == list(
        range(7))


async def test_updates_and_deletes_say_how_many_documents_they_touched(
    collection: Collection,
) -> None:
    await collection.insert_many([{"k": 1, "v": 0}, {"k": 1, "v": 0}, {"k": 2, "v": 0}])

    assert await collection.update_one({"k": 2}, {"$set": {"v": 5}}) == 1
    assert await collection.update_one({"k": 3}, {"$set": {"v": 5}}) == 0
    assert await collection.update_one({"k": 3}, {"$set": {"v": 6}}, upsert=True) == 1
    assert await collection.find_one({"k": 3}, {"_id": 0}) == {"k": 3, "v": 6}
    assert await collection.delete_one({"k": 1}) == 1
    assert await collection.delete_many({"k": {"$in": [1, 2]}}) == 2
    assert await collection.delete_many({"k": 1}) == 0
    assert [d["k"] for d in await collection.find({}).to_list()] == [3]


async def test_a_unique_index_refuses_duplicates_and_keeps_the_rest(
    collection: Collection,
) -> None:
    assert await collection.create_index("name", unique=True) == "name_1"
    assert await collection.create_index("name", unique=True) == "name_1"  # again: no-op
    assert await collection.create_index([("a", 1), ("b", -1)]) == "a_1_b_-1"
    await collection.insert_one({"name": "taken"})

    with pytest.raises(DuplicateKeyError) as one:
        await collection.insert_one({"name": "taken"})
    assert one.value.code == 11000 and one.value.indexes == [0]
    with pytest.raises(DuplicateKeyError) as many:
        await collection.insert_many([{"name": "new"}, {"name": "taken"}, {"name": "other"},
                                      {"name": "new"}])
    assert many.value.indexes == [1, 3]
    names = sorted(d["name"] for d in await collection.find({}).to_list())
    assert names == ["new", "other", "taken"]  # the unordered insert stored the rest


async def test_a_refused_command_is_an_error_with_the_servers_code(client: MongoClient) -> None:
    with pytest.raises(MongoCommandError) as refused:
        await client.command("client_test", {"no_such_command": 1})
    assert refused.value.code is not None and not isinstance(refused.value, DuplicateKeyError)
    assert await client.ping()


class LosingProxy:
    """A TCP proxy to the MongoDB server that closes a client's connection instead of
    passing on the server's reply, for the first ``lose`` commands: a command that
    landed, and whose answer was lost with its connection."""

    def __init__(self, upstream: ServerCommand, lose: int) -> None:
        self.upstream = upstream
        self.lose = lose
        self.server: asyncio.Server | None = None

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"mongodb://127.0.0.1:{port}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(self.upstream.host,
                                                             self.upstream.port)
        try:
            while True:
                request = await _message(reader)
                up_writer.write(request)
                reply = await _message(up_reader)
                if self.lose > 0:
                    self.lose -= 1
                    break  # the command ran; its reply is lost with the connection
                writer.write(reply)
        except asyncio.IncompleteReadError:
            pass
        finally:
            writer.close()
            up_writer.close()

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


async def _message(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readexactly(4)
    return head + await reader.readexactly(int.from_bytes(head, "little") - 4)


@pytest.fixture
async def losing(mongodb_server: ServerCommand) -> AsyncIterator[tuple[LosingProxy, Collection]]:
    proxy = LosingProxy(mongodb_server, lose=0)
    client = MongoClient.from_url(await proxy.start(), **OPTIONS)
    try:
        yield proxy, client["client_test"][unique_name("lost")]
    finally:
        await client.close()
        await proxy.close()


async def test_an_insert_whose_reply_was_lost_is_sent_again_and_stored_once(
    losing: tuple[LosingProxy, Collection],
) -> None:
    proxy, collection = losing
    await collection.create_index("post_id", unique=True)
    await collection.insert_one({"post_id": 0})

    proxy.lose = 1
    await collection.insert_one({"post_id": 1})  # landed, answer lost, sent again: a success
    assert await collection.count_documents({"post_id": 1}) == 1

    proxy.lose = 1
    with pytest.raises(DuplicateKeyError) as taken:  # its own duplicate, and a real one
        await collection.insert_many([{"post_id": 2}, {"post_id": 0}, {"post_id": 3}])
    assert taken.value.indexes == [1]
    assert sorted(d["post_id"] for d in await collection.find({}).to_list()) == [0, 1, 2, 3]

    proxy.lose = 1
    with pytest.raises(DuplicateKeyError):  # a caller's own _id is not told from a landing
        await collection.insert_one({"_id": "mine", "post_id": 4})
    assert await collection.count_documents({"_id": "mine"}) == 1


async def test_a_command_lost_twice_is_an_error(losing: tuple[LosingProxy, Collection]) -> None:
    proxy, collection = losing
    proxy.lose = 2
    with pytest.raises(StoreConnectionError):
        await collection.find_one({})


@pytest.mark.parametrize("url", [
    "mongodb://user:secret@127.0.0.1:27017/?authMechanism=PLAIN",
    "mongodb://127.0.0.1:27017/?tls=true", "mongodb://a:27017,b:27017",
    "redis://127.0.0.1:6379", "mongodb+srv://cluster.example",
])
def test_urls_of_what_the_client_cannot_do_are_refused(url: str) -> None:
    with pytest.raises(ValueError, match=r"mongodb://(\[user:password@\])?host"):
        MongoClient.from_url(url, **OPTIONS)


async def test_a_reply_is_read_only_once_it_is_whole() -> None:
    def connection_with(data: bytes) -> mongodb_client.MongoConnection:
        connection = mongodb_client.MongoConnection(MongoClient("127.0.0.1", 1, **OPTIONS))
        connection.feed(data)
        return connection

    message = encode_message(7, {"ok": 1, "n": 2})
    for cut in (3, 20, len(message) - 1):
        assert connection_with(message[:cut]).read_reply(None) is mongodb_client.INCOMPLETE
    connection = connection_with(message + message[:5])
    assert connection.read_reply(None) == {"ok": 1, "n": 2}
    assert connection.has_unread()  # the next reply's first bytes stay
    not_op_msg = (32).to_bytes(4, "little") + bytes(28)  # op code 0
    with pytest.raises(StoreConnectionError, match="no OP_MSG"):
        connection_with(not_op_msg).read_reply(None)
    header = message[:21]  # a whole message's length, whose body is no BSON document
    with pytest.raises(StoreConnectionError, match="unreadable reply"):
        connection_with(header + b"\x0b\x00\x00\x00" + bytes(len(message) - 25)).read_reply(None)
