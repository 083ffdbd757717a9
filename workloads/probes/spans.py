"""Latency by service: each service's exclusive time per endpoint, from a step's traces.

A trace is a tree: the front-end service's server span is its root, its children the
client spans of its calls (an RPC, a store call), under each RPC the neighbour's server
span. A span's *exclusive* time is its duration less the union of its children's
intervals (concurrent children taken out once): a server span's is its service's own
time, a store call's the store's (``redis``, ``mongodb``, ``memcached``) as the service
saw it, an RPC's ``rpc to <neighbour>`` (network and queueing before the neighbour's
span). :func:`latency_by_service` adds each trace's up by these names and gives, per
endpoint, p50 and p99 over the traces whose root started in the step's measured window,
and its share of the endpoint's mean time, by which the parts are ordered (a part slow in a
few traces is not the largest). A trace with a span whose parent never arrived, or no root,
is incomplete and left out.
A span ends when the caller's coroutine resumes, so a busy event loop makes its store
calls and RPCs look slow too: read the bars with the CPU bottleneck.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

NS_PER_MS = 1_000_000


class Part(StrEnum):
    """What a share of a trace's time is: a service's own, a store's, or an RPC's wait."""

    SERVICE = "service"
    STORE = "store"
    RPC = "rpc"


@dataclass(frozen=True)
class Span:
    """The part of an OpenTelemetry span the analysis needs."""

    trace_id: bytes
    span_id: bytes
    parent_id: bytes  # b"" for a root
    service: str  # the process that made it (its resource's service.name)
    name: str
    server: bool  # SpanKind.SERVER: a request a service served
    start_ns: int
    end_ns: int
    store: str | None = None  # db.system.name of a store call
    callee: str | None = None  # rpc.service of an RPC

    @property
    def part(self) -> tuple[str, Part]:
        """Whose time this span's exclusive time is."""
        if self.store:
            return self.store, Part.STORE
        if self.callee and not self.server:
            return f"rpc to {self.callee}", Part.RPC
        return self.service, Part.SERVICE


def union_ns(intervals: Iterable[tuple[int, int]], low: int, high: int) -> int:
    """Length of the union of ``intervals``, each clipped to ``[low, high]``."""
    clipped = sorted((max(start, low), min(end, high)) for start, end in intervals)
    total, reach = 0, low
    for start, end in clipped:
        if end <= reach:
            continue
        total += end - max(start, reach)
        reach = end
    return total


def exclusive_ns(span: Span, children: Sequence[Span]) -> int:
    """``span``'s duration less the union of its children's intervals."""
    covered = union_ns(((c.start_ns, c.end_ns) for c in children), span.start_ns, span.end_ns)
    return max(span.end_ns - span.start_ns - covered, 0)


@dataclass(frozen=True)
class TraceTimes:
    """One whole trace: its endpoint, when its root started, and each part's time in it."""

    endpoint: str
    start_ns: int
    parts: dict[tuple[str, Part], int]  # exclusive ns, summed over the trace's spans


def trace_times(spans: Sequence[Span]) -> TraceTimes | None:
    """The exclusive times of one trace's spans by part; None when the trace is not whole."""
    ids = {span.span_id for span in spans}
    roots = [span for span in spans if not span.parent_id]
    if len(roots) != 1 or any(s.parent_id and s.parent_id not in ids for s in spans):
        return None
    children: dict[bytes, list[Span]] = defaultdict(list)
    for span in spans:
        if span.parent_id:
            children[span.parent_id].append(span)
    parts: dict[tuple[str, Part], int] = defaultdict(int)
    for span in spans:
        parts[span.part] += exclusive_ns(span, children[span.span_id])
    root = roots[0]
    return TraceTimes(root.name, root.start_ns, dict(parts))


