"""Ceilings: the rate at which each single-core unit would fill its cores, and the verdict."""

from __future__ import annotations

import pytest

from socialbench.workloads.probes.ceilings import (
    FERRETDB_WRITER_SHARE,
    ComponentUnits,
    DeclaredUnits,
    ceiling_verdict,
    declared_units,
    lowest_per_component,
    split_declared,
    step_ceilings,
)
from socialbench.workloads.probes.records import UnitRecord


def unit(name: str, cpu: float, role: str = "process", capacity: float = 1.0) -> UnitRecord:
    return UnitRecord(unit=name, role=role, cpu_seconds=cpu, capacity_cores=capacity)


STEP = [
    # A service of two workers, one busier (the kernel's balance is never exact), and the
    # parent that forked them.
    ComponentUnits("home-timeline", "service", [
        unit("pid 10 (python3)", 0.001), unit("pid 11 (python3)", 9.0),
        unit("pid 12 (python3)", 6.0)]),
    ComponentUnits("redis", "store", [unit("pid 20 (redis-server) command thread", 3.0,
                                           "command thread")]),
    ComponentUnits("memcached", "store", [
        unit("pid 30 thread 30 (memcached)", 0.05, "thread"),
        unit("pid 30 thread 31 (mc-worker)", 1.0, "worker thread"),
        unit("pid 30 thread 32 (mc-worker)", 2.0, "worker thread")]),
    ComponentUnits("mongodb", "store", [unit("pid 40 (ferretdb)", 8.0, "go runtime", 2.0)]),
    ComponentUnits("nginx", "gateway", [unit("pid 50 (nginx)", 0.0),
                                        unit("pid 51 (nginx)", 1.5)]),
]
REQUESTS = 30_000  # over the step's span


def test_each_units_ceiling_is_its_cores_over_its_cpu_per_request() -> None:
    rows = {row.unit: row for row in step_ceilings(STEP, REQUESTS)}

    busiest = rows["pid 11 (python3)"]
    assert busiest.cpu_ms_per_request == pytest.approx(9.0 * 1000 / REQUESTS)
    assert busiest.ceiling_rps == pytest.approx(REQUESTS / 9.0)  # 3,333 req/s
    assert rows["pid 12 (python3)"].ceiling_rps == pytest.approx(REQUESTS / 6.0)
    assert rows["pid 20 (redis-server) command thread"].ceiling_rps == pytest.approx(10_000)
    assert rows["pid 30 thread 32 (mc-worker)"].ceiling_rps == pytest.approx(15_000)
    # FerretDB's runtime may use its GOMAXPROCS cores ...
    assert rows["pid 40 (ferretdb)"].ceiling_rps == pytest.approx(2 * REQUESTS / 8.0)
    # ... and its writer one, at the stated share of its CPU: an estimate, and said so.
    writer = rows["pid 40 (ferretdb): its SQLite writer"]
    assert writer.ceiling_rps == pytest.approx(REQUESTS / (8.0 * FERRETDB_WRITER_SHARE))
    assert writer.estimate and writer.basis.startswith("estimate")
    assert not busiest.estimate and busiest.basis == "measured"
    # A unit that used no CPU has no ceiling.
    assert "pid 50 (nginx)" not in rows


def test_rows_come_lowest_first_and_name_what_lifts_them() -> None:
    rows = step_ceilings(STEP, REQUESTS)

    assert [r.ceiling_rps for r in rows] == sorted(r.ceiling_rps for r in rows)
    assert rows[0].unit == "pid 11 (python3)"
    # Two workers did the work (the forking parent's 0.001 s is not one): a third lifts it.
    assert "up --workers home-timeline=3" in rows[0].lift
    redis = next(r for r in rows if r.component == "redis")
    assert "--stores per-service" in redis.lift
    memcached = next(r for r in rows if r.component == "memcached")
    assert "--memcached-threads 3" in memcached.lift


def test_the_lowest_per_component_keeps_each_components_first_to_fill() -> None:
    lowest = lowest_per_component(step_ceilings(STEP, REQUESTS), most=10)

    assert [(r.component, r.role) for r in lowest] == [
        ("home-timeline", "process"), ("mongodb", "go runtime"), ("mongodb", "writer"),
        ("redis", "command thread"), ("memcached", "worker thread"), ("nginx", "process")]
    assert len(lowest_per_component(step_ceilings(STEP, REQUESTS))) == 5


def test_no_requests_no_ceilings() -> None:
    assert step_ceilings(STEP, 0) == []


def test_a_max_rate_within_15_percent_of_a_ceiling_measures_that_component() -> None:
    lowest = lowest_per_component(step_ceilings(STEP, REQUESTS))
    verdict = ceiling_verdict(3_000, lowest, machine_bound=True)  # 10% below 3,333

    assert "within 15% of home-timeline 3,333 req/s" in verdict
    assert "it measures home-timeline, not the machine" in verdict
    assert "up --workers home-timeline=3" in verdict


def test_every_cpu_busy_below_the_ceilings_says_the_machine_is_the_bound() -> None:
    lowest = lowest_per_component(step_ceilings(STEP, REQUESTS))
    verdict = ceiling_verdict(2_000, lowest, machine_bound=True)

    assert verdict.startswith("every CPU of the stack was busy: the machine is the bound")
    assert "67% above the max rate" in verdict


def test_neither_says_the_limit_is_waiting() -> None:
    lowest = lowest_per_component(step_ceilings(STEP, REQUESTS))

    assert "the limit is waiting" in ceiling_verdict(2_000, lowest, machine_bound=False)
    assert ceiling_verdict(None, lowest, machine_bound=False).startswith("no ceilings")


@pytest.mark.parametrize(("argv", "env", "expected"), [
    (["socialbench", "serve", "user", "--workers", "3"], {}, DeclaredUnits(3, "process")),
    (["serve", "unique-id", "--port", "9001"], {}, DeclaredUnits(1, "process")),
    (["memcached", "-U", "0", "-t", "8"], {}, DeclaredUnits(8, "worker thread")),
    (["memcached", "-m", "64"], {}, DeclaredUnits(4, "worker thread")),
    (["redis-server", "--appendonly", "yes"], {}, DeclaredUnits(1, "command thread")),
    (["nginx", "-g", "daemon off;"], {}, DeclaredUnits(16, "process")),
    (["/usr/bin/ferretdb", "--handler=sqlite"], {"GOMAXPROCS": "3"},
     DeclaredUnits(1, "go runtime", 3.0)),
    (["mongod", "--bind_ip_all"], {}, None),
])
def test_a_commands_declared_units(argv: list[str], env: dict[str, str],
                                   expected: DeclaredUnits | None) -> None:
    assert declared_units(argv, env, host_cpus=16) == expected


def test_a_component_read_whole_is_split_evenly_and_says_so() -> None:
    row = split_declared(6.0, DeclaredUnits(3, "process"))

    assert row.cpu_seconds == pytest.approx(2.0) and row.count == 3
    assert row.basis.startswith("declared: its CPU split evenly over 3 processes")
    [ceiling] = step_ceilings([ComponentUnits("user", "service", [row])], 1000)
    assert ceiling.ceiling_rps == pytest.approx(500)
    assert "up --workers user=4" in ceiling.lift
