"""The services' MongoDB interface from both clients (ours, PyMongo's behind it), with and
without credentials, against real FerretDB servers: plain, with a user, a one-member
replica set, and TLS."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from socialbench.runtime.mongodb_client import DuplicateKeyError, MongoClient, MongoCommandError
from socialbench.runtime.mongodb_pymongo import (
    MongoDB,
    PyMongoClient,
    describe_mongodb,
    mongodb_client,
    uses_our_client,
)
from socialbench.runtime.pipelining import StoreConnectionError
from socialbench.stack.servers import (
    ServerCommand,
    free_port,
    mongodb_command,
    mongodb_flavour,
)
from tests.runtime.conftest import MONGODB_USER
from tests.services.support import unique_name
from tests.support import serving

OPTIONS: dict[str, Any] = {"max_connections": 4, "connect_timeout_s": 2.0, "call_timeout_s": 5.0}
USER, PASSWORD = MONGODB_USER
CLIENTS = ["ours", "ours SCRAM-SHA-256", "ours SCRAM-SHA-1", "pymongo", "pymongo SCRAM-SHA-256"]


def url_of(kind: str, plain: ServerCommand, with_user: ServerCommand) -> str:
    if "SCRAM" not in kind:
        url = f"mongodb://{plain.address}"
        # Any option other than authSource/authMechanism selects PyMongo.
        return url + "/?appName=socialbench" if kind.startswith("pymongo") else url
    mechanism = kind.split()[-1]
    url = f"mongodb://{USER}:{PASSWORD}@{with_user.address}/?authSource=admin"
    return url + (f"&authMechanism={mechanism}" if kind.startswith("ours")
                  else "&appName=socialbench")


@pytest.fixture(params=CLIENTS)
async def client(request: pytest.FixtureRequest, mongodb_server: ServerCommand,
                 mongodb_user_server: ServerCommand) -> AsyncIterator[MongoDB]:
    kind: str = request.param
    client = mongodb_client(url_of(kind, mongodb_server, mongodb_user_server), **OPTIONS)
    assert isinstance(client, PyMongoClient if kind.startswith("pymongo") else MongoClient)
    try:
        yield client
    finally:
        await client.close()


async def test_the_services_commands_answer_the_same_from_either_client(
    client: MongoDB,
) -> None:
    collection = client["client_test"][unique_name("c")]
    assert await collection.create_index([("user", 1), ("at", -1)]) == "user_1_at_-1"
    first = {"user": 1, "at": 5, "text": "b"}
    await collection.insert_one(first)
    assert first == {"user": 1, "at": 5, "text": "b"}  # the caller's document is not changed
    await collection.insert_many([{"user": 1, "at": 9, "text": "c"},
                                  {"user": 2, "at": 7, "text": "x"},
                                  {"user": 1, "at": 1, "text": "a"}])

    newest = await (collection.find({"user": 1}, {"_id": 0, "text": 1})
                    .sort("at", -1).limit(2).to_list())
    assert newest == [{"text": "c"}, {"text": "b"}]
    assert [d["at"] async for d in collection.find({"user": 1}).sort("at")] == [1, 5, 9]
    assert await collection.find_one({"user": 2}, {"_id": 0}) == {"user": 2, "at": 7,
                                                                  "text": "x"}
    assert await collection.find_one({"user": 3}) is None
    assert await collection.count_documents({"user": 1}) == 3

    assert await collection.update_one({"user": 2}, {"$set": {"text": "y"}}) == 1
    assert await collection.update_one({"user": 4}, {"$set": {"at": 0}}) == 0
    assert await collection.update_one({"user": 4}, {"$set": {"at": 0}}, upsert=True) == 1
    assert await collection.find_one({"user": 4}, {"_id": 0}) == {"user": 4, "at": 0}
    assert await collection.delete_one({"user": 1}) == 1
    assert await collection.delete_many({"user": 1}) == 2
    assert await collection.count_documents({}) == 2
    assert (await collection.command({"count": collection.name}))["n"] == 2
    assert await client.ping()


async def test_an_unordered_insert_names_its_duplicates_and_stores_the_rest(
    client: MongoDB,
) -> None:
    collection = client["client_test"][unique_name("c")]
    await collection.create_index("post_id", unique=True)
    await collection.insert_one({"post_id": 1})
    with pytest.raises(DuplicateKeyError) as one:
        await collection.insert_one({"post_id": 1})
    assert one.value.indexes == [0]
    with pytest.raises(DuplicateKeyError) as many:
        await collection.insert_many([{"post_id": 2}, {"post_id": 1}, {"post_id": 3},
                                      {"post_id": 2}])
    assert many.value.indexes == [1, 3]
    stored = await collection.find({}, {"_id": 0}).sort("post_id").to_list()
    assert stored == [{"post_id": 1}, {"post_id": 2}, {"post_id": 3}]


async def test_a_refused_command_is_a_mongo_command_error_with_its_code(
    client: MongoDB,
) -> None:
    with pytest.raises(MongoCommandError) as refused:
        await client.command("client_test", {"no_such_command": 1})
    assert refused.value.code == 59  # CommandNotFound


@pytest.mark.parametrize("kind", ["ours SCRAM-SHA-256", "ours SCRAM-SHA-1",
                                  "pymongo SCRAM-SHA-256"])
async def test_a_wrong_password_is_refused_with_code_18_naming_the_user(
    kind: str, mongodb_server: ServerCommand, mongodb_user_server: ServerCommand,
) -> None:
    url = url_of(kind, mongodb_server, mongodb_user_server).replace(PASSWORD, "not-it")
    client = mongodb_client(url, **OPTIONS)
    try:
        with pytest.raises(MongoCommandError) as refused:
            await client["client_test"]["c"].find_one({})
    finally:
        await client.close()
    assert refused.value.code == 18
    assert "Authentication failed" in str(refused.value)
    assert "not-it" not in str(refused.value)
    if kind.startswith("ours"):
        assert f"refused user {USER!r}" in str(refused.value)
        assert mongodb_user_server.address in str(refused.value)


@pytest.mark.parametrize("kind", ["ours", "pymongo"])
async def test_no_user_where_one_is_needed_is_refused_with_code_13(
    kind: str, mongodb_user_server: ServerCommand,
) -> None:
    url = url_of(kind, mongodb_user_server, mongodb_user_server)
    client = mongodb_client(url, **OPTIONS)
    try:
        with pytest.raises(MongoCommandError) as refused:
            await client["client_test"]["c"].find_one({})
    finally:
        await client.close()
    assert refused.value.code == 13


async def test_pymongo_without_a_server_is_a_connection_error() -> None:
    client = mongodb_client(f"mongodb://127.0.0.1:{free_port()}/?serverSelectionTimeoutMS=300",
                            **OPTIONS)
    try:
        with pytest.raises(StoreConnectionError, match="MongoDB"):
            await client["client_test"]["c"].insert_one({"a": 1})
        assert await client.describe() == {"client": f"pymongo {_pymongo_version()}",
                                           "topology": "unknown"}
    finally:
        await client.close()


def _pymongo_version() -> str:
    import pymongo

    return str(pymongo.version)


@pytest.mark.parametrize(("url", "ours"), [
    ("mongodb://db:27017", True),
    ("mongodb://db", True),
    ("mongodb://db:27017/social", True),
    ("mongodb://u:p%40ss@db:27017/?authSource=admin", True),
    ("mongodb://u:p@db/?authMechanism=SCRAM-SHA-1", True),
    ("mongodb://u:p@db/?authMechanism=PLAIN", False),
    ("mongodb://db:27017/?tls=true", False),
    ("mongodb://db:27017/?tls=true&tlsAllowInvalidHostnames=true", False),
    ("mongodb://a:27017,b:27017,c:27017/?replicaSet=rs0", False),
    ("mongodb://db:27017/?replicaSet=rs0", False),
    ("mongodb://mongos-0:27017,mongos-1:27017", False),
    ("mongodb+srv://u:p@cluster0.example.net/", False),
    ("mongodb://db:27017/?directConnection=true", False),
])
def test_the_url_chooses_the_client(url: str, ours: bool) -> None:
    assert uses_our_client(url) is ours
    client = mongodb_client(url, **OPTIONS)
    assert isinstance(client, MongoClient if ours else PyMongoClient)


@pytest.mark.parametrize("url", ["redis://db:6379", "mongodb://db:27017/?replicaSet=rs0&w=-3",
                                 "mongodb+srv://a.example.net,b.example.net/",
                                 "mongodb://db:27017/?tls=true&tlsCAFile=/no/such/ca.pem"])
def test_a_url_no_client_takes_is_a_clear_value_error(url: str) -> None:
    with pytest.raises(ValueError, match="URL"):
        mongodb_client(url, **OPTIONS)


async def test_ours_describes_a_single_server(mongodb_server: ServerCommand) -> None:
    client = mongodb_client(f"mongodb://{mongodb_server.address}", **OPTIONS)
    dead = mongodb_client(f"mongodb://127.0.0.1:{free_port()}", **OPTIONS)
    try:
        assert await client.describe() == {"client": "socialbench", "topology": "single"}
        assert await dead.describe() == {"client": "socialbench", "topology": "unknown"}
    finally:
        await client.close()
        await dead.close()


async def test_a_url_is_described_as_the_service_would_run_it(
    mongodb_server: ServerCommand, mongodb_user_server: ServerCommand,
) -> None:
    login = f"mongodb://{USER}:{PASSWORD}@{mongodb_user_server.address}/?authSource=admin"
    assert await describe_mongodb(login) == {"client": "socialbench", "topology": "single"}
    assert await describe_mongodb(f"mongodb://{mongodb_server.address}/?appName=x") == {
        "client": f"pymongo {_pymongo_version()}", "topology": "single"}


@pytest.fixture(scope="module")
def replica_set_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerCommand]:
    """FerretDB as a one-member replica set ``rs0`` (its ``hello`` names it and itself)."""
    if mongodb_flavour() != "ferretdb":
        pytest.skip("a one-member replica set here is FerretDB's --repl-set-name")
    data = tmp_path_factory.mktemp("mongodb-rs")
    command = mongodb_command(free_port(), data / "db")
    command.argv.append("--repl-set-name=rs0")
    yield from serving(command, data)


async def test_a_replica_set_url_finds_its_primary(replica_set_server: ServerCommand) -> None:
    client = mongodb_client(f"mongodb://{replica_set_server.address}/?replicaSet=rs0",
                            **OPTIONS)
    wrong_set = mongodb_client(f"mongodb://{replica_set_server.address}/?replicaSet=other"
                               "&serverSelectionTimeoutMS=300", **OPTIONS)
    ours = mongodb_client(f"mongodb://{replica_set_server.address}", **OPTIONS)
    try:
        collection = client["client_test"][unique_name("c")]
        await collection.insert_one({"a": 1})
        assert await collection.find_one({}, {"_id": 0}) == {"a": 1}
        assert await client.describe() == {"client": f"pymongo {_pymongo_version()}",
                                           "topology": "replica-set"}
        with pytest.raises(StoreConnectionError):
            await wrong_set.ping()
        # A plain URL of a member is ours; its description says what the server is.
        assert await ours.describe() == {"client": "socialbench", "topology": "replica-set"}
    finally:
        for each in (client, wrong_set, ours):
            await each.close()


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerCommand, Path]]:
    """FerretDB listening with TLS (a certificate of a CA made here); yields its command
    (``port``: the TLS port) and the CA's file."""
    if mongodb_flavour() != "ferretdb" or shutil.which("openssl") is None:
        pytest.skip("TLS here is FerretDB's --listen-tls with a certificate made by openssl")
    data = tmp_path_factory.mktemp("mongodb-tls")
    ca = _certificates(data)
    tls_port = free_port()
    command = mongodb_command(free_port(), data / "db")
    command.argv += [f"--listen-tls=127.0.0.1:{tls_port}",
                     f"--listen-tls-cert-file={data / 'server.pem'}",
                     f"--listen-tls-key-file={data / 'server.key'}"]
    for started in serving(command, data):
        yield ServerCommand(started.name, started.argv, started.host, tls_port), ca


