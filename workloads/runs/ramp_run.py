"""``socialbench ramp`` past its options: the local stack's part around a ramp job.

Entry points: :data:`QUICK` and :data:`FULL` (the steps' timings), :data:`SETUP_ERRORS`
(what stops a run before it measures), :func:`ramp_memory` (the memory a ramp will need)
and :func:`release_pods` (a helm release's pods, measured instead of the local stack).
"""

from __future__ import annotations

from rich.console import Console

from socialbench.stack.local import LocalStack, StackError
from socialbench.stack.servers import ServerNotInstalled
from socialbench.workloads.probes.memory import (
    MemoryRecord,
    cache_warning,
    composed_at_most,
    memory_warning,
)
from socialbench.workloads.probes.records import PodRecord
from socialbench.workloads.probes.resources import SamplerFactory
from socialbench.workloads.ramp.engine import RampConfig
from socialbench.workloads.results.schema import Dataset
from socialbench.workloads.runs.local import stack_rss
from socialbench.workloads.seeding.seed import SeedError

QUICK = {"step_duration": "10s", "warmup": "3s", "pause": "1s", "settle_max": "30s"}
FULL = {"step_duration": "5m", "warmup": "30s", "pause": "2s", "settle_max": "2m"}
SETUP_ERRORS = (StackError, SeedError, ServerNotInstalled)


def ramp_memory(stack: LocalStack, url: str, config: RampConfig, dataset: Dataset,
                graph_seed: int, stored_posts: int | None = None) -> MemoryRecord:
    """The stack's memory projected for the data the ramp starts with (``stored_posts``
    when given, else the seeded posts) and the posts it may compose, with a warning when
    the machine has not that much."""
    users, follows, posts = dataset.users, 0, 0
    if dataset.seeded is not None:
        data = dataset.seeded.dataset
        users, follows, posts = data.users, data.follows, data.posts
    elif dataset.fresh and dataset.graph is not None:
        from socialbench.workloads.seeding.seed import SeedPlan, load_graph

        data = SeedPlan.make(load_graph(dataset.graph, graph_seed), dataset.graph,
                             dataset.posts_per_user or 0, graph_seed).dataset()
        users, follows, posts = data.users, data.follows, data.posts
    if stored_posts is not None:
        posts = stored_posts
    rates = [config.start_rate + step * config.step_rate for step in range(config.max_steps)]
    if config.max_rate is not None:
        rates = [min(rate, config.max_rate) for rate in rates]
    composed = composed_at_most(config.load.workload, rates,
                                config.step_duration_s + config.warmup_s)
    posts += composed * (1 if dataset.fresh else config.repeat)
    local = stack.serves(url)
    limit = stack.config.memcached_bytes if local else None
    instances = stack.config.memcached_instances
    rss = stack_rss(stack) if local else 0
    warning = memory_warning(users, follows, posts, memcached_limit=limit, stack_rss=rss,
                             what=f"the stack with {users:,} users, {follows:,} follows and "
                                  f"{posts:,} posts (the ramp's composes included)")
    return MemoryRecord.of(users, follows, posts, memcached_limit=limit, stack_rss=rss,
                           warning=warning, cache_warning=cache_warning(
                               users, posts, memcached_limit=limit, instances=instances))


def release_pods(release: str, namespace: str, console: Console
                 ) -> tuple[SamplerFactory, str, list[PodRecord] | None]:
    """The sampler of a helm release's pods, how it measures, and what the pods had."""
    from socialbench.workloads.probes.pods import PodError, pod_records, pod_sampler_factory

    sampler, source = pod_sampler_factory(namespace, release)
    try:
        return sampler, source, pod_records(namespace, release)
    except PodError as exc:
        console.print(f"[yellow]warning[/]: the manifest will not record the pods: {exc}")
        return sampler, source, None
