"""user: registration, login, post creators, and user ids by username.

MongoDB ``user.user`` holds ``{user_id, first_name, last_name, username, salt, password}``,
unique on ``user_id`` and (unlike the original) on ``username``. memcached caches
``<username>:user_id`` (shared with user-mention) and ``<username>:login``; a failing
memcached is a miss (:mod:`socialbench.runtime.cache_aside`). Passwords are
sha256(password + salt), as the original's: a fast hash, what a benchmark wants. Ids the
server makes are random in ``[2**62, 2**63)``, away from the seeded ``0..N-1`` (the
unique index catches a clash and a new id is drawn). Registration stores the user, then
adds it to the social graph; if that fails the error is answered but the user stays
(a user without edges is an empty one; registering again answers 409).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Depends, FastAPI, Request
from pydantic import BaseModel
from starlette.responses import RedirectResponse, Response

from socialbench.runtime.app import ServiceContext, create_service_app, service_logic
from socialbench.runtime.auth import COOKIE_NAME, issue_token
from socialbench.runtime.cache_aside import Cache
from socialbench.runtime.errors import (
    Conflict,
    InvalidArgument,
    NotFound,
    StoreError,
    Unauthorized,
)
from socialbench.runtime.interfaces import (
    CreatorAnswer,
    CreatorRequest,
    SocialGraphClient,
    UserIdAnswer,
    UsernameRequest,
)
from socialbench.runtime.models import (
    MAX_PASSWORD_BYTES,
    MAX_PERSON_NAME_BYTES,
    MAX_USERNAME_BYTES,
    Creator,
    Id,
    Password,
    PersonName,
    Username,
    check_size,
)
from socialbench.runtime.mongodb_client import DuplicateKeyError
from socialbench.runtime.stores import memcached_key, user_id_cache_key
from socialbench.runtime.web import failure_prefix, form_args, parse_int, require, text

MAX_USER_ID = 1 << 63
SERVER_ID_FLOOR = 1 << 62
MAX_ID_ATTEMPTS = 3
LOGIN_FAILED = "Incorrect username or password"


def hash_password(password: str, salt: str) -> str:
    """The stored form of ``password``: hex sha256 of password + salt."""
    return hashlib.sha256((password + salt).encode()).hexdigest()


def new_user_id() -> int:
    """A random id no wrk2-registered user (ids ``0..N-1``) can have."""
    return SERVER_ID_FLOOR | secrets.randbits(62)


def login_cache_key(username: str) -> bytes | None:
    """The memcached key of ``username``'s login record."""
    return memcached_key(f"{username}:login")


def check_username(username: str) -> None:
    """A 413 over the cap, a clear 400 unless memcached can key ``username``."""
    check_size("username", username, MAX_USERNAME_BYTES)
    if not username or user_id_cache_key(username) is None:
        raise InvalidArgument(
            f"a username is 1 to {MAX_USERNAME_BYTES} bytes, without spaces or control characters"
        )


def check_login(username: str, password: str) -> None:
    """A 413 if a username or password is over its cap."""
    check_size("username", username, MAX_USERNAME_BYTES)
    check_size("password", password, MAX_PASSWORD_BYTES)


def check_registration(first_name: str, last_name: str, username: str, password: str) -> None:
    """A 413 if a field is over its cap, a 400 for a username memcached cannot key."""
    check_size("first_name", first_name, MAX_PERSON_NAME_BYTES)
    check_size("last_name", last_name, MAX_PERSON_NAME_BYTES)
    check_size("password", password, MAX_PASSWORD_BYTES)
    check_username(username)


