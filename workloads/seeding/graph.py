"""Social graphs to seed: the original's ``.nodes``/``.edges`` files, Matrix Market, synthetic.

A :class:`Graph` is ``node_count`` users ``0..N-1`` and edges ``(a, b)``, followed both
ways when undirected (as ``init_social_graph.py`` does), ``a`` follows ``b`` when
directed. Two synthetic shapes, reproducible from their seed: ``synthetic[:N[:M]]``,
preferential attachment, undirected, by default like socfb-Reed98 (962 users, about 18.8k
edges; its largest degree grows as M·sqrt(N), far from real celebrities); and
``twitter[:N[:M]]``, directed: each user follows a log-normal number of others of mean M
(default 10,000 users, 50 each), picked by a Zipf popularity (rank^-1 over a random
permutation), so at 100k users the top users have tens of thousands of followers and the
median a few dozen.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from socialbench.errors import SocialbenchError


class GraphFormatError(SocialbenchError, ValueError):
    """A graph file that cannot be read; the message names the file and line."""


TWITTER_USERS = 10_000
TWITTER_FOLLOWS = 50
FOLLOWS_SIGMA = 1.0  # of the log-normal number of follows per user
POPULARITY_EXPONENT = 1.0  # Zipf: the user of popularity rank r is drawn ~ r^-exponent


@dataclass(frozen=True)
class Graph:
    name: str
    node_count: int
    edges: list[tuple[int, int]]
    directed: bool = False  # True: (a, b) is a follows b; False: each follows the other

    @property
    def follows(self) -> int:
        """Follow edges once seeded."""
        return len(self.edges) if self.directed else 2 * len(self.edges)

    def followers(self) -> list[int]:
        """Each user's follower count once seeded."""
        count = [0] * self.node_count
        for a, b in self.edges:
            count[b] += 1
            if not self.directed:
                count[a] += 1
        return count

    def degrees(self) -> list[int]:
        degree = [0] * self.node_count
        for a, b in self.edges:
            degree[a] += 1
            degree[b] += 1
        return degree


def _check_edge(path: Path, line_no: int, a: int, b: int, node_count: int) -> None:
    if not (0 <= a < node_count and 0 <= b < node_count):
        raise GraphFormatError(
            f"{path}:{line_no}: edge {a} {b} is outside the {node_count} nodes"
        )


def load_nodes_edges(path: Path) -> Graph:
    """The original's dataset: ``<name>.nodes`` (first line N) and ``<name>.edges`` (``a b``)."""
    base = path.with_suffix("")
    nodes_path, edges_path = base.with_suffix(".nodes"), base.with_suffix(".edges")
    try:
        first = nodes_path.read_text().split(maxsplit=1)[0]
        node_count = int(first)
    except (OSError, IndexError, ValueError) as exc:
        raise GraphFormatError(f"{nodes_path}: first line must be the node count ({exc})") from exc
    edges: list[tuple[int, int]] = []
    with edges_path.open() as lines:
        for line_no, line in enumerate(lines, 1):
            fields = line.split()
            if not fields or fields[0].startswith(("#", "%")):
                continue
            try:
                a, b = int(fields[0]), int(fields[1])
            except (IndexError, ValueError):
                raise GraphFormatError(
                    f"{edges_path}:{line_no}: expected 'a b', got {line!r}"
                ) from None
            _check_edge(edges_path, line_no, a, b, node_count)
            edges.append((a, b))
    return Graph(base.name, node_count, edges)


def load_matrix_market(path: Path) -> Graph:
    """A Matrix Market coordinate file (``.mtx``): 1-based ``i j`` pairs after the size line."""
    edges: list[tuple[int, int]] = []
    node_count = -1
    with path.open() as lines:
        for line_no, line in enumerate(lines, 1):
            if line.startswith("%") or not line.strip():
                continue
            fields = line.split()
            try:
                if node_count < 0:
                    node_count = max(int(fields[0]), int(fields[1]))
                    continue
                a, b = int(fields[0]) - 1, int(fields[1]) - 1
            except (IndexError, ValueError):
                raise GraphFormatError(f"{path}:{line_no}: unexpected line {line!r}") from None
            _check_edge(path, line_no, a, b, node_count)
            if a != b:
                edges.append((a, b))
    if node_count < 0:
        raise GraphFormatError(f"{path}: no size line")
    return Graph(path.stem, node_count, edges)


