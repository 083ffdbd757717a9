"""What a results bundle records of the local stack it measured (the session's stack)."""

from __future__ import annotations

from pathlib import Path

import pytest

from socialbench.stack.local import LocalStack
from socialbench.stack.servers import free_port

pytestmark = pytest.mark.e2e


def test_the_local_stacks_processes_and_tracing_are_recorded(
    stack_dir: Path, base_url: str
) -> None:
    record = LocalStack(stack_dir).record(base_url)
    assert record is not None
    # As the session fixture started it: one nginx worker, tracing on at ratio 0.
    assert (record.default_workers, record.workers, record.nginx_workers) == (1, {}, "1")
    assert (record.tracing, record.trace_sample_ratio) == (True, 0.0)


def test_another_target_records_no_stack(stack_dir: Path) -> None:
    assert LocalStack(stack_dir).record(f"http://127.0.0.1:{free_port()}") is None
