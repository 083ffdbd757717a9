"""Locust's web UI in a real browser (Debian's chromium, headless, driven by Playwright).

Open the UI that ``socialbench locust`` serves, start a swarm, watch the request count grow.
The screenshot is kept under the test's tmp dir; its path is printed (``pytest -s``).
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from socialbench.stack.servers import free_port, port_open
from tests.e2e.support import CHROMIUM, CHROMIUM_FLAGS, needs_chromium
from tests.support import socialbench

sync_api = pytest.importorskip("playwright.sync_api")
pytestmark = [pytest.mark.e2e, needs_chromium]
GRAPH_USERS = 40
WAIT_S = 60.0  # upper bound for each wait below; they normally take about a second


@pytest.fixture
def locust_ui(base_url: str, tmp_path: Path) -> Iterator[str]:
    """``socialbench locust`` serving its web UI over a seeded stack; stopped afterwards."""
    seed = socialbench("seed", "--graph", f"synthetic:{GRAPH_USERS}:3", "--url", base_url,
                       "--seed", "7")
    assert seed.returncode == 0, seed.stdout + seed.stderr
    port = free_port()
    log = (tmp_path / "locust.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "socialbench.cli", "locust", "--host", base_url,
         "--graph-users", str(GRAPH_USERS), "--users", "3", "--spawn-rate", "3",
         "--web-port", str(port)], stdout=log, stderr=subprocess.STDOUT)
    children: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + WAIT_S
        while not port_open("127.0.0.1", port):
            assert process.poll() is None, (tmp_path / "locust.log").read_text()
            assert time.monotonic() < deadline, "the web UI did not come up"
            time.sleep(0.2)
        children = psutil.Process(process.pid).children(recursive=True)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()  # as a Ctrl+C would: the command stops Locust, then exits
        try:
            process.wait(timeout=WAIT_S)
        finally:
            if process.poll() is None:
                process.kill()
            log.close()
    assert children and not [p for p in children if p.is_running()], "locust left running"


def aggregated_requests(page: sync_api.Page) -> tuple[int, int]:
    """(# Requests, # Fails) of the statistics table's Aggregated row."""
    headers = page.locator("table thead th").all_inner_texts()
    row = page.get_by_role("row").filter(has=page.get_by_role("cell", name="Aggregated",
                                                              exact=True))
    cells = row.locator("td").all_inner_texts()
    return int(cells[headers.index("# Requests")]), int(cells[headers.index("# Fails")])


def test_start_a_swarm_in_the_browser_and_see_requests_grow(locust_ui: str,
                                                             tmp_path: Path) -> None:
    screenshot = tmp_path / "locust-ui.png"
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"), executable_path=str(CHROMIUM), headless=True,
            args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page()
            page.goto(locust_ui)
            page.get_by_label("Number of users (peak concurrency)").fill("2")
            page.get_by_role("button", name="Start").click()
            page.get_by_role("cell", name="Aggregated", exact=True).wait_for(
                timeout=WAIT_S * 1000)

            counts = [aggregated_requests(page)]
            deadline = time.monotonic() + WAIT_S
            while len({requests for requests, _ in counts if requests > 0}) < 2:
                assert time.monotonic() < deadline, f"the request count did not grow: {counts}"
                page.wait_for_timeout(500)
                counts.append(aggregated_requests(page))
            page.screenshot(path=str(screenshot), full_page=True)
            print(f"\nLocust web UI screenshot: {screenshot}")
        finally:
            browser.close()

    requests = [r for r, _ in counts if r > 0]
    assert requests == sorted(requests) and requests[-1] > requests[0], counts
    assert all(fails == 0 for _, fails in counts), counts
    assert screenshot.stat().st_size > 0
