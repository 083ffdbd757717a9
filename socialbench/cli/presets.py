"""'socialbench presets': the published procedures, their sources and parameters."""

from __future__ import annotations

from typing import Annotated

import typer

from socialbench.workloads import presets


def presets_command(
    name: Annotated[str | None, typer.Argument(help="One preset (default: all).")] = None,
) -> None:
    """List the published procedures --preset follows: source, parameters, mappings."""
    try:
        chosen = [presets.get(name)] if name else list(presets.PRESETS)
    except presets.UnknownPreset as exc:
        raise typer.BadParameter(str(exc), param_hint="NAME") from None
    for preset in chosen:
        typer.echo(f"{preset.name}: {preset.title} (socialbench {preset.command} "
                   f"--preset {preset.name})")
        typer.echo(f"  source: {preset.source}")
        typer.echo(f"  reports: {preset.reports}")
        for parameter in preset.parameters:
            value = parameter.value
            text = ",".join(map(str, value)) if isinstance(value, list) else str(value)
            typer.echo(f"  {parameter.flag} {text}  ({parameter.published})")
            if parameter.mapping:
                typer.echo(f"      ours: {parameter.mapping}")
        for note in preset.notes:
            typer.echo(f"  note: {note}")
        typer.echo("")
