"""Login tokens: HS256 JWTs with the original's payload ``{user_id, username, timestamp, ttl}``."""

from __future__ import annotations

import logging
import secrets
import time
from dataclasses import dataclass
from typing import Annotated

import jwt
from fastapi import Depends, Request

from socialbench.runtime.errors import Unauthorized
from socialbench.runtime.settings import Settings, get_settings

COOKIE_NAME = "login_token"

log = logging.getLogger(__name__)
_process_secret: str | None = None


def signing_key(settings: Settings) -> str:
    """The key tokens are signed and checked with: the configured ``jwt_secret``.

    Without one (an app run in-process, e.g. by the tests; ``socialbench serve`` refuses
    to start without it), a random key of this process only: its tokens are good nowhere
    else, so nothing signed with a known key is ever accepted.
    """
    global _process_secret
    if settings.jwt_secret is not None:
        return settings.jwt_secret.get_secret_value()
    if _process_secret is None:
        _process_secret = secrets.token_urlsafe(32)
        log.warning("no login-token secret configured: using a random one of this process "
                    "(its tokens are refused by every other process)")
    return _process_secret


@dataclass(frozen=True)
class LoggedInUser:
    user_id: int
    username: str


def issue_token(settings: Settings, user_id: int, username: str) -> str:
    """A signed login token for ``user_id``."""
    payload = {
        "user_id": str(user_id),
        "username": username,
        "timestamp": str(int(time.time())),
        "ttl": str(settings.login_token_ttl_s),
    }
    return jwt.encode(payload, signing_key(settings), algorithm="HS256")


def verify_token(settings: Settings, token: str) -> LoggedInUser:
    """The user a valid, unexpired token was issued to; :class:`Unauthorized` otherwise."""
    try:
        payload = jwt.decode(token, signing_key(settings), algorithms=["HS256"])
        issued, ttl = int(payload["timestamp"]), int(payload["ttl"])
        user = LoggedInUser(int(payload["user_id"]), str(payload["username"]))
    except (jwt.PyJWTError, KeyError, ValueError, TypeError):
        raise Unauthorized("invalid login token") from None
    if time.time() > issued + ttl:
        raise Unauthorized("login token expired")
    return user


def current_user(request: Request) -> LoggedInUser:
    """The user of the ``login_token`` cookie; 401 without a valid one."""
    token = request.cookies.get(COOKIE_NAME)
    if not token:
        raise Unauthorized("not logged in")
    return verify_token(get_settings(), token)


CurrentUser = Annotated[LoggedInUser, Depends(current_user)]
