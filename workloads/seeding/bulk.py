"""The bulk seeding path: every service's own logic, run in the seeder's process.

``socialbench seed --path bulk`` registers, follows and composes with the calls the
front-end routes make (``UserService.register``, ``SocialGraphService.follow``,
``ComposePostService.compose``) on the stack's own stores (``settings_of``), with two
differences from a request through nginx: a service calls its neighbours in process
(:class:`LocalNeighbour`: the internal route awaited as dispatch awaits it, without
HTTP), and concurrent MongoDB inserts to one collection go out as one unordered
``insert_many`` (:class:`CoalescingCollection`; each caller gets its own outcome). Ids
(unique-id, with a worker slot of its own), timestamps, short urls, the fan-out and a
failed compose's undo are the services' own: no store layout is written here. Why, and
how much faster than the API path: docs/data-at-scale.md, "Seeding at scale".
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import orjson
import pydantic_core
from fastapi import FastAPI
from starlette.responses import Response

from socialbench import registry
from socialbench.errors import SocialbenchError
from socialbench.registry import ServiceSpec
from socialbench.runtime.app import ServiceContext, service_logic, strict_json_body
from socialbench.runtime.dispatch import InternalRoute, find_internal_routes
from socialbench.runtime.errors import Conflict
from socialbench.runtime.interfaces import ComposedText
from socialbench.runtime.models import (
    Creator,
    Post,
    PostType,
    check_media_lists,
    check_post_size,
    now_ms,
)
from socialbench.runtime.mongodb_client import DuplicateKeyError
from socialbench.runtime.rpc import RPCClient, encode
from socialbench.runtime.settings import Settings
from socialbench.runtime.stores import Stores
from socialbench.services import (
    compose_post,
    home_timeline,
    media,
    post_storage,
    social_graph,
    text,
    unique_id,
    url_shorten,
    user,
    user_mention,
    user_timeline,
)
from socialbench.workloads.definitions.socialnetwork import PostFields

# Each service's logic class and app (its routes), by registry name.
SERVICE_MODULES: dict[str, Any] = {
    "unique-id": (unique_id.UniqueIdService, unique_id.create_app),
    "url-shorten": (url_shorten.UrlShortenService, url_shorten.create_app),
    "user-mention": (user_mention.UserMentionService, user_mention.create_app),
    "media": (media.MediaService, media.create_app),
    "text": (text.TextService, text.create_app),
    "user": (user.UserService, user.create_app),
    "social-graph": (social_graph.SocialGraphService, social_graph.create_app),
    "post-storage": (post_storage.PostStorageService, post_storage.create_app),
    "user-timeline": (user_timeline.UserTimelineService, user_timeline.create_app),
    "home-timeline": (home_timeline.HomeTimelineService, home_timeline.create_app),
    "compose-post": (compose_post.ComposePostService, compose_post.create_app),
}
@dataclass(frozen=True)
class Published:
    """A post about to be published: what undoing it needs."""

    post_id: int
    user_id: int
    mentioned: list[int]


class UndoFailed(SocialbenchError, RuntimeError):
    """Some of compose-post's removals failed: the posts may still be in part in the stores."""


UNDO_AT_ONCE = 32  # posts undone at once
MAX_BATCH = 1000  # documents per coalesced insert_many (FerretDB's best, measured above)
MAX_WRITES_IN_FLIGHT = 2  # coalesced inserts per collection at once


@dataclass
class _Pending:
    documents: Sequence[Mapping[str, Any]]
    done: asyncio.Future[None]


