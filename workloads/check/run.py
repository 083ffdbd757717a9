"""The stores check as run (``socialbench check``, the end of ``ramp`` and ``demo``):
:func:`check` reads every user, some, or a sample (check/sample.py), then analyses them
(check/contents.py); a store that cannot be read makes an unreadable result, not an error."""

from __future__ import annotations

import time
from collections.abc import Iterable

from socialbench.workloads.check.contents import (
    DEFAULT_FOLLOW_SLACK_MS,
    DEFAULT_LIMIT,
    CheckResult,
    Sampling,
    StoreAddresses,
    analyse,
    read_snapshot,
    scope_text,
)
from socialbench.workloads.check.sample import read_sample


def check(stores: StoreAddresses, users: Iterable[int] | None = None, *,
          sampling: Sampling | None = None,
          follow_slack_ms: int = DEFAULT_FOLLOW_SLACK_MS, limit: int = DEFAULT_LIMIT,
          timeout_s: float = 10.0) -> CheckResult:
    """Read the stores and check them (every user, ``users``, or a sample if ``sampling``
    asks for one); a result with ``error`` if they cannot be read."""
    import pymongo.errors
    import redis.exceptions

    scope = set(users) if users is not None else None
    started = time.monotonic()
    try:
        snapshot = None
        if scope is None and sampling is not None:
            snapshot = read_sample(stores, sampling, timeout_s, follow_slack_ms)
        if snapshot is None:
            snapshot = read_snapshot(stores, scope, timeout_s=timeout_s, compact=True)
    except (pymongo.errors.PyMongoError, redis.exceptions.RedisError, OSError) as exc:
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return CheckResult.unreadable(f"cannot read the stores: {type(exc).__name__}: "
                                      f"{message[:300]}", scope_text(scope),
                                      time.monotonic() - started)
    result = analyse(snapshot, scope, follow_slack_ms=follow_slack_ms, limit=limit)
    return result.model_copy(update={"elapsed_s": time.monotonic() - started})
