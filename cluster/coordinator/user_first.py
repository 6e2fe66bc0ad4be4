"""A user's action on the cluster (a submission, a cancel) goes before agents' heartbeats.

A job placed on 16 nodes brings 16 heartbeats at once (each node is poked to fetch its work), and each
takes the coordinator's lock. Python threads share one GIL: a submission arriving then waited behind them
for the lock, and for the GIL while it held the lock (at 10,000 agents on 2 cores: up to 18 ms of lock wait
for a 6 ms submission). A heartbeat that would change state therefore waits, up to AGENT_WAIT_MOST, while
any user action is in flight. A heartbeat only reports and fetches work (beacons prove a node alive, and
a heartbeat-only node's silence is judged over seconds), so the wait costs nothing but a few ms of delay.
"""

from __future__ import annotations

import contextlib
import threading

AGENT_WAIT_MOST = 0.05  # seconds: a burst of submissions never starves agents for longer


class UserFirst:
    def __init__(self, agent_wait_most: float = AGENT_WAIT_MOST):
        self.agent_wait_most = agent_wait_most
        self._cond = threading.Condition()
        self._users = 0  # user actions in flight
        self.agents_waiting = 0  # agents' events waiting now (a test watches it)

    @contextlib.contextmanager
    def user(self):
        """Around a user's action, from the moment it arrives until it is answered."""
        with self._cond:
            self._users += 1
        try:
            yield
        finally:
            with self._cond:
                self._users -= 1
                if not self._users:
                    self._cond.notify_all()

    def agent_turn(self) -> None:
        """Returns once no user action is in flight, or after agent_wait_most."""
        with self._cond:
            if not self._users:
                return
            self.agents_waiting += 1
            try:
                self._cond.wait_for(lambda: not self._users, self.agent_wait_most)
            finally:
                self.agents_waiting -= 1
