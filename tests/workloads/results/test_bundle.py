"""A ramp's bundle: every file there, JSON as its schema says, CSV and logs as the JSON."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import TypeAdapter

from socialbench import registry
from socialbench.workloads.probes.ceilings import ComponentUnits, step_ceilings
from socialbench.workloads.probes.records import StackRecord
from socialbench.workloads.results.files import BundleError, read_bundle, read_histogram_log
from socialbench.workloads.results.schema import Manifest, StepRecord, Summary
from socialbench.workloads.results.summary import RampReport

SCHEMAS = {
    "manifest.json": ("manifest.schema.json", Manifest.model_json_schema()),
    "steps.json": ("steps.schema.json", TypeAdapter(list[StepRecord]).json_schema()),
    "summary.json": ("summary.schema.json", Summary.model_json_schema()),
}


def conforms(value: Any, schema: dict[str, Any], defs: dict[str, Any]) -> list[str]:
    """Where ``value`` breaks ``schema`` (objects, arrays, required, types): a small check
    of the published schema files, independent of the models that wrote the JSON."""
    if "$ref" in schema:
        return conforms(value, defs[schema["$ref"].rsplit("/", 1)[1]], defs)
    if "anyOf" in schema:
        options = [conforms(value, option, defs) for option in schema["anyOf"]]
        return [] if any(not o for o in options) else options[0]
    kind = schema.get("type")
    types = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None),
             "integer": int, "number": (int, float)}
    if kind and not isinstance(value, types[kind]):  # type: ignore[arg-type]
        return [f"{value!r} is not {kind}"]
    problems = []
    if kind == "object" and "properties" in schema:
        missing = set(schema.get("required", [])) - set(value)
        extra = set(value) - set(schema["properties"])
        problems += [f"missing {sorted(missing)}"] * bool(missing)
        problems += [f"unexpected {sorted(extra)}"] * bool(extra)
        for key, item in value.items():
            if key in schema["properties"]:
                problems += conforms(item, schema["properties"][key], defs)
    if kind == "array" and "items" in schema:
        for item in value:
            problems += conforms(item, schema["items"], defs)
    if "enum" in schema and value not in schema["enum"]:
        problems.append(f"{value!r} not in {schema['enum']}")
    return problems


def test_every_file_is_there(refined_ramp: RampReport) -> None:
    directory = refined_ramp.directory
    bundle = read_bundle(directory)
    names = [step.name for step in bundle.steps]

    for name in ("manifest.json", "steps.json", "steps.csv", "resources.csv", "summary.json",
                 "report.html", "schema/manifest.schema.json", "schema/steps.schema.json",
                 "schema/summary.schema.json"):
        assert (directory / name).stat().st_size > 0, name
    assert len(names) == len(set(names)) == len(refined_ramp.outcome.runs[0].steps)
    assert sorted(p.name for p in (directory / "histograms").iterdir()) == sorted(
        f"{name}.hlog" for name in names)
    assert sorted(p.name for p in (directory / "raw").iterdir()) == sorted(
        f"{name}.json" for name in names)


@pytest.mark.parametrize("file", sorted(SCHEMAS))
def test_json_matches_its_schema(refined_ramp: RampReport, file: str) -> None:
    directory = refined_ramp.directory
    schema_file, current = SCHEMAS[file]
    schema = json.loads((directory / "schema" / schema_file).read_text())
    data = json.loads((directory / file).read_text())

    assert schema == current  # the published schema is the one the files are read with
    assert conforms(data, schema, schema.get("$defs", {})) == []
    read_bundle(directory)  # and the models accept them (extra keys forbidden)


def test_the_manifest_says_what_ran_and_where(refined_ramp: RampReport) -> None:
    manifest = read_bundle(refined_ramp.directory).manifest

    assert manifest.config.refine and manifest.config.load.seed is not None
    assert manifest.command_line and manifest.git.keys() == {"commit", "dirty"}
    assert {"cpu_model", "architecture", "logical_cores", "memory_bytes", "kernel",
            "frequency_governor"} <= manifest.hardware.keys()
    assert {"python", "nginx", "memcached", "redis", "mongodb_server",
            "mongodb_server_version"} <= manifest.software.keys()
    assert manifest.energy_source.startswith("--power-cmd 'echo 42'")
    assert manifest.energy_meter is not None and manifest.energy_meter.kind == "power-cmd"
    assert not manifest.energy_meter.estimated


def test_the_csv_matches_the_json(refined_ramp: RampReport) -> None:
    directory = refined_ramp.directory
    steps = json.loads((directory / "steps.json").read_text())
    with (directory / "steps.csv").open() as file:
        rows = list(csv.DictReader(file))

    assert len(rows) == len(steps)
    for row, step in zip(rows, steps, strict=True):
        assert row["name"] == step["name"] and row["phase"] == step["phase"]
        assert int(row["repeat"]) == step["repeat"] and int(row["index"]) == step["index"]
        for column, value in [
            ("offered_rps", step["offered_rps"]), ("achieved_rps", step["achieved_rps"]),
            ("p50_ms", step["latency_ms"]["50"]), ("p99_ms", step["latency_ms"]["99"]),
            ("p99.9_ms", step["latency_ms"]["99.9"]), ("p100_ms", step["latency_ms"]["100"]),
            ("send_lag_p99_ms", step["send_lag_ms"]["99"]),
            ("error_ratio", step["error_ratio"]),
            ("stack_cpu_seconds", step["resources"]["stack_cpu_seconds"]),
            ("joules_per_request", step["energy"]["joules_per_request"]),
            ("settle_s", step["settle"]["waited_s"]),
            ("settle_busy_cores", step["settle"]["first_busy_cores"]),
        ]:
            assert float(row[column]) == pytest.approx(value), column
        assert int(row["requests"]) == step["requests"]
        assert int(row["errors_total"]) == step["errors"]["total"]
        assert row["passed"] == str(step["passed"])
        assert row["failures"] == ";".join(step["failures"])
    with (directory / "resources.csv").open() as file:
        resources = list(csv.DictReader(file))
    assert [r["component"] for r in resources] == ["capacity-server"] * len(steps)
    assert [float(r["cpu_seconds"]) for r in resources] == pytest.approx(
        [s["resources"]["components"][0]["cpu_seconds"] for s in steps])


def test_each_histogram_log_holds_its_steps_latencies(refined_ramp: RampReport) -> None:
    bundle = read_bundle(refined_ramp.directory)
    for step in bundle.steps:
        histogram = read_histogram_log(bundle.directory / step.histogram_log)
        assert histogram.get_total_count() == step.completed
        p99_ms = histogram.get_value_at_percentile(99) / 1000
        assert p99_ms == pytest.approx(step.latency_ms["99"]), step.name


def test_steps_carry_verdicts_resources_and_energy(refined_ramp: RampReport) -> None:
    bundle = read_bundle(refined_ramp.directory)
    for step in bundle.steps:
        assert step.passed == (not step.failures)
        assert step.resources.available and step.resources.stack_cpu_seconds is not None
        assert step.resources.components[0].peak_rss_bytes > 1 << 20
        assert step.resources.cpu_ms_per_request == pytest.approx(
            step.resources.stack_cpu_seconds * 1000 / step.responses_in_span)
        # "echo 42": 42 W over the step, shared by the responses in it.
        assert step.energy.source == "power-cmd" and step.energy.watts == pytest.approx(42)
        assert step.energy.joules_per_request == pytest.approx(
            42 * step.energy.seconds / step.responses_in_span)


def test_the_summary_is_the_confirmed_answer(refined_ramp: RampReport) -> None:
    bundle = read_bundle(refined_ramp.directory)
    summary = bundle.summary
    (repeat,) = summary.repeats
    answer_step = next(s for s in bundle.steps if s.name == summary.best.step)  # type: ignore[union-attr]

    assert summary.completed and summary.best_repeat == 1
    assert summary.stop_reason == "sla" and repeat.stop_reason == "sla"
    assert repeat.refined and repeat.confirmed
    assert answer_step.phase == "confirm" and answer_step.passed
    assert summary.max_rate_rps == answer_step.offered_rps
    assert summary.p99_ms == answer_step.latency_ms["99"]
    assert summary.best is not None
    assert summary.best.sla_values_ms == answer_step.sla_values_ms
    assert summary.coefficient_of_variation is None  # one repeat
    assert summary.energy_note == "measured" and summary.resources_note == "measured"


def test_a_directory_that_is_not_a_bundle_is_refused(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match=r"manifest\.json"):
        read_bundle(tmp_path)


def test_the_schema_check_finds_missing_extra_and_mistyped_keys(
    refined_ramp: RampReport,
) -> None:
    directory = refined_ramp.directory
    schema = json.loads((directory / "schema" / "summary.schema.json").read_text())
    summary = json.loads((directory / "summary.json").read_text())
    del summary["max_rate_rps"]
    summary["surprise"] = 1
    summary["repeats"][0]["steps"] = "seven"
    summary["stop_reason"] = "tired"

    problems = conforms(summary, schema, schema["$defs"])

    assert "missing ['max_rate_rps']" in problems and "unexpected ['surprise']" in problems
    assert "'seven' is not integer" in problems
    assert any("'tired' not in" in problem for problem in problems)


def test_a_stack_record_names_every_services_workers_old_bundles_too() -> None:
    every = {spec.name: 2 for spec in registry.SERVICES}
    record = StackRecord(workers=every, workers_chosen="cpu-count", workers_cpus=8,
                         nginx_workers="auto", tracing=False, trace_sample_ratio=None)
    assert record.service_workers() == every
    # Before counts came from the CPU count: a default and only the services given their own.
    old = StackRecord.model_validate({"default_workers": 3, "workers": {"text": 2},
                                      "nginx_workers": "1", "tracing": False,
                                      "trace_sample_ratio": None})
    assert old.service_workers() == {spec.name: 3 for spec in registry.SERVICES} | {"text": 2}
    assert (old.workers_chosen, old.workers_cpus) == (None, None)


def test_the_ceilings_in_a_recorded_bundle_are_right(refined_ramp: RampReport) -> None:
    bundle = read_bundle(refined_ramp.directory)

    for step in bundle.steps:
        [server] = step.resources.components
        assert [u.role for u in server.units] == ["process"]  # one Python process
        recomputed = step_ceilings([ComponentUnits(c.name, c.kind, c.units)
                                    for c in step.resources.components],
                                   step.responses_in_span)
        assert step.ceilings == recomputed
        if step.ceilings:
            [row] = step.ceilings
            assert row.ceiling_rps == pytest.approx(
                step.responses_in_span / server.units[0].cpu_seconds)
    summary = bundle.summary
    assert summary.best is not None and summary.ceilings_step == summary.best.step
    [lowest] = summary.ceilings
    assert lowest.component == "capacity-server"
    # The server's slots, not its CPU, hold it to 200 req/s: far below its one core's rate.
    assert lowest.ceiling_rps > 1.15 * summary.best.max_rate_rps
    assert summary.ceiling_verdict.startswith(("every CPU of the stack was busy",
                                               "no part within 15% of its ceiling"))
