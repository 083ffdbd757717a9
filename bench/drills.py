"""Fault drills under load: kill -9 each part of the local stack in turn, the driver running.

    socialbench bench drills [--rate 100] [--users 200] [--part memcached --part redis ...]

On a stack of its own (free ports, empty stores, a small synthetic graph) the driver runs
the mixed workload at a fixed rate while a probe composes posts of its own. For each part
(memcached, Redis, the MongoDB server, home-timeline): ``--settle`` seconds of baseline,
SIGKILL of its process group, the supervisor's restart, ``--observe`` seconds watched;
its errors, down, served, recovered and lost are defined in docs/robustness.md. Then the
stores check, and a ``down``/``up`` with every timeline read before and after. Writes
``results/bench-drills-<time>.json``; the CLI exits 1 when a target is missed. Kills are
placed on the driver's clock (its ``started_at``).
"""

from __future__ import annotations

import json
import math
import os
import random
import secrets
import signal
import statistics
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from socialbench import registry
from socialbench.bench.results import write_results
from socialbench.stack import launcher
from socialbench.stack.local import LocalStack
from socialbench.stack.servers import free_ports
from socialbench.workloads.check.contents import (
    TOLERATED,
    CheckResult,
    StoreAddresses,
    analyse,
    read_snapshot,
)
from socialbench.workloads.definitions.socialnetwork import (
    COMPOSE_PATH,
    HOME_TIMELINE_PATH,
    USER_TIMELINE_PATH,
)
from socialbench.workloads.driver import LoadConfig, LoadResult, SecondStats, run_load
from socialbench.workloads.seeding.seed import seed_graph

PARTS = ("memcached", "redis", "mongodb", "home-timeline")
FORM = {"Content-Type": "application/x-www-form-urlencoded"}
LEAD_IN_S = 5.0  # load before the first baseline window (warms connections and caches)
WHOLE_TIMELINE = 1_000_000  # a page's stop beyond any timeline of the drill
START_TIMEOUT_S = 600.0  # a busy machine starts a stack slowly
GRACE_S = 5.0  # after a part is healthy again, errors still belong to its outage


@dataclass(frozen=True)
class DrillBench:
    """What to run: the stack's size, the load, the parts to kill and the windows."""

    data_dir: Path = field(default=Path(".socialbench/drills"))
    rate: float = 100.0
    workload: str = "mixed"
    users: int = 200
    edges_per_user: int = 10
    posts_per_user: int = 2
    parts: tuple[str, ...] = PARTS
    settle_s: float = 10.0  # steady load before each kill: the baseline window
    observe_s: float = 20.0  # watched after each kill
    probe_rate: float = 5.0  # acknowledged-post probes per second
    p99_factor: float = 2.0
    stable_s: int = 3
    recovery_target_s: float = 10.0
    down_up: bool = True
    keep_running: bool = False
    results_dir: Path = field(default=Path("results"))

    def check_parts(self) -> None:
        unknown = [p for p in self.parts if p not in known_parts()]
        if unknown:
            raise ValueError(f"unknown part(s) {', '.join(unknown)}; "
                             f"known: {', '.join(known_parts())}")


def known_parts() -> tuple[str, ...]:
    """What can be killed: the stores and every service (nginx and Jaeger are not drilled)."""
    return ("memcached", "redis", "mongodb", *(s.name for s in registry.SERVICES))


# ---------------------------------------------------------------- results


@dataclass
class PartResult:
    """One part killed: errors around it, how long until it served again, posts lost."""

    part: str
    killed_at_s: float  # on the driver's clock
    baseline_p99_ms: float
    peak_p99_ms: float
    errors_before: int  # in the baseline window
    errors_outage: int  # from the kill until the part is healthy again, plus GRACE_S
    errors_after: int  # from then to the window's end
    down_s: float | None  # kill until the restarted process was healthy
    served_s: float | None  # kill until served without errors at rate (None: not seen)
    recovered_s: float | None  # kill until p99 back within the factor too (None: not seen)
    probes_acknowledged: int
    probes_failed: int
    lost: int
    lost_posts: list[str]


