"""The load Job on Kubernetes: N drivers started together, their results merged into one.

    socialbench loadjob collect --drivers N --out DIR [--port 8000] ...
    socialbench loadjob drive --collector URL --drivers N --rate R \
        [--index I] [--seed S] -- URL [more `socialbench load` options]
    socialbench loadjob fetch --collector URL [--results results]

Each driver pod (an index of an Indexed Job) tells the collector it is ready and waits
(``POST /ready/<i>``, a long poll); once all N are, the collector releases them together,
each runs ``socialbench load`` at R/N and sends its ``--json`` result back (``PUT
/parts/<i>``, or ``POST /failed/<i>`` with why). The collector merges them (histograms
exactly) and serves the result (``/status``, ``/result``, ``/bundle.tar.gz``) for a
while; ``fetch`` copies it into ``results/<UTC time of the start>-<run>/``.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from datetime import UTC, datetime
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

from socialbench.deploy.probe import wait_healthy
from socialbench.errors import SocialbenchError

if TYPE_CHECKING:
    from socialbench.workloads.driver.result import LoadResult

DEFAULT_PORT = 8000  # the collector's
READY_TIMEOUT_S = 900.0  # how long the collector and each driver wait for every driver
LINGER_S = 3600.0  # how long the collector serves the bundle after the merge
READY_POLL_S = 30.0  # how long one /ready request is held before the driver asks again
START_GRACE_S = 600.0  # beyond warm-up + duration: late pods, request timeouts, drain
_ROUTE = re.compile(r"^/(ready|parts|failed)/(\d+)$")


class CollectorError(ValueError):
    """A request the collector refuses (unknown driver, a second result, not a result)."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


