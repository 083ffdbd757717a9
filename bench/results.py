"""Where a benchmark's results go: ``<results_dir>/bench-<name>-<UTC time>.json``.

:func:`write_results` is every bench's writer: indented JSON (paths and other values JSON
does not know written as their text), named with the UTC time as ramp bundles are
(:func:`~socialbench.workloads.results.files.utc_stamp`), so results sort by time.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from socialbench.workloads.results.files import utc_stamp


def write_results(results_dir: Path, name: str, data: Any, stamp: str | None = None) -> Path:
    """``data`` in ``results_dir/bench-<name>-<stamp>.json`` (now, unless given); its path."""
    results_dir.mkdir(parents=True, exist_ok=True)
    path = results_dir / f"bench-{name}-{stamp or utc_stamp()}.json"
    path.write_text(json.dumps(data, indent=2, default=str))
    return path