class UserService:
    """The service's logic."""

    def __init__(self, context: ServiceContext) -> None:
        self.settings = context.settings
        self.social_graph = SocialGraphClient(context.rpc["social-graph"])
        self.cache = Cache(context.stores.require_memcached(), context.errors)
        self.users = context.stores.require_mongodb()["user"]["user"]

    async def setup(self) -> None:
        await self.users.create_index("user_id", unique=True)
        await self.users.create_index("username", unique=True)

    async def register(
        self, first_name: str, last_name: str, username: str, password: str,
        user_id: int | None = None,
    ) -> int:
        """Store a new user (``user_id`` given, or made here), add it to the graph; its id."""
        check_registration(first_name, last_name, username, password)
        if user_id is not None and not 0 <= user_id < MAX_USER_ID:
            raise InvalidArgument(f"user_id {user_id} is not a 63-bit unsigned integer")
        salt = secrets.token_hex(16)
        profile = {
            "first_name": first_name, "last_name": last_name, "username": username,
            "salt": salt, "password": hash_password(password, salt),
        }
        for _ in range(1 if user_id is not None else MAX_ID_ATTEMPTS):
            candidate = user_id if user_id is not None else new_user_id()
            try:
                await self.users.insert_one({"user_id": candidate, **profile})
            except DuplicateKeyError:
                if await self._username_taken(username):
                    raise Conflict(f"Username {username} already existed") from None
                if user_id is not None:
                    raise Conflict(f"User id {user_id} already existed") from None
                continue  # two made-up ids met: draw another
            await self._warm_cache(username, candidate, profile)
            await self.social_graph.insert_user(candidate)
            return candidate
        raise StoreError(f"no free user id after {MAX_ID_ATTEMPTS} attempts")

    async def _warm_cache(self, username: str, user_id: int, profile: dict[str, Any]) -> None:
        """Put a new user's id and login record in memcached (write-through).

        Mentions and logins of new users then never reach MongoDB, whose FerretDB
        backend scans the whole collection for every lookup. Best effort: the user is
        stored already, and a cold cache only costs a MongoDB read later.
        """
        id_key, login_key = user_id_cache_key(username), login_cache_key(username)
        record = {"user_id": user_id, "salt": profile["salt"], "password": profile["password"]}
        if id_key is not None:
            await self.cache.fill(id_key, str(user_id).encode())
        if login_key is not None:
            await self.cache.fill(login_key, orjson.dumps(record))

    async def _username_taken(self, username: str) -> bool:
        return await self.users.find_one({"username": username}, {"_id": 1}) is not None

    async def login(self, username: str, password: str) -> str:
        """A signed login token for ``username``; :class:`Unauthorized` on a wrong pair."""
        check_login(username, password)
        record = await self._login_record(username)
        if record is None or not hmac.compare_digest(
            hash_password(password, record["salt"]), record["password"]
        ):
            raise Unauthorized(LOGIN_FAILED)
        return issue_token(self.settings, int(record["user_id"]), username)

    async def _login_record(self, username: str) -> dict[str, Any] | None:
        """``{user_id, salt, password}`` of ``username`` from memcached, else MongoDB."""
        key = login_cache_key(username)
        if key is None:
            return None
        cached = await self.cache.get(key)
        if cached is not None:
            record: dict[str, Any] = orjson.loads(cached)
            return record
        found = await self.users.find_one(
            {"username": username}, {"_id": 0, "user_id": 1, "salt": 1, "password": 1}
        )
        if found is not None:
            await self.cache.fill(key, orjson.dumps(found))
        return found

    async def user_id(self, username: str) -> int:
        """The id of ``username`` (memcached first); :class:`NotFound` if there is none."""
        key = user_id_cache_key(username)
        if key is None:
            raise NotFound(f"User {username!r} doesn't exist")
        cached = await self.cache.get(key)
        if cached is not None:
            return int(cached)
        found = await self.users.find_one({"username": username}, {"_id": 0, "user_id": 1})
        if found is None:
            raise NotFound(f"User {username} doesn't exist")
        user_id = int(found["user_id"])
        await self.cache.fill(key, str(user_id).encode())
        return user_id


UserDep = Annotated[UserService, Depends(service_logic)]
router = APIRouter()


class RegisterUserRequest(BaseModel):
    first_name: PersonName
    last_name: PersonName
    username: Username
    password: Password
    user_id: Id | None = None


class LoginRequest(BaseModel):
    username: Username
    password: Password


class TokenAnswer(BaseModel):
    token: str


@router.post("/register_user")
async def register_user(body: RegisterUserRequest, service: UserDep) -> UserIdAnswer:
    """Register a user (with ``user_id`` if given); 409 if the name or id is taken."""
    return UserIdAnswer(user_id=await service.register(**body.model_dump()))


@router.post("/login")
async def login(body: LoginRequest, service: UserDep) -> TokenAnswer:
    """A login token; 401 on a wrong name or password."""
    return TokenAnswer(token=await service.login(body.username, body.password))


@router.post("/compose_creator_with_user_id")
async def compose_creator_with_user_id(body: CreatorRequest) -> CreatorAnswer:
    """The post's creator (ids as strings, the post's shape)."""
    return CreatorAnswer(creator=Creator(user_id=str(body.user_id), username=body.username))


@router.post("/get_user_id")
async def get_user_id(body: UsernameRequest, service: UserDep) -> UserIdAnswer:
    """The id of ``username``; 404 if unknown."""
    return UserIdAnswer(user_id=await service.user_id(body.username))


# Front-end routes (behind nginx), as the original's Lua scripts.


REGISTRATION_FIELDS = ("first_name", "last_name", "username", "password")


@router.post("/wrk2-api/user/register")
@failure_prefix("User registration failure")
async def wrk2_register(request: Request, service: UserDep) -> Response:
    """Front end (wrk2, graph seeding): register a user with the given ``user_id``."""
    first_name, last_name, username, password, user_id = require(
        await form_args(request), *REGISTRATION_FIELDS, "user_id"
    )
    await service.register(
        first_name, last_name, username, password, parse_int(user_id, "user_id")
    )
    return text("Success!")


@router.post("/api/user/register")
@failure_prefix("User registration failure")
async def api_register(request: Request, service: UserDep) -> Response:
    """Front end (sign-up page): register with a new id, then go to the login page."""
    first_name, last_name, username, password = require(
        await form_args(request), *REGISTRATION_FIELDS
    )
    await service.register(first_name, last_name, username, password)
    return RedirectResponse("/index.html", status_code=302)


@router.post("/api/user/login")
@failure_prefix("User login failure")
async def api_login(request: Request, service: UserDep) -> Response:
    """Front end (login page): set the ``login_token`` cookie and go to the main page."""
    username, password = require(await form_args(request), "username", "password")
    token = await service.login(username, password)
    response = RedirectResponse("/main.html", status_code=302)
    response.set_cookie(
        COOKIE_NAME, token, max_age=service.settings.login_token_ttl_s, path="/",
        httponly=True, samesite="lax", secure=came_over_tls(request),
    )
    return response


def came_over_tls(request: Request) -> bool:
    """Whether the browser reached us over TLS: the scheme, or the first proxy's
    ``X-Forwarded-Proto`` (nginx passes on what a TLS-terminating proxy in front sets)."""
    forwarded = request.headers.get("x-forwarded-proto", "")
    first = forwarded.split(",", 1)[0].strip().lower()
    return first == "https" or request.url.scheme == "https"


def create_app() -> FastAPI:
    return create_service_app("user", router, UserService)