def synthetic(node_count: int = 962, edges_per_node: int = 20, seed: int = 1) -> Graph:
    """A preferential-attachment graph (heavy-tailed degrees), by default shaped like
    socfb-Reed98: 962 users and about 18.8k edges."""
    if node_count <= edges_per_node:
        raise ValueError("node_count must exceed edges_per_node")
    rng = random.Random(seed)
    edges: list[tuple[int, int]] = []
    # Each node appears in `endpoints` once per edge it has: sampling it is
    # sampling proportionally to degree.
    endpoints: list[int] = list(range(edges_per_node))
    for new in range(edges_per_node, node_count):
        targets: set[int] = set()
        while len(targets) < edges_per_node:
            targets.add(rng.choice(endpoints))
        for target in sorted(targets):
            edges.append((new, target))
            endpoints += (new, target)
    return Graph(f"synthetic-{node_count}-{edges_per_node}-{seed}", node_count, edges)


def twitter(node_count: int = TWITTER_USERS, mean_follows: int = TWITTER_FOLLOWS,
            seed: int = 1) -> Graph:
    """A directed graph with Twitter's heavy-tailed followers (see the module's docstring):
    each edge ``(a, b)`` is a follows b, no user follows itself or anyone twice."""
    if node_count < 2 or mean_follows < 1:
        raise ValueError("a twitter graph needs 2 or more users and 1 or more follows each")
    rng = np.random.default_rng(seed)
    mu = math.log(mean_follows) - FOLLOWS_SIGMA ** 2 / 2  # so the mean is mean_follows
    wanted = np.clip(np.rint(rng.lognormal(mu, FOLLOWS_SIGMA, node_count)), 1,
                     node_count - 1).astype(np.int64)
    popularity = 1.0 / np.arange(1, node_count + 1) ** POPULARITY_EXPONENT
    popularity /= popularity.sum()
    user_of_rank = rng.permutation(node_count)
    followers = np.repeat(np.arange(node_count, dtype=np.int64), wanted)
    followees = user_of_rank[rng.choice(node_count, size=len(followers), p=popularity)]
    pairs = np.unique(followers * node_count + followees)  # sorted, each pair once
    pairs = pairs[pairs // node_count != pairs % node_count]
    edges = list(zip((pairs // node_count).tolist(), (pairs % node_count).tolist(),
                     strict=True))
    return Graph(f"twitter-{node_count}-{mean_follows}-{seed}", node_count, edges,
                 directed=True)


def _sizes(source: str, defaults: tuple[int, int]) -> tuple[int, int]:
    parts = source.split(":")[1:]
    if len(parts) > 2:
        raise GraphFormatError(f"{source}: at most two sizes, users and edges per user")
    try:
        sizes = [int(p) for p in parts] + list(defaults)[len(parts):]
    except ValueError:
        raise GraphFormatError(f"{source}: the sizes must be whole numbers") from None
    return sizes[0], sizes[1]


def load(source: str, *, seed: int = 1) -> Graph:
    """``synthetic[:N[:M]]``, ``twitter[:N[:M]]``, a ``.mtx`` file, or a
    ``.nodes``/``.edges`` pair."""
    if source == "synthetic" or source.startswith("synthetic:"):
        return synthetic(*_sizes(source, (962, 20)), seed)
    if source == "twitter" or source.startswith("twitter:"):
        return twitter(*_sizes(source, (TWITTER_USERS, TWITTER_FOLLOWS)), seed)
    path = Path(source)
    if path.suffix == ".mtx":
        return load_matrix_market(path)
    if path.with_suffix(".nodes").exists() and path.with_suffix(".edges").exists():
        return load_nodes_edges(path)
    raise GraphFormatError(
        f"{source}: not 'synthetic[:N[:M]]', 'twitter[:N[:M]]', a .mtx file, or a "
        ".nodes/.edges pair"
    )
