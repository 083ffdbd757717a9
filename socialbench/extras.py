"""The optional extras of the distribution, and the error that names the one to install.

    require("docker", "ramp --containers")   # returns, or raises MissingExtra

``EXTRAS`` maps each extra of pyproject.toml (but ``test``) to the modules whose absence
means it is not installed; tests/test_extras.py checks that the two agree.
"""

from __future__ import annotations

import importlib.util

from socialbench.errors import SocialbenchError

EXTRAS: dict[str, tuple[str, ...]] = {
    "bench": ("uvicorn", "aiomcache"),
    "docker": ("docker",),
    "k8s": ("kubernetes",),
}


class MissingExtra(SocialbenchError, ImportError):
    """A feature was asked for whose extra is not installed."""

    def __init__(self, extra: str, feature: str, missing: list[str]) -> None:
        super().__init__(
            f"{feature} needs the {extra!r} extra, which is not installed (no "
            f"{', '.join(missing)}): pip install 'socialbench[{extra}]'")
        self.extra = extra


def require(extra: str, feature: str) -> None:
    """Return when ``extra`` is installed; else raise :class:`MissingExtra` naming it."""
    missing = [name for name in EXTRAS[extra] if importlib.util.find_spec(name) is None]
    if missing:
        raise MissingExtra(extra, feature, missing)
