"""Users' actions before agents' heartbeats (cluster/engines/agents/user_first.py: the agents engine's lock), on a
real core."""

import threading

import pytest

from tests.agent_core import AgentCore
from cluster.coordinator.core import Settings
from cluster.coordinator.store import SqliteStore
from cluster.engines.agents.user_first import USERS_IN_A_ROW, UserFirstLock
from cluster.shared.config import ExperimentConfig
from cluster.shared.model import Address, AgentRecord, JobSpec
from cluster.shared.work import AgentReport
from tfdist.errors import InternalError


def _wait_until(predicate, what):
    done = threading.Event()
    for _ in range(10_000):  # bounded: ~10 s
        if predicate():
            return
        done.wait(0.001)
    pytest.fail(f"never happened: {what}")


@pytest.fixture
def core(tmp_path):
    core = AgentCore(SqliteStore(str(tmp_path / "c.sqlite")), Settings(lost_after=10))
    core.register(AgentRecord("a1", 2, (Address("198.18.0.9", 24),)), (), (), 0.0)
    return core


def test_a_heartbeat_that_would_change_state_waits_while_a_user_action_is_in_flight(core):
    core.lock.agent_wait_most = 30.0  # no bound in this test: only the user's end lets it go
    core.heartbeat(AgentReport("a1", (), ()), 1.0)
    answered = threading.Event()
    with core.lock.user_action():
        beat = threading.Thread(target=lambda: (core.heartbeat(AgentReport("a1", (), ("9-zz",)), 2.0),
                                                answered.set()))
        beat.start()
        _wait_until(lambda: core.lock.agents_waiting == 1, "the heartbeat waits for its turn")
        assert not answered.is_set() and core.agents["a1"].leased == set()  # nothing applied yet
    beat.join(10)
    assert answered.is_set() and core.agents["a1"].leased == {"9-zz"}


def test_an_idle_nodes_heartbeat_never_waits(core):
    with core.lock.user_action():
        assert core.heartbeat(AgentReport("a1", (), ()), 2.0) is not None  # no lock, no wait
        assert core.agents["a1"].last_heartbeat == 2.0


def test_agents_wait_at_most_the_bound_however_long_users_keep_coming():
    first = UserFirstLock(agent_wait_most=0.01)
    with first.user_action():
        first.node_turn()  # returns after the bound, though a user action is still in flight
    first.node_turn()  # nobody in flight: at once
    assert first.agents_waiting == 0


def test_a_submission_takes_the_lock_before_heartbeats_that_waited_for_it_longer(core, monkeypatch):
    for name in ("a2", "a3", "a4"):
        core.register(AgentRecord(name, 2, (Address("198.18.0.9", 24),)), (), (), 0.0)
    order, transaction = [], core.store.transaction

    def noted(*args, **kwargs):
        order.append(threading.current_thread().name)
        return transaction(*args, **kwargs)
    monkeypatch.setattr(core.store, "transaction", noted)
    spec = JobSpec(ExperimentConfig(name="t", entrypoint=("true",), slots_per_trial=2, distribution_mode="mwms"),
                   working_dir="/w")
    answers = []
    with core.lock:  # an event in progress; heartbeats that change state arrive, then a submission
        beats = [threading.Thread(target=core.heartbeat, args=(AgentReport(n, (), ("9-zz",)), 2.0), name=n)
                 for n in ("a1", "a2", "a3")]
        for t in beats:
            t.start()
        _wait_until(lambda: core.lock._others_waiting == 3, "three heartbeats wait for the lock")
        submit = threading.Thread(target=lambda: answers.append(core.submit(spec, 3.0)), name="user")
        submit.start()
        _wait_until(lambda: core.lock._users_waiting == 1, "the submission waits for the lock")
    for t in [submit, *beats]:
        t.join(10)
    assert set(order) == {"user", "a1", "a2", "a3"}
    last_users = max(i for i, who in enumerate(order) if who == "user")
    assert last_users < min(i for i, who in enumerate(order) if who != "user")  # the submission's event first
    assert answers and answers[0][1] == "STARTING"


def test_the_lock_goes_to_a_waiting_user_before_agents_that_waited_longer():
    lock, order = UserFirstLock(), []

    def take(who, user):
        with lock.for_user() if user else lock:
            order.append(who)

    lock.acquire()  # a heartbeat holds it
    agents = [threading.Thread(target=take, args=(f"agent{i}", False)) for i in range(3)]
    for t in agents:
        t.start()
    _wait_until(lambda: lock._others_waiting == 3, "three agents' events wait for the lock")
    user = threading.Thread(target=take, args=("user", True))
    user.start()
    _wait_until(lambda: lock._users_waiting == 1, "the user's action waits for the lock")
    lock.release()
    for t in [user, *agents]:
        t.join(10)
    assert order[0] == "user" and sorted(order[1:]) == ["agent0", "agent1", "agent2"]


def test_others_get_the_lock_after_a_bounded_run_of_users_however_many_wait():
    lock, order = UserFirstLock(), []

    def take(who, user):
        with lock.for_user() if user else lock:
            order.append(who)

    lock.acquire()
    other = threading.Thread(target=take, args=("other", False))
    other.start()
    _wait_until(lambda: lock._others_waiting == 1, "the other waits")
    users = [threading.Thread(target=take, args=(f"user{i}", True)) for i in range(USERS_IN_A_ROW + 3)]
    for t in users:
        t.start()
    _wait_until(lambda: lock._users_waiting == len(users), "the users wait")
    lock.release()
    for t in [other, *users]:
        t.join(10)
    assert len(order) == len(users) + 1 and order.index("other") == USERS_IN_A_ROW


def test_a_user_interrupted_while_given_the_lock_passes_it_on():
    lock, order = UserFirstLock(), []
    lock.acquire()
    other = threading.Thread(target=lambda: (lock.acquire(), order.append("other"), lock.release()), daemon=True)
    other.start()
    _wait_until(lambda: lock._others_waiting == 1, "the other waits")
    given = lock._for_users.wait_for

    def interrupted(ready):
        given(ready)  # the lock's turn came to it...
        raise KeyboardInterrupt  # ...and it was interrupted before it took it

    lock._for_users.wait_for = interrupted
    user = threading.Thread(target=lambda: order.append(pytest.raises(KeyboardInterrupt, lock.acquire, True)),
                            daemon=True)
    user.start()
    _wait_until(lambda: lock._users_waiting == 1, "the user waits")
    lock.release()
    for t in (user, other):
        t.join(10)
    assert order[-1] == "other" and lock._users_waiting == lock._others_waiting == 0


def test_the_lock_is_reentrant_and_refuses_a_release_by_another_thread():
    lock = UserFirstLock()
    with lock:
        with lock.for_user():  # the holder again: no wait
            pass
        failed = []
        other = threading.Thread(target=lambda: failed.append(pytest.raises(InternalError, lock.release)))
        other.start()
        other.join(10)
        assert failed
    with lock.for_user():  # let go: free again
        pass


def test_the_agents_engine_gives_the_coordinator_the_user_first_lock_and_other_engines_a_plain_one():
    """Issue 48, Must 3: the ordering is the agents engine's (Engine.event_lock), not the job side's."""
    from cluster.coordinator.engine import PlainLock
    from cluster.engines import create_engine, kind

    assert isinstance(create_engine("agents").event_lock(), UserFirstLock)
    assert isinstance(create_engine("local", kind("local").options(slots=1)).event_lock(), PlainLock)
    plain = PlainLock()
    with plain.user_action():
        plain.node_turn()  # nothing orders a plain lock's waiters: no wait
        with plain.for_user(), plain:  # reentrant
            pass
