"""The internal routes one service calls on another, typed on both sides.

Each such route is a :class:`Method`: ``POST /<name>`` of a service, its request model
and its answer model. The serving route takes the request model as its body and answers
the answer model; the caller holds the service's client (``TextClient`` ...; e.g.
``self.text = TextClient(context.rpc["text"])``) and calls it with Python values
(``await self.text.compose(text) -> ComposedText``). The client sends the request's
fields as JSON (mypy checks them against the request model; the neighbour validates
them) and validates the answer into the answer model: an answer the model refuses is a
502 ``NeighbourError`` (``BadAnswer``).
post-storage's posts pass through as bytes, unparsed (:meth:`PostStorageClient.read_posts_json`).
Routes that no service calls keep their models in their own module. What it costs:
docs/performance.md, "Typed calls between services".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Generic, ParamSpec, TypeVar

from pydantic import BaseModel, Field, ValidationError

from socialbench.runtime.errors import NeighbourError
from socialbench.runtime.models import (
    MAX_ITEMS,
    MAX_READ_IDS,
    Creator,
    Id,
    IdText,
    Media,
    Name,
    Post,
    Text,
    Timestamp,
    Url,
    UserMention,
    Username,
)
from socialbench.runtime.rpc import Neighbour

RequestP = ParamSpec("RequestP")
AnswerT = TypeVar("AnswerT", bound=BaseModel)

# The models (no docstrings: they would become descriptions in the services' OpenAPI).


class Empty(BaseModel):
    pass


EMPTY = Empty()
"""The answer ``{}``."""


class PostIdAnswer(BaseModel):
    post_id: IdText


class ComposeTextRequest(BaseModel):
    text: Text


class ComposedText(BaseModel):
    text: str
    user_mentions: list[UserMention]
    urls: list[Url]


class ComposeUrlsRequest(BaseModel):
    urls: Annotated[list[Text], Field(max_length=MAX_ITEMS)]


class UrlsAnswer(BaseModel):
    urls: list[Url]


class ComposeUserMentionsRequest(BaseModel):
    usernames: Annotated[list[str], Field(max_length=MAX_ITEMS)]


class UserMentionsAnswer(BaseModel):
    user_mentions: list[UserMention]


class ComposeMediaRequest(BaseModel):
    media_ids: Annotated[list[Name], Field(max_length=MAX_ITEMS)]
    media_types: Annotated[list[Name], Field(max_length=MAX_ITEMS)]


class MediaAnswer(BaseModel):
    media: list[Media]


class CreatorRequest(BaseModel):
    user_id: Id
    username: Username


class CreatorAnswer(BaseModel):
    creator: Creator


class UsernameRequest(BaseModel):
    username: str


class UserIdAnswer(BaseModel):
    user_id: Id


class UserRequest(BaseModel):
    user_id: Id


class UserIdsAnswer(BaseModel):
    user_ids: list[Id]


class StorePostRequest(BaseModel):
    post: Post


class ReadPostsRequest(BaseModel):
    post_ids: Annotated[list[Id], Field(max_length=MAX_READ_IDS)]


class PostsAnswer(BaseModel):
    posts: list[Post]


class DeletePostRequest(BaseModel):
    post_id: Id


class WriteUserTimelineRequest(BaseModel):
    user_id: Id
    post_id: Id
    timestamp: Timestamp


class RemoveUserTimelineRequest(BaseModel):
    user_id: Id
    post_id: Id


class WriteHomeTimelineRequest(BaseModel):
    user_id: Id
    post_id: Id
    timestamp: Timestamp
    user_mentions_id: Annotated[list[Id], Field(max_length=MAX_ITEMS)] = []


class RemoveHomeTimelineRequest(BaseModel):
    user_id: Id
    post_id: Id
    user_mentions_id: Annotated[list[Id], Field(max_length=MAX_ITEMS)] = []


@dataclass(frozen=True, slots=True)
class Method(Generic[RequestP, AnswerT]):
    """``POST /<name>`` of ``service``: its body model and its answer model.

    ``RequestP`` is the body model's fields (its constructor's keyword arguments): mypy
    checks a client's call (:meth:`Client.ask`) against them.
    """

    service: str
    name: str
    request: Callable[RequestP, BaseModel]
    answer: type[AnswerT]

    @property
    def path(self) -> str:
        return f"/{self.name}"


COMPOSE_UNIQUE_ID = Method("unique-id", "compose_unique_id", Empty, PostIdAnswer)
COMPOSE_TEXT = Method("text", "compose_text", ComposeTextRequest, ComposedText)
COMPOSE_URLS = Method("url-shorten", "compose_urls", ComposeUrlsRequest, UrlsAnswer)
COMPOSE_USER_MENTIONS = Method("user-mention", "compose_user_mentions",
                               ComposeUserMentionsRequest, UserMentionsAnswer)
COMPOSE_MEDIA = Method("media", "compose_media", ComposeMediaRequest, MediaAnswer)
COMPOSE_CREATOR = Method("user", "compose_creator_with_user_id", CreatorRequest, CreatorAnswer)
GET_USER_ID = Method("user", "get_user_id", UsernameRequest, UserIdAnswer)
INSERT_USER = Method("social-graph", "insert_user", UserRequest, Empty)
GET_FOLLOWERS = Method("social-graph", "get_followers", UserRequest, UserIdsAnswer)
STORE_POST = Method("post-storage", "store_post", StorePostRequest, Empty)
READ_POSTS = Method("post-storage", "read_posts", ReadPostsRequest, PostsAnswer)
DELETE_POST = Method("post-storage", "delete_post", DeletePostRequest, Empty)
WRITE_USER_TIMELINE = Method("user-timeline", "write_user_timeline",
                             WriteUserTimelineRequest, Empty)
REMOVE_USER_TIMELINE = Method("user-timeline", "remove_user_timeline",
                              RemoveUserTimelineRequest, Empty)
WRITE_HOME_TIMELINE = Method("home-timeline", "write_home_timeline",
                             WriteHomeTimelineRequest, Empty)
REMOVE_HOME_TIMELINE = Method("home-timeline", "remove_home_timeline",
                              RemoveHomeTimelineRequest, Empty)

METHODS: tuple[Method[..., Any], ...] = (
    COMPOSE_UNIQUE_ID, COMPOSE_TEXT, COMPOSE_URLS, COMPOSE_USER_MENTIONS, COMPOSE_MEDIA,
    COMPOSE_CREATOR, GET_USER_ID, INSERT_USER, GET_FOLLOWERS, STORE_POST, READ_POSTS,
    DELETE_POST, WRITE_USER_TIMELINE, REMOVE_USER_TIMELINE, WRITE_HOME_TIMELINE,
    REMOVE_HOME_TIMELINE,
)
"""Every method a service calls on another (tests/runtime/test_interfaces.py checks each
against its route)."""


def bad_answer(neighbour: str, method: str, problem: str) -> NeighbourError:
    """The error of a neighbour's answer that is not what ``method`` answers: a 502."""
    return NeighbourError(f"{neighbour}: {method}: unexpected answer: {problem}",
                          status_code=502, remote_kind="BadAnswer")


