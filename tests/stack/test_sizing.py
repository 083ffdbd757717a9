"""The stack sized for N CPUs, its layout chosen from the reference, and the projections."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from socialbench import registry
from socialbench.registry import StoreLayout
from socialbench.stack.sizing import (
    DOC_TABLES,
    HEADROOM,
    Reference,
    WorkloadReference,
    doc_block,
    fit_usl,
    project,
    reference_shares,
    render_doc,
    size_stack,
)


def test_the_usl_through_two_points_is_amdahl() -> None:
    fit = fit_usl([(1.0, 1000.0), (2.0, 1800.0)])

    assert fit.lambda_rps == 1000 and fit.kappa == 0
    assert fit.sigma == pytest.approx(2 * 1000 / 1800 - 1)
    assert fit.rate(2.0) == pytest.approx(1800)
    assert fit.rate(1.0) == pytest.approx(1000)


def test_the_usl_through_more_points_finds_both_parameters() -> None:
    sigma, kappa = 0.05, 0.001
    points = [(n, 500 * n / (1 + sigma * (n - 1) + kappa * n * (n - 1))) for n in (1, 2, 4, 8)]
    fit = fit_usl(points)

    assert fit.sigma == pytest.approx(sigma, rel=1e-6)
    assert fit.kappa == pytest.approx(kappa, rel=1e-6)


def test_linear_points_fit_no_contention() -> None:
    fit = fit_usl([(1.0, 900.0), (2.0, 1800.0)])
    assert fit.sigma == 0 and fit.rate(128) == pytest.approx(128 * 900)
    assert not fit.superlinear


def test_superlinear_points_fit_a_line_through_the_best_per_core_rate() -> None:
    fit = fit_usl([(1.0, 290.0), (1.8, 790.0)])

    assert fit.superlinear and fit.sigma == 0 and fit.kappa == 0
    assert fit.rate(1.8) == pytest.approx(790)
    assert fit.rate(128) == pytest.approx(128 * 790 / 1.8)
    assert "more cores gave more per core" in fit.describe()


def reference(redis_ms: float = 0.05, scaling: float = 1.9) -> Reference:
    """A reference where each store's CPU per request is known; the per-service layout
    splits the shared Redis's cost over its three instances, the home timelines' most."""
    services = {spec.name: 0.05 for spec in registry.SERVICES}
    shared = services | {"nginx": 0.05, "redis": redis_ms, "memcached": 0.05,
                         "mongodb": 0.1}
    per_service = services | {"nginx": 0.05, "home-timeline-redis": redis_ms * 0.6,
                              "user-timeline-redis": redis_ms * 0.3,
                              "social-graph-redis": redis_ms * 0.1,
                              "post-storage-memcached": 0.04, "user-memcached": 0.01,
                              "post-storage-mongodb": 0.06, "user-timeline-mongodb": 0.04}
    measured = {
        "shared": WorkloadReference(rate_rps=500, stack_ms=sum(shared.values()),
                                    components=shared, driver_ms=0.02),
        "per-service": WorkloadReference(rate_rps=500, stack_ms=sum(per_service.values()),
                                         components=per_service, driver_ms=0.02),
    }
    return Reference(measured="test", machine="test", commit="test",
                     workloads={"mixed": measured},
                     scaling={"mixed": [(1.0, 1000.0), (2.0, 1000.0 * scaling)]},
                     driver_process_rps=50_000)


def test_on_two_cpus_the_shared_stores_keep_up() -> None:
    size = size_stack(2, reference())

    assert size.store_layout is StoreLayout.SHARED and size.redis_clusters == {}
    assert set(size.workers.values()) == {1}
    assert size.nginx_workers == 2 and size.memcached_threads == 4
    assert size.memcached_instances == 1
    assert "shared" in next(c.why for c in size.choices if c.what == "stores")


def test_where_the_shared_redis_caps_below_the_cores_the_per_service_layout_is_chosen() -> None:
    ref = reference(redis_ms=0.12)  # one Redis thread: 8,333 req/s
    machine = ref.fit("mixed").rate(16)
    assert 1000 / 0.12 < HEADROOM * machine < 1000 / (0.12 * 0.6)  # per-service lifts it

    size = size_stack(16, ref)

    assert size.store_layout is StoreLayout.PER_SERVICE and size.redis_clusters == {}
    why = next(c.why for c in size.choices if c.what == "stores")
    assert why.startswith("per-service, as the original: shared, redis 8,333 req/s")


def test_on_128_cpus_the_hottest_redis_becomes_a_cluster_that_keeps_up() -> None:
    ref = reference(redis_ms=0.12)
    size = size_stack(128, ref)
    machine = ref.fit("mixed").rate(128)

    assert size.store_layout is StoreLayout.PER_SERVICE
    masters = size.redis_clusters["home-timeline-redis"]
    assert masters >= 3 and masters * 1000 / (0.12 * 0.6) >= HEADROOM * machine
    projection = project(size, ref, "mixed")
    redis_rows = [c for c in projection.ceilings if c.component.endswith("redis")]
    assert all(row.rps >= HEADROOM * machine for row in redis_rows)
    # memcached: threads up to 16 a process, then more processes.
    assert size.memcached_threads <= 16
    assert size.memcached_threads * size.memcached_instances >= math.ceil(
        128 * 0.05 / ref.workloads["mixed"]["shared"].stack_ms * 2)


def test_a_projection_is_the_lower_of_the_cores_and_the_lowest_ceiling() -> None:
    ref = reference(redis_ms=0.12)
    size = size_stack(128, ref, layout=StoreLayout.SHARED)  # the shared Redis, kept
    projection = project(size, ref, "mixed")

    assert projection.ceilings[0].component == "redis"
    assert projection.max_rps == pytest.approx(1000 / 0.12)
    assert projection.capped_by == "redis (command thread)"
    assert projection.machine_rps > projection.max_rps
    assert projection.driver_cores == pytest.approx(projection.max_rps / 50_000)
    # With the Redis lifted (per-service, a cluster for the hottest), the cores cap it.
    lifted = project(size_stack(128, ref), ref, "mixed")
    assert lifted.capped_by == "the machine's cores"
    assert lifted.max_rps == pytest.approx(ref.fit("mixed").rate(128))


def test_the_driver_is_sized_for_the_projected_rate() -> None:
    ref = reference()
    size = size_stack(128, ref)
    top = project(size, ref, "mixed").max_rps

    assert size.driver_processes >= top / ref.driver_process_rps / 0.5
    assert size.driver_connections >= 2 * top * 0.05


def test_the_registry_keeps_the_references_shares() -> None:
    shares = reference_shares(Reference.load())
    for spec in registry.SERVICES:
        assert spec.cpu_share == pytest.approx(shares[spec.name], abs=0.005), spec.name


def test_the_kept_reference_plans_per_service_stores_or_more_on_128_cpus() -> None:
    size = size_stack(128)
    assert size.store_layout is StoreLayout.PER_SERVICE
    for workload in Reference.load().workloads:
        projection = project(size, Reference.load(), workload)
        assert projection.max_rps > 0 and projection.ceilings


def test_no_cpu_is_refused() -> None:
    with pytest.raises(ValueError, match="a CPU or more"):
        size_stack(0, reference())


def test_the_docs_show_the_kept_references_tables() -> None:
    doc = (Path(__file__).parents[2] / "docs" / "scaling.md").read_text()
    ref = Reference.load()
    for name in DOC_TABLES:
        assert doc_block(name, ref) in doc, f"docs/scaling.md's {name} table is stale: " \
            "run socialbench bench reference again, or render_doc"
    assert render_doc(doc, ref) == doc


def test_a_document_without_the_markers_is_refused() -> None:
    with pytest.raises(ValueError, match="reference table"):
        render_doc("no tables here", reference())