@dataclass
class DownUpResult:
    """``down`` then ``up`` (no fresh): every timeline read before and after."""

    timelines: int
    entries_before: int
    entries_after: int
    lost: int
    failed_reads: int
    restart_s: float
    check_passed: bool
    check_reason: str


@dataclass
class DrillReport:
    config: dict[str, Any]
    parts: list[PartResult]
    check: dict[str, Any]
    down_up: DownUpResult | None
    driver: dict[str, Any]
    seconds: list[dict[str, Any]]
    load_average: tuple[float, float, float]
    missed: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.missed


def judge(report: DrillReport, config: DrillBench) -> list[str]:
    """The targets missed, each in one line (empty: every target met)."""
    missed: list[str] = []
    for part in report.parts:
        if part.served_s is None:
            missed.append(f"{part.part}: not served without errors at rate in "
                          f"{config.observe_s:g} s")
        elif part.recovered_s is None:
            missed.append(f"{part.part}: p99 not back within {config.p99_factor:g}x in "
                          f"{config.observe_s:g} s")
        elif part.recovered_s > config.recovery_target_s:
            missed.append(f"{part.part}: recovered in {part.recovered_s:.1f} s "
                          f"(target {config.recovery_target_s:g} s)")
        if part.errors_before or part.errors_after:
            missed.append(f"{part.part}: errors outside the outage ({part.errors_before} "
                          f"before the kill, {part.errors_after} after it)")
        if part.lost:
            missed.append(f"{part.part}: {part.lost} acknowledged posts lost")
    if not report.check.get("passed"):
        missed.append(f"check of the stores: {report.check.get('reason')}")
    if report.down_up is not None:
        if report.down_up.lost or report.down_up.failed_reads:
            missed.append(f"down/up: {report.down_up.lost} timeline entries lost, "
                          f"{report.down_up.failed_reads} reads failed")
        if not report.down_up.check_passed:
            missed.append(f"check after down/up: {report.down_up.check_reason}")
    return missed


# ---------------------------------------------------------------- the stack


def drill_stack_config(data_dir: Path) -> launcher.StackConfig:
    """A stack on free ports (beside any other stack), one worker per service and nginx."""
    gateway, media, redis, memcached, mongodb = free_ports(5)
    return launcher.StackConfig(
        data_dir=data_dir, gateway_port=gateway, media_port=media, redis_port=redis,
        memcached_port=memcached, mongodb_port=mongodb, memcached_memory_mb=64,
        nginx_workers="1", service_port_offset=launcher.free_service_offset(),
    )


def _component(stack: LocalStack, name: str) -> launcher.Component:
    state = stack.running_state()
    if state is None:
        raise RuntimeError(f"the stack in {stack.data_dir} is not running")
    return next(c for c in state.components if c.name == name)


def kill_part(stack: LocalStack, name: str) -> int:
    """SIGKILL the process group of component ``name``; its pid."""
    pid = _component(stack, name).pid
    assert pid is not None
    launcher.kill_group(pid, signal.SIGKILL)
    return pid


def wait_restarted(stack: LocalStack, name: str, old_pid: int, timeout_s: float) -> bool:
    """Wait until the supervisor's new process of ``name`` is healthy; False on timeout."""
    host = stack.config.host
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        component = _component(stack, name)
        if (component.pid not in (None, old_pid) and launcher.pid_alive(component.pid)
                and component.is_healthy(host)):
            return True
        time.sleep(0.1)
    return False


# ---------------------------------------------------------------- load and probe


