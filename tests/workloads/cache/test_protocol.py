"""The reply parsers take whole replies only, whatever the reads' boundaries."""

from __future__ import annotations

import struct

import pytest

from socialbench.workloads.cache import protocol as wire
from socialbench.workloads.cache.config import (
    CacheConfig,
    CacheProtocol,
    KeyPattern,
    parse_key_pattern,
    parse_protocol,
    parse_ratio,
)
from socialbench.workloads.cache.protocol import (
    ERROR,
    HIT,
    MISS,
    PARSERS,
    SET_OK,
    ProtocolError,
    build_prefill,
    build_stream,
    parse_memcache_binary,
    stream_length,
)

VALUE = b"v" * 128
# memcached's binary header, written out here rather than taken from the module under test.
HEADER = ">BBHBBHIIQ"


def binary_response(opcode: int, status: int, extras: bytes = b"", key: bytes = b"",
                    value: bytes = b"", opaque: int = 0) -> bytes:
    body = extras + key + value
    return struct.pack(HEADER, 0x81, opcode, len(key), len(extras), 0, status, len(body),
                       opaque, 7) + body


def binary_requests(data: bytes) -> list[tuple[int, int, bytes, bytes, bytes]]:
    """(opcode, CAS, extras, key, value) of each request frame in ``data``, checked whole."""
    frames, pos = [], 0
    while pos < len(data):
        magic, opcode, keylen, extlen, datatype, vbucket, body, _, cas = struct.unpack_from(
            HEADER, data, pos)
        assert (magic, datatype, vbucket) == (0x80, 0, 0)
        start = pos + 24
        extras = data[start:start + extlen]
        key = data[start + extlen:start + extlen + keylen]
        value = data[start + extlen + keylen:start + body]
        assert len(extras) + len(key) + len(value) == body
        frames.append((opcode, cas, extras, key, value))
        pos = start + body
    assert pos == len(data)
    return frames

