"""Write (or check) every deployment file generated from the registry (and the big node's,
from the sizing: socialbench/deploy/bignode.py).

    socialbench deploy generate   # after editing socialbench/registry.py
    socialbench deploy check      # exit 1 and name the stale files
"""

from __future__ import annotations

import sys
from pathlib import Path

from socialbench.deploy import GENERATE_COMMAND, bignode, compose, helm, stack_spec


def expected_files() -> dict[Path, str]:
    """Every generated file (absolute path) and the text it must hold."""
    out = {stack_spec.COMPOSE_DIR / name: text for name, text in compose.files().items()}
    out.update({stack_spec.CHART_DIR / name: text for name, text in helm.files().items()})
    out.update({stack_spec.COMPOSE_DIR / name: text for name, text in bignode.files().items()})
    out[stack_spec.CHART_DIR.parent / bignode.VALUES_FILE] = bignode.render_values()
    return out


def stale_files() -> list[Path]:
    """Generated files that are missing or differ from what the registry gives."""
    stale = []
    for path, text in expected_files().items():
        try:
            current = path.read_text()
        except FileNotFoundError:
            current = None
        if current != text:
            stale.append(path)
    return stale


def write_files() -> list[Path]:
    """Write the stale files; the ones written."""
    written = stale_files()
    expected = expected_files()
    for path in written:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(expected[path])
    return written


def generate() -> int:
    """Write the stale files, naming each; 0."""
    for path in write_files():
        print(f"wrote {path.relative_to(stack_spec.REPO_ROOT)}")
    return 0


def check() -> int:
    """1 when a generated file is stale (each named on stderr), else 0."""
    stale = stale_files()
    for path in stale:
        print(f"stale: {path.relative_to(stack_spec.REPO_ROOT)} (run: {GENERATE_COMMAND})",
              file=sys.stderr)
    return 1 if stale else 0
