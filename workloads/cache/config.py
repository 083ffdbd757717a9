"""What a cache benchmark run does: memtier_benchmark's knobs, as one pydantic model.

Names follow memtier_benchmark where the meaning is the same (``--ratio``,
``--data-size``, ``--pipeline``, ``--clients`` per thread, ``--threads``,
``--test-time``, ``--requests`` per client, ``--key-pattern``, ``--key-minimum``,
``--key-maximum``, ``--protocol``/``-P`` with memtier's names or short ones, see
:func:`parse_protocol`). Two additions: ``rate`` (open loop, as the HTTP
driver: latency from each request's intended send time) and ``prefill`` (every key of
the range is set once before the measured phase, so gets hit).
"""

from __future__ import annotations

import re
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, model_validator

DEFAULT_REQUESTS = 10_000  # per client, memtier_benchmark's default


class CacheProtocol(StrEnum):
    """The wire protocol (memtier_benchmark's ``--protocol`` names, plus meta)."""

    MEMCACHE_TEXT = "memcache_text"  # get / set
    MEMCACHE_META = "memcache_meta"  # mg / ms (memcached >= 1.6)
    MEMCACHE_BINARY = "memcache_binary"  # binary GET / SET (deprecated upstream, still served)
    REDIS = "redis"  # RESP2 GET / SET

    @property
    def memcached(self) -> bool:
        return self is not CacheProtocol.REDIS


PROTOCOL_ALIASES = {"text": CacheProtocol.MEMCACHE_TEXT, "meta": CacheProtocol.MEMCACHE_META,
                    "binary": CacheProtocol.MEMCACHE_BINARY, "resp2": CacheProtocol.REDIS}
MEMCACHED_KEY_MAX = 250  # memcached's KEY_MAX_LENGTH, in every protocol


def parse_protocol(text: str) -> CacheProtocol:
    """memtier's ``-P`` names (memcache_text, memcache_binary, redis), ours (memcache_meta),
    or the short text, meta and binary (and memtier's resp2 for redis)."""
    name = text.strip().lower()
    if name in PROTOCOL_ALIASES:
        return PROTOCOL_ALIASES[name]
    try:
        return CacheProtocol(name)
    except ValueError:
        names = [p.value for p in CacheProtocol] + list(PROTOCOL_ALIASES)
        raise ValueError(f"unknown protocol {text!r}: one of {', '.join(names)}") from None


class KeyPattern(StrEnum):
    """How keys are drawn from [key_minimum, key_maximum]."""

    RANDOM = "R"  # uniform
    SEQUENTIAL = "S"  # each connection walks the range in order
    GAUSSIAN = "G"  # normal around the middle, sd = range / 6 (memtier's default)


def parse_ratio(text: str) -> tuple[int, int]:
    """``"1:10"`` -> (1 set, 10 gets) in every 11 operations."""
    match = re.fullmatch(r"\s*(\d+)\s*:\s*(\d+)\s*", text)
    if match is None:
        raise ValueError(f"ratio must be SETS:GETS, e.g. 1:10, got {text!r}")
    sets, gets = int(match.group(1)), int(match.group(2))
    if sets + gets == 0:
        raise ValueError("ratio 0:0 sends nothing")
    return sets, gets


def parse_key_pattern(text: str) -> tuple[KeyPattern, KeyPattern]:
    """``"R"`` (both), or memtier's ``"S:R"`` (the set pattern, then the get pattern)."""
    parts = text.upper().split(":")
    if len(parts) == 1:
        parts = parts * 2
    if len(parts) != 2:
        raise ValueError(f"key pattern must be R, S, G or SET:GET (e.g. S:R), got {text!r}")
    try:
        return KeyPattern(parts[0]), KeyPattern(parts[1])
    except ValueError:
        raise ValueError(f"key pattern letters are R, S and G, got {text!r}") from None


class CacheConfig(BaseModel):
    """One run of the cache load generator against one server."""

    model_config = ConfigDict(extra="forbid")

    server: str = "127.0.0.1"
    port: int = 11211
    protocol: CacheProtocol = CacheProtocol.MEMCACHE_TEXT
    sets: int = Field(default=1, ge=0, description="Sets in each SETS:GETS block.")
    gets: int = Field(default=10, ge=0, description="Gets in each SETS:GETS block.")
    data_size: int = Field(default=128, ge=1, description="Bytes of every value set.")
    set_pattern: KeyPattern = KeyPattern.RANDOM
    get_pattern: KeyPattern = KeyPattern.RANDOM
    key_minimum: int = Field(default=0, ge=0)
    key_maximum: int = Field(default=99_999, ge=0)
    key_prefix: str = "memtier-"
    pipeline: int = Field(default=1, ge=1, description="Requests in flight per connection.")
    clients: int = Field(default=10, ge=1, description="Connections per thread (process).")
    threads: int = Field(default=1, ge=1, description="Generator processes.")
    test_time_s: float | None = Field(default=None, gt=0, description="Measured seconds.")
    requests: int | None = Field(
        default=None, ge=1, description="Requests per client (when no test time).")
    rate: float | None = Field(
        default=None, gt=0, description="Open loop: total ops/s on a fixed schedule.")
    warmup_s: float = Field(default=0.0, ge=0, description="Sent but not measured (timed runs).")
    prefill: bool = Field(default=True, description="Set every key once before measuring.")
    prefill_pipeline: int = Field(default=64, ge=1)
    timeout_s: float = Field(default=10.0, gt=0, description="Wait for the last replies.")
    seed: int | None = None
    cpus: list[int] | None = Field(
        default=None, description="CPUs the generator processes are pinned to (round robin).")

    @model_validator(mode="after")
    def _check(self) -> CacheConfig:
        if self.key_maximum < self.key_minimum:
            raise ValueError("key_maximum must be >= key_minimum")
        if self.sets + self.gets == 0:
            raise ValueError("ratio 0:0 sends nothing")
        if self.test_time_s is not None and self.requests is not None:
            raise ValueError("give a test time or a request count, not both")
        if self.rate is not None and self.test_time_s is None:
            raise ValueError("an open-loop rate needs a test time")
        if self.protocol.memcached:
            longest = len(self.key_prefix.encode()) + len(str(self.key_maximum))
            if longest > MEMCACHED_KEY_MAX:
                raise ValueError(f"keys of up to {longest} bytes (prefix + number): memcached "
                                 f"takes at most {MEMCACHED_KEY_MAX}")
            if self.protocol is not CacheProtocol.MEMCACHE_BINARY and \
                    any(c.isspace() or not c.isprintable() for c in self.key_prefix):
                raise ValueError(f"key prefix {self.key_prefix!r}: memcached's text and meta "
                                 "keys have no spaces or control characters")
        return self

    @property
    def timed(self) -> bool:
        return self.test_time_s is not None

    @property
    def requests_per_client(self) -> int:
        return self.requests or DEFAULT_REQUESTS

    @property
    def key_count(self) -> int:
        return self.key_maximum - self.key_minimum + 1

    @property
    def ratio(self) -> str:
        return f"{self.sets}:{self.gets}"

    @property
    def address(self) -> str:
        return f"{self.server}:{self.port}"
