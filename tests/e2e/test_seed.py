"""``socialbench seed`` against the running stack."""

from __future__ import annotations

import httpx
import pytest

from socialbench.workloads.definitions import graph
from tests.support import socialbench

pytestmark = pytest.mark.e2e


def test_seed_registers_users_and_follows_both_ways_and_is_safe_twice(base_url: str) -> None:
    source = "synthetic:40:3"
    first = socialbench("seed", "--graph", source, "--url", base_url, "--seed", "7")
    assert first.returncode == 0, first.stdout + first.stderr
    again = socialbench("seed", "--graph", source, "--url", base_url, "--seed", "7")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "already" in again.stdout

    seeded = graph.load(source, seed=7)
    neighbours: dict[int, set[int]] = {}
    for a, b in seeded.edges:
        neighbours.setdefault(a, set()).add(b)
        neighbours.setdefault(b, set()).add(a)
    for user in (0, 5, 39):
        with httpx.Client(base_url=base_url) as client:
            login = client.post("/api/user/login", data={"username": f"username_{user}",
                                                          "password": f"password_{user}"})
            assert login.status_code in (302, 303), login.text
            followees = client.get("/api/user/get_followee").json()
            followers = client.get("/api/user/get_follower").json()
        assert {int(f["followee_id"]) for f in followees} == neighbours[user]
        assert {int(f["follower_id"]) for f in followers} == neighbours[user]
