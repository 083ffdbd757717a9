"""Helpers for the front-end routes (the DeathStarBench HTTP API behind nginx).

The original's clients send form bodies that are not url-encoded (raw spaces, ``@``,
``:``, ``/``, ``"``, ``[``), with ``Content-Type: application/x-www-form-urlencoded``
even on GETs, and expect plain-text bodies: ``Incomplete arguments`` for a missing
parameter, ``<prefix>: <message>`` for a failure.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import parse_qsl

from fastapi import Request
from starlette.responses import PlainTextResponse

from socialbench.runtime.errors import InvalidArgument

F = TypeVar("F", bound=Callable[..., Any])

MAX_INT64 = 2**63 - 1
MAX_FORM_FIELDS = 64
_DIGITS = re.compile(r"[0-9]+")  # ASCII digits only: no sign, space, "_" or other scripts


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
    """Query-string and form-body parameters of a front-end request (the body wins).

    Both must be UTF-8, raw and percent-decoded alike: anything else is a 400, never
    replaced by U+FFFD.
    """
    args = parse_form(request.scope.get("query_string", b""), "query string")
    body = await request.body()
    if body and not request.headers.get("content-type", "").startswith("multipart/"):
        args.update(parse_form(body, "form body"))
    return args


def parse_form(data: bytes, where: str = "form body") -> dict[str, str]:
    """``name=value&...`` pairs (the last of a repeated name wins); a 400 unless UTF-8."""
    try:
        pairs = parse_qsl(
            data.decode("utf-8"), keep_blank_values=True, errors="strict",
            max_num_fields=MAX_FORM_FIELDS,
        )
    except UnicodeDecodeError:
        raise InvalidArgument(f"the {where} is not valid UTF-8") from None
    except ValueError:  # more fields than MAX_FORM_FIELDS
        raise InvalidArgument(f"the {where} has more than {MAX_FORM_FIELDS} fields") from None
    return dict(pairs)


def require(args: dict[str, str], *names: str) -> list[str]:
    """The values of ``names``; :class:`IncompleteArguments` if any is missing or empty."""
    missing = [name for name in names if not args.get(name)]
    if missing:
        raise IncompleteArguments(missing)
    return [args[name] for name in names]


def parse_int(value: str, name: str, *, high: int = MAX_INT64) -> int:
    """``value`` as an int in ``[0, high]`` (an id: a signed 64-bit int that is not negative).

    Only ASCII digits are read: a sign, spaces, ``_`` and the digits of other scripts,
    all of which Python's ``int()`` accepts, are a clear 400 like any other non-number.
    """
    # Bounded before int(): a long run of digits is out of range, not worth converting.
    if _DIGITS.fullmatch(value) is None or len(value.lstrip("0")) > len(str(high)) or (
        int(value) > high
    ):
        raise InvalidArgument(f"{name} must be an integer in [0, {high}], got {value[:40]!r}")
    return int(value)


def require_ints(args: dict[str, str], *names: str) -> list[int]:
    """The values of ``names`` as ints: :func:`require`, then :func:`parse_int` each."""
    values = require(args, *names)
    return [parse_int(value, name) for value, name in zip(values, names, strict=True)]


def text(body: str, status_code: int = 200) -> PlainTextResponse:
    """A plain-text answer ending with a newline, as the original's ``ngx.say``."""
    return PlainTextResponse(body + "\n", status_code=status_code)
