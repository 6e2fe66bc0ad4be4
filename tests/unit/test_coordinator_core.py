"""The coordinator's logic without gRPC, placement and failures: time is passed in, state is a real SQLite
store, and the agents are scripted nodes that answer the coordinator's work the way `tfdist agent` does
(tests/core_nodes.py)."""

import json

import pytest

from tests.agent_core import AgentCore
from cluster.coordinator.core import BadRequest, NotFound, Settings
from cluster.coordinator.views import agents_view, job_view, jobs_view
from cluster.shared import jobspec
from cluster.shared.work import AgentReport
from cluster.shared.model import AllocState, JobState, WorkerExit
from tfdist.errors import UserError
from cluster.coordinator.store import SqliteStore

from tests.core_nodes import ADDR, Node, core, drive, nodes, spec, state  # noqa: F401 (fixtures: core, nodes)


def test_two_node_job_gets_per_node_tf_config_on_the_common_subnet(core, nodes):
    job_id, st = core.submit(spec(4), now=1)
    assert st == "STARTING"
    drive(nodes, 1)
    envs = [dict(p.env) for n in nodes for p in n.started[job_id].processes]
    assert json.loads(envs[3]["TF_CONFIG"]) == {"cluster": {"worker": ["198.18.0.2:30000", "198.18.0.2:30001",
                                                                       "198.18.0.3:30000", "198.18.0.3:30001"]},
                                                "task": {"index": 3, "type": "worker"}}
    assert [e["TFDIST_RANK"] for e in envs] == ["0", "1", "2", "3"]
    assert [e["TFDIST_NODE_RANK"] for e in envs] == ["0", "0", "1", "1"]
    assert envs[2]["TFDIST_LOCAL_RANK"] == "0" and envs[0]["TFDIST_PER_REPLICA_BATCH_SIZE"] == "2"
    assert nodes[0].started[job_id].working_dir == "/w"
    assert state(core, job_id) == JobState.RUNNING
    for n in nodes:
        n.finish(job_id, now=5)
    view = job_view(core, job_id)
    assert view.job.state == JobState.SUCCEEDED and view.job.exit_code == 0
    # Slots are held until the agents say the job is gone; the placement stays whole throughout.
    assert [a.state for a in view.placement] == [AllocState.RELEASING] * 2
    nodes[0].beat(6)
    assert [a.agent for a in job_view(core, job_id).placement] == ["a1", "a2"]
    nodes[1].beat(6)
    assert core.store.allocations(job_id) == [] and core.allocs.of_job(job_id) == ()
    assert [a.agent for a in job_view(core, job_id).placement] == ["a1", "a2"]  # kept for `tfdist job`


def wake_driven(core, nodes, now, event):
    """Runs `event`, then nodes heartbeat only when the coordinator wakes them (WaitForWork) or they have
    answers to send (`tfdist agent` heartbeats again at once after a port check or a probe): no interval
    heartbeats."""
    seen = {n.name: core.agent_board.version(n.name) for n in nodes}

    def due():
        return [n for n in nodes if core.agent_board.version(n.name) != seen[n.name] or n.port_answers or
                n.probe_answers]

    result = event()
    for _ in range(30):
        for n in due():
            seen[n.name] = core.agent_board.version(n.name)
            n.beat(now)
        if not due():
            return result
    raise AssertionError("the nodes never settled")


def test_every_step_of_a_start_and_a_cancel_wakes_the_nodes_it_gives_work(core, nodes):
    # lease, port checks, probes, start: without a single interval heartbeat
    job_id = wake_driven(core, nodes, 1, lambda: core.submit(spec(4), now=1)[0])
    assert all(job_id in n.started for n in nodes)
    wake_driven(core, nodes, 2, lambda: core.cancel(job_id, now=2))
    assert not any(n.running for n in nodes)


def test_nodes_probe_each_other_before_anything_starts(core, nodes):
    job_id = core.submit(spec(4), now=1)[0]
    for n in nodes:
        n.beat(1)  # lease
    for n in nodes:
        n.beat(1)  # answer the lease: LEASED
    probes = {n.name: n.beat(1).probes for n in nodes}
    assert probes["a1"][0].job_id == job_id
    assert [t for t in probes["a1"][0].targets] == [("a2", "198.18.0.3", 30000), ("a2", "198.18.0.3", 30001)]
    assert not nodes[0].started and not nodes[1].started  # nobody starts before every probe answered


