"""When a load may see errors around a deleted pod, and how long it must go on after.

The only pod of a Deployment deleted under load: its Service has no pod to send to from
the end of its drain until the replacement is Ready (and the nodes' kube-proxies send to
it, ``settle_s``), so errors are allowed from the deletion to ``ready + settle_s``; after
that the load must run ``quiet_s`` more with none, however long the replacement took.
Used by kube.deleted_pod_replaced_under_load; tests/e2e/test_replacement.py (not e2e)
checks the rule itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

SETTLE_S = 4.0  # after Ready: the kube-proxies' rules (about 3 s) and a second's rounding
QUIET_S = 10.0  # then this long with no error


@dataclass(frozen=True)
class ReplacementWindow:
    """Seconds after the load's start (the driver's timeline: second N is [N-1, N))."""

    deleted_s: float
    ready_s: float
    settle_s: float = SETTLE_S
    quiet_s: float = QUIET_S

    @property
    def allowed_until_s(self) -> float:
        return self.ready_s + self.settle_s

    @property
    def load_until_s(self) -> float:
        """The load must go on at least this long: the allowed window, then quiet_s."""
        return self.allowed_until_s + self.quiet_s

    def allows(self, second: int) -> bool:
        """Whether timeline second ``second`` overlaps the window errors are allowed in."""
        return second > self.deleted_s and second - 1 < self.allowed_until_s

    def problems(self, timeline: Sequence[tuple[int, int]]) -> list[str]:
        """What in a load's timeline, (second, errors) pairs in order, breaks the rule:
        errors outside the window, or a load that ended before ``load_until_s``."""
        found = []
        outside = [(second, errors) for second, errors in timeline
                   if errors and not self.allows(second)]
        if outside:
            found.append(f"errors (second, count) outside {self.deleted_s:.1f}-"
                         f"{self.allowed_until_s:.1f} s (deletion to Ready "
                         f"{self.ready_s:.1f} s + {self.settle_s:g} s): {outside}")
        ended = timeline[-1][0] if timeline else 0
        if ended < self.load_until_s:
            found.append(f"the load ended at {ended} s, before {self.load_until_s:.1f} s "
                         f"(Ready {self.ready_s:.1f} s + {self.settle_s:g} s + "
                         f"{self.quiet_s:g} s with no error)")
        return found

    def quiet_seconds(self, timeline: Sequence[tuple[int, int]]) -> list[int]:
        """The timeline's seconds wholly after the allowed window."""
        return [second for second, _ in timeline if second - 1 >= self.allowed_until_s]