# ---------------------------------------------------------------- the bundle's records


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PartTime(_Record):
    """One service's (or store's, or RPC's) exclusive time in an endpoint's traces."""

    name: str = Field(description="A service, a store (redis, mongodb, memcached), or "
                                  "'rpc to <service>' (network and queueing before it).")
    kind: Part
    traces: int = Field(description="Traces it took part in (the percentiles are over these).")
    p50_ms: float
    p99_ms: float
    mean_ms: float | None = Field(
        default=None, description="Its time summed over the endpoint's traces, divided by "
                                  "their number: its share of the endpoint's mean time (the "
                                  "shares add up to the mean latency when no calls overlap). "
                                  "None in bundles made before it.")

    @property
    def share_ms(self) -> float:
        """The share of the mean, or the p50 in a bundle that has no share."""
        return self.p50_ms if self.mean_ms is None else self.mean_ms


class EndpointTimes(_Record):
    endpoint: str = Field(description="The root span's name, e.g. 'POST /wrk2-api/post/compose'.")
    traces: int
    parts: list[PartTime] = Field(description="Largest share of the mean first.")


class LatencyByService(_Record):
    """Each part's exclusive time per endpoint over one step's traced requests."""

    traces: int = Field(description="Whole traces whose root started in the measured window.")
    incomplete: int = Field(description="Traces left out: a span's parent never arrived.")
    endpoints: list[EndpointTimes]


def percentile(values: Sequence[int], q: float) -> int:
    """The nearest-rank ``q``th percentile of ``values`` (not empty)."""
    ordered = sorted(values)
    return ordered[max(math.ceil(q / 100 * len(ordered)) - 1, 0)]


def latency_by_service(traces: Iterable[Sequence[Span]], start_ns: int, end_ns: int
                       ) -> LatencyByService:
    """The table of the traces whose root started in ``[start_ns, end_ns)``.

    A trace without a root is counted as incomplete when any of its spans started in
    the window (it cannot be placed better).
    """
    samples: dict[str, dict[tuple[str, Part], list[int]]] = defaultdict(lambda: defaultdict(list))
    counts: dict[str, int] = defaultdict(int)
    whole = incomplete = 0
    for spans in traces:
        times = trace_times(spans)
        if times is None:
            roots = [s.start_ns for s in spans if not s.parent_id] or [s.start_ns for s in spans]
            incomplete += any(start_ns <= t < end_ns for t in roots)
            continue
        if not start_ns <= times.start_ns < end_ns:
            continue
        whole += 1
        counts[times.endpoint] += 1
        for part, ns in times.parts.items():
            samples[times.endpoint][part].append(ns)
    endpoints = []
    for endpoint in sorted(samples):
        parts = [
            PartTime(name=name, kind=kind, traces=len(values),
                     p50_ms=percentile(values, 50) / NS_PER_MS,
                     p99_ms=percentile(values, 99) / NS_PER_MS,
                     mean_ms=sum(values) / counts[endpoint] / NS_PER_MS)
            for (name, kind), values in samples[endpoint].items()
        ]
        parts.sort(key=lambda p: (-p.share_ms, p.name))
        endpoints.append(EndpointTimes(endpoint=endpoint, traces=counts[endpoint], parts=parts))
    return LatencyByService(traces=whole, incomplete=incomplete, endpoints=endpoints)


SERVICE_TIME_CSV = "latency-by-service.csv"
SERVICE_TIME_COLUMNS = ("repeat", "index", "phase", "offered_rps", "endpoint", "endpoint_traces",
                        "part", "kind", "traces", "p50_ms", "p99_ms", "mean_ms")


def service_time_rows(step: dict[str, Any], table: LatencyByService) -> list[dict[str, Any]]:
    """latency-by-service.csv's rows of one step (``step``: its repeat, index, phase, rate)."""
    return [
        {**step, "endpoint": endpoint.endpoint, "endpoint_traces": endpoint.traces,
         "part": part.name, "kind": part.kind.value, "traces": part.traces,
         "p50_ms": part.p50_ms, "p99_ms": part.p99_ms, "mean_ms": part.mean_ms}
        for endpoint in table.endpoints for part in endpoint.parts
    ]
