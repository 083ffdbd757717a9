"""Run mypy over the package as it is installed: each top-level folder at its import path.

setuptools installs ``services/`` as ``socialbench.services`` (pyproject's package-dir);
mypy cannot follow that mapping, so this lays the files out under ``build/typecheck`` as
the installed package is (hard links, made anew each run), runs mypy there, and reports
every path as the file's real place in the checkout.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TREE = ROOT / "build" / "typecheck"


def main() -> int:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    folders = {"socialbench": "socialbench", **pyproject["tool"]["setuptools"]["package-dir"]}
    shutil.rmtree(TREE, ignore_errors=True)
    places: dict[str, str] = {}
    for package, folder in folders.items():
        target = TREE / package.replace(".", "/")
        for source in (ROOT / folder).rglob("*.py"):
            if "__pycache__" in source.parts:
                continue
            linked = target / source.relative_to(ROOT / folder)
            linked.parent.mkdir(parents=True, exist_ok=True)
            os.link(source, linked)
            places[str(linked.relative_to(TREE))] = str(source.relative_to(ROOT))
    mypy = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
         "-p", "socialbench"],
        cwd=TREE, capture_output=True, text=True, check=False,
    )
    for line in (mypy.stdout + mypy.stderr).splitlines():
        path, sep, rest = line.partition(":")
        print(places.get(path, path) + sep + rest)
    return mypy.returncode


if __name__ == "__main__":
    sys.exit(main())
