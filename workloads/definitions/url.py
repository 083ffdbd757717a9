"""The plain-URL workload: the same GET every time (wrk's default request)."""

from __future__ import annotations

import random

from socialbench.workloads.definitions.core import Request, register


@register("url")
class UrlWorkload:
    """``GET <path>`` of the target URL, identical every time, so the driver builds it once."""

    name = "url"
    fixed = True

    def __init__(self, path: str = "/") -> None:
        if not path.startswith("/"):
            raise ValueError(f"path must start with '/', got {path!r}")
        self.request = Request("GET", path, (), None, self.name)

    def next_request(self, rng: random.Random) -> Request:
        return self.request
