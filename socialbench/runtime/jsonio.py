"""Fast JSON for response bodies (orjson), and JSON already encoded."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import Response


class JSONResponse(Response):
    """A JSON response rendered by orjson."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


def json_bytes(body: bytes, status_code: int = 200) -> Response:
    """An answer of JSON already encoded (e.g. post-storage's, passed through)."""
    return Response(body, status_code=status_code, media_type="application/json")
