"""A wake-up at an exact ``perf_counter_ns()`` time, on the event loop.

uvloop's timers have millisecond resolution (its clock ticks once per millisecond), which
alone would add up to a millisecond of send lag. On Linux a ``timerfd`` on
``CLOCK_MONOTONIC`` (the clock behind ``time.perf_counter_ns``) wakes the loop's epoll
at the nanosecond asked; elsewhere the loop's own timer is used.

:func:`prefer_short_waits` asks the Linux scheduler to wake the process promptly.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import platform
import struct
import time
from collections.abc import Callable

CLOCK_MONOTONIC = 1
TFD_NONBLOCK = os.O_NONBLOCK
TFD_CLOEXEC = os.O_CLOEXEC
TFD_TIMER_ABSTIME = 1
PR_SET_TIMERSLACK = 29
SYS_SCHED_SETATTR = {"x86_64": 314, "aarch64": 274}
SHORT_SLICE_NS = 100_000
NS_PER_S = 1_000_000_000


class _Timespec(ctypes.Structure):
    _fields_ = (("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long))


class _Itimerspec(ctypes.Structure):
    _fields_ = (("it_interval", _Timespec), ("it_value", _Timespec))


def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.timerfd_create  # noqa: B018 (raises AttributeError where there is no timerfd)
    except (OSError, AttributeError):
        return None
    return libc


def prefer_short_waits() -> None:
    """Ask Linux for prompt wake-ups: no timer slack, and a short scheduler slice.

    The default 50 µs timer slack would defer every wake-up; and on a busy machine the
    EEVDF scheduler (Linux 6.6+) wakes a task sooner when its requested slice
    (``sched_attr.sched_runtime``) is short, which cuts the send lag the driver sees
    from its neighbours without taking more CPU. Best effort: ignored where unsupported.
    """
    libc = _libc()
    if libc is None:
        return
    libc.prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0)
    number = SYS_SCHED_SETATTR.get(platform.machine())
    if number is not None:
        # struct sched_attr (56 bytes): size, policy SCHED_OTHER, flags, nice (kept as the
        # process was started with it), priority, runtime (the slice), deadline, period,
        # util min and max
        nice = os.getpriority(os.PRIO_PROCESS, 0)
        attr = struct.pack("IIQiIQQQII", 56, 0, 0, nice, 0, SHORT_SLICE_NS, 0, 0, 0, 0)
        libc.syscall(number, 0, ctypes.create_string_buffer(attr, len(attr)), 0)


class Waker:
    """Calls ``callback`` at (or just after) a time asked with :meth:`wake_by`.

    A wake-up already due no later than the time asked is kept rather than re-armed: the
    callback is expected to ask again for the next time it needs, so an early wake-up
    costs one call, while re-arming on every request would cost a system call each.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
        self._loop = loop
        self._callback = callback
        self._handle: asyncio.TimerHandle | None = None
        self._armed_ns = 0  # the pending wake-up, 0 when none
        self._libc = _libc()
        self._fd = -1
        if self._libc is not None and time.get_clock_info("perf_counter").implementation == (
            "clock_gettime(CLOCK_MONOTONIC)"
        ):
            self._fd = self._libc.timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)
        self.precise = self._fd >= 0
        """True when wake-ups are exact (timerfd), False on the loop's millisecond timers."""
        if self._fd >= 0:
            self._spec = _Itimerspec()
            self._spec_ref = ctypes.byref(self._spec)
            loop.add_reader(self._fd, self._on_readable)

    def wake_by(self, at_ns: int) -> None:
        """Make sure the callback runs at ``at_ns`` or before (then it must ask again)."""
        if 0 < self._armed_ns <= at_ns:
            return
        self._armed_ns = max(at_ns, 1)
        if self._fd >= 0:
            value = self._spec.it_value
            value.tv_sec, value.tv_nsec = divmod(self._armed_ns, NS_PER_S)
            self._libc.timerfd_settime(  # type: ignore[union-attr]
                self._fd, TFD_TIMER_ABSTIME, self._spec_ref, None
            )
            return
        if self._handle is not None:
            self._handle.cancel()
        delay_s = max(0.0, (at_ns - time.perf_counter_ns()) / NS_PER_S)
        self._handle = self._loop.call_later(delay_s, self._on_timer)

    def close(self) -> None:
        if self._fd >= 0:
            self._loop.remove_reader(self._fd)
            os.close(self._fd)
            self._fd = -1
        if self._handle is not None:
            self._handle.cancel()

    def _on_readable(self) -> None:
        try:
            os.read(self._fd, 8)
        except BlockingIOError:  # re-armed since it became readable
            return
        self._armed_ns = 0
        self._callback()

    def _on_timer(self) -> None:
        self._handle = None
        self._armed_ns = 0
        self._callback()
