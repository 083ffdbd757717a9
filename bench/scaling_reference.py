"""The reference every ``up --plan`` projection comes from, made from measurements.

    socialbench bench reference --shared bench-stack-A.json --per-service bench-stack-B.json \\
        --point mixed=1:975 --point mixed=2:1800 --point compose-post=1:150 ... \\
        --driver-rps 55000 [--out socialbench/stack/scaling_reference.json]

Takes two ``bench stack`` results (the same workloads on the shared and on the per-service
store layout: each process group's CPU per request, and the driver's), the max rates
measured with the stack on 1, 2, … cores (``--point WORKLOAD=CORES:REQ/S``, cores less the
driver's where it shared them) and one driver process's ceiling (``bench driver``), and
writes the reference (socialbench/stack/sizing.py's :class:`Reference`) and rewrites the
tables of docs/scaling.md made from it. docs/scaling.md says how each was taken.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from socialbench.stack.sizing import Reference, WorkloadReference, render_doc
from socialbench.workloads.probes.machine import cpu_model


@dataclass(frozen=True)
class ReferenceBench:
    """The inputs: two bench-stack files, the scaling points, the driver's ceiling."""

    shared: Path
    per_service: Path
    points: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    driver_rps: float = 50_000.0
    out: Path = Path("socialbench/stack/scaling_reference.json")
    note: str = ""
    doc: Path | None = Path("docs/scaling.md")


def _layout(path: Path) -> dict[str, WorkloadReference]:
    data = json.loads(path.read_text())
    return {
        row["workload"]: WorkloadReference(
            rate_rps=row["achieved_rps"], stack_ms=row["stack_cpu_ms_per_request"],
            components=row["cpu_ms_per_request_by_component"],
            driver_ms=row["driver_cpu_ms_per_request"])
        for row in data["rows"]
    }


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def build(config: ReferenceBench) -> Reference:
    """The reference from ``config``'s measurements (every workload in both files)."""
    shared, per_service = _layout(config.shared), _layout(config.per_service)
    workloads = sorted(set(shared) & set(per_service))
    missing = sorted(set(workloads) - set(config.points))
    if not workloads or missing:
        raise ValueError(f"every workload of both files needs scaling points; "
                         f"{', '.join(missing) or 'no workload in both files'}")
    return Reference(
        measured=config.note or "see docs/scaling.md",
        machine=f"{os.cpu_count()} CPUs, {platform.machine()}, {cpu_model()}",
        commit=_commit(),
        workloads={w: {"shared": shared[w], "per-service": per_service[w]} for w in workloads},
        scaling={w: sorted(config.points[w]) for w in workloads},
        driver_process_rps=config.driver_rps,
    )


def run(config: ReferenceBench) -> Path:
    reference = build(config)
    config.out.write_text(reference.model_dump_json(indent=2) + "\n")
    print(f"written {config.out}")
    if config.doc is not None:
        config.doc.write_text(render_doc(config.doc.read_text(), reference))
        print(f"written {config.doc}'s tables")
    return config.out
