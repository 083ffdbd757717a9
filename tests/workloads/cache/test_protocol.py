"""The reply parsers take whole replies only, whatever the reads' boundaries."""

from __future__ import annotations

import pytest

from socialbench.workloads.cache.config import (
    CacheConfig,
    CacheProtocol,
    KeyPattern,
    parse_key_pattern,
    parse_ratio,
)
from socialbench.workloads.cache.protocol import (
    ERROR,
    HIT,
    MISS,
    PARSERS,
    SET_OK,
    build_stream,
)

VALUE = b"v" * 128
REPLIES = {
    CacheProtocol.REDIS: (b"+OK\r\n$128\r\n" + VALUE + b"\r\n$-1\r\n-ERR no\r\n"),
    CacheProtocol.MEMCACHE_TEXT: (b"STORED\r\nVALUE memtier-1 0 128\r\n" + VALUE
                                  + b"\r\nEND\r\nEND\r\nSERVER_ERROR out of memory\r\n"),
    CacheProtocol.MEMCACHE_META: (b"HD\r\nVA 128\r\n" + VALUE + b"\r\nEN\r\nNS\r\n"),
}


@pytest.mark.parametrize("protocol", list(CacheProtocol))
def test_parsers_split_anywhere(protocol: CacheProtocol) -> None:
    data = REPLIES[protocol]
    parse = PARSERS[protocol]
    for cut in range(len(data) + 1):
        out = bytearray()
        pending = data[:cut]
        pos = parse(pending, 0, out)
        rest = pending[pos:] + data[cut:]
        pos = parse(rest, 0, out)
        assert pos == len(rest)
        assert list(out) == [SET_OK, HIT, MISS, ERROR], cut


def test_stream_follows_ratio_and_range() -> None:
    config = CacheConfig(sets=1, gets=10, key_minimum=10, key_maximum=19, data_size=50,
                         protocol=CacheProtocol.MEMCACHE_TEXT)
    stream = build_stream(config, 1)
    requests = [stream.data[a:b] for a, b in zip(stream.offsets, stream.offsets[1:], strict=False)]
    assert stream.length % 11 == 0
    sets = [r for r in requests if r.startswith(b"set ")]
    assert len(sets) * 11 == len(requests)
    assert all(r.startswith(b"set ") for r in requests[::11])
    keys = {int(r.split()[1].removeprefix(b"memtier-")) for r in requests}
    assert keys == set(range(10, 20))
    assert all(r.endswith(b"0 0 50\r\n" + r.split(b"\r\n")[1] + b"\r\n") for r in sets)
    assert all(len(r.split(b"\r\n")[1]) == 50 for r in sets)


def test_memtier_style_options() -> None:
    assert parse_ratio("1:10") == (1, 10)
    assert parse_key_pattern("S:R") == (KeyPattern.SEQUENTIAL, KeyPattern.RANDOM)
    assert parse_key_pattern("g") == (KeyPattern.GAUSSIAN, KeyPattern.GAUSSIAN)
    with pytest.raises(ValueError):
        parse_ratio("0:0")
    with pytest.raises(ValueError):
        CacheConfig(rate=100)  # open loop needs a test time
