"""The wire: request streams built once before a run, and incremental reply parsers.

Requests are pre-built: a run's operations (sets and gets in the SETS:GETS pattern, keys
from the key pattern) are encoded once into one ``bytes`` with the offset of every
request, so sending k requests is one slice. A connection cycles through the stream
from its own starting point.

Parsers take the bytes received so far and append one code per complete reply to
``out``: SET_OK, HIT, MISS or ERROR; they return where the first incomplete reply
starts (the caller keeps the rest for the next read).

The binary protocol is memtier's ``-P memcache_binary``: one non-quiet GET or SET frame
per operation (no GETQ/GETKQ batches closed by a NOOP), so every request has one reply
and pipelining is, as in text, requests in flight back to back.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from itertools import accumulate

import numpy as np

from socialbench.workloads.cache.config import CacheConfig, CacheProtocol, KeyPattern

SET_OK, HIT, MISS, ERROR = 0, 1, 2, 3
CODE_BITS = 2  # latencies travel as (ns << 2) | code
MIN_STREAM = 1 << 16
MAX_STREAM = 1 << 20
MAX_STREAM_BYTES = 64 << 20  # a process's stream or prefill batch, whatever the value size
REQUEST_OVERHEAD = 48  # a request's bytes besides its key and value, in any protocol


class ProtocolError(ValueError):
    """The server answered something that is not a reply of the protocol."""


@dataclass(frozen=True)
class OpStream:
    """Encoded requests back to back; request i is ``data[offsets[i]:offsets[i + 1]]``."""

    data: bytes
    offsets: list[int]
    period: int  # the SETS:GETS block: connections start on a multiple of it

    @property
    def length(self) -> int:
        return len(self.offsets) - 1


def value_bytes(size: int) -> bytes:
    """A value of ``size`` printable bytes (memtier sends a fixed pattern too)."""
    pattern = b"0123456789abcdefghijklmnopqrstuvwxyz"
    return (pattern * (size // len(pattern) + 1))[:size]


# memcached's binary protocol (protocol_binary.h): a 24-byte header, then extras, key, value.
# Request: magic, opcode, key length, extras length, data type, vbucket, body length,
# opaque, CAS; a response has the status where the request has the vbucket.
BINARY_HEADER = struct.Struct(">BBHBBHIIQ")
BINARY_REQUEST, BINARY_RESPONSE = 0x80, 0x81
OP_GET, OP_SET = 0x00, 0x01
STATUS_OK, STATUS_KEY_NOT_FOUND = 0x0000, 0x0001
_SET_EXTRAS = bytes(8)  # flags 0, expiration 0 (never), as memtier sends


def encode_set(protocol: CacheProtocol, key: bytes, value: bytes) -> bytes:
    if protocol is CacheProtocol.MEMCACHE_BINARY:
        return BINARY_HEADER.pack(BINARY_REQUEST, OP_SET, len(key), len(_SET_EXTRAS), 0, 0,
                                  len(_SET_EXTRAS) + len(key) + len(value), 0, 0) \
            + _SET_EXTRAS + key + value
    if protocol is CacheProtocol.REDIS:
        return b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (
            len(key), key, len(value), value)
    if protocol is CacheProtocol.MEMCACHE_META:
        return b"ms %s %d\r\n%s\r\n" % (key, len(value), value)
    return b"set %s 0 0 %d\r\n%s\r\n" % (key, len(value), value)


def encode_get(protocol: CacheProtocol, key: bytes) -> bytes:
    if protocol is CacheProtocol.MEMCACHE_BINARY:
        return BINARY_HEADER.pack(BINARY_REQUEST, OP_GET, len(key), 0, 0, 0, len(key), 0, 0) \
            + key
    if protocol is CacheProtocol.REDIS:
        return b"*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n" % (len(key), key)
    if protocol is CacheProtocol.MEMCACHE_META:
        return b"mg %s v\r\n" % key
    return b"get %s\r\n" % key


def draw_keys(pattern: KeyPattern, config: CacheConfig, count: int,
              rng: np.random.Generator) -> np.ndarray:
    """``count`` key numbers in [key_minimum, key_maximum] by ``pattern``."""
    low, span = config.key_minimum, config.key_count
    if pattern is KeyPattern.SEQUENTIAL:
        return low + np.arange(count, dtype=np.int64) % span
    if pattern is KeyPattern.GAUSSIAN:
        drawn = rng.normal(low + (span - 1) / 2, span / 6, count)
        return np.clip(np.rint(drawn), low, low + span - 1).astype(np.int64)
    return rng.integers(low, low + span, count, dtype=np.int64)


def request_bytes(config: CacheConfig) -> tuple[int, int]:
    """At most the bytes of one set and of one get, whatever the protocol."""
    key = len(config.key_prefix.encode()) + len(str(config.key_maximum))
    return REQUEST_OVERHEAD + key + config.data_size, REQUEST_OVERHEAD + key


def stream_length(config: CacheConfig) -> int:
    """Long enough to cover the key range once (within bounds), a whole number of blocks,
    and at most MAX_STREAM_BYTES (large values: fewer, repeated requests)."""
    period = config.sets + config.gets
    wanted = min(max(MIN_STREAM, config.key_count), MAX_STREAM)
    set_bytes, get_bytes = request_bytes(config)
    affordable = MAX_STREAM_BYTES // (config.sets * set_bytes + config.gets * get_bytes)
    return max(min(-(-wanted // period), affordable), 1) * period


def build_stream(config: CacheConfig, seed: int) -> OpStream:
    """The run's operations: in every block of SETS+GETS, SETS sets then GETS gets."""
    period = config.sets + config.gets
    length = stream_length(config)
    rng = np.random.default_rng(seed)
    is_set = (np.arange(length) % period) < config.sets
    set_keys = draw_keys(config.set_pattern, config, length, rng)
    get_keys = draw_keys(config.get_pattern, config, length, rng)
    numbers = np.where(is_set, set_keys, get_keys).tolist()
    prefix = config.key_prefix.encode()
    value = value_bytes(config.data_size)
    protocol = config.protocol
    requests = [
        encode_set(protocol, b"%s%d" % (prefix, n), value) if flag
        else encode_get(protocol, b"%s%d" % (prefix, n))
        for n, flag in zip(numbers, is_set.tolist(), strict=True)
    ]
    return _join(requests, period)


