"""'socialbench check': did the social network keep its promises? Read from its stores.

The logic is :mod:`socialbench.workloads.check.run`; this module parses the stores'
addresses (the local stack's, or ``--mongodb-url``/``--redis-url``: one URL for every
service, or ``SERVICE=URL`` for each instance of the per-service layout) and whom to check
into :class:`socialbench.workloads.runs.check_run.CheckOptions`, and
:func:`~socialbench.workloads.runs.check_run.run_check` checks and prints the verdict.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from socialbench.cli.options import DEFAULT_DATA_DIR, DataDir, run
from socialbench.registry import Store
from socialbench.stack.local import LocalStack
from socialbench.workloads.check.contents import (
    CHECKED,
    CHECKED_MONGODB,
    CHECKED_REDIS,
    DEFAULT_BUDGET_S,
    DEFAULT_FOLLOW_SLACK_MS,
    DEFAULT_HOME_ENTRIES,
    DEFAULT_LIMIT,
    Sampling,
    StoreAddresses,
)
from socialbench.workloads.runs.check_run import CheckOptions, run_check


def local_stores(stack: LocalStack) -> StoreAddresses:
    """Where the local stack's MongoDB and Redis instances listen."""
    return stack.config.store_addresses()


def given_urls(store: Store, values: list[str]) -> dict[str, str]:
    """Each service's URL from the ``--<store>-url`` values: a bare URL serves every
    service, ``SERVICE=URL`` that service's instance (the per-service layout). A service no
    value covers is refused: the local stack's instances are not the deployment's."""
    option = f"--{store}-url"
    readers = CHECKED[store]
    default: str | None = None
    own: dict[str, str] = {}
    for value in values:
        name, sep, url = value.partition("=")
        if not sep or "/" in name or ":" in name:  # a URL (its query may hold '=')
            if default is not None:
                raise typer.BadParameter(f"two URLs for every service: {default}, {value}",
                                         param_hint=option)
            default = value
        elif name not in readers:
            raise typer.BadParameter(
                f"{name!r}: the check reads the {store} of {', '.join(readers)} only",
                param_hint=option)
        elif not url:
            raise typer.BadParameter(f"{name}=: no URL", param_hint=option)
        else:
            own[name] = url
    missing = [name for name in readers if name not in own]
    if default is None and missing:
        raise typer.BadParameter(
            f"no URL for {', '.join(missing)}: give one URL for every service, or "
            f"SERVICE=URL for each of {', '.join(readers)}", param_hint=option)
    return {name: own.get(name) or default or "" for name in readers}


def parse_users(spec: str) -> set[int]:
    """``5,7,100-199`` -> those user ids."""
    users: set[int] = set()
    for item in filter(None, (part.strip() for part in spec.split(","))):
        low, sep, high = item.partition("-")
        if not low.isdigit() or (sep and not high.isdigit()):
            raise typer.BadParameter(f"expected ID or FIRST-LAST, got {item!r}",
                                     param_hint="--users")
        first, last = int(low), int(high) if sep else int(low)
        if last < first:
            raise typer.BadParameter(f"{item!r}: the range ends before it starts",
                                     param_hint="--users")
        users.update(range(first, last + 1))
    if not users:
        raise typer.BadParameter("no user ids given", param_hint="--users")
    return users


def check_command(
    data_dir: DataDir = DEFAULT_DATA_DIR,
    mongodb_url: Annotated[list[str] | None, typer.Option(
        help="Another deployment's MongoDB(-wire) server (default: the local stack's); "
        "per-service: SERVICE=URL for each of " + ", ".join(CHECKED_MONGODB) + ".")] = None,
    redis_url: Annotated[list[str] | None, typer.Option(
        help="Another deployment's Redis, e.g. redis://host:6379/0 (default: the local "
        "stack's); per-service: SERVICE=URL for each of " + ", ".join(CHECKED_REDIS) + ".")]
    = None,
    users: Annotated[str | None, typer.Option(
        help="Check only these users' posts and timelines: ID,ID,FIRST-LAST.")] = None,
    sample: Annotated[int | None, typer.Option(
        min=1, help="Check a random sample of this many users (default: every user while "
        f"the home timelines hold up to {DEFAULT_HOME_ENTRIES:,} entries, else as many as "
        "--budget allows).")] = None,
    budget: Annotated[float, typer.Option(
        min=0.0, help="Seconds of reads for the default sample (it takes users in a random "
        "order until they are spent).")] = DEFAULT_BUDGET_S,
    full: Annotated[bool, typer.Option(
        "--full", help="Check every user, however large the stores.")] = False,
    seed: Annotated[int | None, typer.Option(
        help="The sample's seed, to draw the same users again.")] = None,
    limit: Annotated[int, typer.Option(min=1, help="Examples listed per kind of problem.")]
    = DEFAULT_LIMIT,
    follow_slack: Annotated[int, typer.Option(
        min=0, help="ms after a post in which a new follower may or may not get it.")]
    = DEFAULT_FOLLOW_SLACK_MS,
    json_out: Annotated[Path | None, typer.Option(
        "--json", help="Also write the result as JSON to this file.")] = None,
) -> None:
    """Check the stores after a run: posts stored and complete, timelines exactly right."""
    console = Console(highlight=False)
    stack = LocalStack(data_dir)
    local = local_stores(stack)
    given = {Store.MONGODB: given_urls(Store.MONGODB, mongodb_url) if mongodb_url else {},
             Store.REDIS: given_urls(Store.REDIS, redis_url) if redis_url else {}}
    stores = StoreAddresses.of_services(lambda spec, store: given[store].get(spec.name) or (
        local.mongodb_of(spec.name) if store is Store.MONGODB else local.redis_of(spec.name)))
    scope = parse_users(users) if users is not None else None
    if sample is not None and (full or users is not None):
        raise typer.BadParameter("--full and --users say whom to check: no --sample with them",
                                 param_hint="--sample")
    sampling = None if full else Sampling(users=sample, seed=seed, budget_s=budget)
    options = CheckOptions(
        stores=stores, data_dir=data_dir, sampling=sampling,
        users=frozenset(scope) if scope is not None else None, follow_slack_ms=follow_slack,
        limit=limit, json_out=json_out, urls_given=bool(mongodb_url and redis_url))
    run(lambda: run_check(options, console), console)
