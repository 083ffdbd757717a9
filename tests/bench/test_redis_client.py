"""bench redis-client: both clients send every command to a real Redis, their CPU measured."""

from __future__ import annotations

import json
from pathlib import Path

from socialbench.bench.redis_client import RedisClientBench, run


def test_both_clients_are_measured_at_each_caller_count(tmp_path: Path) -> None:
    config = RedisClientBench(commands=300, callers=(1, 4), warmup_commands=10,
                              results_dir=tmp_path)

    rows = json.loads(run(config).read_text())["rows"]

    assert [(row["client"], row["callers"]) for row in rows] == [
        ("redis-py (blocking pool)", 1), ("socialbench RedisClient", 1),
        ("redis-py (blocking pool)", 4), ("socialbench RedisClient", 4),
    ]
    for row in rows:
        assert row["commands"] == 300, row
        assert row["cpu_us_per_command"] > 0 and row["commands_per_s"] > 0, row
