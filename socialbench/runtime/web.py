"""Helpers for the front-end routes (the DeathStarBench HTTP API behind nginx).

The original's clients send form bodies that are not url-encoded (raw spaces, ``@``,
``:``, ``/``, ``"``, ``[``), with ``Content-Type: application/x-www-form-urlencoded``
even on GETs, and expect plain-text bodies: ``Incomplete arguments`` for a missing
parameter, ``<prefix>: <message>`` for a failure.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import parse_qsl

from fastapi import Request
from starlette.responses import PlainTextResponse

from socialbench.runtime.errors import InvalidArgument

F = TypeVar("F", bound=Callable[..., Any])


class IncompleteArguments(InvalidArgument):
    """A required front-end parameter is missing."""

    def __init__(self, missing: list[str]) -> None:
        super().__init__("Incomplete arguments")
        self.missing = missing


def failure_prefix(prefix: str) -> Callable[[F], F]:
    """Mark a route as a front-end route whose failures read ``<prefix>: <message>``."""

    def mark(endpoint: F) -> F:
        endpoint.failure_prefix = prefix  # type: ignore[attr-defined]
        return endpoint

    return mark


async def form_args(request: Request) -> dict[str, str]:
    """Query-string and form-body parameters of a front-end request (the body wins)."""
    args = dict(parse_qsl(request.url.query, keep_blank_values=True))
    body = await request.body()
    if body and not request.headers.get("content-type", "").startswith("multipart/"):
        args.update(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))
    return args


def require(args: dict[str, str], *names: str) -> list[str]:
    """The values of ``names``; :class:`IncompleteArguments` if any is missing or empty."""
    missing = [name for name in names if not args.get(name)]
    if missing:
        raise IncompleteArguments(missing)
    return [args[name] for name in names]


def parse_int(value: str, name: str) -> int:
    """``value`` as an int; a clear 400 if it is not one."""
    try:
        return int(value)
    except ValueError:
        raise InvalidArgument(f"{name} must be an integer, got {value!r}") from None


def require_ints(args: dict[str, str], *names: str) -> list[int]:
    """The values of ``names`` as ints: :func:`require`, then :func:`parse_int` each."""
    values = require(args, *names)
    return [parse_int(value, name) for value, name in zip(values, names, strict=True)]


def text(body: str, status_code: int = 200) -> PlainTextResponse:
    """A plain-text answer ending with a newline, as the original's ``ngx.say``."""
    return PlainTextResponse(body + "\n", status_code=status_code)