def _certificates(directory: Path) -> Path:
    """A CA, and a certificate it signed for 127.0.0.1 (server.pem, server.key); the CA's."""
    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key",
            "-out", "ca.pem", "-days", "2", "-subj", "/CN=socialbench test CA")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key",
            "-out", "server.csr", "-subj", "/CN=127.0.0.1")
    (directory / "san").write_text("subjectAltName=IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "server.pem", "-days", "2", "-extfile", "san")
    return directory / "ca.pem"


async def test_tls_with_the_servers_ca_works_and_without_it_fails_clearly(
    tls_server: tuple[ServerCommand, Path],
) -> None:
    server, ca = tls_server
    trusted = mongodb_client(f"mongodb://{server.address}/?tls=true&tlsCAFile={ca}", **OPTIONS)
    untrusted = mongodb_client(f"mongodb://{server.address}/?tls=true"
                               "&serverSelectionTimeoutMS=500", **OPTIONS)
    try:
        collection = trusted["client_test"][unique_name("c")]
        await collection.insert_one({"over": "tls"})
        assert await collection.find_one({}, {"_id": 0}) == {"over": "tls"}
        with pytest.raises(StoreConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
            await untrusted.ping()
    finally:
        await trusted.close()
        await untrusted.close()


async def test_pymongo_commands_of_a_traced_request_are_its_client_spans(
    mongodb_server: ServerCommand,
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    client = mongodb_client(f"mongodb://{mongodb_server.address}/?appName=socialbench",
                            tracer=tracer, **OPTIONS)
    assert isinstance(client, PyMongoClient)
    try:
        posts = client["socialbench_test"]["post"]
        await posts.insert_one({"outside": "a request"})
        assert exporter.get_finished_spans() == ()
        with tracer.start_as_current_span("request", kind=SpanKind.SERVER) as request:
            await posts.insert_one({"inside": "a request"})
            await posts.find_one({"inside": "a request"})
            with pytest.raises(MongoCommandError):
                await client.command("socialbench_test", {"no_such_command": 1})
    finally:
        await client.close()
    spans = {span.name: span for span in exporter.get_finished_spans()}
    assert {"mongodb insert post", "mongodb find post", "mongodb no_such_command"} <= set(spans)
    request_id = request.get_span_context().span_id
    for name in ("mongodb insert post", "mongodb find post"):
        span = spans[name]
        assert span.kind is SpanKind.CLIENT
        assert span.parent is not None and span.parent.span_id == request_id
        assert dict(span.attributes or {})["db.namespace"] == "socialbench_test"
    assert spans["mongodb no_such_command"].status.status_code is StatusCode.ERROR
