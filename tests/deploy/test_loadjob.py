"""The load Job's collector and drivers: started together, results merged into one bundle."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from socialbench.cli import app
from socialbench.deploy import loadjob
from socialbench.stack.servers import free_port
from socialbench.workloads.driver.merge import merge_results
from socialbench.workloads.driver.result import LoadResult
from tests.deploy.results import load_config, result_of, worker_report


def run_loadjob(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(app, ["loadjob", *args], env={"COLUMNS": "300", **(env or {})})


def start_collector(
    tmp_path: Path, drivers: int
) -> tuple[loadjob.Collector, str, ThreadingHTTPServer]:
    collector = loadjob.Collector(drivers, tmp_path / "run1", run="run1")
    port = free_port()
    server = loadjob.serve(collector, "127.0.0.1", port)
    return collector, f"http://127.0.0.1:{port}", server


@pytest.fixture
def two_drivers(tmp_path: Path) -> Iterator[tuple[loadjob.Collector, str]]:
    collector, url, server = start_collector(tmp_path, 2)
    yield collector, url
    server.shutdown()


@pytest.fixture(scope="module")
def parts() -> list[LoadResult]:
    return [result_of(load_config(250, 1, 8), [worker_report(i, 500, seed=i)]) for i in range(2)]


def fetch(url: str, method: str = "GET", body: bytes | None = None) -> tuple[int, bytes]:
    return loadjob._request(url, method, body)


def part_file(tmp_path: Path, result: LoadResult, index: int) -> Path:
    path = tmp_path / f"part-{index}.json"
    path.write_text(result.model_dump_json())
    return path


def test_drivers_start_together_and_the_bundle_holds_the_merge(
    tmp_path: Path, two_drivers: tuple[loadjob.Collector, str], parts: list[LoadResult]
) -> None:
    collector, url = two_drivers
    started: list[int] = []

    def first_driver() -> None:
        loadjob.wait_for_start(url, 0, 10)
        started.append(0)

    first = threading.Thread(target=first_driver)
    first.start()
    first.join(0.3)
    assert first.is_alive() and not started  # held until every driver is ready
    loadjob.wait_for_start(url, 1, 10)
    first.join(5)
    assert started == [0]
    assert collector.manifest()["released_at"]

    for index, part in enumerate(parts):
        loadjob.report(url, index, part_file(tmp_path, part, index))
    assert collector.done.is_set() and collector.complete
    status, body = fetch(f"{url}/result")
    assert status == 200
    assert LoadResult.model_validate_json(body) == merge_results(parts)

    status, body = fetch(f"{url}/bundle.tar.gz")
    with tarfile.open(fileobj=io.BytesIO(body)) as tar:
        names = set(tar.getnames())
    assert {"run1/result.json", "run1/summary.txt", "run1/manifest.json",
            "run1/parts/driver-0.json", "run1/parts/driver-1.json"} <= names
    manifest = json.loads((tmp_path / "run1" / "manifest.json").read_text())
    assert manifest["complete"] and manifest["reported"] == [0, 1]
    assert "Latency distribution" in (tmp_path / "run1" / "summary.txt").read_text()

    fetched = run_loadjob("fetch", "--collector", url, "--results", str(tmp_path / "results"))
    assert fetched.exit_code == 0, fetched.output
    (bundle,) = (tmp_path / "results").iterdir()
    released = collector.manifest()["released_at"]
    assert bundle.name.endswith("-run1") and bundle.name[:8] == released[:10].replace("-", "")
    assert LoadResult.model_validate_json(
        (bundle / "result.json").read_bytes()) == merge_results(parts)
    assert sorted(p.name for p in (bundle / "parts").iterdir()) == ["driver-0.json",
                                                                      "driver-1.json"]
    assert "Latency distribution" in fetched.output and f"Fetched: {bundle}" in fetched.output


def test_fetch_before_the_merge_or_without_a_collector_fails_clearly(
    tmp_path: Path, two_drivers: tuple[loadjob.Collector, str]
) -> None:
    _, url = two_drivers
    results = tmp_path / "results"
    early = run_loadjob("fetch", "--collector", url, "--results", str(results))
    assert early.exit_code == 1
    assert f"collector {url} has not merged yet: 0 of 2 drivers reported" in early.output
    absent = run_loadjob("fetch", "--collector", f"http://127.0.0.1:{free_port()}",
                         "--results", str(results))
    assert absent.exit_code == 1 and "not reachable" in absent.output
    assert not results.exists()


def test_bad_reports_are_refused_and_change_nothing(
    tmp_path: Path, two_drivers: tuple[loadjob.Collector, str], parts: list[LoadResult]
) -> None:
    collector, url = two_drivers
    assert fetch(f"{url}/result")[0] == 404
    assert fetch(f"{url}/parts/2", "PUT", parts[0].model_dump_json().encode())[0] == 404
    status, body = fetch(f"{url}/parts/0", "PUT", b'{"not": "a result"}')
    assert status == 400 and b"not a `socialbench load --json` result" in body
    assert fetch(f"{url}/parts/0", "POST", b"{}")[0] == 404
    assert collector.manifest()["reported"] == []
    loadjob.report(url, 0, part_file(tmp_path, parts[0], 0))
    assert fetch(f"{url}/parts/0", "PUT", parts[0].model_dump_json().encode())[0] == 409
    assert collector.manifest()["reported"] == [0]
    assert not collector.done.is_set()


def test_a_failed_driver_gives_an_incomplete_bundle(
    tmp_path: Path, two_drivers: tuple[loadjob.Collector, str], parts: list[LoadResult]
) -> None:
    collector, url = two_drivers
    loadjob.report(url, 0, part_file(tmp_path, parts[0], 0))
    loadjob.report(url, 1, None, "socialbench load exited with 1")
    assert collector.done.is_set() and not collector.complete
    manifest = json.loads(fetch(f"{url}/status")[1])
    assert manifest["failed"] == {"1": "socialbench load exited with 1"}
    assert manifest["merged"] and not manifest["complete"]
    assert "INCOMPLETE" in (tmp_path / "run1" / "summary.txt").read_text()


def test_collect_gives_up_on_drivers_that_never_come(
    tmp_path: Path, parts: list[LoadResult]
) -> None:
    collector = loadjob.Collector(3, tmp_path / "out")
    collector.arrive(0, 0)
    code = loadjob.collect(collector, ready_timeout_s=0.1, run_timeout_s=1, linger_s=0)
    assert code == 1
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["missing"] == [0, 1, 2]
    assert "only drivers [0] of 3 were ready" in manifest["problem"]
    # A result that comes after the close does not change the bundle.
    with pytest.raises(loadjob.CollectorError, match="the run is closed"):
        collector.add_part(0, parts[0].model_dump_json().encode())
    assert not (tmp_path / "out" / "parts" / "driver-0.json").exists()


def test_a_driver_without_its_collector_fails_clearly() -> None:
    result = run_loadjob("drive", "--collector", f"http://127.0.0.1:{free_port()}",
                         "--drivers", "1", "--rate", "1", "--ready-timeout", "0.2",
                         "--", "http://127.0.0.1:1/", env={"JOB_COMPLETION_INDEX": "3"})
    assert result.exit_code == 1
    assert "driver 3: collector http://127.0.0.1:" in result.output


def test_a_driver_needs_its_index() -> None:
    result = run_loadjob("drive", "--collector", "http://x", "--drivers", "1", "--rate", "1",
                         "--", "http://127.0.0.1:1/", env={"JOB_COMPLETION_INDEX": None})
    assert result.exit_code == 2
    assert "--index" in result.output


def test_collect_serves_then_gives_up(tmp_path: Path) -> None:
    result = run_loadjob("collect", "--drivers", "2", "--out", str(tmp_path / "r1"), "--run",
                         "r1", "--host", "127.0.0.1", "--port", str(free_port()),
                         "--ready-timeout", "0.1", "--linger", "0")
    assert result.exit_code == 1
    assert "collector for 2 drivers on 127.0.0.1:" in result.output
    manifest = json.loads((tmp_path / "r1" / "manifest.json").read_text())
    assert manifest["run"] == "r1" and manifest["missing"] == [0, 1]
    bad = run_loadjob("collect", "--drivers", "1", "--out", str(tmp_path / "r2"),
                      "--duration", "soon")
    assert bad.exit_code == 2 and "not a duration" in bad.output


class _Ok(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.mark.slow
def test_two_drivers_run_socialbench_load_and_the_collector_merges_them(tmp_path: Path) -> None:
    target = ThreadingHTTPServer(("127.0.0.1", 0), _Ok)
    target.daemon_threads = True
    threading.Thread(target=target.serve_forever, daemon=True).start()
    collector, url, server = start_collector(tmp_path, 2)
    codes: dict[int, int] = {}

    def driver(index: int) -> None:
        # As the Job's pods run it: the socialbench command, its index from the environment.
        codes[index] = subprocess.run(
            [sys.executable, "-m", "socialbench.cli", "loadjob", "drive", "--collector", url,
             "--drivers", "2", "--rate", "100", "--seed", "5", "--ready-timeout", "30", "--",
             f"http://127.0.0.1:{target.server_port}/ok", "--duration", "1s", "-D",
             "constant", "--processes", "1", "--connections", "2", "--quiet"],
            env={**os.environ, "JOB_COMPLETION_INDEX": str(index)}, timeout=120, check=False,
        ).returncode

    threads = [threading.Thread(target=driver, args=(i,)) for i in range(2)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert codes == {0: 0, 1: 0}
        assert collector.done.wait(5) and collector.complete
        merged = LoadResult.model_validate_json((tmp_path / "run1" / "result.json").read_text())
        assert merged.config.rate == 100
        assert merged.scheduled == 100 and merged.ok == 100
        assert sorted(part.config.seed for part in collector.parts.values()) == [5, 6]
        assert all(part.config.rate == 50 for part in collector.parts.values())
    finally:
        server.shutdown()
        target.shutdown()


def test_drive_needs_a_target() -> None:
    result = run_loadjob("drive", "--collector", "http://x", "--drivers", "1", "--rate", "1",
                         "--index", "0", "--")
    assert result.exit_code == 2
    assert "give the target after --" in result.output


def test_an_unknown_driver_cannot_join(two_drivers: tuple[loadjob.Collector, str]) -> None:
    _, url = two_drivers
    with pytest.raises(RuntimeError, match="refused driver 5"):
        loadjob.wait_for_start(url, 5, 5)
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen("http://127.0.0.1:1/", timeout=1)