class DriverClock:
    """The driver's per-second reports, and when its run started on ``time.monotonic()``.

    A report of second ``n`` arrives just after ``start + n``: the earliest
    ``arrival - n`` is the start, late by the report's delivery (a few ms to a few
    hundred when the machine is busy).
    """

    def __init__(self, on_second: Callable[[SecondStats], None] | None = None) -> None:
        self.seconds: dict[int, SecondStats] = {}
        self.start: float | None = None
        self.started = threading.Event()
        self._on_second = on_second

    def __call__(self, stats: SecondStats) -> None:
        arrival = time.monotonic()
        self.seconds[stats.second] = stats
        start = arrival - stats.second
        self.start = start if self.start is None else min(self.start, start)
        self.started.set()
        if self._on_second is not None:
            self._on_second(stats)

    def offset(self, moment: float) -> float:
        """``moment`` (monotonic) in seconds since the driver's start."""
        assert self.start is not None
        return moment - self.start


@dataclass
class Probe:
    text: str
    user_id: int
    sent_at: float  # monotonic
    status: int | None  # None: no answer (connection error or timeout)


class ComposeProbe(threading.Thread):
    """Composes posts with texts of its own at ``rate`` per second and records the answers."""

    def __init__(self, url: str, users: int, rate: float, seed: int = 1) -> None:
        super().__init__(name="compose-probe", daemon=True)
        self.url, self.users, self.interval_s = url.rstrip("/"), users, 1.0 / rate
        self.rng = random.Random(seed)
        self.tag = secrets.token_hex(4)
        self.probes: list[Probe] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        due = time.monotonic()
        number = 0
        while not self.stopping.wait(max(0.0, due - time.monotonic())):
            user = self.rng.randrange(self.users)
            text = f"drill-{self.tag}-{number}"
            body = (f"username=username_{user}&user_id={user}&text={text}"
                    "&media_ids=[]&media_types=[]&post_type=0").encode()
            request = urllib.request.Request(self.url + COMPOSE_PATH, data=body, headers=FORM)
            sent = time.monotonic()
            try:
                with urllib.request.urlopen(request, timeout=15) as response:
                    status: int | None = response.status
            except urllib.error.HTTPError as exc:
                status = exc.code
            except (urllib.error.URLError, OSError):
                status = None
            self.probes.append(Probe(text, user, sent, status))
            number += 1
            due += self.interval_s

    def stop(self) -> None:
        self.stopping.set()
        self.join()


# ---------------------------------------------------------------- measuring one part


def measure_part(part: str, kill_offset: float, down_s: float | None,
                 seconds: dict[int, SecondStats], config: DrillBench) -> PartResult:
    """Errors and recovery of one part from the per-second reports around its kill.

    ``kill_offset``: seconds from the driver's start (its ``started_at``) to the kill.
    """
    kill_second = math.floor(kill_offset) + 1  # the second [n-1, n) holding the kill
    baseline = [seconds[s] for s in range(
        max(1, kill_second - int(config.settle_s) + 1), kill_second) if s in seconds]
    baseline_p99_us = statistics.median(s.latency_p99_us for s in baseline) if baseline else 0
    last = kill_second + int(config.observe_s) - 1
    window = [seconds[s] for s in range(kill_second, last + 1) if s in seconds]
    limit_us = config.p99_factor * baseline_p99_us

    def served(stats: SecondStats) -> bool:
        return stats.errors == 0 and stats.completed >= config.rate / 2

    def recovered(stats: SecondStats) -> bool:
        return served(stats) and stats.latency_p99_us <= limit_us

    def first_stable(good: Callable[[SecondStats], bool]) -> float | None:
        """Seconds from the kill to the first of ``stable_s`` good seconds in a row."""
        for index in range(len(window) - config.stable_s + 1):
            run = window[index:index + config.stable_s]
            if (all(good(s) for s in run)
                    and run[-1].second - run[0].second == config.stable_s - 1):
                return round(max(0.0, run[0].second - 1 - kill_offset), 2)
        return None
    # The outage: until the part is healthy again, plus a grace for the clients to find
    # it (the whole window when it never came back).
    outage_end = kill_offset + (config.observe_s if down_s is None else down_s + GRACE_S)
    return PartResult(
        part=part, killed_at_s=round(kill_offset, 2),
        baseline_p99_ms=baseline_p99_us / 1000,
        peak_p99_ms=max((s.latency_p99_us for s in window), default=0) / 1000,
        errors_before=sum(s.errors for s in baseline),
        errors_outage=sum(s.errors for s in window if s.second - 1 < outage_end),
        errors_after=sum(s.errors for s in window if s.second - 1 >= outage_end),
        down_s=None if down_s is None else round(down_s, 2),
        served_s=first_stable(served),
        recovered_s=first_stable(recovered),
        probes_acknowledged=0, probes_failed=0, lost=0, lost_posts=[],
    )