class Client:
    """The typed calls to one neighbour service, through its :class:`Neighbour`."""

    service: ClassVar[str]

    def __init__(self, neighbour: Neighbour) -> None:
        if neighbour.name != self.service:
            raise ValueError(f"{type(self).__name__} calls {self.service}, not {neighbour.name}")
        self.neighbour = neighbour

    @property
    def name(self) -> str:
        return self.neighbour.name

    async def ask(self, method: Method[RequestP, AnswerT], *_: RequestP.args,
                  **fields: RequestP.kwargs) -> AnswerT:
        """Send the request of ``fields`` (the body model's, by keyword: mypy checks them)
        to ``method``; its answer, validated (a 502 if the model refuses it).

        The request is encoded from ``fields`` by orjson, not built as a model first: the
        neighbour validates it, and a model built only to be encoded cost 2-3 µs a call
        (docs/performance.md, "Typed calls between services").
        """
        body = await self.neighbour.call_raw(method.name, fields)
        try:
            return method.answer.model_validate_json(body)
        except ValidationError as exc:
            raise bad_answer(self.name, method.name, str(exc)) from None

    async def ask_raw(self, method: Method[RequestP, Any], *_: RequestP.args,
                      **fields: RequestP.kwargs) -> bytes:
        """As :meth:`ask`, but the answer's JSON as bytes, unparsed (passed on)."""
        return await self.neighbour.call_raw(method.name, fields)


