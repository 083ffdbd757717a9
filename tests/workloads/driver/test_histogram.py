from __future__ import annotations

import random
import subprocess
import sys
from array import array
from pathlib import Path

import numpy as np

from socialbench.workloads.driver.histogram import (
    HIGHEST_US,
    Recorder,
    encode,
    merge,
    new_histogram,
    record_many,
)

WORKER = """
import sys
from array import array
from socialbench.workloads.driver.histogram import Recorder, encode
samples = array("q")
with open(sys.argv[1], "rb") as file:
    samples.frombytes(file.read())
recorder = Recorder()
for value in samples:
    recorder.record(value)
recorder.flush()
print(encode(recorder.total))
"""


def samples_ns(seed: int, n: int) -> list[int]:
    """A log-normal body around 1 ms, a tail to minutes, and bucket edges (ns)."""
    rng = random.Random(seed)
    edges = [0, 999, 1000, 2_047_000, 2_048_000, 2_049_000, 3_600_000_000_000]
    return edges + [int(rng.lognormvariate(13.8, 1.5)) for _ in range(n)]


def test_vectorised_recording_matches_record_value_bucket_for_bucket() -> None:
    rng = random.Random(1)
    values_us = [0, 1, 2047, 2048, 2049, 4095, 4096, HIGHEST_US] + [
        int(rng.lognormvariate(7, 3)) % HIGHEST_US for _ in range(50_000)
    ]
    one_by_one, vectorised = new_histogram(), new_histogram()
    for value in values_us:
        one_by_one.record_value(value)
    record_many(np.array(values_us), vectorised)
    assert list(vectorised.counts) == list(one_by_one.counts)
    assert vectorised.get_total_count() == one_by_one.get_total_count()
    assert vectorised.get_min_value() == one_by_one.get_min_value()
    assert vectorised.get_max_value() == one_by_one.get_max_value()


def test_histograms_merged_across_processes_equal_one_histogram_of_all_samples(
    tmp_path: Path,
) -> None:
    values = samples_ns(42, 60_000)
    processes = []
    for part in range(2):
        part_file = tmp_path / f"part{part}"
        part_file.write_bytes(array("q", values[part::2]).tobytes())
        processes.append(
            subprocess.Popen([sys.executable, "-c", WORKER, str(part_file)], stdout=subprocess.PIPE)
        )
    encoded = [process.communicate()[0].decode().strip() for process in processes]
    assert all(process.returncode == 0 for process in processes)
    merged = merge(encoded)

    single = Recorder()
    for value in values:
        single.record(value)
    single.flush()
    expected = single.total

    assert list(merged.counts) == list(expected.counts)
    assert merged.get_total_count() == expected.get_total_count() == 60_007
    for percentile in (50, 90, 99, 99.9, 99.999, 100):
        assert merged.get_value_at_percentile(percentile) == expected.get_value_at_percentile(
            percentile
        )
    assert merged.get_max_value() == expected.get_max_value()
    assert encode(merged) == encode(expected)


def test_warm_up_samples_reach_the_interval_but_not_the_total() -> None:
    recorder = Recorder()
    recorder.record(5_000_000)
    recorder.record_unmeasured(9_000_000)
    interval = recorder.take_interval()
    assert recorder.total.get_total_count() == 1
    assert interval.get_total_count() == 2
    assert recorder.interval.get_total_count() == 0
