"""SingleFlight: concurrent loads of one key are one load."""

from __future__ import annotations

import asyncio

import pytest

from socialbench.runtime.singleflight import SingleFlight


class Loader:
    """A load that waits for the test's go-ahead and counts its runs."""

    def __init__(self) -> None:
        self.runs = 0
        self.release = asyncio.Event()

    async def __call__(self, value: str = "loaded", error: Exception | None = None) -> str:
        self.runs += 1
        await self.release.wait()
        if error is not None:
            raise error
        return value


async def test_concurrent_calls_of_one_key_share_one_load() -> None:
    flight: SingleFlight[str, str] = SingleFlight()
    load = Loader()
    calls = [asyncio.create_task(flight.run("user:1", load)) for _ in range(10)]
    other = asyncio.create_task(flight.run("user:2", lambda: load("other")))
    await asyncio.sleep(0.01)
    assert (load.runs, len(flight)) == (2, 2)
    load.release.set()
    assert await asyncio.gather(*calls) == ["loaded"] * 10
    assert await other == "other"
    assert len(flight) == 0
    # Finished: the next call loads again (nothing is cached).
    assert await flight.run("user:1", load) == "loaded"
    assert load.runs == 3


async def test_every_waiting_caller_gets_the_loads_error() -> None:
    flight: SingleFlight[str, str] = SingleFlight()
    load = Loader()
    calls = [asyncio.create_task(flight.run("k", lambda: load(error=KeyError("gone"))))
             for _ in range(3)]
    await asyncio.sleep(0.01)
    load.release.set()
    results = await asyncio.gather(*calls, return_exceptions=True)
    assert [type(r) for r in results] == [KeyError] * 3
    assert load.runs == 1


async def test_a_cancelled_caller_leaves_the_load_to_the_others() -> None:
    flight: SingleFlight[str, str] = SingleFlight()
    load = Loader()
    first = asyncio.create_task(flight.run("k", load))
    second = asyncio.create_task(flight.run("k", load))
    await asyncio.sleep(0.01)
    first.cancel()
    await asyncio.sleep(0.01)
    load.release.set()
    assert await second == "loaded"
    with pytest.raises(asyncio.CancelledError):
        await first
    assert load.runs == 1
