"""The memcached pool's ring: each server about 1/N of the keys, few keys moved by a change."""

from __future__ import annotations

from collections import Counter

import pytest

from socialbench.runtime.hash_ring import HashRing, key_hash

SERVERS = ["127.0.0.1:11222", "127.0.0.1:11223", "127.0.0.1:11224"]
KEYS = [f"post:{n}".encode() for n in range(30_000)]
SHARE_TOLERANCE = 0.10  # of the share each server should get (the module says 7% is typical)


def owners(ring: HashRing) -> list[str]:
    return [ring.names[ring.owner(key)] for key in KEYS]


def test_each_of_three_servers_holds_about_a_third_of_the_keys() -> None:
    counts = Counter(owners(HashRing(SERVERS)))
    assert set(counts) == set(SERVERS)
    for server, count in counts.items():
        assert abs(count / len(KEYS) - 1 / 3) <= SHARE_TOLERANCE / 3, (server, counts)


def test_a_fourth_server_takes_about_a_quarter_of_the_keys_from_the_others_only() -> None:
    before = owners(HashRing(SERVERS))
    after = owners(HashRing([*SERVERS, "127.0.0.1:11225"]))
    moved = [(old, new) for old, new in zip(before, after, strict=True) if old != new]
    assert abs(len(moved) / len(KEYS) - 1 / 4) <= SHARE_TOLERANCE / 4
    assert {new for _, new in moved} == {"127.0.0.1:11225"}
    assert {old for old, _ in moved} == set(SERVERS)  # taken from each of them


def test_removing_a_server_moves_only_its_keys() -> None:
    before = owners(HashRing(SERVERS))
    after = owners(HashRing(SERVERS[:2]))
    moved = {index for index, (old, new) in enumerate(zip(before, after, strict=True))
             if old != new}
    assert moved == {index for index, old in enumerate(before) if old == SERVERS[2]}
    assert {after[index] for index in moved} == set(SERVERS[:2])  # spread over both


def test_the_owner_depends_on_the_names_not_their_order() -> None:
    assert owners(HashRing(SERVERS)) == owners(HashRing(SERVERS[::-1]))


def test_one_server_owns_every_key() -> None:
    assert set(owners(HashRing(SERVERS[:1]))) == {SERVERS[0]}


def test_a_key_hashes_to_the_first_four_bytes_of_its_md5_little_endian() -> None:
    # md5(b"") = d41d8cd98f00b204...: libketama's hash of the empty key
    assert key_hash(b"") == 0xD98C1DD4


def test_a_ring_needs_distinct_servers() -> None:
    with pytest.raises(ValueError, match="needs a server"):
        HashRing([])
    with pytest.raises(ValueError, match="twice"):
        HashRing([SERVERS[0], SERVERS[0]])
