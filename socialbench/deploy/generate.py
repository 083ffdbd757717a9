"""Write (or check) every deployment file generated from the registry.

    python -m socialbench.deploy generate   # after editing socialbench/registry.py
    python -m socialbench.deploy check      # exit 1 and name the stale files
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from socialbench.deploy import compose, helm, stack


def expected_files() -> dict[Path, str]:
    """Every generated file (absolute path) and the text it must hold."""
    out = {stack.COMPOSE_DIR / name: text for name, text in compose.files().items()}
    out.update({stack.CHART_DIR / name: text for name, text in helm.files().items()})
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


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    command = args[0] if args else "check"
    if command == "generate":
        for path in write_files():
            print(f"wrote {path.relative_to(stack.REPO_ROOT)}")
        return 0
    if command == "check":
        stale = stale_files()
        for path in stale:
            print(f"stale: {path.relative_to(stack.REPO_ROOT)} "
                  "(run: python -m socialbench.deploy generate)", file=sys.stderr)
        return 1 if stale else 0
    print("usage: python -m socialbench.deploy generate|check", file=sys.stderr)
    return 2
