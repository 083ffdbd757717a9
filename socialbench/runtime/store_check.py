"""Each store tried once when a service process starts: refused credentials stop it.

A service given a wrong password would otherwise start, pass for alive, and answer 500
to every request that touches the store. :func:`check_stores_at_start` sends each of its
stores one command at once (MongoDB ``listDatabases``, since ``ping`` needs no login;
Redis ``PING`` after its ``AUTH``; memcached ``version``, so its absence is logged). A
refusal of the credentials (MongoDB code 18 or 13, Redis ``WRONGPASS``, ``NOAUTH`` or a
refused ``AUTH``) raises :class:`StoreCredentialsRefused`, naming the store, host and
user, never the password, and the process exits (``socialbench serve``: status 3). A
store that does not answer is logged and the start goes on (pods start in any order;
``/healthz`` answers 503 until it answers).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from socialbench.runtime.mongodb_client import MongoCommandError
from socialbench.runtime.pipelining import StoreReplyError

if TYPE_CHECKING:
    from socialbench.runtime.settings import Settings
    from socialbench.runtime.stores import Stores

log = logging.getLogger("socialbench")

AUTHENTICATION_FAILED = 18
UNAUTHORIZED = 13
REDIS_REFUSALS = ("WRONGPASS", "NOAUTH", "ERR AUTH", "ERR invalid password",
                  "ERR Client sent AUTH")


class StoreCredentialsRefused(RuntimeError):
    """A store refused the credentials this service was given."""


def url_place(url: str, default_user: str) -> tuple[str, str]:
    """The hosts of a store URL (or of the first of several, comma-separated) and its user
    (``default_user`` when it gives none); never its password."""
    first = url.split(",redis://")[0] if url.startswith("redis") else url
    netloc = urlsplit(first).netloc
    userinfo, _, hosts = netloc.rpartition("@")
    user = unquote(userinfo.partition(":")[0]) if userinfo else ""
    return hosts, user or default_user


def mongodb_refusal(exc: BaseException, url: str) -> str | None:
    """What MongoDB refused, if ``exc`` is a refusal of the URL's credentials."""
    if not isinstance(exc, MongoCommandError):
        return None
    hosts, user = url_place(url, "")
    said = str(exc.details.get("errmsg") or _first_line(exc))
    if exc.code == AUTHENTICATION_FAILED:
        return (f"MongoDB at {hosts} refused the credentials of user {user or '(none)'!r} "
                f"({said})")
    if exc.code == UNAUTHORIZED and not user:
        return (f"MongoDB at {hosts} requires a login and the URL gives no user "
                f"(mongodb://USER:PASSWORD@...) ({said})")
    return None


def redis_refusal(exc: BaseException, url: str) -> str | None:
    """What Redis refused, if ``exc`` is a refusal of the URL's credentials."""
    if not isinstance(exc, StoreReplyError) or not str(exc).startswith(REDIS_REFUSALS):
        return None
    hosts, user = url_place(url, "default")
    return f"Redis at {hosts} refused the credentials of user {user!r} ({_first_line(exc)})"


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__


async def check_stores_at_start(stores: Stores, settings: Settings, *, service: str) -> None:
    """Try each of ``stores`` once (``settings``' URLs name them in messages):
    :class:`StoreCredentialsRefused` if any refused its credentials; a store that does
    not answer is logged."""
    checks: dict[str, Awaitable[Any]] = {}
    if stores.mongodb is not None:
        checks["mongodb"] = stores.mongodb.command("admin",
                                                   {"listDatabases": 1, "nameOnly": True})
    if stores.redis is not None:
        checks["redis"] = stores.redis.ping()
    if stores.memcached is not None:
        checks["memcached"] = stores.memcached.version()
    bound = 2 * settings.store_connect_timeout_s
    results = await asyncio.gather(*(asyncio.wait_for(check, bound) for check in checks.values()),
                                   return_exceptions=True)
    refusals = []
    for store, result in zip(checks, results, strict=True):
        if not isinstance(result, BaseException):
            continue
        if isinstance(result, asyncio.CancelledError):
            raise result
        refusal = (mongodb_refusal(result, settings.mongodb_url) if store == "mongodb" else
                   redis_refusal(result, settings.redis_url) if store == "redis" else None)
        if refusal is not None:
            refusals.append(refusal)
        else:
            log.warning("%s: %s did not answer at start-up (%s: %s); starting anyway, "
                        "/healthz says when it does", service, store, type(result).__name__,
                        _first_line(result))
    if refusals:
        raise StoreCredentialsRefused(f"{service}: " + "; ".join(refusals))