def test_an_unreachable_peer_fails_the_job_before_tensorflow_starts(core, nodes):
    nodes[0].unreachable = ["a2"]
    job_id = core.submit(spec(4), now=1)[0]
    drive(nodes, 1)
    job = job_view(core, job_id).job
    assert job.state == JobState.FAILED and job.exit_code == 1
    assert job.message.startswith("node a1 cannot reach node a2 at 198.18.0.3:30000: refused (and 1 more). "
                                  "Nothing was started.")
    assert not nodes[0].started and not nodes[1].started
    drive(nodes, 2)
    assert all(a.free_slots == 2 for a in agents_view(core))  # leases given back, slots free


def test_busy_port_is_released_and_replaced(core, nodes):
    nodes[0].busy_ports = {30000}
    nodes[1].busy_ports = {30000}
    job_id = core.submit(spec(2), now=1)[0]
    drive(nodes, 1)
    placement = job_view(core, job_id).placement[0]
    assert 30000 not in placement.ports and len(placement.ports) == 3  # 2 workers + the job store
    assert state(core, job_id) == JobState.RUNNING
    assert "ports [30000] busy on" in " ".join(m for _, m in core.store.events(job_id))


def test_two_small_jobs_pack_one_node_and_never_share_ports(core, nodes):
    j1 = core.submit(spec(1), now=1)[0]
    j2 = core.submit(spec(1), now=1)[0]
    p1, p2 = job_view(core, j1).placement[0], job_view(core, j2).placement[0]
    assert p1.agent == p2.agent
    assert not set(p1.ports) & set(p2.ports)


def test_gpus_are_assigned_and_never_shared(core):
    node = Node(core, "g1", gpus=range(8))
    node.register()
    two = core.submit(spec(2), now=1)[0]
    one_a = core.submit(spec(1), now=1)[0]
    one_b = core.submit(spec(1), now=1)[0]
    drive([node], 1)
    held = {j: job_view(core, j).placement[0].gpus for j in (two, one_a, one_b)}
    assert held == {two: (0, 1), one_a: (2,), one_b: (3,)}
    envs = {j: dict(node.started[j].processes[0].env) for j in held}
    assert [len(node.started[j].processes) for j in held] == [1, 1, 1]  # one process drives the node's GPUs
    assert envs[two]["CUDA_VISIBLE_DEVICES"] == "0,1" and envs[one_b]["CUDA_VISIBLE_DEVICES"] == "3"
    assert envs[two]["TFDIST_LOCAL_SLOTS"] == "2" and envs[two]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert agents_view(core)[0].free_gpus == (4, 5, 6, 7)
    node.finish(one_a, now=2)
    node.beat(3)
    assert core.submit(spec(1), now=3)[0]  # the freed GPU is handed out again
    assert agents_view(core)[0].free_gpus == (4, 5, 6, 7)


def test_job_waits_with_a_reason_then_starts(core, nodes):
    big = core.submit(spec(4), now=1)[0]
    waiting = core.submit(spec(2), now=1)[0]
    assert state(core, waiting) == JobState.QUEUED
    assert job_view(core, waiting).waiting_reason == \
        f"waiting for 2 slots free on one node; the most free is 0 on a1; job {big} (t) holds a1 and a2; it starts " \
        "when one of those nodes has 2 free"
    drive(nodes, 1)
    for n in nodes:
        n.finish(big, now=3)
    nodes[0].beat(4)
    assert state(core, waiting) == JobState.STARTING


def test_infeasible_job_is_refused_with_sizes(core, nodes):
    with pytest.raises(BadRequest, match=r"slots_per_trial=3 can never be scheduled on this cluster \(2 nodes of "
                                         r"2 slots\).*Sizes that fit: 1-2, 4\. Nearest: 2 or 4\."):
        core.submit(spec(3), now=1)
    assert jobs_view(core) == []


def test_a_retried_submit_is_one_job(core, nodes):
    first = core.submit(spec(1, submission_id="abc"), now=1)
    again = core.submit(spec(1, submission_id="abc"), now=2)
    assert first == again and len(jobs_view(core)) == 1


