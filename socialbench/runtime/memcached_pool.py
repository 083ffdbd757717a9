"""A pool of memcached servers, each key on one of them by consistent hashing.

``SOCIALBENCH_MEMCACHED_ADDRESS=host:port,...`` gives the servers;
:meth:`~socialbench.runtime.stores.Stores.connect` makes a :class:`MemcachedPool` of one
client per server (one server: the plain client, nothing added). A key goes to its owner
on a :class:`~socialbench.runtime.hash_ring.HashRing`; a get of many keys is split by
server, sent at once, and merged in the order asked.

A server that fails costs its keys only (the :class:`~socialbench.runtime.cache_aside.Cache`
makes its errors misses): its first failed command marks it down, and its commands then
fail at once (:class:`ServerDown`; a get of many keys answers the live servers' part,
:class:`SomeServersFailed`) until a background ``version`` probe, after a back-off of 1 s
doubling to 30 s, finds it again. Its keys are never rehashed to the others (a key with
two homes could serve a deleted post). What a pool costs: docs/stores.md.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NoReturn, TypeVar

from socialbench.runtime.hash_ring import HashRing
from socialbench.runtime.memcached_client import MemcachedClient, check_key
from socialbench.runtime.pipelining import StoreClientError, StoreConnectionError

FIRST_BACKOFF_S = 1.0
MOST_BACKOFF_S = 30.0

T = TypeVar("T")
log = logging.getLogger("socialbench")


class ServerDown(StoreConnectionError):
    """The key's server failed and waits for its back-off; the command was not sent."""


class SomeServersFailed(StoreClientError):
    """A get of many keys whose servers did not all answer: ``values`` has what those
    that did hold (None for the others' keys), ``errors`` each failed server's error."""

    def __init__(self, values: tuple[bytes | None, ...], errors: list[StoreClientError]) -> None:
        super().__init__("; ".join(str(error) for error in errors))
        self.values = values
        self.errors = errors


class _Server:
    """One server of the pool, and whether it is in use."""

    __slots__ = ("backoff_s", "client", "error", "name", "probe", "retry_at")

    def __init__(self, client: MemcachedClient) -> None:
        self.client = client
        self.name = f"{client.host}:{client.port}"
        self.retry_at = 0.0  # 0: in use; else down, probed from this loop time on
        self.backoff_s = FIRST_BACKOFF_S
        self.error: StoreClientError | None = None
        self.probe: asyncio.Task[None] | None = None


