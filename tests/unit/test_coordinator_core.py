"""The coordinator's logic without gRPC: time is passed in, state is a real SQLite store."""

import json

import pytest

from cluster.coordinator.core import BadRequest, CoordinatorCore, NotFound, Settings
from cluster.store import Store

ADDR = {"a1": [{"ip": "198.18.0.2", "prefix_len": 24, "interface": "eth0"}],
        "a2": [{"ip": "198.18.0.3", "prefix_len": 24, "interface": "eth0"},
               {"ip": "10.9.0.3", "prefix_len": 16, "interface": "eth1"}]}


def spec(slots, cmd=("python", "train.py"), **extra):
    return {"name": "t", "entrypoint": list(cmd), "slots": slots, "distribution_mode": "mwms",
            "hyperparameters_json": json.dumps({"global_batch_size": 8}), "environment": {}, "max_restarts": 0,
            "priority": 0, "working_dir": "/w", **extra}


def submit(core, job_spec, now):
    """Submits; returns the job id (the state right after scheduling is checked where it matters)."""
    return core.submit(job_spec, now)[0]


@pytest.fixture
def core(tmp_path):
    c = CoordinatorCore(Store(str(tmp_path / "c.sqlite")), Settings(lost_after=10, port_range=(30000, 30009)))
    c.register("a1", 2, False, ADDR["a1"], [], now=0)
    c.register("a2", 2, False, ADDR["a2"], [], now=0)
    return c


def beat(core, agent, now, running=(), busy=None):
    return core.heartbeat(agent, list(running), busy or {}, now)


def start_job(core, job_id, agents, now=1):
    """Drives the port check and start for `agents`; returns each agent's start task."""
    for a in agents:
        work = beat(core, a, now)
        assert [c["job_id"] for c in work["check_ports"]] == [job_id]
        beat(core, a, now, busy={job_id: []})
    starts = {}
    for a in agents:
        work = beat(core, a, now)
        starts[a] = work["start"][0]
    for a in agents:
        beat(core, a, now, running=[job_id])
    return starts


def test_two_node_job_gets_per_node_tf_config_on_the_common_subnet(core):
    job_id, state = core.submit(spec(4), now=1)
    assert state == "STARTING" and core.job_view(job_id)["state"] == "STARTING"
    starts = start_job(core, job_id, ["a1", "a2"])
    envs = [w["env"] for a in ("a1", "a2") for w in starts[a]["workers"]]
    tf_config = json.loads(envs[3]["TF_CONFIG"])
    assert tf_config == {"cluster": {"worker": ["198.18.0.2:30000", "198.18.0.2:30001",
                                                "198.18.0.3:30000", "198.18.0.3:30001"]},
                         "task": {"index": 3, "type": "worker"}}
    assert [e["TFDIST_RANK"] for e in envs] == ["0", "1", "2", "3"]
    assert [e["TFDIST_NODE_RANK"] for e in envs] == ["0", "0", "1", "1"]
    assert envs[2]["TFDIST_LOCAL_RANK"] == "0" and envs[0]["TFDIST_PER_REPLICA_BATCH_SIZE"] == "2"
    assert starts["a1"]["working_dir"] == "/w"
    assert core.job_view(job_id)["state"] == "RUNNING"
    for rank, agent in enumerate(["a1", "a1", "a2", "a2"]):
        core.report_exit(agent, job_id, rank, 0, [], now=5)
    view = core.job_view(job_id)
    assert view["state"] == "SUCCEEDED" and view["exit_code"] == 0
    # Slots are held until the agents say the job is gone.
    assert [a["state"] for a in view["placement"]] == ["RELEASING", "RELEASING"]
    beat(core, "a1", 6)
    beat(core, "a2", 6)
    assert core.store.allocations(job_id) == [] and core.allocs.of_job(job_id) == []
    assert [p["agent"] for p in core.job_view(job_id)["placement"]] == ["a1", "a2"]  # kept for `tfdist job`


def test_busy_port_is_released_and_replaced(core):
    job_id = submit(core, spec(2), now=1)
    beat(core, "a1", 1) or beat(core, "a2", 1)
    agent = core.job_view(job_id)["placement"][0]["agent"]
    ports = core.job_view(job_id)["placement"][0]["ports"]
    beat(core, agent, 2, busy={job_id: [ports[0]]})
    new_ports = core.job_view(job_id)["placement"][0]["ports"]
    assert ports[0] not in new_ports and len(new_ports) == 2
    assert beat(core, agent, 2)["start"] == []  # still checking: nobody starts
    assert beat(core, agent, 2)["check_ports"] == [{"job_id": job_id, "ports": new_ports}]


