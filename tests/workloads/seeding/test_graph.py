from __future__ import annotations

from pathlib import Path

import pytest

from socialbench.workloads.seeding import graph, seed


def test_nodes_edges_pair_as_the_original(tmp_path: Path) -> None:
    (tmp_path / "tiny.nodes").write_text("4\n")
    (tmp_path / "tiny.edges").write_text("0 1\n1 2\n\n2 3\n")
    loaded = graph.load(str(tmp_path / "tiny"))
    assert loaded.node_count == 4
    assert loaded.edges == [(0, 1), (1, 2), (2, 3)]


def test_matrix_market_is_one_based_and_drops_self_loops(tmp_path: Path) -> None:
    path = tmp_path / "g.mtx"
    path.write_text(
        "%%MatrixMarket matrix coordinate pattern symmetric\n% c\n3 3 3\n1 2\n3 3\n2 3\n"
    )
    loaded = graph.load(str(path))
    assert loaded.node_count == 3
    assert loaded.edges == [(0, 1), (1, 2)]


def test_edge_outside_the_nodes_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "bad.nodes").write_text("2\n")
    (tmp_path / "bad.edges").write_text("0 1\n1 5\n")
    with pytest.raises(graph.GraphFormatError, match=r"bad.edges:2"):
        graph.load(str(tmp_path / "bad"))


def test_unknown_source_is_refused(tmp_path: Path) -> None:
    with pytest.raises(graph.GraphFormatError, match="not 'synthetic"):
        graph.load(str(tmp_path / "missing"))


def test_synthetic_default_is_shaped_like_socfb_reed98() -> None:
    reed = graph.load("synthetic")
    assert reed.node_count == 962
    assert 18_000 <= len(reed.edges) <= 19_500
    assert len(set(reed.edges)) == len(reed.edges)
    assert all(a != b for a, b in reed.edges)
    degrees = sorted(reed.degrees())
    median = degrees[len(degrees) // 2]
    assert degrees[-1] > 5 * median  # heavy tail


def test_synthetic_is_reproducible_from_its_seed() -> None:
    assert graph.synthetic(200, 5, seed=3).edges == graph.synthetic(200, 5, seed=3).edges
    assert graph.synthetic(200, 5, seed=3).edges != graph.synthetic(200, 5, seed=4).edges


def test_twitter_is_directed_heavy_tailed_and_reproducible() -> None:
    users = 5_000
    twitter = graph.load(f"twitter:{users}:30", seed=3)

    assert twitter.directed and twitter.node_count == users
    assert twitter.edges == graph.twitter(users, 30, seed=3).edges
    assert twitter.edges != graph.twitter(users, 30, seed=4).edges
    assert len(set(twitter.edges)) == len(twitter.edges)
    assert all(a != b for a, b in twitter.edges)
    assert twitter.follows == len(twitter.edges)
    # About 30 follows a user, fewer after the repeats of popular users are dropped.
    assert 20 * users < len(twitter.edges) < 30 * users
    followers = sorted(twitter.followers(), reverse=True)
    median = followers[users // 2]
    # Celebrities: the most followed user has a third of all users as followers, the
    # median user a handful.
    assert followers[0] > users // 3 > 100 * median > 0, (followers[:5], median)


def test_a_directed_graph_is_followed_one_way_an_undirected_both() -> None:
    assert list(seed.follow_bodies([(1, 2)], directed=True)) == ["user_id=1&followee_id=2"]
    assert list(seed.follow_bodies([(1, 2)])) == ["user_id=1&followee_id=2",
                                                  "user_id=2&followee_id=1"]
    assert graph.synthetic(50, 3).follows == 2 * len(graph.synthetic(50, 3).edges)


@pytest.mark.parametrize("spec", ["twitter:10:x", "twitter:1:2:3"])
def test_a_malformed_size_is_refused(spec: str) -> None:
    with pytest.raises(graph.GraphFormatError):
        graph.load(spec)
