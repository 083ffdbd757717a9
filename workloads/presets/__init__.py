"""The published procedures by name: what each sets, how it maps to our instrument, and
the deviations of a run that overrode it.

    get("dsb-ampere")                        # a Preset, or UnknownPreset
    resolve(preset, given) -> (values, PresetRecord)

A preset is data: each parameter is one option of its command (``ramp``, ``cache run``,
``cache scale``), keyed by the option's parameter name. An option given beside a preset
overrides it and is recorded as a deviation when its value differs. Sources:
docs/reproducing.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from socialbench.errors import SocialbenchError

Command = Literal["ramp", "cache run", "cache scale"]


class Parameter(BaseModel):
    """One parameter the procedure names, as our option and value."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    option: str = Field(description="The command's parameter name, e.g. step_duration.")
    value: Any = Field(description="Our value, as the option takes it.")
    published: str = Field(description="What the publication says.")
    mapping: str = Field(default="", description="How ours differs, when it does.")

    @property
    def flag(self) -> str:
        return "--" + self.option.replace("_", "-")


class Preset(BaseModel):
    """A published procedure: its source, its parameters and what it reports."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    title: str
    command: Command
    source: str
    reports: str
    parameters: tuple[Parameter, ...]
    notes: tuple[str, ...] = Field(
        default=(), description="What the procedure does that no option sets here.")

    @property
    def mappings(self) -> list[str]:
        """Where our instrument differs from the original's, one line each."""
        return [f"{p.flag}: {p.mapping}" for p in self.parameters if p.mapping] + list(
            self.notes)


class Deviation(BaseModel):
    """An option given beside a preset, with a value other than the preset's."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    option: str
    preset: Any
    given: Any

    def __str__(self) -> str:
        return f"--{self.option.replace('_', '-')} {_text(self.given)} (preset: " \
               f"{_text(self.preset)})"


class PresetRecord(BaseModel):
    """What a manifest records of the preset a run followed."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    title: str
    source: str
    deviations: list[Deviation] = Field(default_factory=list)
    mappings: list[str] = Field(default_factory=list)

    def headline(self) -> str:
        """``Ampere DSB method, 2 deviations: …`` (or ``…, no deviation``)."""
        if not self.deviations:
            return f"{self.title}, no deviation"
        count = len(self.deviations)
        return (f"{self.title}, {count} deviation{'s' if count > 1 else ''}: "
                + "; ".join(map(str, self.deviations)))


class UnknownPreset(SocialbenchError, ValueError):
    """No preset by that name, or not one of this command's."""


def _text(value: Any) -> str:
    if isinstance(value, list | tuple):
        return ",".join(map(str, value))
    return str(value)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return [str(x) for x in a] == [str(x) for x in b]
    if isinstance(a, int | float) and isinstance(b, int | float):
        return float(a) == float(b)
    return str(a) == str(b)


WRK2_THREADS = ("wrk2's threads are its event loops; ours are processes (--processes, "
                "default: one per CPU the driver may use), each with its share of the "
                "connections: the count that matters is connections, not threads")
SLA_PERCENTILE = ("ours is the percentile of latency from each request's intended send "
                  "time, as wrk2's corrected histogram (coordinated omission counted)")

