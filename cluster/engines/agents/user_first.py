"""The agents engine's lock for the coordinator (Engine.event_lock): a user's action on the cluster (a
submission, a cancel) goes before agents' heartbeats. One lock, two rules:

1. A job placed on 16 nodes brings 16 heartbeats at once (each node is poked to fetch its work), and each
takes the coordinator's lock. Python threads share one GIL: a submission arriving then waited behind them
for the lock, and for the GIL while it held the lock (at 10,000 agents on 2 cores: up to 18 ms of lock wait
for a 6 ms submission). A heartbeat that would change state therefore waits, up to AGENT_WAIT_MOST, while
any user action is in flight. A heartbeat only reports and fetches work (beacons prove a node alive, and
a heartbeat-only node's silence is judged over seconds), so the wait costs nothing but a few ms of delay.

2. Heartbeats that passed that gate before the user's action arrived may already be waiting for the lock:
a plain lock goes to any waiter, and a submission behind a 16-node job's heartbeats lost to them one
after another (3,000 agents: up to 20 ms of lock wait in the slowest submissions). When the lock is let go,
a waiting user's action therefore takes it before any other waiter (never more than USERS_IN_A_ROW turns
while others wait).

The local and Kubernetes engines have few nodes and keep the coordinator's plain lock.
"""

from __future__ import annotations

import contextlib
import threading

from tfdist.errors import InternalError

AGENT_WAIT_MOST = 0.05  # seconds: a burst of submissions never starves agents for longer
USERS_IN_A_ROW = 8  # turns of the lock given to users while others wait, before one goes to the others


class UserFirstLock:
    """A reentrant lock that, when let go, goes to a waiting user's action (`for_user`) before any other
    waiter. `with lock:` takes it as anything else does (agents' events, listings, the check loop): that
    waits while a user's action waits, but never longer than USERS_IN_A_ROW users' turns. `node_turn`:
    an agent's event waits, up to agent_wait_most, while any user's action is in flight (`user_action`)."""

    def __init__(self, agent_wait_most: float = AGENT_WAIT_MOST):
        self.agent_wait_most = agent_wait_most
        self._mutex = threading.Lock()
        self._for_users = threading.Condition(self._mutex)
        self._for_others = threading.Condition(self._mutex)
        self._no_users = threading.Condition(self._mutex)  # no user's action in flight
        self._users_in_flight = 0
        self.agents_waiting = 0  # agents' events waiting for their turn now (a test watches it)
        self._owner: int | None = None
        self._depth = 0
        self._users_waiting = 0
        self._others_waiting = 0
        self._users_in_a_row = 0  # turns given to users while others waited
        self._others_turn = False  # the next turn is an other's, though users wait

    def acquire(self, user: bool = False) -> None:
        me = threading.get_ident()
        with self._mutex:
            if self._owner == me:
                self._depth += 1
                return
            if user:
                self._users_waiting += 1
                self._wait(self._for_users, lambda: self._owner is None and not self._others_turn)
                self._users_waiting -= 1
            else:
                self._others_waiting += 1
                self._wait(self._for_others,
                           lambda: self._owner is None and (self._others_turn or not self._users_waiting))
                self._others_waiting -= 1
                self._others_turn, self._users_in_a_row = False, 0
            self._owner, self._depth = me, 1

    def _wait(self, condition: threading.Condition, ready) -> None:
        """Waits (the mutex held) until `ready()`; interrupted, it leaves the lock's count and passes on a
        turn it may have been given."""
        try:
            condition.wait_for(ready)
        except BaseException:
            if condition is self._for_users:
                self._users_waiting -= 1
            else:
                self._others_waiting -= 1
            if self._owner is None:
                self._hand_over()
            raise

    def release(self) -> None:
        with self._mutex:
            if self._owner != threading.get_ident():
                raise InternalError("release of the coordinator's lock by a thread that does not hold it")
            self._depth -= 1
            if self._depth:
                return
            self._owner = None
            self._hand_over()

    def _hand_over(self) -> None:
        """Wakes who takes the free lock next: a user, unless others waited through USERS_IN_A_ROW turns."""
        if self._users_waiting and not (self._others_waiting and self._users_in_a_row >= USERS_IN_A_ROW):
            self._users_in_a_row += 1 if self._others_waiting else 0
            self._others_turn = False
            self._for_users.notify()
        elif self._others_waiting:
            self._others_turn, self._users_in_a_row = bool(self._users_waiting), 0
            self._for_others.notify()
        else:
            self._others_turn = False

    def __enter__(self) -> "UserFirstLock":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    @contextlib.contextmanager
    def for_user(self):
        """Held for a user's action: it goes before every other waiter."""
        self.acquire(user=True)
        try:
            yield
        finally:
            self.release()

    @contextlib.contextmanager
    def user_action(self):
        """Around a user's action, from the moment it arrives until it is answered."""
        with self._mutex:
            self._users_in_flight += 1
        try:
            yield
        finally:
            with self._mutex:
                self._users_in_flight -= 1
                if not self._users_in_flight:
                    self._no_users.notify_all()

    def node_turn(self) -> None:
        """Returns once no user's action is in flight, or after agent_wait_most."""
        with self._mutex:
            if not self._users_in_flight:
                return
            self.agents_waiting += 1
            try:
                self._no_users.wait_for(lambda: not self._users_in_flight, self.agent_wait_most)
            finally:
                self.agents_waiting -= 1
