"""``socialbench check`` past its options: the stores read, checked, and the verdict.

Entry points: :class:`CheckOptions` (what the command parsed: whose stores, whom to
check) and :func:`run_check` (the check, printed; the exit status back). The check itself
is :mod:`socialbench.workloads.check.run`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from socialbench.stack.local import LocalStack
from socialbench.workloads.check.contents import (
    DEFAULT_FOLLOW_SLACK_MS,
    DEFAULT_LIMIT,
    Sampling,
    StoreAddresses,
)
from socialbench.workloads.check.report import print_result
from socialbench.workloads.check.run import check


@dataclass(frozen=True)
class CheckOptions:
    """What ``socialbench check`` was asked, parsed and checked."""

    stores: StoreAddresses  # each service's, the local stack's where none was given
    data_dir: Path  # the local stack's
    sampling: Sampling | None  # None: every user (--full)
    users: frozenset[int] | None = None  # only these (--users)
    follow_slack_ms: int = DEFAULT_FOLLOW_SLACK_MS
    limit: int = DEFAULT_LIMIT
    json_out: Path | None = None
    urls_given: bool = False  # both --mongodb-url and --redis-url: not the local stack


def run_check(options: CheckOptions, console: Console) -> int:
    """Check the stores and print the verdict; the exit status: 0 (passed) or 1."""
    result = check(options.stores, options.users, sampling=options.sampling,
                   follow_slack_ms=options.follow_slack_ms, limit=options.limit)
    if options.json_out is not None:
        options.json_out.write_text(result.model_dump_json(indent=2))
    stack = LocalStack(options.data_dir)
    if result.error is not None and not options.urls_given and stack.running_state() is None:
        console.print(f"The local stack in {stack.data_dir} is not running (socialbench up), "
                      "or give --mongodb-url and --redis-url.")
    print_result(result, console, examples=None)
    return 0 if result.passed else 1