class MemcachedPool:
    """The commands of :class:`MemcachedClient`, each key sent to its server's client."""

    def __init__(self, clients: Sequence[MemcachedClient], *,
                 first_backoff_s: float = FIRST_BACKOFF_S,
                 most_backoff_s: float = MOST_BACKOFF_S) -> None:
        self._servers = [_Server(client) for client in clients]
        self._ring = HashRing([server.name for server in self._servers])
        self.first_backoff_s, self.most_backoff_s = first_backoff_s, most_backoff_s
        for server in self._servers:
            server.backoff_s = first_backoff_s

    @property
    def servers(self) -> tuple[str, ...]:
        """``host:port`` of each server, in the order given."""
        return self._ring.names

    def server_of(self, key: bytes) -> str:
        """``host:port`` of the server that holds ``key``."""
        return self._ring.names[self._ring.owner(key)]

    def is_down(self, name: str) -> bool:
        """Whether server ``name`` is out of use (failed, waiting for its back-off or probe)."""
        return any(server.retry_at != 0.0 for server in self._servers if server.name == name)

    @property
    def open_connections(self) -> int:
        return sum(server.client.open_connections for server in self._servers)

    async def get(self, key: bytes) -> bytes | None:
        """The value of ``key``, or None."""
        return await self._on(self._ring.owner(key), lambda client: client.get(key))

    async def multi_get(self, *keys: bytes) -> tuple[bytes | None, ...]:
        """The value of each key (None where missing), one ``get`` per server, all written
        before any is waited for; :class:`SomeServersFailed` with the values found when a
        server fails."""
        owner = self._ring.owner
        by_server: dict[int, list[bytes]] = {}
        for key in keys:
            by_server.setdefault(owner(check_key(key)), []).append(key)
        if len(by_server) <= 1:
            if not keys:
                return ()
            return await self._on(next(iter(by_server)), lambda client: client.multi_get(*keys))
        errors: list[StoreClientError] = []
        sent: list[tuple[_Server, asyncio.Future[Any]]] = []
        values: dict[bytes, bytes] = {}
        try:
            for index, part in by_server.items():
                server = self._servers[index]
                if server.retry_at:
                    errors.append(self._refusal(server))
                else:
                    sent.append((server, server.client.get_sent(part)))
            for server, reply in sent:
                try:
                    found = await reply
                except StoreConnectionError as exc:
                    self._mark_down(server, exc)
                    errors.append(exc)
                else:
                    if isinstance(found, StoreClientError):
                        errors.append(found)
                    else:
                        values.update(found)
        finally:
            for _, reply in sent:
                reply.cancel()  # (those not waited for: the caller was cancelled)
        answer = tuple(values.get(key) for key in keys)
        if errors:
            raise SomeServersFailed(answer, errors)
        return answer

    async def set(self, key: bytes, value: bytes, exptime: int = 0) -> bool:
        """Store ``value`` under ``key`` (for ``exptime`` seconds; 0: until evicted)."""
        return await self._on(self._ring.owner(key),
                              lambda client: client.set(key, value, exptime))

    async def add(self, key: bytes, value: bytes, exptime: int = 0) -> bool:
        """Store ``value`` under ``key`` unless ``key`` holds a value; True if stored."""
        return await self._on(self._ring.owner(key),
                              lambda client: client.add(key, value, exptime))

    async def delete(self, key: bytes) -> bool:
        """True if ``key`` was there."""
        return await self._on(self._ring.owner(key), lambda client: client.delete(key))

    def describe(self) -> dict[str, str]:
        """Which client and topology serve the commands (for a results manifest)."""
        return {"client": "socialbench",
                "topology": f"pool of {len(self._servers)} servers, consistent hashing"}

    async def version(self) -> bytes:
        """Every server's version, space-separated (health: asks those marked down too);
        :class:`StoreConnectionError` naming the servers that did not answer."""
        replies = await asyncio.gather(*(server.client.version() for server in self._servers),
                                       return_exceptions=True)
        failed = [f"{server.name}: {reply}" for server, reply in zip(self._servers, replies,
                                                                      strict=True)
                  if isinstance(reply, BaseException)]
        if failed:
            raise StoreConnectionError(f"memcached servers not answering: {'; '.join(failed)}")
        return b" ".join(reply for reply in replies if isinstance(reply, bytes))

    async def close(self) -> None:
        for server in self._servers:
            if server.probe is not None:
                server.probe.cancel()
            await server.client.close()

    async def _on(self, index: int, command: Callable[[MemcachedClient], Awaitable[T]]) -> T:
        """``command`` on server ``index``'s client, unless the server is down."""
        server = self._servers[index]
        if server.retry_at:
            self._refuse(server)
        try:
            return await command(server.client)
        except StoreConnectionError as exc:
            self._mark_down(server, exc)
            raise

    def _refuse(self, server: _Server) -> NoReturn:
        raise self._refusal(server)

    def _refusal(self, server: _Server) -> ServerDown:
        """The error of a command not sent to ``server``, which is down; starts its probe
        once its back-off is over."""
        if server.probe is None and asyncio.get_running_loop().time() >= server.retry_at:
            server.probe = asyncio.ensure_future(self._probe(server))
        return ServerDown(f"memcached {server.name} is out of use until it answers again "
                          f"(it failed: {server.error})")

    def _mark_down(self, server: _Server, error: StoreConnectionError) -> None:
        if server.retry_at:
            return
        server.retry_at = asyncio.get_running_loop().time() + server.backoff_s
        server.error = error
        log.warning("memcached %s failed, its keys are misses until it answers again "
                    "(tried in %g s): %s", server.name, server.backoff_s, error)

    async def _probe(self, server: _Server) -> None:
        try:
            await server.client.version()
        except StoreClientError as exc:
            server.error = exc
            server.backoff_s = min(server.backoff_s * 2, self.most_backoff_s)
            server.retry_at = asyncio.get_running_loop().time() + server.backoff_s
        else:
            server.retry_at = 0.0
            server.backoff_s = self.first_backoff_s
            log.warning("memcached %s answers again: back in use", server.name)
        finally:
            server.probe = None


Memcached = MemcachedClient | MemcachedPool
"""What the services reach memcached through: one server's client, or a pool's."""
