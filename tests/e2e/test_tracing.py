"""A traced compose-post through nginx: one whole trace in Jaeger, across all 11 services."""

from __future__ import annotations

import secrets
import time
from typing import Any

import httpx
import pytest

from socialbench import registry
from tests.e2e.support import FORM, follow, new_user

pytestmark = pytest.mark.e2e

EXPORT_WAIT_S = 30.0  # the services export in batches, every 5 s
SPAN_CLOSE_SLACK_US = 10_000


def wait_for_trace(jaeger_url: str, trace_id: str, services: set[str]) -> dict[str, Any]:
    """The trace once spans of every one of ``services`` reached Jaeger and no more come."""
    deadline = time.monotonic() + EXPORT_WAIT_S
    seen: set[str] = set()
    spans_before = -1
    while time.monotonic() < deadline:
        response = httpx.get(f"{jaeger_url}/api/traces/{trace_id}", timeout=5)
        if response.status_code == 200:
            trace: dict[str, Any] = response.json()["data"][0]
            seen = {p["serviceName"] for p in trace["processes"].values()}
            # A process's spans may come in two batches: wait until the count holds and
            # no span's parent (but the caller's) is missing.
            ids = {span["spanID"] for span in trace["spans"]}
            parents = {r["spanID"] for span in trace["spans"] for r in span["references"]}
            if (services <= seen and len(trace["spans"]) == spans_before
                    and len(parents - ids) <= 1):
                return trace
            spans_before = len(trace["spans"])
        time.sleep(0.5)
    pytest.fail(f"trace {trace_id} in Jaeger has spans of {sorted(seen)} only")


def test_a_sampled_compose_is_one_whole_trace(client: httpx.Client, jaeger_url: str) -> None:
    author, author_name = new_user(client)
    follower, _ = new_user(client)
    follow(client, follower, author)
    trace_id, caller_span_id = secrets.token_hex(16), secrets.token_hex(8)
    body = (f"username={author_name}&user_id={author}&post_type=0"
            f"&text=traced @{author_name} http://example.com/x&media_ids=[]&media_types=[]")
    started = time.perf_counter_ns()
    response = client.post("/wrk2-api/post/compose", content=body.encode(),
                           headers={**FORM, "traceparent": f"00-{trace_id}-{caller_span_id}-01"})
    elapsed_us = (time.perf_counter_ns() - started) // 1000
    assert response.status_code == 200, response.text

    # One compose reaches every service: compose-post calls seven, text two more,
    # home-timeline social-graph.
    all_services = {spec.name for spec in registry.SERVICES}
    trace = wait_for_trace(jaeger_url, trace_id, all_services)
    service_of = {pid: p["serviceName"] for pid, p in trace["processes"].items()}
    spans = {span["spanID"]: span for span in trace["spans"]}
    assert {span["traceID"] for span in spans.values()} == {trace_id}

    def parent_of(span: dict[str, Any]) -> str | None:
        parents = [r["spanID"] for r in span["references"] if r["refType"] == "CHILD_OF"]
        return parents[0] if parents else None

    # compose-post's server span continues the caller's trace, and took no longer than
    # the client saw (times add up), but for the moment after its answer left: the span
    # closes when the service's loop comes back to it, which on a busy machine can be a
    # few ms after the client has the answer.
    root = next(s for s in spans.values() if parent_of(s) == caller_span_id)
    assert service_of[root["processID"]] == "compose-post"
    assert root["operationName"] == "POST /wrk2-api/post/compose"
    assert root["duration"] <= elapsed_us + SPAN_CLOSE_SLACK_US
    # Every other span hangs off a span of the same trace: the tree is whole.
    for span in spans.values():
        if span is not root:
            assert parent_of(span) in spans, span["operationName"]
    # Each service's server span is the child of its caller's client span.
    for span in spans.values():
        parent = spans.get(parent_of(span) or "")
        service = service_of[span["processID"]]
        if parent is not None and service_of[parent["processID"]] != service:
            assert parent["operationName"].startswith(f"{service} "), parent["operationName"]
    # The stores' calls are there too, each inside the service that made it.
    store_spans = [s for s in spans.values() if "db.system.name" in tags(s)]
    assert {tags(s)["db.system.name"] for s in store_spans} == {"redis", "memcached", "mongodb"}
    for span in store_spans:
        parent = spans[parent_of(span) or ""]
        assert service_of[parent["processID"]] == service_of[span["processID"]]
    stored = [s for s in store_spans if service_of[s["processID"]] == "post-storage"]
    assert any(s["operationName"] == "mongodb insert post" for s in stored)


def tags(span: dict[str, Any]) -> dict[str, Any]:
    return {tag["key"]: tag["value"] for tag in span["tags"]}
