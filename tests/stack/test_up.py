"""``up``'s options: --cpus read as a count or a list, the sizing's defaults unless given,
and --plan, which starts nothing and prints the plan and its projections."""

from __future__ import annotations

from pathlib import Path

import pytest

from socialbench.registry import Store, StoreLayout
from socialbench.stack import launcher
from socialbench.stack.sizing import Reference, project, size_stack
from socialbench.stack.up import CpuChoiceError, UpOptions, resolve_cpus, stack_config
from socialbench.workloads.driver.hostload import usable_cpus
from tests.support import socialbench


def test_a_count_takes_the_first_usable_cpus_and_a_list_names_them() -> None:
    usable = usable_cpus()
    assert resolve_cpus(None) == (len(usable), None)
    assert resolve_cpus("1") == (1, usable[:1])
    assert resolve_cpus(f"{usable[-1]}-{usable[-1]}") == (1, [usable[-1]])
    assert resolve_cpus("128", plan=True) == (128, None)  # a plan may be of any machine


@pytest.mark.parametrize(("text", "message"), [
    ("0", "a CPU or more"),
    ("4096", "this process may use"),
    ("4095-4095", "is not among the CPUs"),
    ("two", "not a CPU list"),
])
def test_cpus_that_cannot_be_are_refused(text: str, message: str) -> None:
    with pytest.raises(CpuChoiceError, match=message):
        resolve_cpus(text)


def test_the_sizings_defaults_unless_given(tmp_path: Path) -> None:
    size = size_stack(128)
    sized = stack_config(UpOptions(data_dir=tmp_path), size, None)
    assert sized.store_layout == size.store_layout.value
    assert sized.redis_cluster_instances == list(size.redis_clusters)
    # Each cluster with the masters the sizing gave it, the hottest more than the others.
    assert {name: sized.cluster_masters(name) for name in sized.redis_cluster_instances} == (
        size.redis_clusters)
    assert sized.redis_servers == sum(2 * m for m in size.redis_clusters.values()) + sum(
        1 for i in sized.store_instances()
        if i.store is Store.REDIS and i.name not in size.redis_clusters)
    assert (sized.memcached_threads, sized.memcached_instances) == (
        size.memcached_threads, size.memcached_instances)
    assert sized.nginx_workers == str(size.nginx_workers) and sized.worker_cpus == 128
    assert set(sized.sizing) >= {"workers", "stores", "memcached", "driver"}

    given = stack_config(UpOptions(data_dir=tmp_path, stores=StoreLayout.SHARED,
                                   memcached_threads=2, nginx_workers="3"),
                         size_stack(128, layout=StoreLayout.SHARED), [0])
    assert (given.store_layout, given.memcached_threads, given.nginx_workers) == (
        "shared", 2, "3")
    assert given.redis_cluster_instances == [] and given.cpus == [0]


def test_plan_for_128_cpus_chooses_per_service_stores_or_more_and_prints_the_ceilings(
        tmp_path: Path) -> None:
    plan = socialbench("up", "--plan", "--cpus", "128", "--data-dir", str(tmp_path))

    assert plan.returncode == 0, plan.stderr
    text = " ".join(plan.stdout.split())
    assert "Plan for 128 CPUs (nothing started)" in text
    assert "Stores: per-service" in text
    reference = Reference.load()
    size = size_stack(128, reference)
    for workload in reference.workloads:
        projection = project(size, reference, workload)
        assert f"{workload}: projected ceilings, lowest first" in text
        assert f"projected max {projection.max_rps:,.0f} req/s (an estimate)" in text
        assert projection.ceilings[0].component in text
        # Below the cores' rate, what lifts the lowest ceiling.
        lowest = projection.ceilings[0]
        assert (f"to lift {lowest.component}:" in text) == (
            lowest.rps < projection.machine_rps)
    assert "an estimate, not a measurement" in text
    # Nothing started: no state, no configuration written.
    assert not (tmp_path / launcher.STATE_FILE).exists()
    assert not (tmp_path / launcher.CONFIG_FILE).exists()


def test_up_on_more_cpus_than_usable_says_what_to_do(tmp_path: Path) -> None:
    up = socialbench("up", "--cpus", "4096", "--data-dir", str(tmp_path))
    assert up.returncode == 1
    assert "--plan --cpus 4096" in " ".join((up.stdout + up.stderr).split())
    assert not (tmp_path / launcher.STATE_FILE).exists()
