"""One contract suite, run against every engine (as Flower runs one suite against each LinkState): the same
scenarios (tests/engines/scenarios.py) on a real coordinator (real SQLite, real gRPC) with each engine behind it
and real worker processes: the local engine, the agents engine with a real `tfdist agent`, and the tests' own
minimal engine (tests/engines/minimal/: one package and one registry line). The Kubernetes engine runs the same
scenarios in tests/kubernetes/: every one with its workers in real containers on the real node
(test_real_node.py), and the one that needs no worker on a KWOK node (test_engine_contract_kwok.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from cluster.agent.ports import lease_range
from cluster.coordinator.server import CoordinatorServer
from cluster.coordinator.values import Settings
from cluster.engines import ENGINES, create_engine, kind
from cluster.shared.model import JobState
from tests.conftest import cli_env, stop_processes, wait_for
from tests.engines import scenarios
from tests.engines.scenarios import PRINTS
from tests.specs import flat_spec

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]
ENGINES_UNDER_TEST = ("local", "agents", "minimal")


class Cluster:
    """A coordinator serving on loopback with the engine `name` behind it, whose one node has 2 slots."""

    def __init__(self, name: str, tmp_path, marker: str, monkeypatch):
        monkeypatch.setenv("TFDIST_TEST_MARKER", marker)  # the workers carry it: leftovers are found
        monkeypatch.setitem(ENGINES, "minimal", "tests.engines.minimal")  # its one registry line
        options = kind(name).options(slots=2) if name != "agents" else None
        self.server = CoordinatorServer(str(tmp_path / "state"), "127.0.0.1:0",
                                        settings=Settings(port_range=lease_range(), lost_after=30.0),
                                        engine=create_engine(name, options)).start()
        self.core, self.agent = self.server.core, None
        if name == "agents":
            credential = tmp_path / "node.json"
            self.server.issue("node", "a1").save(str(credential))
            self.agent = subprocess.Popen([sys.executable, "-m", "cluster.client.cli", "agent", "--coordinator",
                                           self.server.address, "--name", "a1", "--credentials", str(credential),
                                           "--slots", "2"], env=cli_env(marker), stdout=subprocess.DEVNULL,
                                          stderr=open(tmp_path / "agent.log", "a"))
        wait_for(lambda: [a.record.slots for a in self.core.agents.values() if not a.lost] == [2],
                 f"the {name} engine's node offered", timeout=60)
        self.driver = scenarios.InProcess(self.core, (sys.executable,), working_dir=str(tmp_path))

    def close(self) -> None:
        self.server.stop(grace=0, engine_timeout=20)
        stop_processes([self.agent])


@pytest.fixture(params=ENGINES_UNDER_TEST)
def cluster(request, tmp_path, marker, monkeypatch):
    made = Cluster(request.param, tmp_path, marker, monkeypatch)
    yield made
    made.close()


@pytest.mark.parametrize("scenario", scenarios.SCENARIOS, ids=lambda s: s.__name__)
def test_the_contract_s_scenario(cluster, scenario):
    scenario(cluster.driver)


def test_the_minimal_engine_is_one_package_and_one_registry_line():
    """What registering it took: the line `ENGINES["minimal"] = "tests.engines.minimal"` (the fixture's); its
    package holds the whole engine (its KIND), in a few dozen lines."""
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "engines", "minimal",
                        "__init__.py")
    with open(path, encoding="utf-8") as f:
        lines = [line for line in f if line.strip() and not line.strip().startswith(("#", '"""'))]
    assert len(lines) < 80, len(lines)
    assert "minimal" not in ENGINES  # nothing else registers it


def test_an_engine_that_places_gangs_itself_is_handed_each_queued_run_and_says_where_it_landed(tmp_path, marker,
                                                                                                monkeypatch):
    """Issue 48, Must 2: with an engine that places (a gang API, Kueue, Ray), the job side hands each queued run
    over once, shows the engine's reason while it waits, checks where it landed, and runs it there."""
    from tests.engines.minimal import MinimalOptions

    monkeypatch.setenv("TFDIST_TEST_MARKER", marker)
    monkeypatch.setitem(ENGINES, "minimal", "tests.engines.minimal")
    engine = create_engine("minimal", MinimalOptions(slots=2, places=True))
    server = CoordinatorServer(str(tmp_path / "state"), "127.0.0.1:0", settings=Settings(port_range=lease_range()),
                               engine=engine).start()
    core, host = server.core, server.core.host
    try:
        wait_for(lambda: list(core.agents) == ["minimal"], "its node offered", timeout=30)
        job_id, state = core.submit(flat_spec((sys.executable, "-c", PRINTS), slots=2, working_dir=str(tmp_path)),
                                    now=time.time())
        assert state == "QUEUED" and [(r.job_id, r.attempt, r.slots) for r in engine.requests] == [(job_id, 0, 2)]
        assert core.waiting[job_id] == "waiting for the minimal engine to place it"
        assert host.gang_waiting(job_id, 0, "its queue's quota has 0 of 2 slots left", time.time())
        assert core.waiting[job_id] == ("waiting for the minimal engine to place it: its queue's quota has 0 of 2 "
                                        "slots left")
        core.lifecycle.schedule(time.time())  # a round later it is not handed again
        assert len(engine.requests) == 1 and cluster_state(core, job_id) == JobState.QUEUED
        assert host.gang_placed(job_id, 0, [("elsewhere", 2)], time.time()) == "node elsewhere is not offered (or was lost)"
        assert host.gang_placed(job_id, 0, [("minimal", 1)], time.time()) == \
            f"the placement has 1 slot(s); job {job_id} needs 2"
        assert host.gang_placed(job_id, 1, [("minimal", 2)], time.time()).startswith(f"job {job_id} (run 1) is not "
                                                                                     "waiting")
        assert host.gang_placed(job_id, 0, [("minimal", 2)], time.time()) == ""
        wait_for(lambda: cluster_state(core, job_id) == JobState.SUCCEEDED, "the job to run where it landed",
                 timeout=120, logs=lambda: str(core.store.job(job_id)))
        assert [a.agent for a in core.store.job(job_id).placement] == ["minimal"]

        canceled, _ = core.submit(flat_spec((sys.executable, "-c", PRINTS), slots=2, working_dir=str(tmp_path)),
                                  now=time.time())
        assert [r.job_id for r in engine.requests][-1] == canceled
        core.cancel(canceled, time.time())
        assert host.gang_placed(canceled, 0, [("minimal", 2)], time.time()).startswith(f"job {canceled} (run 0) is "
                                                                                       "not waiting")
        assert not host.gang_waiting(canceled, 0, "late", time.time()) and cluster_state(core, canceled) == \
            JobState.CANCELED
    finally:
        server.stop(grace=0, engine_timeout=20)


def cluster_state(core, job_id: str) -> JobState:
    return core.store.job(job_id).state
