"""Consistent hashing of keys to memcached servers, as libketama places them (servers of
equal weight).

Each server gets 160 points on a ring of 2**32: the MD5 digests of ``<name>-0`` to
``<name>-39`` (``name`` is ``host:port``), each cut into four little-endian 32-bit
points. A key hashes to the first four bytes of its MD5, little-endian, and goes to the
server of the first point at or after it, clockwise (past the last point: the first).

So each of N servers owns about 1/N of the keys: at 160 points a server's share is 1/N
give or take 7% of it (one standard deviation over random names of 3 servers; one set
of names in 7 has a server more than 12% off). Adding a server moves to it only the
keys its points take, about 1/(N+1) of them, and removing one moves only the keys it
owned. The owner of a key depends on the servers' names only, not on their order.
"""

from __future__ import annotations

import hashlib
from bisect import bisect_left
from collections.abc import Sequence

POINTS_PER_SERVER = 160
_POINTS_PER_DIGEST = 4  # an MD5 digest is 16 bytes: four 32-bit points


def _md5(data: bytes) -> bytes:
    return hashlib.md5(data, usedforsecurity=False).digest()


def key_hash(key: bytes) -> int:
    """``key``'s place on the ring."""
    return int.from_bytes(_md5(key)[:4], "little")


class HashRing:
    """The servers ``names`` on a ring; :meth:`owner` is the index in ``names`` of a key's."""

    def __init__(self, names: Sequence[str]) -> None:
        if not names:
            raise ValueError("a hash ring needs a server")
        if len(set(names)) != len(names):
            raise ValueError(f"a server is named twice: {', '.join(names)}")
        points: list[tuple[int, str, int]] = []
        for index, name in enumerate(names):
            for digest_number in range(POINTS_PER_SERVER // _POINTS_PER_DIGEST):
                digest = _md5(f"{name}-{digest_number}".encode())
                for start in range(0, 16, 4):
                    points.append((int.from_bytes(digest[start:start + 4], "little"),
                                   name, index))
        points.sort()  # a point two servers share goes to the first by name, whatever the order
        self.names = tuple(names)
        self._points = [point for point, _, _ in points]
        self._owners = [index for _, _, index in points]

    def owner(self, key: bytes) -> int:
        """The index of the server that holds ``key``."""
        position = bisect_left(self._points, key_hash(key))
        return self._owners[position if position < len(self._points) else 0]