REPLIES = {
    CacheProtocol.REDIS: (b"+OK\r\n$128\r\n" + VALUE + b"\r\n$-1\r\n-ERR no\r\n"),
    CacheProtocol.MEMCACHE_TEXT: (b"STORED\r\nVALUE memtier-1 0 128\r\n" + VALUE
                                  + b"\r\nEND\r\nEND\r\nSERVER_ERROR out of memory\r\n"),
    CacheProtocol.MEMCACHE_META: (b"HD\r\nVA 128\r\n" + VALUE + b"\r\nEN\r\nNS\r\n"),
    CacheProtocol.MEMCACHE_BINARY: (  # stored; a hit (flags as extras); not found; too large
        binary_response(0x01, 0x0000) + binary_response(0x00, 0x0000, bytes(4), value=VALUE)
        + binary_response(0x00, 0x0001, value=b"Not found")
        + binary_response(0x01, 0x0003, value=b"Too large.")),
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


def test_binary_requests_are_memtiers_get_and_set() -> None:
    config = CacheConfig(sets=1, gets=3, key_minimum=5, key_maximum=8, data_size=40,
                         protocol=CacheProtocol.MEMCACHE_BINARY)
    stream = build_stream(config, 1)
    frames = binary_requests(stream.data)
    assert len(frames) == stream.length and stream.length % 4 == 0
    assert [f[0] for f in frames[:8]] == [0x01, 0x00, 0x00, 0x00] * 2  # SET, then 3 GETs
    value = b"0123456789abcdefghijklmnopqrstuvwxyz0123"
    for opcode, cas, extras, key, body in frames:
        assert cas == 0 and key.startswith(b"memtier-") and 5 <= int(key[8:]) <= 8
        if opcode == 0x01:  # flags 0, expiration 0, then the value
            assert extras == bytes(8) and body == value
        else:
            assert extras == body == b""
    offsets = stream.offsets
    assert binary_requests(stream.data[offsets[1]:offsets[2]])[0][0] == 0x00
    prefill = binary_requests(build_prefill(config, 5, 8).data)
    assert [(f[0], f[3]) for f in prefill] == [(0x01, b"memtier-%d" % n) for n in range(5, 9)]


def _parse_in_reads(data: bytes, read: int) -> tuple[list[int], int]:
    """As a connection does: each read appended to what was left, whole replies taken."""
    out, pending, calls = bytearray(), b"", 0
    for start in range(0, len(data), read):
        pending += data[start:start + read]
        pending = pending[parse_memcache_binary(pending, 0, out):]
        calls += 1
    assert pending == b""
    return list(out), calls


def test_binary_value_larger_than_a_read() -> None:
    big = bytes(range(256)) * 1200  # 300 KiB: more than one 256 KiB read
    data = (binary_response(0x00, 0x0000, bytes(4), value=big)
            + binary_response(0x00, 0x0001, value=b"Not found")
            + binary_response(0x00, 0x0000, bytes(4), value=VALUE))
    for read in (1000, 65536, 262144):
        codes, calls = _parse_in_reads(data, read)
        assert codes == [HIT, MISS, HIT] and calls > 1
    out = bytearray()
    assert parse_memcache_binary(data[:24 + 4 + len(big) - 1], 0, out) == 0 and not out


def test_binary_refuses_what_is_not_a_response() -> None:
    with pytest.raises(ProtocolError, match="magic 0x2d, expected 0x81"):
        parse_memcache_binary(b"-ERR unknown command 'x', with args beginning with:\r\n",
                              0, bytearray())
    with pytest.raises(ProtocolError, match="magic 0x80"):  # a request echoed back
        parse_memcache_binary(struct.pack(HEADER, 0x80, 0, 0, 0, 0, 0, 0, 0, 0), 0,
                              bytearray())
    with pytest.raises(ProtocolError, match="opcode 0x0a"):  # a NOOP: never sent
        parse_memcache_binary(binary_response(0x0A, 0), 0, bytearray())
    out = bytearray()  # statuses other than not found are errors, even to GET
    for status in (0x0002, 0x0004, 0x0081, 0x0082, 0x0086):
        parse_memcache_binary(binary_response(0x00, status), 0, out)
    parse_memcache_binary(binary_response(0x01, 0x0001), 0, out)  # not found to a SET
    assert list(out) == [ERROR] * 6


def test_protocol_names() -> None:
    assert parse_protocol("memcache_binary") is CacheProtocol.MEMCACHE_BINARY
    assert parse_protocol("binary") is CacheProtocol.MEMCACHE_BINARY
    assert parse_protocol(" Text ") is CacheProtocol.MEMCACHE_TEXT
    assert parse_protocol("meta") is CacheProtocol.MEMCACHE_META
    assert parse_protocol("resp2") is parse_protocol("redis") is CacheProtocol.REDIS
    with pytest.raises(ValueError, match="unknown protocol 'ascii': one of memcache_text"):
        parse_protocol("ascii")


def test_keys_memcached_cannot_take_are_refused() -> None:
    long_prefix = "k" * 246
    CacheConfig(protocol=CacheProtocol.MEMCACHE_BINARY, key_prefix=long_prefix, key_maximum=999)
    for protocol in (CacheProtocol.MEMCACHE_BINARY, CacheProtocol.MEMCACHE_TEXT):
        with pytest.raises(ValueError, match="keys of up to 251 bytes"):
            CacheConfig(protocol=protocol, key_prefix=long_prefix, key_maximum=99_999)
    CacheConfig(protocol=CacheProtocol.REDIS, key_prefix=long_prefix)  # Redis takes them
    with pytest.raises(ValueError, match="no spaces or control characters"):
        CacheConfig(protocol=CacheProtocol.MEMCACHE_META, key_prefix="a b")
    CacheConfig(protocol=CacheProtocol.MEMCACHE_BINARY, key_prefix="a b")  # binary keys may


def test_streams_of_large_values_stay_within_their_bytes(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    assert stream_length(CacheConfig()) == 100_001  # 128-byte values: every key, whole blocks
    monkeypatch.setattr(wire, "MAX_STREAM_BYTES", 1 << 20)
    for protocol in CacheProtocol:
        config = CacheConfig(protocol=protocol, data_size=100_000, sets=1, gets=10)
        stream = build_stream(config, 1)
        assert stream.length == 10 * 11 and len(stream.data) <= 1 << 20
    huge = CacheConfig(data_size=4 << 20, sets=2, gets=1)  # one block is over budget: one
    assert stream_length(huge) == 3