class Collector:
    """The state of one load run: ready drivers, their results, and the merged bundle."""

    def __init__(self, drivers: int, out_dir: Path, run: str = "") -> None:
        if drivers < 1:
            raise ValueError("drivers must be at least 1")
        self.drivers = drivers
        self.out_dir = out_dir
        self.run = run
        self.ready: set[int] = set()
        self.released_at: datetime | None = None
        self.parts: dict[int, LoadResult] = {}
        self.failed: dict[int, str] = {}
        self.problem = ""
        self.finished = False
        self.done = threading.Event()
        self._lock = threading.Condition()
        (out_dir / "parts").mkdir(parents=True, exist_ok=True)

    def _index(self, index: int) -> int:
        if not 0 <= index < self.drivers:
            raise CollectorError(HTTPStatus.NOT_FOUND,
                                 f"driver {index} is not one of 0..{self.drivers - 1}")
        return index

    def arrive(self, index: int, wait_s: float) -> bool:
        """Driver ``index`` is ready; True once every driver is (waits up to ``wait_s``)."""
        self._index(index)
        with self._lock:
            self.ready.add(index)
            if len(self.ready) == self.drivers and self.released_at is None:
                self.released_at = datetime.now(UTC)
                self._lock.notify_all()
            return self._lock.wait_for(lambda: self.released_at is not None, wait_s)

    def wait_released(self, wait_s: float) -> bool:
        with self._lock:
            return self._lock.wait_for(lambda: self.released_at is not None, wait_s)

    def _check_open(self, index: int) -> None:
        if self.finished:
            why = self.problem or "merged"
            raise CollectorError(HTTPStatus.CONFLICT, f"the run is closed ({why})")
        if index in self.parts or index in self.failed:
            raise CollectorError(HTTPStatus.CONFLICT, f"driver {index} already reported")

    def add_part(self, index: int, body: bytes) -> None:
        """Driver ``index``'s ``--json`` result; the merge once every driver has reported."""
        from socialbench.workloads.driver.result import LoadResult

        self._index(index)
        try:
            result = LoadResult.model_validate_json(body)
        except ValueError as exc:
            raise CollectorError(HTTPStatus.BAD_REQUEST,
                                 f"not a `socialbench load --json` result: {exc}") from None
        with self._lock:
            self._check_open(index)
            (self.out_dir / "parts" / f"driver-{index}.json").write_bytes(body)
            self.parts[index] = result
            self._finish_if_complete()

    def add_failure(self, index: int, reason: str) -> None:
        self._index(index)
        with self._lock:
            self._check_open(index)
            self.failed[index] = reason or "no reason given"
            self._finish_if_complete()

    def _finish_if_complete(self) -> None:
        if len(self.parts) + len(self.failed) == self.drivers:
            self.finish()

    def finish(self, problem: str = "") -> None:
        """Merge what has arrived and write the bundle (called once; later calls do nothing)."""
        from rich.console import Console

        from socialbench.workloads.driver.merge import merge_results
        from socialbench.workloads.driver.report import print_summary

        with self._lock:
            if self.finished:
                return
            self.finished = True
            self.problem = problem or (
                f"drivers {sorted(self.failed)} failed" if self.failed else "")
            if self.parts:
                merged = merge_results([self.parts[i] for i in sorted(self.parts)])
                (self.out_dir / "result.json").write_text(merged.model_dump_json(indent=2))
                text = io.StringIO()
                console = Console(file=text, width=120, highlight=False, soft_wrap=True)
                print_summary(merged, console)
                if not self.complete:
                    console.print(f"INCOMPLETE: {self.problem}; merged {len(self.parts)} "
                                  f"of {self.drivers} drivers")
                (self.out_dir / "summary.txt").write_text(text.getvalue())
            (self.out_dir / "manifest.json").write_text(json.dumps(self.manifest(), indent=2))
            self.done.set()

    @property
    def complete(self) -> bool:
        return len(self.parts) == self.drivers

    def manifest(self) -> dict[str, Any]:
        with self._lock:
            missing = [i for i in range(self.drivers)
                       if i not in self.parts and i not in self.failed]
            return {
                "run": self.run,
                "drivers": self.drivers,
                "ready": sorted(self.ready),
                "released_at": self.released_at.isoformat() if self.released_at else None,
                "reported": sorted(self.parts),
                "failed": {str(i): why for i, why in sorted(self.failed.items())},
                "missing": missing,
                "merged": self.finished and bool(self.parts),
                "complete": self.finished and self.complete,
                "problem": self.problem,
            }

    def bundle(self) -> bytes:
        """The output directory as a .tar.gz named after the run."""
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
            tar.add(self.out_dir, arcname=self.run or "load")
        return buffer.getvalue()


def _handler(collector: Collector) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            """No access log."""

        def _send(self, status: HTTPStatus, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _json(self, data: Any, status: HTTPStatus = HTTPStatus.OK) -> None:
            self._send(status, json.dumps(data).encode(), "application/json")

        def _text(self, status: HTTPStatus, message: str) -> None:
            self._send(status, (message + "\n").encode(), "text/plain; charset=utf-8")

        def _body(self) -> bytes:
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def do_GET(self) -> None:
            if self.path == "/healthz":
                self._text(HTTPStatus.OK, "ok")
            elif self.path == "/status":
                self._json(collector.manifest())
            elif self.path == "/result":
                result = collector.out_dir / "result.json"
                if not (collector.done.is_set() and result.exists()):
                    self._text(HTTPStatus.NOT_FOUND, "no result yet: "
                               f"{len(collector.parts)} of {collector.drivers} drivers reported")
                else:
                    self._send(HTTPStatus.OK, result.read_bytes(), "application/json")
            elif self.path == "/bundle.tar.gz":
                self._send(HTTPStatus.OK, collector.bundle(), "application/gzip")
            else:
                self._text(HTTPStatus.NOT_FOUND, f"no such path: {self.path}")

        def _post_or_put(self, verbs: tuple[str, ...]) -> None:
            match = _ROUTE.match(self.path)
            body = self._body()
            if match is None or match.group(1) not in verbs:
                self._text(HTTPStatus.NOT_FOUND, f"no such path: {self.command} {self.path}")
                return
            kind, index = match.group(1), int(match.group(2))
            try:
                if kind == "ready":
                    self._json({"start": collector.arrive(index, READY_POLL_S)})
                    return
                if kind == "parts":
                    collector.add_part(index, body)
                else:
                    collector.add_failure(index, body.decode(errors="replace")[:2000])
            except CollectorError as exc:
                self._text(exc.status, str(exc))
                return
            self._json(collector.manifest())

        def do_POST(self) -> None:
            self._post_or_put(("ready", "failed"))

        def do_PUT(self) -> None:
            self._post_or_put(("parts",))

    return Handler


def serve(collector: Collector, host: str, port: int) -> ThreadingHTTPServer:
    """Start the collector's HTTP server in a background thread."""
    server = ThreadingHTTPServer((host, port), _handler(collector))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="collector", daemon=True).start()
    return server