def test_worker_failure_stops_the_gang_everywhere(core, nodes):
    job_id = core.submit(spec(4), now=1)[0]
    drive(nodes, 1)
    core.report_exit("a2", job_id, WorkerExit(3, "a2", 7, ("boom",)), now=2)
    job = job_view(core, job_id).job
    assert job.state == JobState.FAILED and job.exit_code == 7
    assert job.message == "rank 3 on node a2 exited with code 7; the other workers were stopped"
    work = nodes[0].beat(3)
    assert work.stop_jobs == [job_id] and work.stop_grace == {job_id: 1.0}  # a failed gang's survivors: quickly
    core.report_exit("a1", job_id, WorkerExit(0, "a1", -15), now=3)  # collateral exits change nothing
    assert job_view(core, job_id).job.message.startswith("rank 3 on node a2")


def test_lost_node_fails_its_job_and_stops_the_others(core, nodes):
    job_id = core.submit(spec(4), now=1)[0]
    drive(nodes, 1)
    nodes[0].beat(9)
    core.check_agents(now=11.5)  # a2 silent since t=1
    job = job_view(core, job_id).job
    assert job.state == JobState.FAILED
    assert job.message == "node a2 was lost (no heartbeat for 10s); the other nodes' workers were stopped"
    assert nodes[0].beat(12).stop_jobs == [job_id]
    assert nodes[1].beat(12) is None  # a lost agent must register again
    assert [a.state for a in agents_view(core)] == ["ALIVE", "LOST"]


def test_an_agent_that_comes_back_without_its_workers_fails_their_job_at_once(core, nodes):
    job_id = core.submit(spec(4), now=1)[0]
    drive(nodes, 1)
    assert state(core, job_id) == JobState.RUNNING
    restarted = Node(core, "a2")  # kill -9 and started again under the same name: nothing running
    restarted.register(now=2)
    job = job_view(core, job_id).job
    assert job.state == JobState.FAILED and job.message == (
        "node a2 restarted (its agent registered again without the job's workers): rank(s) 2, 3 are gone; "
        "the other workers were stopped")
    assert [a.agent for a in core.allocs.of_job(job_id)] == ["a1"]  # a2's slots are free at once
    assert nodes[0].beat(3).stop_jobs == [job_id]
    nodes[0].beat(4)
    assert all(a.free_slots == 2 for a in agents_view(core))


def test_a_coordinator_restart_keeps_what_agents_hold(tmp_path):
    path = str(tmp_path / "c.sqlite")
    core = AgentCore(SqliteStore(path), Settings(port_range=(30000, 30009)))
    nodes = [Node(core, "a1"), Node(core, "a2")]
    for n in nodes:
        n.register()
    running = core.submit(spec(4), now=1)[0]
    drive(nodes, 1)
    leased = core.submit(spec(4), now=1)[0]  # waits: the cluster is full
    core.store.close()
    core = AgentCore(SqliteStore(path), Settings(port_range=(30000, 30009)), now=100)  # kill -9: the file survives
    for n in nodes:
        n.core = core
        n.register(now=100)  # the agents re-attach with what they run
    assert state(core, running) == JobState.RUNNING and state(core, leased) == JobState.QUEUED
    for n in nodes:
        n.finish(running, now=102)
    assert state(core, running) == JobState.SUCCEEDED
    drive(nodes, 103)
    assert state(core, leased) == JobState.RUNNING


def test_a_rank_that_never_joins_fails_the_job_naming_it(core):
    nodes = [Node(core, "a1", slots=1), Node(core, "a2", slots=1)]
    for n in nodes:
        n.register()
    nodes[1].join = False  # its process hangs before tfdist.init()
    job_id = core.submit(spec(2, startup_timeout=15), now=1)[0]
    drive(nodes, 1)
    drive(nodes, 10, rounds=1)
    core.check_agents(now=10)
    assert state(core, job_id) == JobState.RUNNING
    assert job_view(core, job_id).waiting_reason == \
        "1 of 2 ranks joined; waiting for rank 1 (node a2) (startup timeout 15 s)"  # followers print it
    drive(nodes, 16.5, rounds=1)
    core.check_agents(now=16.5)
    job = job_view(core, job_id).job
    assert job.state == JobState.FAILED and job.message.startswith(
        "rank(s) 1 did not join within the startup timeout of 15s (never called tfdist.init() nor listened on "
        "their port)")
    assert nodes[0].beat(17).stop_jobs == [job_id]


