from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from httpx import ASGITransport, AsyncClient

from socialbench.services.unique_id import EPOCH_MS, IdGenerator, claim_worker_slot, create_app


def test_ids_are_unique_and_carry_the_machine_id() -> None:
    generator = IdGenerator(machine_id=1234)
    ids = [generator.next_id() for _ in range(20_000)]
    assert len(set(ids)) == len(ids)
    assert all(i >> 52 == 1234 for i in ids)
    assert all(i > 0 and i < 1 << 63 for i in ids)


def test_a_clock_that_steps_back_does_not_repeat_ids() -> None:
    times = iter([EPOCH_MS + 1000] * 3 + [EPOCH_MS + 500] * 3 + [EPOCH_MS + 1001])
    generator = IdGenerator(machine_id=1, clock_ms=lambda: next(times))
    ids = [generator.next_id() for _ in range(7)]
    assert len(set(ids)) == 7
    assert ids == sorted(ids)


def test_counter_overflow_borrows_the_next_millisecond() -> None:
    generator = IdGenerator(machine_id=1, clock_ms=lambda: EPOCH_MS + 10)
    ids = [generator.next_id() for _ in range(5000)]
    assert len(set(ids)) == 5000


def test_worker_slots_are_exclusive_across_processes(tmp_path: Path) -> None:
    slot, _held = claim_worker_slot(tmp_path)
    code = (
        "from pathlib import Path\n"
        "from socialbench.services.unique_id import claim_worker_slot\n"
        f"print(claim_worker_slot(Path({str(tmp_path)!r}))[0])"
    )
    other = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True,
        cwd=Path(__file__).parents[2],
    )
    assert int(other.stdout) != slot


async def test_route_returns_string_ids() -> None:
    app = create_app()
    async with app.router.lifespan_context(app):
        transport = ASGITransport(app=app)
        async with AsyncClient(transport=transport, base_url="http://t") as client:
            first = (await client.post("/compose_unique_id")).json()["post_id"]
            second = (await client.post("/compose_unique_id")).json()["post_id"]
            health = await client.get("/healthz")
    assert isinstance(first, str) and int(first) != int(second)
    assert health.status_code == 200
