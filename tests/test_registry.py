"""The registry's default worker counts: each service its share of the machine's CPUs."""

from __future__ import annotations

from socialbench import registry


def workers_on(cpus: int) -> dict[str, int]:
    return {spec.name: registry.default_workers(spec, cpus) for spec in registry.SERVICES}


def test_on_two_cpus_every_service_gets_one_worker() -> None:
    assert set(workers_on(2).values()) == {1}
    assert set(workers_on(1).values()) == {1}


def test_on_sixteen_cpus_the_hot_services_get_more() -> None:
    workers = workers_on(16)
    assert (workers["home-timeline"], workers["post-storage"], workers["user-timeline"]) == (
        4, 3, 3)
    assert workers["compose-post"] == workers["unique-id"] == 1


def test_worker_counts_never_fall_as_cpus_grow() -> None:
    for spec in registry.SERVICES:
        counts = [registry.default_workers(spec, cpus) for cpus in range(1, 129)]
        assert counts == sorted(counts), spec.name
        assert counts[0] == 1


def test_the_services_shares_leave_room_for_the_stores_and_nginx() -> None:
    assert all(spec.cpu_share > 0 for spec in registry.SERVICES)
    assert 0.7 < sum(spec.cpu_share for spec in registry.SERVICES) < 0.9