def attribute_probes(parts: list[PartResult], kills: list[float], probes: list[Probe],
                     stored: dict[str, int], broken: set[int], config: DrillBench) -> None:
    """Count each part's probes (sent from its baseline window to the end of its watch) and
    the acknowledged ones lost: not stored, or stored with a timeline entry missing."""
    for part, killed_at in zip(parts, kills, strict=True):
        mine = [p for p in probes
                if killed_at - config.settle_s <= p.sent_at < killed_at + config.observe_s]
        acknowledged = [p for p in mine if p.status == 200]
        lost = [p.text for p in acknowledged
                if p.text not in stored or stored[p.text] in broken]
        part.probes_acknowledged = len(acknowledged)
        part.probes_failed = len(mine) - len(acknowledged)
        part.lost, part.lost_posts = len(lost), lost[:20]


def check_stores(stores: StoreAddresses) -> tuple[CheckResult, dict[str, int], set[int]]:
    """The check over every post stored; post ids by text; ids of posts with a problem."""
    started = time.monotonic()
    snapshot = read_snapshot(stores, timeout_s=30.0)
    result = analyse(snapshot, limit=1_000_000)
    result = result.model_copy(update={"elapsed_s": time.monotonic() - started})
    stored = {str(p.get("text")): int(p["post_id"]) for p in snapshot.posts
              if str(p.get("text", "")).startswith("drill-") and "post_id" in p}
    broken = {p.post_id for p in result.problems
              if not p.tolerated and p.kind not in TOLERATED and p.post_id is not None}
    return result, stored, broken


# ---------------------------------------------------------------- down and up


def read_timelines(url: str, users: int) -> tuple[dict[str, set[int]], int]:
    """Every user's home and user timeline through the front end: post ids by timeline."""
    timelines: dict[str, set[int]] = {}
    failed = 0
    for path in (HOME_TIMELINE_PATH, USER_TIMELINE_PATH):
        for user in range(users):
            query = f"?user_id={user}&start=0&stop={WHOLE_TIMELINE}"
            try:
                with urllib.request.urlopen(url.rstrip("/") + path + query, timeout=30) as r:
                    posts = json.loads(r.read())
            except (urllib.error.URLError, OSError, ValueError):
                failed += 1
                continue
            timelines[f"{path}:{user}"] = {int(post["post_id"]) for post in posts}
    return timelines, failed


def down_up(stack: LocalStack, config: launcher.StackConfig, users: int,
            console: Console) -> DownUpResult:
    """``down`` then ``up`` without ``--fresh``; timeline entries read before and after."""
    before, failed_before = read_timelines(config.url, users)
    console.print(f"  read {len(before)} timelines ({sum(map(len, before.values()))} entries); "
                  "stopping the stack")
    started = time.monotonic()
    stack.stop()
    stack.start(config, timeout_s=START_TIMEOUT_S, on_progress=lambda m: console.print(f"  {m}"))
    restart_s = time.monotonic() - started
    after, failed_after = read_timelines(config.url, users)
    lost = sum(len(posts - after.get(key, set())) for key, posts in before.items())
    check, _, _ = check_stores(config.store_addresses())
    return DownUpResult(
        timelines=len(before), entries_before=sum(map(len, before.values())),
        entries_after=sum(map(len, after.values())), lost=lost,
        failed_reads=failed_before + failed_after, restart_s=round(restart_s, 1),
        check_passed=check.passed, check_reason=check.reason,
    )