PRESETS: tuple[Preset, ...] = (
    Preset(
        name="dsb-ampere", title="Ampere DSB method", command="ramp",
        source="seed 004: the DeathStarBench social network on Ampere Altra Max",
        reports="the best repeat's max rate at p99 <= 2 s, with its p99",
        parameters=(
            Parameter(option="workload", value="compose-post",
                      published="compose-post workload only"),
            Parameter(option="connections", value=5000,
                      published="wrk2 -t 80 -c 5000",
                      mapping="5,000 connections as wrk2's; " + WRK2_THREADS),
            Parameter(option="start_rate", value=1000.0, published="start at 1,000 req/s"),
            Parameter(option="step", value=500.0, published="+500 req/s per step"),
            Parameter(option="step_duration", value="5m", published="5-minute steps",
                      mapping="ours warms up (--warmup, 30 s) before each 5-minute window"),
            Parameter(option="repeat", value=5, published="at least 5 repeats; the best "
                      "rate is reported, with its p99"),
            Parameter(option="sla", value=["p99=2s"], published="SLA p99 <= 2 s",
                      mapping=SLA_PERCENTILE),
        ),
        notes=("stop when p99 or the drop rate climbs: ours stops at the SLA, at errors over "
               "--max-errors (1%) and at achieved under --min-achieved (95%) of offered",),
    ),
    Preset(
        name="perfkit-dsb-social", title="PerfKit dsb_social method", command="ramp",
        source="Intel's PerfKit Benchmarker dsb_social (its benchmark's README)",
        reports="the maximum throughput, and the throughput at p99 <= 30 ms with at most 5% "
                "errors, under the two-declines stop",
        parameters=(
            Parameter(option="workload", value="mixed", published="the mixed workload"),
            Parameter(option="start_rate", value=500.0, published="start at 500 req/s"),
            Parameter(option="step", value=100.0, published="+100 req/s per step"),
            Parameter(option="step_duration", value="5m",
                      published="no step length named in its README",
                      mapping="ours: 5-minute steps (our default), so that a shorter run is "
                              "recorded as a deviation"),
            Parameter(option="stop_after_declines", value=2,
                      published="stop after two declines in a row",
                      mapping="a decline is a step whose achieved req/s is below the step "
                              "before's; steps that break the SLA do not stop the ramp"),
            Parameter(option="sla", value=["p99=30ms"], published="p99 <= 30 ms",
                      mapping=SLA_PERCENTILE),
            Parameter(option="max_errors", value="5%", published="at most 5% errors"),
        ),
        notes=("the throughput at the SLA is the achieved req/s of the highest step that "
               "held it (ours also asks achieved >= 95% of offered and a driver that can be "
               "trusted)",
               "PerfKit runs with the services' horizontal autoscaling on and the tiers on "
               "nodes of their own: on Kubernetes, set them in the chart's values; the local "
               "stack has neither"),
    ),
    Preset(
        name="memcached-ampere", title="Ampere memcached method", command="cache scale",
        source="seed 000: memcached on Ampere Altra Max",
        reports="the aggregate ops/s over the instances that held p99 <= 1 ms",
        parameters=(
            Parameter(option="kind", value="memcached", published="memcached"),
            Parameter(option="ratio", value="1:10", published="1:10 set:get (memtier)"),
            Parameter(option="data_size", value=128, published="128-byte values"),
            Parameter(option="pipeline", value=126, published="pipeline 126 (Altra Max)"),
            Parameter(option="step_time", value=120.0, published="2-minute runs",
                      mapping="each probe of an instance count is 2 minutes"),
            Parameter(option="sla_p99_ms", value=1.0, published="p99 <= 1 ms"),
            Parameter(option="runs", value=3, published="3 runs"),
        ),
        notes=("add instances until one breaks the SLA: as ours does; memtier_benchmark's "
               "flags are our generator's, its threads our --threads processes",),
    ),
    Preset(
        name="redis-ampere", title="Ampere Redis method", command="cache scale",
        source="seed 002: Redis on Ampere Altra Max",
        reports="the aggregate ops/s over the instances that held p99 <= 1 ms",
        parameters=(
            Parameter(option="kind", value="redis", published="Redis"),
            Parameter(option="ratio", value="10:1", published='"1:10 get:set" as written',
                      mapping="taken as written: 10 sets to 1 get; the memcached brief's "
                              "1:10 is set:get, the other way round"),
            Parameter(option="pipeline", value=45, published="pipeline 45"),
            Parameter(option="step_time", value=180.0, published="3-minute runs",
                      mapping="each probe of an instance count is 3 minutes"),
            Parameter(option="sla_p99_ms", value=1.0, published="p99 <= 1 ms"),
            Parameter(option="runs", value=3, published="3 runs"),
        ),
        notes=("add instances until one breaks the SLA: as ours does",),
    ),
    Preset(
        name="memcached-yitian", title="Yitian 710 memcached method", command="cache run",
        source="seed 001: memcached on Yitian 710 against x86",
        reports="ops/s at each pipeline depth (the published table aggregates 30 runs)",
        parameters=(
            Parameter(option="threads", value=8, published="8 memtier clients x 8 threads",
                      mapping="8 generator processes; memtier's 8 clients x 8 threads x 10 "
                              "connections are 640 connections, ours 8 x --clients 80"),
            Parameter(option="clients", value=80, published="10 connections each",
                      mapping="80 connections per process: the same 640 in all"),
            Parameter(option="pipeline", value=[1, 50, 100], published="pipelines 1, 50, 100"),
            Parameter(option="data_size", value=128, published="128-byte values"),
            Parameter(option="key_pattern", value="R", published="random keys"),
            Parameter(option="protocol", value="memcache_text", published="text protocol"),
            Parameter(option="runs", value=3, published="3 consecutive runs"),
        ),
    ),
)


def names(command: Command | None = None) -> list[str]:
    return [p.name for p in PRESETS if command is None or p.command == command]


def get(name: str, command: Command | None = None) -> Preset:
    """The preset called ``name`` (of ``command``, when given)."""
    preset = next((p for p in PRESETS if p.name == name), None)
    if preset is None:
        raise UnknownPreset(f"no preset {name!r}; the presets are {', '.join(names())}")
    if command is not None and preset.command != command:
        raise UnknownPreset(f"{name} is a preset of `socialbench {preset.command}`, not of "
                            f"`socialbench {command}` (its presets: "
                            f"{', '.join(names(command)) or 'none'})")
    return preset


def resolve(preset: Preset, given: Mapping[str, Any]) -> tuple[dict[str, Any], PresetRecord]:
    """The preset's values with ``given`` (the options the user set) over them, and the
    record: every given option whose value differs from the preset's is a deviation."""
    values = {p.option: p.value for p in preset.parameters}
    deviations = [Deviation(option=option, preset=values[option], given=value)
                  for option, value in given.items()
                  if option in values and not _same(values[option], value)]
    values.update(given)
    return values, PresetRecord(name=preset.name, title=preset.title, source=preset.source,
                                deviations=deviations, mappings=preset.mappings)
