"""``socialbench seed`` against the running stack."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from socialbench.workloads.seeding import graph
from tests.support import socialbench

pytestmark = pytest.mark.e2e


def test_seed_registers_users_and_follows_both_ways_and_is_safe_twice(
        base_url: str, tmp_path: Path) -> None:
    source = "synthetic:40:3"
    args = ("seed", "--graph", source, "--url", base_url, "--seed", "7",
            "--data-dir", str(tmp_path))
    first = socialbench(*args)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "--path api" in first.stdout
    recorded = socialbench(*args)
    assert recorded.returncode == 0 and "Already seeded" in recorded.stdout, recorded.stdout
    again = socialbench(*args, "--restart")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "already there" in again.stdout and "40 " in again.stdout

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


def _login(client: httpx.Client, user: int) -> None:
    login = client.post("/api/user/login", data={"username": f"username_{user}",
                                                  "password": f"password_{user}"})
    assert login.status_code in (302, 303), login.text


def test_a_heavy_tailed_directed_graph_is_seeded_one_way(base_url: str, tmp_path: Path
                                                         ) -> None:
    source = "twitter:1500:6"
    seeded = socialbench("seed", "--graph", source, "--url", base_url, "--seed", "11",
                         "--concurrency", "16", "--data-dir", str(tmp_path))
    assert seeded.returncode == 0, seeded.stdout + seeded.stderr
    assert "followed one way" in seeded.stdout

    twitter = graph.load(source, seed=11)
    followers: dict[int, set[int]] = {}
    followees: dict[int, set[int]] = {}
    for a, b in twitter.edges:
        followers.setdefault(b, set()).add(a)
        followees.setdefault(a, set()).add(b)
    # The shared stack's other tests seed users 0..39 too: the users looked at are above.
    mine = set(range(40, 1500))
    celebrity = max(mine & set(followers), key=lambda u: len(followers[u]))
    assert len(followers[celebrity]) > 100  # a heavy tail even at 1,500 users
    fan = min(followers[celebrity] & mine)
    with httpx.Client(base_url=base_url) as client:
        _login(client, celebrity)
        got = {int(f["follower_id"]) for f in client.get("/api/user/get_follower").json()}
        assert got == followers[celebrity]
    with httpx.Client(base_url=base_url) as client:
        _login(client, fan)
        got = {int(f["followee_id"]) for f in client.get("/api/user/get_followee").json()}
        assert got == followees[fan]