class UniqueIdClient(Client):
    service = "unique-id"

    async def compose(self) -> str:
        """A new post id."""
        return (await self.ask(COMPOSE_UNIQUE_ID)).post_id


class TextClient(Client):
    service = "text"

    async def compose(self, text: str) -> ComposedText:
        """``text`` with short urls, its known mentions and its urls."""
        return await self.ask(COMPOSE_TEXT, text=text)


class UrlShortenClient(Client):
    service = "url-shorten"

    async def compose(self, urls: list[str]) -> list[Url]:
        """One new short url per url, in order (a 502 unless one each)."""
        pairs = (await self.ask(COMPOSE_URLS, urls=urls)).urls
        if len(pairs) != len(urls):
            raise bad_answer(self.name, COMPOSE_URLS.name,
                             f"{len(pairs)} short urls for {len(urls)} urls")
        return pairs


class UserMentionClient(Client):
    service = "user-mention"

    async def compose(self, usernames: list[str]) -> list[UserMention]:
        """The known users among ``usernames``."""
        return (await self.ask(COMPOSE_USER_MENTIONS, usernames=usernames)).user_mentions


class MediaClient(Client):
    service = "media"

    async def compose(self, media_ids: list[str], media_types: list[str]) -> list[Media]:
        """``media_ids`` zipped with ``media_types``."""
        return (await self.ask(COMPOSE_MEDIA, media_ids=media_ids, media_types=media_types)
                ).media


class UserClient(Client):
    service = "user"

    async def compose_creator(self, user_id: int, username: str) -> Creator:
        """The creator of a post by ``user_id``."""
        return (await self.ask(COMPOSE_CREATOR, user_id=user_id, username=username)).creator

    async def user_id(self, username: str) -> int:
        """The id of ``username`` (a 404 if unknown)."""
        return (await self.ask(GET_USER_ID, username=username)).user_id


class SocialGraphClient(Client):
    service = "social-graph"

    async def insert_user(self, user_id: int) -> None:
        """Make a new user known to the graph."""
        await self.ask(INSERT_USER, user_id=user_id)

    async def followers(self, user_id: int) -> list[int]:
        """The ids of the followers of ``user_id``."""
        return (await self.ask(GET_FOLLOWERS, user_id=user_id)).user_ids


class PostStorageClient(Client):
    service = "post-storage"

    async def store(self, post: Post) -> None:
        """Store a new post (a 409 if its id is taken)."""
        await self.ask(STORE_POST, post=post)

    async def read_posts_json(self, post_ids: list[int]) -> bytes:
        """The answer of ``read_posts`` as bytes, ``{"posts": [...]}``: passed on, unparsed
        (:func:`socialbench.runtime.timelines.posts_array`)."""
        return await self.ask_raw(READ_POSTS, post_ids=post_ids)

    async def delete(self, post_id: int) -> None:
        """Delete a post (undoing a compose); none stored is no error."""
        await self.ask(DELETE_POST, post_id=post_id)


class UserTimelineClient(Client):
    service = "user-timeline"

    async def write(self, user_id: int, post_id: int, timestamp: int) -> None:
        """Add a post to its author's timeline."""
        await self.ask(WRITE_USER_TIMELINE, user_id=user_id, post_id=post_id, timestamp=timestamp)

    async def remove(self, user_id: int, post_id: int) -> None:
        """Remove a post from its author's timeline (undoing a compose)."""
        await self.ask(REMOVE_USER_TIMELINE, user_id=user_id, post_id=post_id)


class HomeTimelineClient(Client):
    service = "home-timeline"

    async def write(self, user_id: int, post_id: int, timestamp: int,
                    user_mentions_id: list[int]) -> None:
        """Fan a post out to its author's followers and the users it mentions."""
        await self.ask(WRITE_HOME_TIMELINE, user_id=user_id, post_id=post_id,
                       timestamp=timestamp, user_mentions_id=user_mentions_id)

    async def remove(self, user_id: int, post_id: int, user_mentions_id: list[int]) -> None:
        """Take a post out of the home timelines it went to (undoing a compose)."""
        await self.ask(REMOVE_HOME_TIMELINE, user_id=user_id, post_id=post_id,
                       user_mentions_id=user_mentions_id)