# ---------------------------------------------------------------- the drill


def drill(config: DrillBench, console: Console | None = None) -> DrillReport:
    """Run the drills (stack started and stopped here); the report, judged."""
    config.check_parts()
    console = console or Console(highlight=False)
    stack = LocalStack(config.data_dir)
    stack_config = drill_stack_config(stack.data_dir)
    console.rule("[bold]starting a local stack with empty stores[/]")
    stack.start(stack_config, fresh=True, timeout_s=START_TIMEOUT_S,
                on_progress=lambda m: console.print(f"  {m}"))
    try:
        graph = f"synthetic:{config.users}:{config.edges_per_user}"
        console.rule(f"[bold]seeding {graph} ({config.posts_per_user} posts per user at most)[/]")
        seed_graph(stack_config.url, graph, config.posts_per_user, seed_value=1)
        report = _drill_under_load(stack, stack_config, config, console)
        if config.down_up:
            console.rule("[bold]down and up (no --fresh), every timeline read before and after[/]")
            report.down_up = down_up(stack, stack_config, config.users, console)
    finally:
        if not config.keep_running:
            stack.stop()
    report.missed = judge(report, config)
    return report


def _drill_under_load(stack: LocalStack, stack_config: launcher.StackConfig,
                      config: DrillBench, console: Console) -> DrillReport:
    per_part = config.settle_s + config.observe_s
    duration = LEAD_IN_S + len(config.parts) * per_part + 1
    load = LoadConfig(url=stack_config.url, workload=config.workload, users=config.users,
                      rate=config.rate, duration_s=duration, processes=1,
                      connections=32, max_connections=1024, seed=1)
    status = console.status("driver starting")

    def show(stats: SecondStats) -> None:
        status.update(f"second {stats.second}: {stats.completed} answers, {stats.errors} "
                      f"errors, p99 {stats.latency_p99_us / 1000:.0f} ms")

    clock = DriverClock(show)
    outcome: list[LoadResult | BaseException] = []

    def drive() -> None:
        try:
            outcome.append(run_load(load, clock))
        except BaseException as exc:  # reported in the main thread
            outcome.append(exc)
            clock.started.set()

    console.rule(f"[bold]{config.rate:g} req/s {config.workload} for {duration:.0f} s; "
                 f"killing {', '.join(config.parts)}[/]")
    driver = threading.Thread(target=drive, name="driver", daemon=True)
    probe = ComposeProbe(stack_config.url, config.users, config.probe_rate)
    kills: list[float] = []  # monotonic
    kill_walls: list[float] = []
    downs: list[float | None] = []
    with status:
        driver.start()
        clock.started.wait()
        if outcome:
            raise RuntimeError(f"the driver failed: {outcome[0]}")
        probe.start()
        for index, part in enumerate(config.parts):
            kill_offset = LEAD_IN_S + index * per_part + config.settle_s
            time.sleep(max(0.0, kill_offset - clock.offset(time.monotonic())))
            old_pid = kill_part(stack, part)
            killed_at = time.monotonic()
            kills.append(killed_at)
            kill_walls.append(time.time())
            console.print(f"  {clock.offset(killed_at):5.1f} s  killed {part} (pid {old_pid})")
            restarted = wait_restarted(stack, part, old_pid, timeout_s=config.observe_s)
            downs.append(time.monotonic() - killed_at if restarted else None)
            console.print(f"  {clock.offset(time.monotonic()):5.1f} s  {part} " + (
                f"healthy again after {downs[-1]:.1f} s" if restarted
                else f"not healthy within {config.observe_s:g} s"))
        driver.join()
        probe.stop()
    result = outcome[0]
    if isinstance(result, BaseException):
        raise RuntimeError(f"the driver failed: {result}") from result
    # On the driver's own clock: its start, and the kills, in wall-clock time.
    started = result.started_at.timestamp()
    parts = [measure_part(part, killed_wall - started, down_s, clock.seconds, config)
             for part, killed_wall, down_s in zip(config.parts, kill_walls, downs, strict=True)]
    console.rule("[bold]checking the stores[/]")
    check, stored, broken = check_stores(stack_config.store_addresses())
    attribute_probes(parts, kills, probe.probes, stored, broken, config)
    acknowledged = [p for p in probe.probes if p.status == 200]
    lost_anywhere = [p.text for p in acknowledged
                     if p.text not in stored or stored[p.text] in broken]
    check_summary = check.model_dump(exclude={"problems"}) | {
        "reason": check.reason, "problems": [str(p) for p in check.problems[:20]],
        "probes_acknowledged": len(acknowledged), "probes_lost": len(lost_anywhere)}
    return DrillReport(
        config=_config_dict(config), parts=parts, check=check_summary, down_up=None,
        driver={"offered_rps": result.offered_rps, "achieved_rps": result.achieved_rps,
                "scheduled": result.scheduled, "ok": result.ok,
                "errors": result.errors.model_dump(), "p99_ms": result.latency.p99_ms,
                "saturated": result.saturated, "warnings": result.warnings},
        seconds=[{"second": s.second, "completed": s.completed, "errors": s.errors,
                  "p99_ms": s.latency_p99_us / 1000} for s in result.timeline],
        load_average=os.getloadavg(),
    )


