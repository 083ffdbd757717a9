"""unique-id: new 64-bit post ids, never repeated across processes or restarts.

Layout (as the original): 1 bit 0 | 11 bits machine id | 40 bits ms since
2018-01-01 UTC | 12 bits per-ms counter. The 11-bit machine id is 7 bits of host
(``SOCIALBENCH_MACHINE_ID`` mod 128, else a hash of the host name) and 4 bits of
worker slot, claimed with an exclusive file lock so the workers of one host never
share an id space. A clock that steps back does not repeat ids: the generator keeps
the last timestamp it used until the clock passes it.
"""

from __future__ import annotations

import fcntl
import os
import socket
import tempfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, BinaryIO

from fastapi import APIRouter, Depends, FastAPI

from socialbench.runtime.app import ServiceContext, create_service_app, service_logic
from socialbench.runtime.errors import StoreError
from socialbench.runtime.interfaces import PostIdAnswer
from socialbench.runtime.models import now_ms

EPOCH_MS = 1514764800000  # 2018-01-01T00:00:00Z
HOST_BITS, SLOT_BITS, TIME_BITS, COUNTER_BITS = 7, 4, 40, 12
MAX_COUNTER = (1 << COUNTER_BITS) - 1


def claim_worker_slot(lock_dir: Path) -> tuple[int, BinaryIO]:
    """Claim the first free worker slot on this host; the open lock file keeps it ours."""
    lock_dir.mkdir(parents=True, exist_ok=True)
    for slot in range(1 << SLOT_BITS):
        handle = (lock_dir / f"slot-{slot}.lock").open("ab")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            continue
        return slot, handle
    raise StoreError(f"all {1 << SLOT_BITS} unique-id worker slots on this host are taken")


class IdGenerator:
    """Snowflake-style ids for one machine id."""

    def __init__(self, machine_id: int, clock_ms: Callable[[], int] | None = None) -> None:
        if not 0 <= machine_id < 1 << (HOST_BITS + SLOT_BITS):
            raise ValueError(f"machine id {machine_id} does not fit in 11 bits")
        self.machine_id = machine_id
        self._clock_ms = clock_ms or now_ms
        self._last_ms = 0
        self._counter = 0

    def next_id(self) -> int:
        now = max(self._clock_ms() - EPOCH_MS, self._last_ms)
        if now == self._last_ms:
            self._counter += 1
            if self._counter > MAX_COUNTER:
                # 4,096 ids in this millisecond: borrow the next one rather than repeat.
                now, self._counter = now + 1, 0
        else:
            self._counter = 0
        self._last_ms = now
        return (
            (self.machine_id << (TIME_BITS + COUNTER_BITS))
            | ((now & ((1 << TIME_BITS) - 1)) << COUNTER_BITS)
            | self._counter
        )


class UniqueIdService:
    """The service's logic: one generator per worker process."""

    def __init__(self, context: ServiceContext) -> None:
        configured = context.settings.machine_id
        host = configured if configured is not None else zlib.crc32(socket.gethostname().encode())
        lock_dir = Path(tempfile.gettempdir()) / f"socialbench-unique-id-{os.getuid()}"
        slot, self._slot_lock = claim_worker_slot(lock_dir)
        self.generator = IdGenerator(((host % (1 << HOST_BITS)) << SLOT_BITS) | slot)

    async def setup(self) -> None:
        return None


UniqueIdDep = Annotated[UniqueIdService, Depends(service_logic)]
router = APIRouter()


@router.post("/compose_unique_id")
async def compose_unique_id(service: UniqueIdDep) -> PostIdAnswer:
    """A new post id (as a string: it does not fit in a JavaScript number)."""
    return PostIdAnswer(post_id=str(service.generator.next_id()))


def create_app() -> FastAPI:
    return create_service_app("unique-id", router, UniqueIdService)
