"""The bulk path (workloads/seeding/bulk.py) on real stores: the services' own logic in
process writes what the requests would have written, inserts coalesced."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from typing import Any

import pytest

from socialbench.registry import ServiceSpec
from socialbench.runtime.mongodb_client import DuplicateKeyError, MongoClient
from socialbench.runtime.pipelining import StoreConnectionError
from socialbench.runtime.settings import Settings
from socialbench.services.home_timeline import timeline_key
from socialbench.stack.servers import ServerCommand, free_port
from socialbench.workloads.definitions.socialnetwork import PostFields
from socialbench.workloads.seeding.bulk import (
    CoalescingCollection,
    InProcessServices,
    Published,
    UndoFailed,
)


@pytest.fixture
async def services(redis_server: ServerCommand, memcached_server: ServerCommand,
                   mongodb_server: ServerCommand) -> AsyncIterator[InProcessServices]:
    def settings_of(spec: ServiceSpec) -> Settings:
        return Settings(redis_url=f"redis://{redis_server.address}/0",
                        memcached_address=memcached_server.address,
                        mongodb_url=f"mongodb://{mongodb_server.address}")

    in_process = InProcessServices(settings_of)
    await in_process.start()
    yield in_process
    await in_process.close()


async def test_concurrent_inserts_go_out_together_and_a_duplicate_fails_its_caller_only(
        mongodb_server: ServerCommand) -> None:
    client = MongoClient.from_url(f"mongodb://{mongodb_server.address}", max_connections=4,
                                  connect_timeout_s=5, call_timeout_s=30)
    name = f"coalesce-{random.getrandbits(32)}"
    collection = CoalescingCollection(client["scratch"][name])
    await collection.insert_one({"_id": "taken"})
    documents = [{"_id": f"doc-{i}"} for i in range(50)]
    outcomes = await asyncio.gather(
        *(collection.insert_one(d) for d in documents),
        collection.insert_many([{"_id": "fresh"}, {"_id": "taken"}, {"_id": "doc-3"}]),
        return_exceptions=True)
    assert outcomes[:50] == [None] * 50
    duplicate = outcomes[50]
    assert isinstance(duplicate, DuplicateKeyError) and duplicate.indexes == [1, 2]
    # The first insert went alone; the 51 callers of one turn of the loop, in one batch.
    assert collection.batches == 2 and collection.documents == 54
    stored = {d["_id"] for d in await collection.find({}).to_list()}
    assert stored == {"taken", "fresh", *(d["_id"] for d in documents)}
    await client["scratch"][name].command({"drop": name})
    await client.close()


def post_by(author: int, mentioned: int, url: str) -> PostFields:
    text = f"{random.getrandbits(64):x} @username_{mentioned} {url}"
    return PostFields(f"username_{author}", author, text, [str(random.getrandbits(60))],
                      ["png"])


async def timeline(services: InProcessServices, service: str, user: int) -> list[Any]:
    import orjson

    raw = await services.logic[service].read(user, 0, 100)
    posts: list[Any] = orjson.loads(raw)
    return posts


async def test_composed_in_bulk_as_one_by_one(services: InProcessServices) -> None:
    base = random.randrange(10**9, 10**12)
    author, fan, mentioned = base, base + 1, base + 2
    for user in (author, fan, mentioned):
        assert await services.register(user, "f", "l", f"username_{user}", "p") == "ok"
    assert await services.register(author, "f", "l", f"username_{author}", "p") == "exists"
    await services.follow_many([(fan, author), (fan, author)])  # again: kept once

    one = post_by(author, mentioned, "http://one.example")
    one_id = await services.compose(one.username, one.user_id, one.text, one.media_ids,
                                    one.media_types, one.post_type)
    batch = [post_by(author, mentioned, f"http://{i}.example") for i in range(3)]
    journaled: list[Published] = []
    ids = await services.compose_many(batch, journaled.extend)
    assert all(isinstance(post_id, str) for post_id in ids)
    assert [p.post_id for p in journaled] == [int(i) for i in ids]  # type: ignore[arg-type]
    assert all(p.mentioned == [mentioned] for p in journaled)

    posts = services.logic["post-storage"].posts
    stored = {d["post_id"]: d for d in await posts.find(
        {"post_id": {"$in": [int(one_id), *map(int, ids)]}}, {"_id": 0}).to_list()}
    assert len(stored) == 4
    single = stored[int(one_id)]
    for post_id in ids:
        document = stored[int(post_id)]  # type: ignore[arg-type]
        assert set(document) == set(single)
        assert document["creator"] == single["creator"]
        assert document["user_mentions"] == single["user_mentions"]
        assert document["urls"][0]["shortened_url"].startswith("http://short-url/")
        assert document["text"].endswith(document["urls"][0]["shortened_url"])

    expected = {one_id, *ids}
    for service, reader in (("user-timeline", author), ("home-timeline", fan),
                            ("home-timeline", mentioned)):
        found = {post["post_id"] for post in await timeline(services, service, reader)}
        assert found == expected, (service, reader)
    assert await timeline(services, "home-timeline", author) == []  # not its own

    # Undone (a resumed seeding's unfinished chunk): gone from everywhere.
    await services.undo(journaled)
    for service, reader in (("user-timeline", author), ("home-timeline", fan)):
        found = {post["post_id"] for post in await timeline(services, service, reader)}
        assert found == {one_id}, (service, reader)
    redis = services.logic["home-timeline"].redis
    members = await redis.zrevrange(timeline_key(fan), 0, -1)
    assert [int(m) for m in members] == [int(one_id)]
    assert await posts.count_documents({"post_id": {"$in": [int(i) for i in ids]}}) == 0


async def test_a_failed_write_undoes_the_batch_and_a_failed_undo_is_not_taken_for_done(
        services: InProcessServices) -> None:
    base = random.randrange(10**9, 10**12)
    for user in (base, base + 1):
        await services.register(user, "f", "l", f"username_{user}", "p")
    timelines = services.logic["user-timeline"]
    working = timelines.entries
    unreachable = MongoClient.from_url(f"mongodb://127.0.0.1:{free_port()}", max_connections=1,
                                       connect_timeout_s=0.5, call_timeout_s=2)
    timelines.entries = unreachable["user-timeline"]["user-timeline"]
    try:
        journaled: list[Published] = []
        [outcome] = await services.compose_many([post_by(base, base + 1, "http://a.example")],
                                                journaled.extend)
        assert isinstance(outcome, StoreConnectionError)
        posts = services.logic["post-storage"].posts
        assert await posts.count_documents({"post_id": journaled[0].post_id}) == 0
        with pytest.raises(UndoFailed, match="1 removals of 1 posts failed"):
            await services.undo(journaled)
    finally:
        timelines.entries = working
        await unreachable.close()
    await services.undo(journaled)  # the store is back: undone
