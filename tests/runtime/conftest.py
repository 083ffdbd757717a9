"""Stores with credentials, for the runtime's tests: real servers on free ports."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from socialbench.stack.servers import (
    ServerCommand,
    free_port,
    mongodb_command,
    mongodb_flavour,
    redis_command,
)
from tests.support import serving

MONGODB_USER = ("socialbench", "mongo-test-password")
REDIS_PASSWORD = "redis-test-password"


@pytest.fixture(scope="session")
def mongodb_user_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerCommand]:
    """FerretDB with authentication on and the user ``MONGODB_USER`` (in ``admin``)."""
    if mongodb_flavour() != "ferretdb":
        pytest.skip("a MongoDB user at start is FerretDB's (mongod: createUser)")
    data = tmp_path_factory.mktemp("mongodb-user")
    yield from serving(mongodb_command(free_port(), data / "db", user=MONGODB_USER), data)


@pytest.fixture(scope="session")
def redis_password_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerCommand]:
    """A redis-server whose default user has the password ``REDIS_PASSWORD``."""
    command = redis_command(free_port(), tmp_path_factory.mktemp("redis-password"))
    command.argv += ["--requirepass", REDIS_PASSWORD]
    yield from serving(command, tmp_path_factory.mktemp("logs"))