def collect(collector: Collector, *, ready_timeout_s: float, run_timeout_s: float,
            linger_s: float) -> int:
    """Wait for the drivers, merge, keep serving ``linger_s``; 0 when every driver reported."""
    if not collector.wait_released(ready_timeout_s):
        collector.finish(f"only drivers {sorted(collector.ready)} of {collector.drivers} "
                         f"were ready after {ready_timeout_s:g} s")
    elif not collector.done.wait(run_timeout_s):
        collector.finish(f"drivers {collector.manifest()['missing']} did not report "
                         f"within {run_timeout_s:g} s of the start")
    summary = collector.out_dir / "summary.txt"
    if summary.exists():
        print(summary.read_text(), flush=True)
    print(json.dumps(collector.manifest()), flush=True)
    time.sleep(linger_s)
    return 0 if collector.complete else 1


# ---------------------------------------------------------------- driver side


def _request(url: str, method: str, body: bytes | None = None,
             timeout_s: float = 30.0) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return int(response.status), response.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read()


def wait_for_start(collector_url: str, index: int, timeout_s: float) -> None:
    """Tell the collector driver ``index`` is ready and return when every driver is."""
    deadline = time.monotonic() + timeout_s
    down = wait_healthy([f"{collector_url}/healthz"], timeout_s)
    if down:
        raise RuntimeError(f"collector {collector_url} not reachable after {timeout_s:g} s")
    while time.monotonic() < deadline:
        status, body = _request(f"{collector_url}/ready/{index}", "POST",
                                timeout_s=READY_POLL_S + 10)
        if status != HTTPStatus.OK:
            raise RuntimeError(f"collector refused driver {index}: {body.decode(errors='replace')}")
        if json.loads(body)["start"]:
            return
    raise RuntimeError(f"the other drivers were not ready within {timeout_s:g} s")


def report(collector_url: str, index: int, result_file: Path | None, reason: str = "") -> None:
    """Send driver ``index``'s result file (or, with none, why it has none)."""
    if result_file is not None:
        status, body = _request(f"{collector_url}/parts/{index}", "PUT", result_file.read_bytes())
    else:
        status, body = _request(f"{collector_url}/failed/{index}", "POST", reason.encode())
    if status != HTTPStatus.OK:
        raise RuntimeError(f"collector answered {status}: {body.decode(errors='replace')}")


def load_argv(load_args: Sequence[str], *, rate: float, drivers: int, index: int,
              seed: int | None, json_file: Path) -> list[str]:
    """``socialbench load`` for driver ``index``: R/N, its own seed, its result file."""
    argv = [sys.executable, "-m", "socialbench.cli", "load", *load_args,
            "--rate", repr(rate / drivers), "--json", str(json_file)]
    if seed:
        argv += ["--seed", str(seed + index)]
    return argv


def drive(collector_url: str, *, drivers: int, rate: float, index: int, seed: int | None,
          load_args: Sequence[str], ready_timeout_s: float) -> int:
    """Run driver ``index`` of ``drivers``: wait for the others, load, report."""
    collector_url = collector_url.rstrip("/")
    wait_for_start(collector_url, index, ready_timeout_s)
    with tempfile.TemporaryDirectory(prefix="socialbench-load-") as workdir:
        json_file = Path(workdir) / f"driver-{index}.json"
        argv = load_argv(load_args, rate=rate, drivers=drivers, index=index, seed=seed,
                         json_file=json_file)
        code = subprocess.call(argv)
        if code == 0 and json_file.exists():
            report(collector_url, index, json_file)
            return 0
        report(collector_url, index, None, f"socialbench load exited with {code}")
        return code or 1


