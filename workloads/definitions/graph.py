"""Social graphs to seed: the original's ``.nodes``/``.edges`` files, Matrix Market, synthetic.

A :class:`Graph` is ``node_count`` users ``0..N-1`` and undirected edges ``(a, b)``;
seeding follows every edge both ways, as the original ``init_social_graph.py`` does.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path


class GraphFormatError(ValueError):
    """A graph file that cannot be read; the message names the file and line."""


@dataclass(frozen=True)
class Graph:
    name: str
    node_count: int
    edges: list[tuple[int, int]]

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


def load(source: str, *, seed: int = 1) -> Graph:
    """``synthetic[:N[:M]]``, a ``.mtx`` file, or a ``.nodes``/``.edges`` pair."""
    if source.startswith("synthetic"):
        parts = source.split(":")[1:]
        sizes = [int(p) for p in parts] + [962, 20][len(parts):]
        return synthetic(sizes[0], sizes[1], seed)
    path = Path(source)
    if path.suffix == ".mtx":
        return load_matrix_market(path)
    if path.with_suffix(".nodes").exists() and path.with_suffix(".edges").exists():
        return load_nodes_edges(path)
    raise GraphFormatError(
        f"{source}: not 'synthetic[:N[:M]]', a .mtx file, or a .nodes/.edges pair"
    )
