"""Local server instances for ``cache scale``: memcached ``-t 1`` or redis-server, each on
its own free port, optionally pinned to one CPU (``sched_setaffinity``, as taskset)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

READY_TIMEOUT_S = 10.0


class ServerKind(StrEnum):
    MEMCACHED = "memcached"
    REDIS = "redis"


@dataclass
class Instance:
    """A running server: where it listens, its pid (None for an in-process fake), how to stop it."""

    host: str
    port: int
    pid: int | None = None
    cpu: int | None = None
    stop: Callable[[], None] = field(default=lambda: None)


Launcher = Callable[[int], Instance]
"""Starts instance number i (0, 1, ...) and returns it ready."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def wait_port(host: str, port: int, timeout_s: float = READY_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection((host, port), timeout=0.2):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing listening on {host}:{port} "
                                   f"after {timeout_s} s") from None
            time.sleep(0.02)


def server_argv(kind: ServerKind, port: int, host: str = "127.0.0.1",
                memory_mb: int = 1024) -> list[str]:
    """One single-threaded instance, no persistence (a cache, as in the seed documents)."""
    if kind is ServerKind.MEMCACHED:
        binary = _which("memcached")
        argv = [binary, "-l", host, "-p", str(port), "-U", "0", "-t", "1",
                "-m", str(memory_mb), "-c", "4096"]
        if os.geteuid() == 0:
            argv += ["-u", "root"]
        return argv
    binary = _which("redis-server")
    return [binary, "--bind", host, "--port", str(port), "--save", "", "--appendonly", "no",
            "--protected-mode", "no", "--maxclients", "10000", "--dir", "/tmp"]


def _which(name: str) -> str:
    found = shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
    if found is None:
        raise FileNotFoundError(f"{name} is not installed (apt-get install {name})")
    return found


def start_instance(kind: ServerKind, *, cpu: int | None = None, host: str = "127.0.0.1",
                   memory_mb: int = 1024, log_dir: Path | None = None) -> Instance:
    """Start one instance on a free port (pinned to ``cpu`` when given); return it ready."""
    port = free_port(host)
    log = open(log_dir / f"{kind.value}-{port}.log", "wb") if log_dir else subprocess.DEVNULL  # noqa: SIM115
    process = subprocess.Popen(server_argv(kind, port, host, memory_mb),
                               stdout=log, stderr=subprocess.STDOUT)
    if cpu is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(process.pid, {cpu})

    def stop() -> None:
        process.terminate()
        try:
            process.wait(5.0)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if log is not subprocess.DEVNULL:
            log.close()  # type: ignore[union-attr]

    try:
        wait_port(host, port)
    except TimeoutError:
        stop()
        raise
    return Instance(host, port, process.pid, cpu, stop)


def local_launcher(kind: ServerKind, cpus: list[int] | None = None,
                   memory_mb: int = 1024, log_dir: Path | None = None) -> Launcher:
    """Instance i on ``cpus[i % len(cpus)]`` (unpinned when no CPUs are given)."""

    def launch(number: int) -> Instance:
        cpu = cpus[number % len(cpus)] if cpus else None
        return start_instance(kind, cpu=cpu, memory_mb=memory_mb, log_dir=log_dir)

    return launch


def server_stats(host: str, port: int, kind: ServerKind) -> dict[str, str]:
    """memcached ``stats`` or Redis ``INFO`` (all sections) as a flat dict of strings."""
    with socket.create_connection((host, port), timeout=5) as sock:
        if kind is ServerKind.MEMCACHED:
            sock.sendall(b"stats\r\n")
            text = _read_until(sock, b"END\r\n").decode()
            return {parts[1]: parts[2] for line in text.splitlines()
                    if (parts := line.split(" ", 2)) and len(parts) == 3 and parts[0] == "STAT"}
        sock.sendall(b"*2\r\n$4\r\nINFO\r\n$3\r\nall\r\n")
        head = _read_until(sock, b"\r\n")
        size = int(head[1:head.index(b"\r\n")])
        body = head[head.index(b"\r\n") + 2:]
        while len(body) < size:
            body += sock.recv(65536)
        return {key: value for line in body.decode().splitlines()
                if ":" in line and not line.startswith("#")
                for key, value in [line.split(":", 1)]}


def _read_until(sock: socket.socket, marker: bytes) -> bytes:
    data = b""
    while not data.endswith(marker):
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data