class CoalescingCollection:
    """A collection whose inserts from concurrent callers go out together.

    Everything but ``insert_one`` and ``insert_many`` is the collection's own.
    """

    def __init__(self, collection: Any, max_batch: int = MAX_BATCH,
                 max_in_flight: int = MAX_WRITES_IN_FLIGHT) -> None:
        self._collection = collection
        self._max_batch = max_batch
        self._max_in_flight = max_in_flight
        self._pending: list[_Pending] = []
        self._in_flight = 0
        self._flush_scheduled = False
        self.batches = 0  # insert_many calls made
        self.documents = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._collection, name)

    async def insert_one(self, document: Mapping[str, Any]) -> None:
        await self.insert_many([document])

    async def insert_many(self, documents: Sequence[Mapping[str, Any]]) -> None:
        if not documents:
            return
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append(_Pending(documents, done))
        if not self._flush_scheduled:
            # After the callers of this turn of the loop have added theirs.
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)
        await done

    def _flush(self) -> None:
        self._flush_scheduled = False
        while self._pending and self._in_flight < self._max_in_flight:
            batch: list[_Pending] = []
            size = 0
            while self._pending and (not batch or
                                     size + len(self._pending[0].documents) <= self._max_batch):
                item = self._pending.pop(0)
                batch.append(item)
                size += len(item.documents)
            self._in_flight += 1
            task = asyncio.ensure_future(self._write(batch))
            task.add_done_callback(self._written)

    def _written(self, task: asyncio.Task[None]) -> None:
        self._in_flight -= 1
        self._flush()

    async def _write(self, batch: list[_Pending]) -> None:
        documents = [document for item in batch for document in item.documents]
        self.batches += 1
        self.documents += len(documents)
        try:
            await self._collection.insert_many(documents)
        except DuplicateKeyError as exc:
            duplicates = set(exc.indexes)
            start = 0
            for item in batch:
                mine = [i - start for i in range(start, start + len(item.documents))
                        if i in duplicates]
                start += len(item.documents)
                if item.done.done():
                    continue
                if mine:
                    item.done.set_exception(DuplicateKeyError(str(exc), mine, exc.details))
                else:
                    item.done.set_result(None)
            return
        except BaseException as exc:
            for item in batch:
                if not item.done.done():
                    item.done.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        for item in batch:
            if not item.done.done():
                item.done.set_result(None)


class CoalescingMongoDB:
    """A MongoDB client whose collections coalesce their inserts (see above)."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.collections: dict[tuple[str, str], CoalescingCollection] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def __getitem__(self, database: str) -> _CoalescingDatabase:
        return _CoalescingDatabase(self, database)


@dataclass
class _CoalescingDatabase:
    client: CoalescingMongoDB
    name: str

    def __getitem__(self, collection: str) -> CoalescingCollection:
        key = (self.name, collection)
        if key not in self.client.collections:
            real = self.client._client[self.name][collection]
            self.client.collections[key] = CoalescingCollection(real)
        return self.client.collections[key]


class LocalNeighbour:
    """A neighbour called in process: its internal route awaited as the dispatch does."""

    def __init__(self, name: str, services: InProcessServices) -> None:
        self.name = name
        self._services = services

    async def call(self, method: str, payload: Any = None) -> Any:
        return orjson.loads(await self.call_raw(method, payload))

    async def call_raw(self, method: str, payload: Any = None) -> bytes:
        route, logic = self._services.route(self.name, method)
        kwargs: dict[str, Any] = {}
        if route.model is not None and route.body_name is not None:
            kwargs[route.body_name] = route.model.model_validate_json(
                encode(payload if payload is not None else {}))
        if route.logic_name is not None:
            kwargs[route.logic_name] = logic
        result = await route.endpoint(**kwargs)
        if isinstance(result, Response):
            return bytes(result.body)
        return pydantic_core.to_json(result)


class _LocalRPC:
    """What a service's ``context.rpc`` is in process: its neighbours, by name."""

    def __init__(self, services: InProcessServices) -> None:
        self._services = services

    def __getitem__(self, name: str) -> LocalNeighbour:
        return LocalNeighbour(name, self._services)

    async def close(self) -> None:
        return None