def test_two_small_jobs_pack_one_node_and_never_share_ports(core):
    j1 = submit(core, spec(1), now=1)
    j2 = submit(core, spec(1), now=1)
    p1, p2 = core.job_view(j1)["placement"][0], core.job_view(j2)["placement"][0]
    assert p1["agent"] == p2["agent"]
    assert not set(p1["ports"]) & set(p2["ports"])


def test_job_waits_with_a_reason_then_starts(core):
    big = submit(core, spec(4), now=1)
    waiting = submit(core, spec(2), now=1)
    view = core.job_view(waiting)
    assert view["state"] == "QUEUED"
    assert view["waiting_reason"] == "waiting for 2 free slots on one node; the most free on any node is 0 (a1)"
    start_job(core, big, ["a1", "a2"])
    for rank, agent in enumerate(["a1", "a1", "a2", "a2"]):
        core.report_exit(agent, big, rank, 0, [], now=3)
    beat(core, "a1", 4)
    assert core.job_view(waiting)["state"] == "STARTING"


def test_infeasible_job_is_refused_with_sizes(core):
    with pytest.raises(BadRequest, match=r"slots_per_trial=3 can never be scheduled on this cluster \(2 nodes of "
                                         r"2 slots\).*Sizes that fit: 1-2, 4\. Nearest: 2 or 4\."):
        submit(core, spec(3), now=1)
    assert core.jobs_view() == []


def test_worker_failure_stops_the_gang_everywhere(core):
    job_id = submit(core, spec(4), now=1)
    start_job(core, job_id, ["a1", "a2"])
    core.report_exit("a2", job_id, 3, 7, ["boom"], now=2)
    view = core.job_view(job_id)
    assert view["state"] == "FAILED" and view["exit_code"] == 7
    assert view["message"] == "rank 3 on node a2 exited with code 7; the other workers were stopped"
    assert beat(core, "a1", 3, running=[job_id])["stop_jobs"] == [job_id]
    core.report_exit("a1", job_id, 0, -15, [], now=3)  # the collateral exits do not change the outcome
    assert core.job_view(job_id)["message"].startswith("rank 3 on node a2")


def test_lost_node_fails_its_job_and_stops_the_others(core):
    job_id = submit(core, spec(4), now=1)
    start_job(core, job_id, ["a1", "a2"], now=1)
    beat(core, "a1", 9, running=[job_id])
    core.check_agents(now=11.5)  # a2 silent since t=1
    view = core.job_view(job_id)
    assert view["state"] == "FAILED"
    assert view["message"] == "node a2 was lost (no heartbeat for 10s); the other nodes' workers were stopped"
    assert beat(core, "a1", 12, running=[job_id])["stop_jobs"] == [job_id]
    assert beat(core, "a2", 12) is None  # a lost agent must register again
    assert [a["state"] for a in core.agents_view(12)] == ["ALIVE", "LOST"]


def test_restart_resumes_from_the_file(tmp_path):
    path = str(tmp_path / "c.sqlite")
    core = CoordinatorCore(Store(path), Settings(port_range=(30000, 30009)))
    core.register("a1", 2, False, ADDR["a1"], [], now=0)
    job_id = submit(core, spec(2), now=1)
    start_job(core, job_id, ["a1"])
    core.store.close()
    # kill -9: nothing but the file survives.
    core = CoordinatorCore(Store(path), Settings(port_range=(30000, 30009)), now=100)
    assert core.job_view(job_id)["state"] == "RUNNING"
    work = beat(core, "a1", 101, running=[job_id])  # the agent re-attaches with its running job
    assert work == {"check_ports": [], "start": [], "stop_jobs": []}
    core.report_exit("a1", job_id, 0, 0, [], now=102)
    core.report_exit("a1", job_id, 1, 0, [], now=102)
    assert core.job_view(job_id)["state"] == "SUCCEEDED"


def test_cancel_and_job_refs(core):
    job_id = submit(core, spec(2), now=1)
    assert core.resolve_job_id(job_id.split("-")[0]) == job_id
    assert core.cancel(job_id, now=2) == "CANCELED"
    with pytest.raises(NotFound, match="job 99 not found"):
        core.job_view("99")


def test_bad_specs(core):
    with pytest.raises(BadRequest, match="slots must be at least 1, got 0"):
        submit(core, spec(0), now=1)
    with pytest.raises(BadRequest, match="the job has no entrypoint"):
        submit(core, spec(1, cmd=()), now=1)
    with pytest.raises(BadRequest, match="environment.variables.TF_CONFIG"):
        submit(core, spec(1, environment={"TF_CONFIG": "x"}), now=1)