def build_prefill(config: CacheConfig, first: int, last: int) -> OpStream:
    """One set of every key from ``first`` to ``last`` (inclusive), in order."""
    prefix = config.key_prefix.encode()
    value = value_bytes(config.data_size)
    return _join([encode_set(config.protocol, b"%s%d" % (prefix, n), value)
                  for n in range(first, last + 1)], 1)


def _join(requests: list[bytes], period: int) -> OpStream:
    offsets = [0, *accumulate(len(r) for r in requests)]
    return OpStream(b"".join(requests), offsets, period)


# ---------------------------------------------------------------- replies


def parse_redis(data: bytes, pos: int, out: bytearray) -> int:
    """RESP2 replies to SET (+OK) and GET ($-1 or $n + n bytes); -ERR is an error."""
    n = len(data)
    find = data.find
    append = out.append
    while pos < n:
        end = find(b"\r\n", pos)
        if end < 0:
            break
        first = data[pos]
        if first == 36:  # $
            if data[pos + 1] == 45:  # $-1: nil
                append(MISS)
                pos = end + 2
                continue
            stop = end + 4 + int(data[pos + 1:end])
            if stop > n:
                break
            append(HIT)
            pos = stop
        elif first == 43:  # +OK
            append(SET_OK)
            pos = end + 2
        elif first == 45:  # -ERR ...
            append(ERROR)
            pos = end + 2
        else:
            raise ProtocolError(f"not a RESP reply to GET or SET: {data[pos:end][:80]!r}")
    return pos


