"""Helpers for service tests: run the app under test in-process, fake its neighbours.

The runtime's RPC client (socialbench.runtime.rpc) speaks real HTTP, so a fake neighbour
listens on a port: a small FastAPI app served by the runtime's HTTP server in the test's
own event loop, so its handlers can share state with the test.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from fastapi import FastAPI
from httpx import ASGITransport, AsyncClient
from pymongo import AsyncMongoClient

from socialbench import registry
from socialbench.runtime.http_server import HttpServer, ServerConfig, bind
from socialbench.runtime.settings import get_settings


@asynccontextmanager
async def app_client(app: FastAPI) -> AsyncIterator[AsyncClient]:
    """An HTTP client to ``app`` (started: stores and pools open) for the block."""
    async with app.router.lifespan_context(app):
        transport = ASGITransport(app=app)
        async with AsyncClient(transport=transport, base_url="http://test") as client:
            yield client


def mongo_client(store_env: dict[str, str]) -> AsyncMongoClient[dict[str, Any]]:
    """A client of the test MongoDB, to seed or check what a service stored."""
    return AsyncMongoClient(store_env["SOCIALBENCH_MONGODB_URL"])


def unique_name(prefix: str) -> str:
    """A name no other test uses (the store servers are shared by the whole session)."""
    return f"{prefix}_{uuid.uuid4().hex[:12]}"


@asynccontextmanager
async def serve_fake(app: FastAPI) -> AsyncIterator[str]:
    """Serve ``app`` (its lifespan the caller's) on a free local port for the block; yields
    its base URL."""
    config = ServerConfig(port=0, lifespan=False, shutdown_timeout_s=1.0)
    sock = bind(config)
    port = sock.getsockname()[1]
    server = HttpServer(app, config, asyncio.get_running_loop())
    await server.start(sock)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await server.shutdown()
        sock.close()


@asynccontextmanager
async def serve_neighbours(
    monkeypatch: pytest.MonkeyPatch, app: FastAPI, *services: str
) -> AsyncIterator[str]:
    """Serve ``app`` as the neighbours ``services`` for the block; yields its base URL."""
    async with serve_fake(app) as url:
        for service in services:
            point_at(monkeypatch, service, url)
        yield url


def point_at(monkeypatch: pytest.MonkeyPatch, service: str, base_url: str) -> None:
    """Make services created from now on call ``service`` at ``base_url``."""
    monkeypatch.setenv(registry.get(service).url_env, base_url)
    get_settings.cache_clear()


class Connection:
    """One HTTP/1.1 keep-alive connection, requests sent one after another."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def request(
        self, method: str, path: str, body: bytes = b"",
        content_type: str = "application/x-www-form-urlencoded",
    ) -> tuple[int, dict[str, str], bytes]:
        head = (f"{method} {path} HTTP/1.1\r\nHost: test\r\nContent-Type: {content_type}\r\n"
                f"Content-Length: {len(body)}\r\n\r\n")
        self.writer.write(head.encode() + body)
        await self.writer.drain()
        status_line = await asyncio.wait_for(self.reader.readline(), timeout=10)
        assert status_line, "the server closed the connection"
        headers: dict[str, str] = {}
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            headers[name.strip().lower()] = value.strip()
        data = await self.reader.readexactly(int(headers["content-length"]))
        return int(status_line.split()[1]), headers, data


@asynccontextmanager
async def connection_to(app: FastAPI) -> AsyncIterator[Connection]:
    """``app`` started and served by the runtime's HTTP server; one connection to it."""
    async with app.router.lifespan_context(app), serve_fake(app) as url:
        host, port = url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            yield Connection(reader, writer)
        finally:
            writer.close()
