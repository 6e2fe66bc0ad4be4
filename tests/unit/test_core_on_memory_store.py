"""The coordinator core on the dict store: every scenario of test_coordinator_core.py and
test_core_later_life.py that takes the `core` fixture runs here again on a `MemoryStore`, which proves the core needs only the StateStore interface
(cluster/coordinator/store/base.py), not SQLite."""

import inspect

import pytest

from tests.agent_core import AgentCore
from cluster.coordinator.core import Settings
from cluster.coordinator.store import MemoryStore, StateStore
from tests.core_nodes import Node, drive, nodes, spec, state  # noqa: F401 (nodes: the scenarios' fixture)
from tests.unit import test_coordinator_core, test_core_later_life
from cluster.shared.model import JobState


@pytest.fixture
def core():
    return AgentCore(MemoryStore(), Settings(lost_after=10, port_range=(30000, 30009), startup_timeout=60))


def _takes_the_core_fixture(name: str, value) -> bool:
    return name.startswith("test_") and callable(value) and "core" in inspect.signature(value).parameters


# The scenarios, by their own names (pytest collects them here, where `core` is the fixture above).
SCENARIOS = {name: value for module in (test_coordinator_core, test_core_later_life)
             for name, value in vars(module).items() if _takes_the_core_fixture(name, value)}
globals().update(SCENARIOS)


def test_the_scenarios_run_here_on_the_memory_store(core):
    assert len(SCENARIOS) >= 15, sorted(SCENARIOS)
    assert type(core.store) is MemoryStore and isinstance(core.store, StateStore)


def test_a_coordinator_restart_on_the_same_state_keeps_what_agents_hold():
    """test_coordinator_core's restart scenario, with the state handed to a new core instead of a file."""
    store = MemoryStore()
    core = AgentCore(store, Settings(port_range=(30000, 30009)))
    agents = [Node(core, "a1"), Node(core, "a2")]
    for n in agents:
        n.register()
    running = core.submit(spec(4), now=1)[0]
    drive(agents, 1)
    leased = core.submit(spec(4), now=1)[0]  # waits: the cluster is full
    core = AgentCore(store, Settings(port_range=(30000, 30009)), now=100)
    for n in agents:
        n.core = core
        n.register(now=100)  # the agents re-attach with what they run
    assert state(core, running) == JobState.RUNNING and state(core, leased) == JobState.QUEUED
    for n in agents:
        n.finish(running, now=102)
    assert state(core, running) == JobState.SUCCEEDED
    drive(agents, 103)
    assert state(core, leased) == JobState.RUNNING