def parse_memcache_text(data: bytes, pos: int, out: bytearray) -> int:
    """Text replies: STORED; VALUE <key> <flags> <bytes> + data + END; END (a miss)."""
    n = len(data)
    find = data.find
    append = out.append
    while pos < n:
        end = find(b"\r\n", pos)
        if end < 0:
            break
        first = data[pos]
        if first == 86:  # VALUE key flags bytes
            size = int(data[data.rfind(b" ", pos, end) + 1:end])
            stop = end + 9 + size  # \r\n + data + \r\nEND\r\n
            if stop > n:
                break
            append(HIT)
            pos = stop
        elif first == 83 and data[pos + 1] == 84:  # STORED (not SERVER_ERROR)
            append(SET_OK)
            pos = end + 2
        elif first == 69 and data[pos + 1] == 78:  # END: a miss (not ERROR)
            append(MISS)
            pos = end + 2
        elif first in b"ECSNX":  # ERROR, CLIENT_ERROR, SERVER_ERROR, NOT_STORED, EXISTS
            append(ERROR)
            pos = end + 2
        else:
            raise ProtocolError(f"not a memcached reply to get or set: {data[pos:end][:80]!r}")
    return pos


def parse_memcache_meta(data: bytes, pos: int, out: bytearray) -> int:
    """Meta replies: HD (stored); VA <size> + data (hit); EN (miss); NS, errors."""
    n = len(data)
    find = data.find
    append = out.append
    while pos < n:
        end = find(b"\r\n", pos)
        if end < 0:
            break
        head = data[pos:pos + 2]
        if head == b"VA":
            space = find(b" ", pos + 3, end)
            size = int(data[pos + 3:end if space < 0 else space])
            stop = end + 4 + size
            if stop > n:
                break
            append(HIT)
            pos = stop
        elif head == b"HD":
            append(SET_OK)
            pos = end + 2
        elif head == b"EN":
            append(MISS)
            pos = end + 2
        elif head in (b"NS", b"EX", b"NF", b"ER", b"CL", b"SE"):
            append(ERROR)
            pos = end + 2
        else:
            raise ProtocolError(f"not a memcached meta reply: {data[pos:end][:80]!r}")
    return pos


def parse_memcache_binary(data: bytes, pos: int, out: bytearray) -> int:
    """Binary responses: status 0 to SET (stored) or GET (a hit); 0x0001 key not found to
    GET (a miss); any other status an error. The whole frame (24 + body length) or nothing."""
    n = len(data)
    unpack = BINARY_HEADER.unpack_from
    append = out.append
    while pos + 24 <= n:
        magic, opcode, _, _, _, status, body, _, _ = unpack(data, pos)
        if magic != BINARY_RESPONSE:
            raise ProtocolError(f"not a memcached binary response (magic 0x{magic:02x}, "
                                f"expected 0x81): {data[pos:pos + 24][:80]!r}")
        stop = pos + 24 + body
        if stop > n:
            break
        if opcode == OP_GET:
            append(HIT if status == STATUS_OK
                   else MISS if status == STATUS_KEY_NOT_FOUND else ERROR)
        elif opcode == OP_SET:
            append(SET_OK if status == STATUS_OK else ERROR)
        else:
            raise ProtocolError(f"a binary response to opcode 0x{opcode:02x} (status "
                                f"0x{status:04x}); only GET and SET were sent")
        pos = stop
    return pos


PARSERS = {
    CacheProtocol.REDIS: parse_redis,
    CacheProtocol.MEMCACHE_TEXT: parse_memcache_text,
    CacheProtocol.MEMCACHE_META: parse_memcache_meta,
    CacheProtocol.MEMCACHE_BINARY: parse_memcache_binary,
}
