"""The driver's configuration: its default size on a machine of N CPUs."""

from __future__ import annotations

from socialbench.workloads.driver.config import driver_size


def test_the_drivers_default_size_grows_with_the_cpus() -> None:
    assert driver_size(2) == (2, 64)  # this machine: as before
    assert driver_size(128) == (128, 128 * 32)  # a big machine's rates need connections
    assert driver_size(128, processes=8) == (8, 256)
    assert driver_size(128, connections=32) == (32, 32)  # one connection a process at least
    assert driver_size(4, processes=2, connections=5000) == (2, 5000)  # as given
