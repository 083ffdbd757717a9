"""Options and parsers that several commands share, defined once; and :func:`run`, how a
command calls its function outside the CLI and exits (a tool's error caught there only)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import BaseModel
from rich.console import Console

from socialbench import extras
from socialbench.errors import SocialbenchError
from socialbench.workloads import presets
from socialbench.workloads.driver.config import LoadConfig, parse_duration
from socialbench.workloads.driver.placement import (
    Placement,
    PlacementMode,
    parse_cpus,
    plan_placement,
)
from socialbench.workloads.probes.energy import EnergyOptions, MeterChoice

DataDir = Annotated[
    Path, typer.Option("--data-dir", envvar="SOCIALBENCH_DATA_DIR",
                       help="The local stack's directory: state, logs and store data.")
]
DEFAULT_DATA_DIR = Path(".socialbench")

# How energy is measured (socialbench.workloads.probes.energy; docs/energy.md): the same four
# options on ramp, cache run and cache scale.
PowerCmd = Annotated[str | None, typer.Option(
    help="A command printing the machine's watts, sampled each second: overrides every "
         "meter.")]
PowerMeter = Annotated[MeterChoice, typer.Option(
    help="auto: RAPL, else a known hwmon meter, else IPMI DCMI, else the estimate; or one "
         "of them only (an error when it is not there).")]
PowerCoefficients = Annotated[Path | None, typer.Option(
    exists=True, dir_okay=False, metavar="FILE",
    help="Your own coefficients for the estimate (CSV with the table's columns, "
         "docs/energy.md): replaces the table's rows of the same key, adds new ones.")]
CpuFamily = Annotated[str | None, typer.Option(
    metavar="KEY", help="Say which CPU this is (a key of the coefficients table, e.g. "
    "altra-max), where Linux does not tell it.")]


def energy_options(power_cmd: str | None, power_meter: MeterChoice,
                   power_coefficients: Path | None, cpu_family: str | None) -> EnergyOptions:
    return EnergyOptions(power_cmd=power_cmd, meter=power_meter,
                         coefficients=power_coefficients, cpu_family=cpu_family)


def run(command: Callable[[], int], console: Console | None = None,
        soft_wrap: bool | None = None) -> None:
    """Call ``command`` (a command's one function outside the CLI) and exit with the status
    it returns; a tool's error (:class:`SocialbenchError`) is printed on ``console`` (else
    on standard error), exit 1."""
    try:
        status = command()
    except SocialbenchError as exc:
        if console is None:
            typer.echo(f"error: {exc}", err=True)
        else:
            console.print(f"[bold red]error[/]: {exc}", soft_wrap=soft_wrap)
        raise typer.Exit(1) from None
    if status:
        raise typer.Exit(status)


def require_extra(extra: str, feature: str) -> None:
    """Exit 2, naming the extra to install, unless ``extra`` is installed."""
    try:
        extras.require(extra, feature)
    except extras.MissingExtra as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


def preset_values(ctx: typer.Context, name: str, command: presets.Command
                  ) -> tuple[dict[str, Any], presets.PresetRecord]:
    """The preset's options with those the user gave over them, and its record (each given
    option that differs, a deviation)."""
    try:
        chosen = presets.get(name, command)
    except presets.UnknownPreset as exc:
        raise typer.BadParameter(str(exc), param_hint="--preset") from None
    given = {}
    for parameter in chosen.parameters:
        source = ctx.get_parameter_source(parameter.option)
        if source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP"):
            given[parameter.option] = ctx.params[parameter.option]
    return presets.resolve(chosen, given)


def duration(text: str, option: str | None = None) -> float:
    """Seconds from ``500ms``, ``30s``, ``5m``, ``1h``; a bad value is the user's error."""
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=option) from None


def ratio(text: str, option: str | None = None) -> float:
    """``1%`` -> 0.01; ``0.01`` -> 0.01."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*(%?)\s*", text)
    if match is None:
        raise typer.BadParameter(f"{text!r} is not a ratio like 1% or 0.01", param_hint=option)
    value = float(match.group(1)) / (100 if match.group(2) else 1)
    if value > 1:
        raise typer.BadParameter(f"{text!r} is more than 100%", param_hint=option)
    return value


def model_default(model: type[BaseModel], field: str) -> Any:
    """The default of ``model``'s ``field``: an option's default, written once in the model."""
    return model.model_fields[field].default


def load_default(field: str) -> Any:
    """The default of a LoadConfig field: the driver's options of load, ramp and ab."""
    return model_default(LoadConfig, field)


def seconds_text(seconds: float) -> str:
    """``10.0`` -> ``10s``: a default duration in seconds as an option's text."""
    return f"{seconds:g}s"


def percent(share: float) -> str:
    """0.01 -> '1%'."""
    return f"{100 * share:g}%"


CpuPlacement = Annotated[PlacementMode, typer.Option(
    "--cpu-placement",
    help="shared: the driver and the local stack on every CPU; split: on disjoint CPUs "
    "(needs 2 or more: the driver gets a quarter, rounded up, or --driver-cpus; the stack "
    "the rest). Recorded in the results.")]
DriverCpus = Annotated[str | None, typer.Option(
    "--driver-cpus", help="With --cpu-placement split: the driver's CPUs, e.g. 0 or 0-1,4.")]


def placement(mode: PlacementMode, driver_cpus: str | None, reason: str = "",
              stack_cpus: list[int] | None = None) -> Placement:
    """The placement asked for; a CPU list or a split that cannot be is the user's error.

    ``stack_cpus``: the CPUs the local stack was started on (``up --cpus``), which it
    keeps: a split gives the driver the others.
    """
    try:
        cpus = parse_cpus(driver_cpus) if driver_cpus else None
        return plan_placement(mode, cpus, reason=reason, stack_cpus=stack_cpus)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--cpu-placement/--driver-cpus") from None


def placement_for(plan: Placement, stack_serves: bool) -> Placement:
    """``plan`` as it applies: the stack is placed only when the target is the local stack."""
    if stack_serves:
        return plan
    note = "the target is not the local stack: it was not placed"
    return plan.model_copy(update={"stack_cpus": None,
                                   "reason": "; ".join(filter(None, [plan.reason, note]))})
