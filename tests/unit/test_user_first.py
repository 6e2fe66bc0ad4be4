"""Users' actions before agents' heartbeats (cluster/coordinator/user_first.py), on a real core."""

import threading

import pytest

from cluster.coordinator.core import CoordinatorCore, Settings
from cluster.coordinator.store import SqliteStore
from cluster.coordinator.user_first import UserFirst
from cluster.shared.model import Address, AgentRecord
from cluster.shared.work import AgentReport


def _wait_until(predicate, what):
    done = threading.Event()
    for _ in range(10_000):  # bounded: ~10 s
        if predicate():
            return
        done.wait(0.001)
    pytest.fail(f"never happened: {what}")


@pytest.fixture
def core(tmp_path):
    core = CoordinatorCore(SqliteStore(str(tmp_path / "c.sqlite")), Settings(lost_after=10))
    core.register(AgentRecord("a1", 2, (Address("198.18.0.9", 24),)), (), (), 0.0)
    return core


def test_a_heartbeat_that_would_change_state_waits_while_a_user_action_is_in_flight(core):
    core.user_first.agent_wait_most = 30.0  # no bound in this test: only the user's end lets it go
    core.heartbeat(AgentReport("a1", (), ()), 1.0)
    answered = threading.Event()
    with core.user_first.user():
        beat = threading.Thread(target=lambda: (core.heartbeat(AgentReport("a1", (), ("9-zz",)), 2.0),
                                                answered.set()))
        beat.start()
        _wait_until(lambda: core.user_first.agents_waiting == 1, "the heartbeat waits for its turn")
        assert not answered.is_set() and core.agents["a1"].leased == set()  # nothing applied yet
    beat.join(10)
    assert answered.is_set() and core.agents["a1"].leased == {"9-zz"}


def test_an_idle_nodes_heartbeat_never_waits(core):
    with core.user_first.user():
        assert core.heartbeat(AgentReport("a1", (), ()), 2.0) is not None  # no lock, no wait
        assert core.agents["a1"].last_heartbeat == 2.0


def test_agents_wait_at_most_the_bound_however_long_users_keep_coming():
    first = UserFirst(agent_wait_most=0.01)
    with first.user():
        first.agent_turn()  # returns after the bound, though a user action is still in flight
    first.agent_turn()  # nobody in flight: at once
    assert first.agents_waiting == 0
