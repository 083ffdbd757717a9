"""A pool of memcached servers, each key on one of them by consistent hashing.

``SOCIALBENCH_MEMCACHED_ADDRESS=host:port,host:port,...`` gives the servers;
:meth:`~socialbench.runtime.stores.Stores.connect` makes a :class:`MemcachedPool` of one
:class:`~socialbench.runtime.memcached_client.MemcachedClient` per server (each up to
``memcached_pool_size`` connections). With one server it makes the plain client, as
before pools: one server pays nothing for them, not even a call.

A key goes to its owner on a :class:`~socialbench.runtime.hash_ring.HashRing` (libketama's
points). A get of many keys is split by server, the parts sent at once, and the values
merged back in the order asked.

A server that fails costs its keys and nothing else. The
:class:`~socialbench.runtime.cache_aside.Cache`
wrapper makes its errors misses; here:

- Its first command that fails for want of the server (refused, lost, no reply in
  time) marks it down. Until it is tried again, its commands fail at once with
  :class:`ServerDown`: no connection is tried, so no connect timeout is waited for, and
  a get of many keys answers those on the live servers at once (:class:`SomeServersFailed`
  carries them). The commands already sent to it fail as their connection does: its
  client tries one new connection (a server's part of a get of many keys, none), not
  the reconnect loop of a lone server (``reconnect_for_s``). So the only waits are those
  of the commands sent before the first failure: at most a connect or call timeout,
  once per outage.
- After a back-off (1 s, doubling to 30 s while it stays down) its next command starts
  a probe (``version``) in the background, and still fails at once; the probe's answer
  puts the server back in use.
- Its keys stay on it: nothing is rehashed to the live servers. A key moved while its
  server is away would have two homes once it is back: a post deleted (tombstoned, see
  ``cache``) on the stand-in would still be served by the returning server, which may
  hold it from before.

Cost: CPU of the client process per command, under uvloop, 1 caller, against memcached
``-t 1`` on this 2-core machine (2026-12-03, shared and loaded: min and median of 7
interleaved rounds of 1,500 commands; ``socialbench bench store-clients`` has the same
rows). A ``get`` of 10 keys of 270 bytes: one server's client 28-33 µs; the pool of 3
(the keys 6/3/1 over the servers) 87-97 µs, as each server's part is a command and a
reply of its own (asking them one after another, or as gathered tasks, cost 100-110 µs).
A ``get`` of one key: 17-19 µs, through the pool 19-23 (the ring: an MD5 and a bisect,
about 1 µs a key). With one server there is no pool: nothing is added. So on one machine
a pool spends the services' CPU (post-storage's page of posts comes from up to 3
servers); it adds memory and cores to the cache only where there are cores to spare.
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
