"""FerretDB (SQLite) reads by ``_id`` and by indexed fields through the index, with
MongoDB's answers: our patch of scripts/ferretdb/ (see docs/ferretdb.md).

Skipped where the MongoDB server is a real mongod.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from bson import Int64
from pymongo import MongoClient
from pymongo.collection import Collection

from socialbench.stack.servers import ServerCommand, mongodb_flavour

pytestmark = pytest.mark.skipif(
    mongodb_flavour() == "mongod", reason="the patch is FerretDB's; mongod has its own planner"
)

COUNT = 3000
BASE = 2**40  # int64 ids, as post ids are
BIG = 2**60  # a double of it is printed 1152921504606847000, not ...846976


def _id(i: int) -> Int64:
    return Int64(BASE + i)


@pytest.fixture(scope="module")
def posts(mongodb_server: ServerCommand) -> Iterator[Collection[dict[str, Any]]]:
    client: MongoClient[dict[str, Any]] = MongoClient(f"mongodb://{mongodb_server.address}")
    db = client[f"indexes_{uuid.uuid4().hex[:12]}"]
    coll = db["post"]
    coll.create_index("user_id")
    coll.create_index("username", unique=True)
    coll.insert_many([{"_id": _id(i), "user_id": Int64(i % 1000), "username": f"user_{i}"}
                      for i in range(COUNT)])
    coll.insert_many([
        {"_id": Int64(BIG), "user_id": 2000.0, "username": "double_2000"},
        {"_id": Int64(BIG + 1), "user_id": 2000.5, "username": "double_2000_5"},
        {"_id": 1.5, "user_id": [2001, 2002], "username": "array"},
        {"_id": "a string id", "user_id": -0.0, "username": "minus_zero"},
    ])
    try:
        yield coll
    finally:
        client.drop_database(db.name)
        client.close()


def _names(coll: Collection[dict[str, Any]], query: dict[str, Any]) -> list[str]:
    return sorted(d["username"] for d in coll.find(query))


def test_find_one_by_id_and_by_indexed_fields(posts: Collection[dict[str, Any]]) -> None:
    found = posts.find_one({"_id": _id(1234)})
    assert found == {"_id": 2**40 + 1234, "user_id": 234, "username": "user_1234"}
    assert posts.find_one({"username": "user_2999"}) == {
        "_id": _id(2999), "user_id": 999, "username": "user_2999"}
    assert _names(posts, {"user_id": Int64(7)}) == ["user_1007", "user_2007", "user_7"]
    assert _names(posts, {"user_id": {"$eq": 7}}) == ["user_1007", "user_2007", "user_7"]
    assert posts.find_one({"_id": _id(COUNT)}) is None
    assert posts.find_one({"_id": Int64(-5)}) is None
    assert posts.find_one({"username": "nobody"}) is None
    assert posts.find_one({"user_id": 1999}) is None
    assert posts.find_one({"_id": "a string id"})["username"] == "minus_zero"  # type: ignore[index]


def test_numbers_of_other_types_equal_as_in_mongodb(posts: Collection[dict[str, Any]]) -> None:
    # An int64 _id found by the equal double and int32; no match for a non-integral double.
    assert posts.find_one({"_id": float(BASE + 42)})["username"] == "user_42"  # type: ignore[index]
    assert posts.find_one({"_id": 1.5})["username"] == "array"  # type: ignore[index]
    assert posts.find_one({"_id": BASE + 42.5}) is None
    assert _names(posts, {"user_id": 7.0}) == ["user_1007", "user_2007", "user_7"]
    assert _names(posts, {"user_id": 2000}) == ["double_2000"]
    assert _names(posts, {"user_id": Int64(2000)}) == ["double_2000"]
    assert _names(posts, {"user_id": 2000.5}) == ["double_2000_5"]
    # Exact comparison of int64 and double: 2^60 + 1 is no double, 2^60 is.
    assert posts.find_one({"_id": float(BIG)})["username"] == "double_2000"  # type: ignore[index]
    assert posts.find_one({"_id": float(BIG + 1)})["username"] == "double_2000"  # type: ignore[index]
    assert posts.find_one({"_id": Int64(BIG + 1)})["username"] == "double_2000_5"  # type: ignore[index]
    # -0.0 equals 0; an array matches each of its elements.
    assert _names(posts, {"user_id": 0}) == ["minus_zero", "user_0", "user_1000", "user_2000"]
    assert _names(posts, {"user_id": 0.0}) == ["minus_zero", "user_0", "user_1000", "user_2000"]
    assert _names(posts, {"user_id": 2002}) == ["array"]
    assert _names(posts, {"user_id": {"$in": [2001, 2000.0]}}) == ["array", "double_2000"]


def test_in_on_id(posts: Collection[dict[str, Any]]) -> None:
    ids = [_id(3), _id(30), float(BASE + 300), BASE + 3000, Int64(BIG + 1), "a string id"]
    assert _names(posts, {"_id": {"$in": ids}}) == [
        "double_2000_5", "minus_zero", "user_3", "user_30", "user_300"]
    assert _names(posts, {"_id": {"$in": [Int64(-1), "none"]}}) == []


def _plan(posts: Collection[dict[str, Any]], query: dict[str, Any]) -> dict[str, Any]:
    return posts.database.command("explain", {"find": posts.name, "filter": query})


@pytest.mark.parametrize("query", [
    {"_id": _id(17)},
    {"_id": 17.0},
    {"_id": "a string id"},
    {"_id": {"$in": [_id(1), _id(2), _id(3)]}},
    {"user_id": Int64(17)},
    {"user_id": {"$in": [1, 2.0]}},
    {"username": "user_17"},
    {"username": "user_17", "user_id": 17},
], ids=str)
def test_the_index_answers(posts: Collection[dict[str, Any]], query: dict[str, Any]) -> None:
    answer = _plan(posts, query)
    rows = answer["queryPlanner"]["Plan"]
    assert answer["filterPushdown"] is True, answer
    assert any("SEARCH" in row and "USING INDEX" in row for row in rows), rows
    assert not any("SCAN" in row for row in rows), rows


def test_other_filters_are_not_pushed_down(posts: Collection[dict[str, Any]]) -> None:
    for query in ({"other": 1}, {"user_id": {"$gt": 5}}, {"user_id": None}):
        assert _plan(posts, query)["filterPushdown"] is False, query
    assert _names(posts, {"user_id": {"$gt": 2000}}) == ["array", "double_2000_5"]
