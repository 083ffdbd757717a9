"""Fast JSON for request and response bodies (orjson)."""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import Request
from starlette.responses import Response

from socialbench.runtime.errors import InvalidArgument

dumps = orjson.dumps


def loads(data: bytes | str) -> Any:
    """Parse JSON; malformed input is the caller's fault (400)."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise InvalidArgument(f"malformed JSON: {exc}") from None


class JSONResponse(Response):
    """A JSON response rendered by orjson."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


async def json_body(request: Request) -> Any:
    """The request's JSON body."""
    return loads(await request.body())
