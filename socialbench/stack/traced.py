"""The local stack traced into this process for a while: ``socialbench ramp --trace-ratio``."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from socialbench.stack.local import LocalStack
from socialbench.workloads.probes.otlp import SpanReceiver


@contextmanager
def spans_to_receiver(stack: LocalStack, ratio: float,
                      note: Callable[[str], None]) -> Iterator[SpanReceiver]:
    """A span receiver in this process, and the running ``stack`` restarted (stores kept)
    with its services sending it the traces of ``ratio`` of the front-end requests; the
    stack is restarted as it was before when done."""
    before = dataclasses.replace(stack.config, trace_collector=None)
    with SpanReceiver(before.host) as receiver:
        note(f"Restarting the local stack with {ratio:g} of its requests traced, spans to "
             f"{receiver.endpoint} (this process)")
        def progress(message: str) -> None:
            note(f"  {message}")

        try:
            stack.restart(dataclasses.replace(before, trace_collector=receiver.endpoint,
                                              trace_sample_ratio=ratio), on_progress=progress)
            yield receiver
        finally:
            note("Restarting the local stack as it was (not traced into this process)")
            stack.restart(before, on_progress=progress)