@dataclass
class InProcessServices:
    """Every service's logic on its stores, its neighbours called in process."""

    settings_of: Callable[[ServiceSpec], Settings]
    logic: dict[str, Any] = field(default_factory=dict)
    stores: dict[str, Stores] = field(default_factory=dict)
    routes: dict[str, dict[str, InternalRoute]] = field(default_factory=dict)

    async def start(self) -> None:
        """Connect every service's stores and make its logic; its setup (indexes) run."""
        rpc = cast(RPCClient, _LocalRPC(self))  # the services only ask it for neighbours
        for spec in registry.SERVICES:
            logic_class, create_app = SERVICE_MODULES[spec.name]
            settings = self.settings_of(spec)
            stores = Stores.connect(settings, spec.stores)
            if stores.mongodb is not None:
                stores.mongodb = cast(Any, CoalescingMongoDB(stores.mongodb))
            self.stores[spec.name] = stores
            self.logic[spec.name] = logic_class(ServiceContext(spec, settings, stores, rpc))
            app: FastAPI = create_app()
            self.routes[spec.name] = find_internal_routes(
                app, spec.gateway_routes, service_logic, (strict_json_body,))
        await asyncio.gather(*(logic.setup() for logic in self.logic.values()))

    async def close(self) -> None:
        for stores in self.stores.values():
            with contextlib.suppress(Exception):
                await stores.close()
        slot_lock = getattr(self.logic.get("unique-id"), "_slot_lock", None)
        if slot_lock is not None:
            slot_lock.close()

    def route(self, service: str, method: str) -> tuple[InternalRoute, Any]:
        found = self.routes[service].get("/" + method)
        if found is None:
            raise LookupError(f"{service} has no internal route /{method}")
        return found, self.logic[service]

    def coalesced(self) -> tuple[int, int]:
        """Coalesced inserts made, and the documents they carried."""
        # (set with a cast: their type is the services' clients')
        coalescing = [cast(CoalescingMongoDB, stores.mongodb) for stores in self.stores.values()
                      if isinstance(stores.mongodb, CoalescingMongoDB)]
        collections = [c for client in coalescing for c in client.collections.values()]
        return sum(c.batches for c in collections), sum(c.documents for c in collections)

    # ---------------------------------------------------------------- what seeding calls

    async def register(self, user_id: int, first_name: str, last_name: str, username: str,
                       password: str) -> str:
        """Register as ``/wrk2-api/user/register`` does: "ok", or "exists"."""
        try:
            await self.logic["user"].register(first_name, last_name, username, password,
                                              user_id)
        except Conflict:
            return "exists"
        return "ok"

    async def follow(self, user_id: int, followee_id: int) -> str:
        """Follow as ``/wrk2-api/user/follow`` does."""
        await self.logic["social-graph"].follow(user_id, followee_id)
        return "ok"

    async def follow_many(self, follows: Sequence[tuple[int, int]]) -> str:
        """Follow each pair as ``/wrk2-api/user/follow`` does, in one go."""
        await self.logic["social-graph"].follow_many(follows)
        return "ok"

    async def compose(self, username: str, user_id: int, text: str, media_ids: list[str],
                      media_types: list[str], post_type: int) -> str:
        """Compose as ``/wrk2-api/post/compose`` does; the post's id."""
        post_id: str = await self.logic["compose-post"].compose(
            username, user_id, text, media_ids, media_types, PostType(post_type))
        return post_id

    async def compose_many(self, posts: Sequence[PostFields],
                           journal: Callable[[list[Published]], None] | None = None,
                           ) -> list[str | BaseException]:
        """Compose ``posts`` as compose-post composes each: its parts, then stored, in its
        author's user timeline and fanned out, undone if one of those fails; each post's
        id or its error. The mentions of all of them are looked up, and their urls
        shortened, in one call each; ``journal`` hears each post before it is published."""
        parsed = [text.mentions_and_urls(post.text) for post in posts]
        names = list(dict.fromkeys(name for usernames, _ in parsed for name in usernames))
        urls = [url for _, post_urls in parsed for url in post_urls]
        mentions_of: list[Any] = []
        short_urls: list[Any] = []
        if names:
            mentions_of = await self.logic["user-mention"].mentions(names)
        if urls:
            short_urls = await self.logic["url-shorten"].shorten(urls)
        known = {mention.username: mention for mention in mentions_of}
        generator = self.logic["unique-id"].generator
        built: list[tuple[Post, int, list[int]]] = []
        offset = 0
        for post, (usernames, post_urls) in zip(posts, parsed, strict=True):
            mine = short_urls[offset:offset + len(post_urls)]
            offset += len(post_urls)
            check_media_lists(post.media_ids, post.media_types)
            check_post_size(post.username, post.text, post.media_ids, post.media_types)
            composed = ComposedText(text=text.with_short_urls(post.text, mine),
                                    user_mentions=[known[n] for n in usernames if n in known],
                                    urls=mine)
            creator = Creator(user_id=str(post.user_id), username=post.username)
            timestamp = now_ms()
            made = compose_post.build_post(
                str(generator.next_id()), creator, composed,
                media.MediaService.compose(post.media_ids, post.media_types),
                timestamp, PostType(post.post_type))
            built.append((made, post.user_id, [int(m.user_id) for m in made.user_mentions]))
        published = [Published(int(made.post_id), author, mentioned)
                     for made, author, mentioned in built]
        if journal is not None:
            journal(published)
        return await self._publish([made for made, _, _ in built], published)

    async def _publish(self, posts: list[Post], published: list[Published]
                       ) -> list[str | BaseException]:
        """What compose-post's publish does for each post, for all of them at once: store
        them, write their user timelines and fan them out, all concurrently; undo (with
        compose-post's own undo) each post for which one of those failed."""
        stamped = [(p, int(post.timestamp)) for p, post in zip(published, posts, strict=True)]
        results: tuple[Any, ...] = await asyncio.gather(
            self.logic["post-storage"].store_posts(posts),
            self.logic["user-timeline"].write_many(
                [(p.user_id, p.post_id, timestamp) for p, timestamp in stamped]),
            self.logic["home-timeline"].write_many(
                [(p.user_id, p.post_id, timestamp, p.mentioned) for p, timestamp in stamped]),
            return_exceptions=True)
        stored = results[0]
        batch_failed = next((r for r in results if isinstance(r, BaseException)), None)
        outcomes: list[str | BaseException] = []
        undo: list[tuple[Published, bool]] = []
        for position, (p, post) in enumerate(zip(published, posts, strict=True)):
            failed = batch_failed
            taken = not isinstance(stored, BaseException) and position in stored
            if taken and failed is None:
                failed = Conflict(f"post {p.post_id} is already stored")
            if failed is None:
                outcomes.append(post.post_id)
                continue
            # A taken id is another post's: its timeline entries go, the post stays.
            undo.append((p, not taken))
            outcomes.append(failed)
        if undo:
            await self._undo(undo)
        return outcomes

    async def undo(self, published: Sequence[Published]) -> None:
        """Remove posts that may have been published in part (compose-post's own undo):
        their timeline entries, then the posts; :class:`UndoFailed` if a removal failed
        (compose-post logs and counts it), so that nothing is taken for undone that is not."""
        compose = self.logic["compose-post"]
        failed_before = compose.errors[compose_post.COMPENSATION_FAILED]
        await self._undo([(p, True) for p in published])
        failed = compose.errors[compose_post.COMPENSATION_FAILED] - failed_before
        if failed:
            raise UndoFailed(f"{failed} removals of {len(published)} posts failed (logged)")

    async def _undo(self, posts: Sequence[tuple[Published, bool]]) -> None:
        """compose-post's undo of each post (and of the post itself where True), a few at a
        time: thousands at once would queue each store past its call timeout."""
        compose = self.logic["compose-post"]
        semaphore = asyncio.Semaphore(UNDO_AT_ONCE)

        async def undo_one(p: Published, post: bool) -> None:
            async with semaphore:
                await compose._undo(p.post_id, p.user_id, p.mentioned, post=post)

        await asyncio.gather(*(undo_one(p, post) for p, post in posts))
