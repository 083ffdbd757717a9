"""The power coefficients of Cloud Carbon Footprint's linear model, per CPU family, as data.

``data/ccf-coefficients.csv`` is the table: per family, the watts per hardware thread at
active idle (``min_w``) and at 100% load (``max_w``), averaged over that family's
SPECpower_ssj2008 results as CCF's ccf-coefficients derives them (each result's watts /
its threads, then the mean), with the band (the lowest and highest per-thread values
among those results) and, on every row, its source. ``data/specpower-results.csv`` holds
those results; :func:`derive` recomputes the table's numbers from them (a test checks
that they agree). A row is ``specpower`` (derived so), ``proxy`` (another family's
coefficients, as CCF uses them for a CPU SPECpower never measured) or ``unknown`` (no
coefficients: nothing is estimated). A user's own file (``--power-coefficients``, same
columns) replaces rows by key and adds new ones.

Entry points: :func:`load_table`, :func:`derive`, :class:`Coefficients`. Errors:
:class:`CoefficientsError`.
"""

from __future__ import annotations

import csv
import io
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from importlib import resources
from pathlib import Path

from socialbench.errors import SocialbenchError

TABLE = "ccf-coefficients.csv"
RESULTS = "specpower-results.csv"
COLUMNS = ("key", "name", "kind", "uses", "min_w", "max_w", "idle_lo", "idle_hi",
           "full_lo", "full_hi", "results", "source")
REQUIRED = ("key", "name", "min_w", "max_w", "source")
DIGITS = 4  # the table's numbers are rounded to this many decimals


class CoefficientsError(SocialbenchError, ValueError):
    """A coefficients file that cannot be read, or a row that makes no sense."""


class Kind(StrEnum):
    SPECPOWER = "specpower"  # CCF's rule on this family's SPECpower results
    PROXY = "proxy"  # another family's coefficients, as CCF uses them
    UNKNOWN = "unknown"  # nothing measured: no estimate
    USER = "user"  # the user's own file


@dataclass(frozen=True)
class Band:
    """Per-thread watts at active idle and at 100%: the lowest and highest of the results."""

    idle_lo: float
    idle_hi: float
    full_lo: float
    full_hi: float


@dataclass(frozen=True)
class Coefficients:
    """One row: a family's per-thread watts, its band and where they come from."""

    key: str
    name: str
    kind: Kind
    source: str
    min_w: float | None = None
    max_w: float | None = None
    band: Band | None = None
    results: int | None = None
    uses: str | None = None  # proxy: the family whose coefficients it takes
    origin: str = "table"  # "table" or the user's file

    @property
    def usable(self) -> bool:
        return self.min_w is not None and self.max_w is not None


def _number(row: dict[str, str], column: str, where: str) -> float | None:
    text = (row.get(column) or "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise CoefficientsError(f"{where}: {column} is {text!r}, not a number") from None
    if value < 0:
        raise CoefficientsError(f"{where}: {column} is negative ({value})")
    return value


def _rows(text: str, where: str) -> list[dict[str, str]]:
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("#")]
    reader = csv.DictReader(io.StringIO("\n".join(lines)))
    missing = [c for c in REQUIRED if c not in (reader.fieldnames or [])]
    if missing:
        raise CoefficientsError(f"{where}: no column {', '.join(missing)} (the columns are "
                                f"{', '.join(COLUMNS)}; see docs/energy.md)")
    return list(reader)