# ---------------------------------------------------------------- the bundle, fetched


class FetchError(SocialbenchError, RuntimeError):
    """The collector has no bundle to give (not reachable, not merged yet)."""


def fetch(collector_url: str, results_dir: Path, *, wait_s: float = 0.0,
          timeout_s: float = 30.0) -> Path:
    """The collector's merged bundle, unpacked into ``results_dir/<start time>-<run>``.

    Waits up to ``wait_s`` for the merge; an incomplete run (a driver failed or never
    came) is fetched too, its manifest saying what is missing.
    """
    collector_url = collector_url.rstrip("/")
    deadline = time.monotonic() + wait_s
    while True:
        try:
            status, body = _request(f"{collector_url}/status", "GET", timeout_s=timeout_s)
        except OSError as exc:
            raise FetchError(f"collector {collector_url} not reachable: {exc}") from None
        manifest = json.loads(body) if status == HTTPStatus.OK else {}
        if manifest.get("merged") or manifest.get("problem"):
            break
        if time.monotonic() >= deadline:
            raise FetchError(f"collector {collector_url} has not merged yet: "
                             f"{len(manifest.get('reported', []))} of "
                             f"{manifest.get('drivers', '?')} drivers reported")
        time.sleep(1.0)
    status, body = _request(f"{collector_url}/bundle.tar.gz", "GET", timeout_s=timeout_s)
    if status != HTTPStatus.OK:
        raise FetchError(f"collector answered {status} for the bundle")
    from socialbench.workloads.results.files import bundle_dir

    started = manifest.get("released_at")
    out = bundle_dir(results_dir, manifest.get("run") or "load",
                     datetime.fromisoformat(started) if started else None)
    out.mkdir(parents=True, exist_ok=False)
    with tarfile.open(fileobj=io.BytesIO(body), mode="r:gz") as tar:
        for member in tar.getmembers():
            # The bundle's one top directory (the run's name) becomes `out` itself.
            _, _, inner = member.name.partition("/")
            if not inner:
                continue
            member.name = inner
            tar.extract(member, out, filter="data")
    return out


# ---------------------------------------------------------------- the two roles


def run_collector(*, drivers: int, out_dir: Path, run: str = "", host: str = "0.0.0.0",
                  port: int = DEFAULT_PORT, warmup_s: float = 0.0, duration_s: float,
                  ready_timeout_s: float = READY_TIMEOUT_S, linger_s: float = LINGER_S) -> int:
    """The collector of ``drivers`` drivers that each load for ``warmup_s + duration_s``.

    0 when every driver reported (see :func:`collect`).
    """
    collector = Collector(drivers, out_dir, run)
    server = serve(collector, host, port)
    print(f"collector for {drivers} drivers on {host}:{port}", flush=True)
    try:
        return collect(collector, ready_timeout_s=ready_timeout_s,
                       run_timeout_s=warmup_s + duration_s + START_GRACE_S, linger_s=linger_s)
    finally:
        server.shutdown()


def run_driver(collector_url: str, *, drivers: int, rate: float, index: int,
               seed: int | None, load_args: Sequence[str],
               ready_timeout_s: float = READY_TIMEOUT_S) -> int:
    """Driver ``index``: :func:`drive`, its failures told on stderr (exit code 1; 2: no target)."""
    if not load_args:
        print("drive: give the target after --, e.g. -- http://nginx:8080 --duration 60s",
              file=sys.stderr)
        return 2
    try:
        return drive(collector_url, drivers=drivers, rate=rate, index=index, seed=seed,
                     load_args=load_args, ready_timeout_s=ready_timeout_s)
    except (RuntimeError, OSError) as exc:
        print(f"driver {index}: {exc}", file=sys.stderr)
        return 1
