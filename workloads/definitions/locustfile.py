"""Locust over the driver's social-network workloads: for exploring, not for quoting.

One closed-loop user sends the ``mixed`` workload's requests (60% home timeline, 30% user
timeline, 10% compose), each built by the same workload definitions the open-loop driver
uses. Locust is closed loop: a slow response delays the user's next request, so its
latencies suffer coordinated omission; quote ``socialbench load`` / ``socialbench ramp``.

    locust -f workloads/definitions/locustfile.py --host http://127.0.0.1:8080 --graph-users 962
    locust -f workloads/definitions/locustfile.py --headless --ramp --ramp-start 10 \\
        --ramp-step 10 --ramp-hold 30s --users 100

Options (each also an environment variable): ``--graph-users`` (``LOCUST_GRAPH_USERS``),
user ids are drawn in ``[0, N)``, the size of the seeded graph; ``--ramp``
(``LOCUST_RAMP``) turns on :class:`StepRamp`: ``--ramp-start`` users, ``--ramp-step``
more every ``--ramp-hold``, up to ``--users``, then stop.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from functools import cache
from typing import Any

from locust import FastHttpUser, LoadTestShape, constant, events, task
from locust.argument_parser import LocustArgumentParser
from locust.env import Environment
from locust.util.timespan import parse_timespan

from socialbench.workloads.definitions.core import Workload, load_workload
from socialbench.workloads.definitions.socialnetwork import DEFAULT_USERS, MIX_HOME, MIX_USER

DEFAULT_HOST = "http://127.0.0.1:8080"
HOME_WEIGHT = round(MIX_HOME * 100)
USER_WEIGHT = round(MIX_USER * 100)
COMPOSE_WEIGHT = 100 - HOME_WEIGHT - USER_WEIGHT

RAMP_START, RAMP_STEP, RAMP_HOLD = 10, 10, "60s"


def _at_least(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text)
        if value < minimum:
            raise ValueError(f"must be at least {minimum}")
        return value

    parse.__name__ = f"integer >= {minimum}"  # argparse names the type in its error message
    return parse


def _timespan(text: str) -> str:
    if parse_timespan(text) < 1:
        raise ValueError("must be at least 1s")
    return text  # kept as text: the web UI edits it as text


_timespan.__name__ = "duration like 30s or 5m"


@events.init_command_line_parser.add_listener
def add_options(parser: LocustArgumentParser) -> None:
    """The social network's options, shown in the web UI and sent to the workers."""
    group = parser.add_argument_group("socialbench")
    group.add_argument("--graph-users", type=_at_least(2), default=DEFAULT_USERS,
                       env_var="LOCUST_GRAPH_USERS",
                       help="Users of the seeded graph: user ids are drawn in [0, N).")
    group.add_argument("--ramp", action="store_true", default=False, env_var="LOCUST_RAMP",
                       help="Step ramp: --ramp-start users, +--ramp-step every --ramp-hold, "
                            "up to --users, then stop.")
    group.add_argument("--ramp-start", type=_at_least(1), default=RAMP_START,
                       env_var="LOCUST_RAMP_START", help="Users of the first step.")
    group.add_argument("--ramp-step", type=_at_least(1), default=RAMP_STEP,
                       env_var="LOCUST_RAMP_STEP", help="Users added at each step.")
    group.add_argument("--ramp-hold", type=_timespan, default=RAMP_HOLD,
                       env_var="LOCUST_RAMP_HOLD", help="How long each step holds, e.g. 30s, 5m.")


@events.init.add_listener
def drop_ramp_unless_asked(environment: Environment, **_: Any) -> None:
    """Locust runs any shape it finds; without ``--ramp`` the user count decides instead.

    So the web UI's user count can be changed while a test runs; ``--class-picker`` still
    offers the ramp there.
    """
    options = environment.parsed_options
    if options is not None and not options.ramp and isinstance(environment.shape_class, StepRamp):
        environment.shape_class = None


@cache
def _workloads(graph_users: int) -> tuple[Workload, Workload, Workload]:
    return (load_workload("read-home-timeline", users=graph_users),
            load_workload("read-user-timeline", users=graph_users),
            load_workload("compose-post", users=graph_users))


class SocialNetworkUser(FastHttpUser):
    """A closed-loop user: its next request leaves when the last one is answered."""

    host = DEFAULT_HOST
    wait_time = constant(0)

    def on_start(self) -> None:
        options = self.environment.parsed_options
        graph_users = options.graph_users if options is not None else DEFAULT_USERS
        self.home, self.user, self.compose = _workloads(graph_users)
        self.rng = random.Random()

    def send(self, workload: Workload) -> None:
        request = workload.next_request(self.rng)
        self.client.request(request.method, request.path, name=request.name,
                            data=request.body,  # type: ignore[arg-type]  # bytes are sent as is
                            headers=dict(request.headers))

    @task(HOME_WEIGHT)
    def read_home_timeline(self) -> None:
        self.send(self.home)

    @task(USER_WEIGHT)
    def read_user_timeline(self) -> None:
        self.send(self.user)

    @task(COMPOSE_WEIGHT)
    def compose_post(self) -> None:
        self.send(self.compose)


class StepRamp(LoadTestShape):
    """``--ramp-start`` users, ``--ramp-step`` more every ``--ramp-hold``, up to ``--users``.

    The driver's ramp steps the offered rate; this one steps the number of closed-loop
    users. New users start at ``--spawn-rate`` per second.
    """

    use_common_options = True  # reads --users (the top) and --spawn-rate

    def tick(self) -> tuple[int, float] | None:
        options = self.runner.environment.parsed_options if self.runner else None
        if options is None:
            return None
        start, step = options.ramp_start, options.ramp_step
        hold = parse_timespan(str(options.ramp_hold))
        top = max(options.num_users or start, start)
        level = int(self.get_run_time() // hold)
        if level >= 1 + math.ceil((top - start) / step):
            return None
        return min(start + level * step, top), float(options.spawn_rate or step)
