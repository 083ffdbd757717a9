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
    assert (workers["home-timeline"], workers["post-storage"], workers["compose-post"]) == (
        4, 4, 4)
    assert workers["unique-id"] == workers["user"] == 1


def test_a_services_workers_cover_its_share_of_the_cpus() -> None:
    for cpus in (2, 16, 64, 128, 192):
        for spec in registry.SERVICES:
            assert registry.default_workers(spec, cpus) >= (
                cpus * spec.cpu_share * registry.WORKERS_HEADROOM)


def test_worker_counts_never_fall_as_cpus_grow() -> None:
    for spec in registry.SERVICES:
        counts = [registry.default_workers(spec, cpus) for cpus in range(1, 129)]
        assert counts == sorted(counts), spec.name
        assert counts[0] == 1


def test_every_service_has_a_share() -> None:
    assert all(0 < spec.cpu_share < 0.5 for spec in registry.SERVICES)
