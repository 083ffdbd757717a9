"""What differs between ramp bundles, besides the machine: the apples-to-oranges list.

``socialbench compare`` prints these above its tables. Two runs measured against
different SLAs or workloads, or on datasets seeded from another graph, seed or number of
posts, answer different questions, so compare refuses them unless forced; every other
difference (step duration, warm-up, placement, data, store layout,
code version, driver settings, the hosts' calibrations) changes the number and is named,
so the reader knows what the ratio measures.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from socialbench.workloads.ramp.engine import sla_text
from socialbench.workloads.results.schema import Bundle

DEFAULT_HOST_DRIFT = 0.10
DATA_SIZE_SHARE = 0.10


@dataclass(frozen=True)
class Difference:
    """One setting whose value is not the same in every bundle."""

    name: str
    values: tuple[str, ...]  # one per bundle, in the comparison's order
    refuses: bool  # compare refuses it without --force
    why: str  # what it changes

    def describe(self, labels: Sequence[str]) -> str:
        shown = "; ".join(f"{label}: {value}" for label, value in zip(labels, self.values,
                                                                      strict=True))
        return f"{self.name} differs ({shown}): {self.why}"


def _text(value: Any) -> str:
    if value is None:
        return "not recorded"
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True)
    return str(value)


def _placement(bundle: Bundle) -> str:
    placement = bundle.manifest.placement
    return placement.describe() if placement is not None else "not recorded"


def _dataset(bundle: Bundle) -> str:
    dataset = bundle.manifest.dataset
    parts = [f"{dataset.users:,} users"]
    if dataset.graph is not None:
        parts.append(f"graph {dataset.graph} (seed {dataset.seed})")
    if dataset.posts_per_user is not None:
        parts.append(f"0..{dataset.posts_per_user} posts per user")
    parts.append("re-seeded each repeat" if dataset.fresh else "as found")
    return ", ".join(parts)


def _stored(bundle: Bundle) -> tuple[int, int] | None:
    """Posts and follow edges the check counted after the run (None: not checked)."""
    check = bundle.summary.check
    if check is None or check.error is not None:
        return None
    return check.posts, check.edges


def data_size_difference(bundles: Sequence[Bundle]) -> Difference | None:
    """Posts or follow edges stored after the runs more than DATA_SIZE_SHARE apart (a
    ramp's composes add posts, so equal runs differ a little)."""
    sizes = [_stored(bundle) for bundle in bundles]
    known = [size for size in sizes if size is not None]
    if len(known) < 2:
        return None
    for index in (0, 1):
        low, high = min(s[index] for s in known), max(s[index] for s in known)
        if high > (1 + DATA_SIZE_SHARE) * low:
            return Difference(
                "data size", tuple("not checked" if s is None else
                                   f"{s[0]:,} posts, {s[1]:,} follow edges" for s in sizes),
                False, "stores of other sizes (after the run, as the check counted them)")
    return None


def _seeded(bundle: Bundle) -> str:
    dataset = bundle.manifest.dataset
    identity = dataset.identity()
    if identity is None:
        return "not known"
    graph, seed, posts_per_user = identity
    described = f"graph {graph}, seed {seed}, 0..{posts_per_user} posts per user"
    if dataset.seeded is not None:
        data = dataset.seeded.dataset
        described += (f" ({data.users:,} users, {data.follows:,} follows, {data.posts:,} "
                      f"posts, seeded by --path {dataset.seeded.path.value})")
    return described


def dataset_difference(bundles: Sequence[Bundle]) -> Difference | None:
    """Datasets seeded from other graphs, seeds or post counts: refused (two runs on other
    data measure other things). A bundle that does not know its data is not compared."""
    identities = [bundle.manifest.dataset.identity() for bundle in bundles]
    known = {identity for identity in identities if identity is not None}
    if len(known) < 2:
        return None
    return Difference("dataset", tuple(_seeded(bundle) for bundle in bundles), True,
                      "other data: another graph, seed or number of posts")


def _store_layout(bundle: Bundle) -> str:
    stack = bundle.manifest.stack
    layout: dict[str, object] = {"mongodb_server": bundle.manifest.software.get("mongodb_server")}
    if stack is not None:  # older bundles' defaults filled in
        clients = sorted({f"{store}: {client.get('client')}, {client.get('topology')}"
                          for stores in stack.store_clients.values()
                          for store, client in stores.items()})
        layout.update(durability=stack.durability, memcached_servers=stack.memcached_servers or 1,
                      layout=stack.store_layout or "shared",
                      redis_mode=stack.redis_mode or "standalone",
                      redis_servers=stack.redis_servers or 1, clients=clients or None)
    return _text(layout)


def _code(bundle: Bundle) -> str:
    git = bundle.manifest.git
    commit = git.get("commit")
    version = f"socialbench {bundle.manifest.socialbench_version}"
    if commit:
        version += f", commit {str(commit)[:12]}" + (" (with changes)" if git.get("dirty") else "")
    return version


def _driver(bundle: Bundle) -> str:
    load = bundle.manifest.config.load
    return (f"{load.connections} connections (max {load.max_connections}), "
            f"{load.processes} processes, {load.distribution.value} arrivals, timeout "
            f"{load.timeout_s:g} s, {'absolute' if load.absolute_form else 'origin'}-form")


def _workers(bundle: Bundle) -> str:
    stack = bundle.manifest.stack
    return _text(stack.service_workers() if stack is not None else None)


# name, how to read it, refuses, what it changes
SETTINGS: tuple[tuple[str, Callable[[Bundle], str], bool, str], ...] = (
    ("preset", lambda b: b.manifest.preset.headline() if b.manifest.preset else "none", False,
     "another published procedure, or the same one with other deviations"),
    ("SLA", lambda b: sla_text(b.manifest.config.slas), True,
     "a max rate at another SLA answers another question"),
    ("workload", lambda b: b.manifest.config.load.workload, True,
     "another mix of requests, another capacity"),
    ("step duration", lambda b: f"{b.manifest.config.step_duration_s:g} s", False,
     "longer steps find a lower knee"),
    ("warm-up", lambda b: f"{b.manifest.config.warmup_s:g} s", False,
     "caches and pools warm differently"),
    ("refine", lambda b: "bisected and confirmed" if b.manifest.config.refine else "steps only",
     False, "the answer's resolution"),
    ("placement", _placement, False,
     "the CPUs the stack had (and whether the driver shared them)"),
    ("data", _dataset, False, "the original's throughput falls as its stores grow"),
    ("store layout", _store_layout, False, "other servers and durability, other costs"),
    ("service workers", _workers, False, "the stack's processes"),
    ("code version", _code, False, "other code"),
    ("driver settings", _driver, False, "the load's shape and the driver's own costs"),
)


def host_speed_ratio(bundle: Bundle, baseline: Bundle) -> float | None:
    """The bundle's host speed at its start over the baseline's (None: not calibrated)."""
    mine = bundle.summary.host_calibration_start
    theirs = baseline.summary.host_calibration_start
    if mine is None or theirs is None:
        return None
    return mine.speed_relative_to(theirs)


def differences(bundles: Sequence[Bundle]) -> list[Difference]:
    """Every setting that differs between ``bundles`` (the first is the baseline)."""
    found = []
    for name, read, refuses, why in SETTINGS:
        values = tuple(read(bundle) for bundle in bundles)
        if len(set(values)) > 1:
            found.append(Difference(name, values, refuses, why))
    for difference in (dataset_difference(bundles), data_size_difference(bundles)):
        if difference is not None:
            found.append(difference)
    baseline = bundles[0]
    drift = baseline.summary.host_drift or DEFAULT_HOST_DRIFT
    speeds = [host_speed_ratio(bundle, baseline) for bundle in bundles]
    if any(speed is not None and abs(speed - 1) > drift for speed in speeds):
        found.append(Difference(
            "host speed", tuple("not calibrated" if s is None else f"{s:.2f}" for s in speeds),
            False, f"the hosts' fixed work ran more than {drift:.0%} apart: part of the "
                   "ratio is the raw cores, not the microservices"))
    return found


def refusals(found: Sequence[Difference]) -> list[Difference]:
    return [difference for difference in found if difference.refuses]
