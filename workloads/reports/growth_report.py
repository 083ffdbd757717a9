"""The curve of a ``ramp --grow`` bundle: max rate, CPU per request and the stores'
figures against the posts stored (a PNG), and its ``report.html``."""

from __future__ import annotations

import base64
from pathlib import Path

import jinja2
from matplotlib import pyplot as plt
from matplotlib.ticker import NullLocator

from socialbench.workloads.reports.formatting import format_latency, format_rate
from socialbench.workloads.reports.plotting import save
from socialbench.workloads.reports.ramp_report import REPORT
from socialbench.workloads.results.growth import GROW_CSV, GROW_JSON, GrowRecord, read_grow, rss_of

CURVE_PLOT = "max-rate-vs-posts.png"
_TEMPLATE = Path(__file__).with_name("grow_report.html.j2")
GiB = 2**30


def plot_curve(record: GrowRecord, path: Path) -> None:
    """Three panels against the posts stored: the max rate at the SLA; stack CPU per
    request and p99 there; Redis's memory, the MongoDB files and memcached's hit ratio."""
    levels = [level for level in record.levels if level.stored.posts > 0]
    posts = [level.stored.posts for level in levels]
    figure, (rate, cost, stores) = plt.subplots(3, 1, figsize=(8, 9), sharex=True)
    rate.plot(posts, [level.max_rate_rps or 0 for level in levels], "o-", color="tab:green",
              label="max rate at the SLA")
    rate.plot(posts, [level.highest_passed_rps or float("nan") for level in levels], "^:",
              color="tab:gray", label="highest rate whose step held it")
    rate.legend(loc="lower left", fontsize=8)
    rate.set_ylabel("max req/s at the SLA")
    rate.set_ylim(bottom=0)
    cost.plot(posts, [level.cpu_ms_per_request or float("nan") for level in levels], "o-",
              color="tab:blue", label="stack CPU ms / request at the max rate")
    cost.plot(posts, [level.start_cpu_ms_per_request or float("nan") for level in levels],
              "o:", color="tab:cyan", label="... at the first step's rate")
    cost.set_ylabel("CPU ms / request")
    cost.set_ylim(bottom=0)
    cost.legend(loc="upper left", fontsize=8)
    p99 = cost.twinx()
    p99.plot(posts, [level.p99_ms or float("nan") for level in levels], "s--",
             color="tab:red", label="p99 ms at that rate")
    p99.set_ylabel("p99 ms at the max rate")
    p99.set_ylim(bottom=0)
    p99.legend(loc="upper right", fontsize=8)
    stores.plot(posts, [level.stored.redis_used_memory_bytes / GiB for level in levels], "o-",
                label="Redis used_memory")
    stores.plot(posts, [rss_of(level, "redis") / GiB for level in levels], "^:",
                label="Redis RSS")
    stores.plot(posts, [level.stored.mongodb_file_bytes / GiB for level in levels], "s-",
                label="MongoDB files")
    stores.set_ylabel("GiB")
    stores.set_xlabel("posts stored")
    stores.set_xscale("log")
    stores.set_xticks(posts, [f"{count:,}" for count in posts])
    stores.xaxis.set_minor_locator(NullLocator())
    hits = stores.twinx()
    hits.plot(posts, [100 * (level.memcached_hit_ratio or 0) for level in levels], "x--",
              color="tab:purple", label="memcached hits %")
    hits.set_ylim(0, 105)
    hits.set_ylabel("memcached hits %")
    for axis in (rate, cost, stores):
        axis.grid(True, alpha=0.3)
    lines = [*stores.get_lines(), *hits.get_lines()]
    stores.legend(lines, [line.get_label() for line in lines], fontsize=8, loc="upper left")
    save(figure, path)


def build_grow_report(directory: Path) -> Path:
    """(Re)build the curve and report.html of the growth bundle in ``directory``."""
    record = read_grow(directory)
    plot_curve(record, directory / CURVE_PLOT)
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(_TEMPLATE.parent),
        autoescape=True, trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined,
    )
    environment.filters.update(rate=format_rate, latency=format_latency,
                               gib=lambda value: f"{value / GiB:,.2f}")
    html = environment.get_template(_TEMPLATE.name).render(
        record=record, manifest=record.manifest, levels=record.levels, rss_of=rss_of,
        plot=base64.b64encode((directory / CURVE_PLOT).read_bytes()).decode(),
        files=[GROW_JSON, GROW_CSV, CURVE_PLOT])
    path = directory / REPORT
    path.write_text(html)
    return path
