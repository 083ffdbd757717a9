"""What a results bundle records of the local stack it measured (the session's stack)."""

from __future__ import annotations

from pathlib import Path

import pytest

from socialbench import registry
from socialbench.stack.local import LocalStack
from socialbench.stack.servers import free_port

pytestmark = pytest.mark.e2e


def test_the_local_stacks_processes_and_tracing_are_recorded(
    stack_dir: Path, base_url: str
) -> None:
    record = LocalStack(stack_dir).record(base_url)
    assert record is not None
    # As the session fixture started it: the services' workers from the CPU count, one
    # nginx worker, tracing on at ratio 0.
    config = LocalStack(stack_dir).config
    assert record.workers == {
        spec.name: registry.default_workers(spec, config.cpu_count) for spec in registry.SERVICES}
    assert (record.default_workers, record.workers_chosen, record.workers_cpus) == (
        None, "cpu-count", config.cpu_count)
    assert record.nginx_workers == "1"
    state = LocalStack(stack_dir).state()
    assert state is not None
    started = {c.name: int(c.argv[c.argv.index("--workers") + 1])
               for c in state.components if c.kind == "service"}
    assert record.workers == started
    assert (record.tracing, record.trace_sample_ratio) == (True, 0.0)


def test_another_target_records_no_stack(stack_dir: Path) -> None:
    assert LocalStack(stack_dir).record(f"http://127.0.0.1:{free_port()}") is None
