"""``cache scale`` adds instances until one breaks the SLA, and keeps the best aggregate."""

from __future__ import annotations

from pathlib import Path

from socialbench.workloads.cache import CacheConfig, CacheProtocol
from socialbench.workloads.cache.scale import ScaleConfig, ScaleStop, scale
from socialbench.workloads.cache.servers import Instance
from socialbench.workloads.reports.cache_report import build_cache_report
from socialbench.workloads.results.cache_runs import CacheBundleWriter, read_records
from tests.workloads.cache.conftest import start_fake

SLOW_FROM = 2  # instances 0 and 1 answer at once; the third and later 60 ms late


def _launch(number: int) -> Instance:
    return start_fake(*(["--delay-ms", "60"] if number >= SLOW_FROM else []))


def _config(max_instances: int, **extra: object) -> ScaleConfig:
    run = CacheConfig(protocol=CacheProtocol.REDIS, clients=1, pipeline=1, key_maximum=99,
                      seed=1)
    return ScaleConfig(server="fake", max_instances=max_instances, run=run, step_s=0.5,
                       sla_p99_ms=20.0, fractions=[0.5, 0.2], min_gain=-1,
                       **extra)  # type: ignore[arg-type]


def test_scale_stops_when_an_added_instance_breaks_the_sla(tmp_path: Path) -> None:
    writer = CacheBundleWriter(tmp_path, "scale-test", "cache-scale", {})
    outcome = scale(_config(4), _launch, on_level=writer.add_level)
    assert [level.instances for level in outcome.levels] == [1, 2, 3]
    assert [level.held is not None for level in outcome.levels] == [True, True, False]
    assert outcome.stop_reason is ScaleStop.SLA_BROKEN
    assert outcome.best_instances == 2
    two = outcome.levels[1].held
    assert two is not None and len(two.results) == 2
    assert outcome.best_aggregate_ops_per_s == two.aggregate_ops_per_s
    assert [p.fraction for p in outcome.levels[2].probes] == [None, 0.5, 0.2]  # max, then less
    writer.write_scale(outcome)
    report = build_cache_report(writer.directory)
    _, records, read_back = read_records(writer.directory)
    assert read_back is not None and read_back.best_instances == 2
    assert {(r.instances, r.instance) for r in records} == {(1, 0), (2, 0), (2, 1), (3, 0),
                                                            (3, 1), (3, 2)}
    assert "instances-vs-aggregate.png" in report.read_text()