def parse(text: str, where: str, origin: str = "table") -> dict[str, Coefficients]:
    """Rows by key from a coefficients CSV (``#`` lines are comments)."""
    table: dict[str, Coefficients] = {}
    for number, row in enumerate(_rows(text, where), start=2):
        at = f"{where} row {number}"
        key = (row.get("key") or "").strip()
        if not key:
            raise CoefficientsError(f"{at}: no key")
        kind_text = (row.get("kind") or "").strip() or (Kind.USER if origin != "table"
                                                        else Kind.SPECPOWER)
        try:
            kind = Kind(kind_text)
        except ValueError:
            raise CoefficientsError(f"{at}: kind {kind_text!r} is not one of "
                                    f"{', '.join(k.value for k in Kind)}") from None
        min_w, max_w = _number(row, "min_w", at), _number(row, "max_w", at)
        if kind in (Kind.SPECPOWER, Kind.USER) and (min_w is None or max_w is None):
            raise CoefficientsError(f"{at}: {key} needs min_w and max_w")
        if min_w is not None and max_w is not None and max_w < min_w:
            raise CoefficientsError(f"{at}: max_w {max_w} is below min_w {min_w}")
        bounds = [_number(row, c, at) for c in ("idle_lo", "idle_hi", "full_lo", "full_hi")]
        band = None
        if all(b is not None for b in bounds):
            idle_lo, idle_hi, full_lo, full_hi = (float(b) for b in bounds if b is not None)
            if not (idle_lo <= (min_w or idle_lo) <= idle_hi
                    and full_lo <= (max_w or full_lo) <= full_hi):
                raise CoefficientsError(f"{at}: the band does not hold min_w and max_w")
            band = Band(idle_lo, idle_hi, full_lo, full_hi)
        results = _number(row, "results", at)
        source = (row.get("source") or "").strip()
        if not source:
            raise CoefficientsError(f"{at}: {key} names no source")
        table[key] = Coefficients(
            key=key, name=(row.get("name") or key).strip(), kind=kind, source=source,
            min_w=min_w, max_w=max_w, band=band,
            results=int(results) if results is not None else None,
            uses=(row.get("uses") or "").strip() or None, origin=origin)
    if origin == "table":
        _check_proxies(table, where)
    return table


def _check_proxies(table: dict[str, Coefficients], where: str) -> None:
    for entry in table.values():
        if entry.kind is Kind.PROXY and (entry.uses is None or entry.uses not in table):
            raise CoefficientsError(f"{where}: proxy {entry.key} uses {entry.uses!r}, "
                                    "which is not in the table")


def package_text(name: str) -> str:
    return resources.files("socialbench.workloads.probes").joinpath("data", name).read_text()


def load_table(user_file: Path | None = None) -> dict[str, Coefficients]:
    """The package's table, with the user's file (when given) replacing rows by key."""
    table = parse(package_text(TABLE), TABLE)
    if user_file is not None:
        try:
            text = user_file.read_text()
        except OSError as exc:
            raise CoefficientsError(f"--power-coefficients {user_file}: {exc.strerror or exc}"
                                    ) from None
        table = table | parse(text, str(user_file), origin=str(user_file))
        _check_proxies(table, str(user_file))
    return table


def resolve(table: dict[str, Coefficients], key: str) -> Coefficients:
    """The row whose numbers ``key`` uses: itself, or for a proxy the family it takes."""
    row = table[key]
    if row.kind is Kind.PROXY and row.uses is not None:
        used = table[row.uses]
        return Coefficients(key=row.key, name=row.name, kind=Kind.PROXY, source=row.source,
                            min_w=used.min_w, max_w=used.max_w, band=used.band,
                            results=used.results, uses=used.key, origin=row.origin)
    return row


@dataclass(frozen=True)
class Result:
    """One SPECpower_ssj2008 result of ``data/specpower-results.csv``."""

    row: int
    system: str
    cpu: str
    threads: int
    watts_idle: float
    watts_100: float
    families: tuple[str, ...]

    @property
    def idle_per_thread(self) -> float:
        return self.watts_idle / self.threads

    @property
    def full_per_thread(self) -> float:
        return self.watts_100 / self.threads


def specpower_results(text: str | None = None) -> list[Result]:
    lines = [line for line in (text or package_text(RESULTS)).splitlines()
             if line.strip() and not line.startswith("#")]
    return [
        Result(int(r["row"]), r["system"], r["cpu"], int(r["threads"]),
               float(r["watts_active_idle"]), float(r["watts_100"]),
               tuple(r["families"].split(";")))
        for r in csv.DictReader(io.StringIO("\n".join(lines)))
    ]


def derive(results: Iterable[Result], family: str) -> Coefficients:
    """CCF's rule on ``family``'s results: the mean per-thread watts at idle and at 100%,
    and the band (the lowest and highest per-thread values), rounded as the table."""
    chosen = [r for r in results if family in r.families]
    if not chosen:
        raise CoefficientsError(f"no SPECpower result of {family}")
    idle = [r.idle_per_thread for r in chosen]
    full = [r.full_per_thread for r in chosen]
    return Coefficients(
        key=family, name=family, kind=Kind.SPECPOWER, source="derived",
        min_w=round(statistics.mean(idle), DIGITS), max_w=round(statistics.mean(full), DIGITS),
        band=Band(round(min(idle), DIGITS), round(max(idle), DIGITS), round(min(full), DIGITS),
                  round(max(full), DIGITS)),
        results=len(chosen))