def _config_dict(config: DrillBench) -> dict[str, Any]:
    data = asdict(config)
    data["data_dir"], data["results_dir"] = str(config.data_dir), str(config.results_dir)
    return data


# ---------------------------------------------------------------- output


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def print_report(report: DrillReport, console: Console) -> None:
    table = Table(title="Fault drills: kill -9 under load")
    for column in ("killed", "errors in outage", "errors outside", "down s", "served s",
                   "recovered s",
                   "p99 before ms", "peak p99 ms", "acked posts", "lost"):
        table.add_column(column, justify="left" if column == "killed" else "right")
    for part in report.parts:
        table.add_row(part.part, str(part.errors_outage),
                      str(part.errors_before + part.errors_after), _seconds(part.down_s),
                      _seconds(part.served_s), _seconds(part.recovered_s),
                      f"{part.baseline_p99_ms:.1f}",
                      f"{part.peak_p99_ms:.0f}", str(part.probes_acknowledged), str(part.lost))
    console.print(table)
    driver = report.driver
    console.print(f"driver: {driver['achieved_rps']:.1f} req/s of {driver['offered_rps']:g}, "
                  f"errors {driver['errors']}, p99 {driver['p99_ms']:.0f} ms over the whole run"
                  f"{' (SATURATED)' if driver['saturated'] else ''}")
    console.print(f"check of the stores: {'passed' if report.check['passed'] else 'FAILED'}: "
                  f"{report.check['reason']}", soft_wrap=True)
    if report.down_up is not None:
        down = report.down_up
        console.print(f"down/up: {down.timelines} timelines, {down.entries_before} entries "
                      f"before, {down.entries_after} after, lost {down.lost}, failed reads "
                      f"{down.failed_reads}, restart {down.restart_s:.0f} s; check after: "
                      f"{down.check_reason}", soft_wrap=True)
    console.print(f"load average at the end: {report.load_average[0]:.1f}")
    for line in report.missed:
        console.print(f"[bold red]missed[/]: {line}", soft_wrap=True)
    if report.passed:
        console.print("[bold green]every target met[/]")


def write_report(report: DrillReport, results_dir: Path) -> Path:
    return write_results(results_dir, "drills", asdict(report) | {"passed": report.passed})


def run(config: DrillBench) -> DrillReport:
    """The drills, printed and written; the report."""
    console = Console(highlight=False)
    report = drill(config, console)
    print_report(report, console)
    console.print(f"written {write_report(report, config.results_dir)}")
    return report
