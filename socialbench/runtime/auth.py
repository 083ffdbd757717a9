"""Login tokens: HS256 JWTs with the original's payload ``{user_id, username, timestamp, ttl}``."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Annotated

import jwt
from fastapi import Depends, Request

from socialbench.runtime.errors import Unauthorized
from socialbench.runtime.settings import Settings, get_settings

COOKIE_NAME = "login_token"


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
    return jwt.encode(payload, settings.jwt_secret, algorithm="HS256")


def verify_token(settings: Settings, token: str) -> LoggedInUser:
    """The user a valid, unexpired token was issued to; :class:`Unauthorized` otherwise."""
    try:
        payload = jwt.decode(token, settings.jwt_secret, algorithms=["HS256"])
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