def test_a_node_that_never_starts_fails_the_job(core, nodes):
    job_id = core.submit(spec(4, startup_timeout=15), now=1)[0]
    nodes[0].beat(1)  # told to lease; it never answers, and a2 never hears of the job
    core.check_agents(now=5)
    nodes[1].beat(5)
    core.heartbeat(AgentReport("a1"), now=17)
    core.heartbeat(AgentReport("a2"), now=17)
    core.check_agents(now=17)
    assert job_view(core, job_id).job.message == (
        "node(s) a1, a2 did not start their workers within the startup timeout of 15s; the other workers were "
        "stopped")


def test_one_process_jobs_are_not_held_to_joining(core, nodes):
    nodes[0].join = nodes[1].join = False
    job_id = core.submit(spec(1, startup_timeout=15), now=1)[0]
    drive(nodes, 1)
    drive(nodes, 100, rounds=1)
    core.check_agents(now=100)
    assert state(core, job_id) == JobState.RUNNING


def test_an_event_that_fails_midway_changes_nothing(core, nodes, monkeypatch):
    job_id = core.submit(spec(4), now=1)[0]
    drive(nodes, 1)
    core.report_exit("a1", job_id, WorkerExit(0, "a1", 0), now=2)

    def crash(*a, **k):
        raise RuntimeError("killed between the exit and the outcome")

    before = dict(core.runs.items())
    assert before[job_id].start_clock is not None and before[job_id].plan is not None
    # The failure comes after the job's state machine replaced its run (released: nothing watched).
    monkeypatch.setattr(core.lifecycle, "transition", crash)
    with pytest.raises(RuntimeError):
        core.report_exit("a2", job_id, WorkerExit(2, "a2", 9), now=3)
    monkeypatch.undo()
    assert [e.rank for e in core.store.exits(job_id)] == [0]  # the exit was not half-applied
    assert dict(core.runs.items()) == before  # nor its run: every field as it was
    core.report_exit("a2", job_id, WorkerExit(2, "a2", 9), now=4)  # the agent retries: decided now
    assert job_view(core, job_id).job.message.startswith("rank 2 on node a2 exited with code 9")


def test_cancel_and_job_refs(core, nodes):
    job_id = core.submit(spec(2), now=1)[0]
    assert core.resolve_job_id(job_id.split("-")[0]) == job_id
    drive(nodes, 1)
    assert core.cancel(job_id, now=2) == "CANCELED"
    holder = next(n for n in nodes if job_id in n.running)
    assert holder.beat(3).stop_grace == {job_id: 5.0}  # canceled: time to save
    with pytest.raises(NotFound, match="job 99 not found"):
        job_view(core, "99")


def test_bad_specs_are_refused_at_the_coordinators_edge():
    """What the server decodes from a SubmitJob: the config's own rules, before the core sees it."""
    def submitted(s):
        return jobspec.from_pb(jobspec.to_pb(s))

    with pytest.raises(UserError, match="resources.slots_per_trial: must be at least 1, got 0"):
        submitted(spec(0))
    with pytest.raises(UserError, match="the job has no entrypoint"):
        submitted(spec(1, cmd=()))
    with pytest.raises(UserError, match="environment.variables.TF_CONFIG"):
        submitted(spec(1, environment={"TF_CONFIG": "x"}))
    with pytest.raises(UserError, match="distribution mode is auto"):
        submitted(spec(1, distribution_mode="auto"))


def test_a_single_node_mode_larger_than_any_node_is_refused(core, nodes):
    with pytest.raises(BadRequest, match=r"distribution mode mirrored runs one process on one node, but "
                                         r"slots_per_trial=4 is more than the largest node \(2 slots\); use mode mwms"):
        core.submit(spec(4, distribution_mode="mirrored"), now=1)
    job_id = core.submit(spec(2, distribution_mode="mirrored"), now=1)[0]
    drive(nodes, 1)
    holder = next(n for n in nodes if job_id in n.started)
    (process,) = holder.started[job_id].processes  # one process drives both slots
    assert process.replicas == 2 and "TF_CONFIG" not in process.env
    assert process.env["TFDIST_LOCAL_SLOTS"] == "2" and process.env["TFDIST_DISTRIBUTION"] == "mirrored"
