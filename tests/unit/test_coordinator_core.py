"""The coordinator's logic without gRPC: time is passed in, state is a real SQLite store, and the
agents are scripted nodes that answer the coordinator's work the way `tfdist agent` does."""

import dataclasses
import json
import time

import pytest

from tests.agent_core import AgentCore
from cluster.coordinator.core import BadRequest, NotFound, Settings
from cluster.coordinator.answers import job_to_pb
from cluster.coordinator.views import agents_view, job_view, jobs_view
from cluster.shared import jobspec
from cluster.shared.config import ExperimentConfig
from cluster.shared.work import AgentReport, ProbeFailure, RunningJob
from cluster.shared.model import Address, AgentRecord, AllocState, Gpu, JobSpec, JobState, WorkerExit
from tfdist.errors import UserError
from cluster.coordinator.store import SqliteStore

ADDR = {"a1": (Address("198.18.0.2", 24, "eth0"),),
        "a2": (Address("198.18.0.3", 24, "eth0"), Address("10.9.0.3", 16, "eth1"))}


SUBMISSION_FIELDS = ("startup_timeout", "submission_id", "priority")


def spec(slots, cmd=("python", "train.py"), distribution_mode="mwms", environment=None, **extra):
    """A submitted job: config fields by their config names, how it was submitted by JobSpec's."""
    submission = {k: extra.pop(k) for k in SUBMISSION_FIELDS if k in extra}
    config = ExperimentConfig(name="t", entrypoint=tuple(cmd), slots_per_trial=slots, distribution_mode=distribution_mode,
                              hyperparameters={"global_batch_size": 8}, environment_variables=environment or {}, **extra)
    return JobSpec(config, working_dir="/w", **submission)


class Node:
    """A scripted agent: answers port checks and probes (as told), starts and stops what it is told to."""

    def __init__(self, core, name, slots=2, gpus=()):
        self.core, self.name = core, name
        self.record = AgentRecord(name, len(gpus) or slots, ADDR.get(name, (Address("198.18.0.9", 24),)),
                                  tuple(Gpu(i, f"GPU-{name}-{i}") for i in gpus))
        self.leased, self.running, self.started = set(), {}, {}
        self.port_answers, self.probe_answers = {}, {}
        self.busy_ports, self.unreachable, self.join = set(), [], True

    def _running(self):
        return tuple(RunningJob(j, tuple(r), tuple(r), attempt=self.started[j].attempt if j in self.started else 0)
                     for j, r in self.running.items())

    def register(self, now=0):
        self.core.register(self.record, self._running(), self.leased, now)

    def beat(self, now):
        ports, self.port_answers = self.port_answers, {}
        probes, self.probe_answers = self.probe_answers, {}
        report = AgentReport(self.name, self._running(), tuple(self.leased - set(self.running)),
                             {j: tuple(busy) for j, busy in ports.items()},
                             {j: tuple(ProbeFailure(*f) for f in failures) for j, failures in probes.items()})
        work = self.core.heartbeat(report, now)
        if work is None:
            return None
        for job_id, leased_ports in work.check_ports:
            busy = [p for p in leased_ports if p in self.busy_ports]
            self.port_answers[job_id] = busy
            if not busy:
                self.leased.add(job_id)
        for probe in work.probes:
            self.probe_answers[probe.job_id] = [(*t, "refused") for t in probe.targets if t[0] in self.unreachable]
        for task in work.start:
            self.started[task.job_id] = task
            self.running[task.job_id] = [p.rank for p in task.processes] if self.join else []
        for job_id in work.stop_jobs:
            self.running.pop(job_id, None)
            self.leased.discard(job_id)
        return work

    def finish(self, job_id, now, code=0):
        """Every rank of the job here exits with `code`."""
        task = self.started[job_id]
        for p in task.processes:
            self.core.report_exit(self.name, job_id, WorkerExit(p.rank, self.name, code, attempt=task.attempt), now)
        self.running.pop(job_id, None)
        self.leased.discard(job_id)


def drive(nodes, now, rounds=8):
    for _ in range(rounds):
        for n in nodes:
            n.beat(now)


@pytest.fixture
def core(tmp_path):
    return AgentCore(SqliteStore(str(tmp_path / "c.sqlite")), Settings(lost_after=10, port_range=(30000, 30009),
                                                                      startup_timeout=60))


@pytest.fixture
def nodes(core):
    made = [Node(core, "a1"), Node(core, "a2")]
    for n in made:
        n.register()
    return made


def state(core, job_id):
    return job_view(core, job_id).job.state


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


def record(core, job_id, name, step, value, note="", now=5):
    from cluster.shared.model import MetricRow

    core.push_metrics("a1", job_id, [MetricRow(0, step, name, value, now, note)], source="a1/x", first_seq=0)


def test_a_failure_restarts_the_whole_gang_from_the_latest_checkpoint(core, nodes):
    job_id, _ = core.submit(spec(4, max_restarts=1, checkpoint_storage="/shared/ckpt"), now=1)
    drive(nodes, 1)
    first = nodes[1].started[job_id]
    assert first.attempt == 0 and dict(first.processes[0].env)["TFDIST_CHECKPOINT_DIR"] == f"/shared/ckpt/{job_id}"
    record(core, job_id, "tfdist.checkpoint", 20, 0, note=f"/shared/ckpt/{job_id}/ckpt-20")
    record(core, job_id, "loss", 20, 0.5)
    core.report_exit("a2", job_id, WorkerExit(3, "a2", -9), now=6)  # rank 3 killed
    view = job_view(core, job_id)
    assert view.job.state == JobState.QUEUED and view.job.attempt == 1 and view.job.restarts == 1
    assert view.job.message.endswith("; restarting the job (restart 1 of 1)")
    assert [m.name for m in view.latest_metrics] == ["loss"]  # tfdist's records are not metrics
    # The old run's survivors are stopped first; their exits (attempt 0) are history, not the new run's.
    nodes[0].finish(job_id, now=7, code=-15)
    drive(nodes, 8)
    second = nodes[1].started[job_id]
    assert second.attempt == 1 and state(core, job_id) == JobState.RUNNING
    info = json.loads(dict(second.processes[0].env)["TFDIST_CLUSTER"])
    assert info["latest_checkpoint"] == {"path": f"/shared/ckpt/{job_id}/ckpt-20", "step": 20}
    assert dict(second.processes[0].env)["TFDIST_ATTEMPT"] == "1"
    core.report_exit("a2", job_id, WorkerExit(2, "a2", 1, attempt=1), now=9)  # restarts are spent
    view = job_view(core, job_id)
    assert view.job.state == JobState.FAILED and view.job.message.endswith("(after 1 restart, max_restarts=1)")
    assert [(e.rank, e.attempt) for e in view.exits] == [(2, 1)]  # the view shows the last run's exits
    assert len(core.store.exits(job_id)) == 4 and core.store.latest_checkpoint(job_id).step == 20


def test_preemption_pauses_at_the_workers_step_and_resume_runs_again(core, nodes):
    job_id, _ = core.submit(spec(2, checkpoint_storage="/shared/ckpt"), now=1)
    drive(nodes, 1)
    with pytest.raises(BadRequest, match="cannot be preempted: its workers do not check for preemption"):
        core.preempt(job_id, now=2)
    record(core, job_id, "tfdist.preemptible", 1, 0)
    assert core.preempt(job_id, now=3) == "RUNNING"
    work = nodes[0].beat(4)
    assert work.preempt == [job_id]  # the node serving the job's store writes the request there
    record(core, job_id, "tfdist.preempted", 7, 0)
    record(core, job_id, "tfdist.checkpoint", 7, 0, note="/shared/ckpt/x/ckpt-7")
    nodes[0].finish(job_id, now=5)
    view = job_view(core, job_id)
    assert view.job.state == JobState.PAUSED and view.job.message == "paused at step 7"
    assert [(p.agent, p.state) for p in job_to_pb(view).placement] == [("a1", "")]  # where it ran; it holds nothing
    drive(nodes, 6)
    assert not core.allocs.of_job(job_id)  # a paused job holds nothing
    assert core.preempt(job_id, now=6) == "PAUSED"  # already stopped: nothing to do
    assert core.resume(job_id, now=7) == "STARTING"
    drive(nodes, 7)
    assert nodes[0].started[job_id].attempt == 1 and state(core, job_id) == JobState.RUNNING
    with pytest.raises(BadRequest, match="is RUNNING, not PAUSED"):
        core.resume(job_id, now=8)
    nodes[0].finish(job_id, now=9)
    assert state(core, job_id) == JobState.SUCCEEDED


def test_a_queued_job_preempted_pauses_at_once_and_resumes_later(core, nodes):
    """Found by the gRPC fuzz: preempting a QUEUED job answered INTERNAL (QUEUED -> PAUSED was missing)."""
    running, _ = core.submit(spec(4), now=1)  # takes both nodes
    waiting, state_now = core.submit(spec(2), now=2)
    assert state_now == "QUEUED"
    assert core.preempt(waiting, now=3) == "PAUSED"
    core.cancel(running, now=4)
    drive(nodes, 5)
    assert state(core, waiting) == JobState.PAUSED  # a paused job is not placed when nodes free up
    assert core.resume(waiting, now=6) in ("QUEUED", "STARTING")


def test_a_lost_node_restarts_the_job_on_the_nodes_left(core):
    a1, a2, a3 = Node(core, "a1"), Node(core, "a2"), Node(core, "a3")
    for n in (a1, a2, a3):
        n.register()
    job_id, _ = core.submit(spec(4, max_restarts=3), now=1)
    drive([a1, a2, a3], 1)
    placed = {a.agent for a in job_view(core, job_id).placement}
    gone = sorted(placed)[1]
    survivors = [n for n in (a1, a2, a3) if n.name != gone]
    drive(survivors, 19)
    core.check_agents(now=20)  # `gone` sent nothing for 19s: lost
    view = job_view(core, job_id)
    assert view.job.state == JobState.QUEUED and view.job.restarts == 1
    assert f"node {gone} was lost" in view.job.message
    drive(survivors, 21)
    assert {a.agent for a in job_view(core, job_id).placement} == {n.name for n in survivors}
    assert state(core, job_id) == JobState.RUNNING
    assert all(n.started[job_id].attempt == 1 for n in survivors)


def test_a_durable_submit_syncs_outside_the_lock_and_answers_only_once_synced(core, nodes, monkeypatch):
    """Group commit, as the core uses it: a submission's transaction commits under the lock, its fsync
    happens after the lock is let go (other events go on meanwhile), and the answer waits for it."""
    import threading

    store, entered, release, marks = core.store, threading.Event(), threading.Event(), []

    def held_sync(through=None):
        marks.append((through, store.commits))
        entered.set()
        release.wait(10)

    monkeypatch.setattr(store, "sync", held_sync)
    answered = []
    submitter = threading.Thread(target=lambda: answered.append(core.submit(spec(2), 1.0)))
    submitter.start()
    assert entered.wait(10)
    assert not answered  # committed, not yet acknowledged
    through, committed = marks[0]
    assert through == committed  # the mark is its own commit
    nodes[0].beat(2.0)  # the lock is free while the submission syncs: another event goes on
    second = threading.Thread(target=lambda: answered.append(core.submit(spec(2), 2.5)))
    second.start()
    deadline = time.monotonic() + 10
    while len(marks) < 2 and time.monotonic() < deadline:  # bounded wait for the second one's commit
        time.sleep(0.005)
    assert len(marks) == 2 and marks[1][0] > through  # the second committed while the first waits on its sync
    release.set()
    submitter.join(10)
    second.join(10)
    assert len(answered) == 2 and {state for _, state in answered} <= {"QUEUED", "STARTING"}


def test_a_deep_queue_costs_a_submission_nothing_more(core, nodes):
    """The queue lives in memory in scheduling order: a submission behind a full cluster does not read or
    rank the jobs before it (the store is not asked for the queue), and reasons are worked out when read."""
    blocker = core.submit(spec(4), 1.0)[0]
    assert core.store.job(blocker).state == JobState.STARTING
    queued = [core.submit(spec(2, priority=p), 2.0)[0] for p in (0, 0, 5, 0)]
    asked = []
    real = core.store.jobs
    core.store.jobs = lambda *a, **k: asked.append(a) or real(*a, **k)
    later = core.submit(spec(2), 3.0)[0]
    assert asked == []  # not one read of the queue
    assert [j.id for j in core.lifecycle.queue] == [queued[2], queued[0], queued[1], queued[3], later]
    assert job_view(core, later).waiting_reason.startswith("waiting for 2 slots free on one node")
    core.cancel(blocker, 4.0)
    for n in nodes:
        n.beat(5.0)
        n.beat(5.1)
    assert core.store.job(queued[2]).state == JobState.STARTING  # the priority-5 job first, when nodes free up
    assert core.store.job(queued[0]).state == JobState.STARTING
    assert job_view(core, queued[1]).waiting_reason  # still queued: a reason, worked out now
    assert queued[2] not in core.lifecycle.queue and later in core.lifecycle.queue
    by_name = lambda ns: sorted(ns, key=lambda n: n.name)  # noqa: E731
    assert by_name(core.lifecycle.live.index.nodes.values()) == by_name(core.lifecycle.nodes())  # kept, not rebuilt
    core.check_agents(100.0)  # both nodes silent past lost_after: lost
    assert core.lifecycle.live.index.nodes == {} and core.lifecycle.live.index.free_total == 0


def test_a_jobs_log_is_bounded_and_says_where_it_was_cut(core, nodes):
    import dataclasses

    from cluster.shared.model import LogLine

    core.settings = dataclasses.replace(core.settings, max_log_lines=5)
    job_id = core.submit(spec(2), now=1)[0]
    agent = core.store.job(job_id).placement[0].agent
    say = lambda *texts: core.push_logs(agent, job_id, [LogLine(0, "stdout", t, 2.0) for t in texts])  # noqa: E731
    say("one", "two", "three")
    say("four", "five", "six")  # crosses the limit: this batch is kept whole, then the cut is said once
    say("seven")
    say("eight", "nine")
    texts = [l.text for l in core.store.logs(job_id, limit=100)]
    assert texts == ["one", "two", "three", "four", "five", "six",
                     f"tfdist: job {job_id}: its log reached 5 lines, the coordinator's limit (tfdist coordinator "
                     "--max-log-lines); later output is not stored"]
    assert core.store.logs(job_id, limit=100)[-1].rank == -1  # tfdist's own line, not a rank's


def test_a_node_that_comes_back_smaller_than_what_it_runs_does_not_block_the_others(core, nodes):
    """Its free slots are none, not negative: the other nodes still take jobs (a GPU lost across an agent
    restart)."""
    big = core.submit(spec(2), now=1)[0]
    drive(nodes, 2)
    holder = next(n for n in nodes if big in n.running)
    holder.record = dataclasses.replace(holder.record, slots=1)
    holder.register(now=3)  # re-attaches with its job, one slot smaller
    assert core.lifecycle.live.index.nodes[holder.name].free_slots == 0
    other = core.submit(spec(2), now=4)[0]
    assert core.store.job(other).state == JobState.STARTING  # on the other node


def test_preempting_a_queued_job_lets_the_next_one_use_the_nodes_it_kept(core, nodes):
    first = core.submit(spec(2), now=1)[0]
    kept = core.submit(spec(4), now=1)[0]  # waits for both nodes: keeps them from later jobs
    assert core.store.job(kept).state == JobState.QUEUED
    core.preempt(kept, 2.0)
    assert core.store.job(kept).state == JobState.PAUSED
    small = core.submit(spec(2), now=3)[0]  # the node `first` does not hold is free, and kept for nobody now
    assert core.store.job(small).state == JobState.STARTING, job_view(core, small).waiting_reason
    assert core.store.job(first).state == JobState.STARTING


def test_a_retried_log_batch_near_the_limit_does_not_say_it_was_cut(core, nodes):
    from cluster.shared.model import LogLine

    core.settings = dataclasses.replace(core.settings, max_log_lines=10)
    job_id = core.submit(spec(2), now=1)[0]
    agent = core.store.job(job_id).placement[0].agent
    batch = [LogLine(0, "stdout", f"line {i}", 2.0) for i in range(1, 7)]
    core.push_logs(agent, job_id, batch, source="a/1", first_seq=1)
    core.push_logs(agent, job_id, batch, source="a/1", first_seq=1)  # the same batch again (a retry)
    assert [l.text for l in core.store.logs(job_id, limit=100)] == [f"line {i}" for i in range(1, 7)]


def test_a_submission_asks_the_node_sizes_not_every_node(core, nodes):
    """Admission reads how many live nodes there are of each size: a cluster's 10,000 nodes are not walked
    for a submission, even right after a node joined or left."""
    def walked(*args, **kwargs):
        raise AssertionError("a submission walked every node")

    core.lifecycle.nodes = walked
    assert core.submit(spec(4), 1.0)[1] == JobState.STARTING.value  # two nodes of 2
    with pytest.raises(BadRequest, match="slots_per_trial=3 can never be scheduled"):
        core.submit(spec(3), 1.0)
    Node(core, "a3", slots=1).register()  # a node of another size joins: 2 + 1 fits now
    assert core.submit(spec(3), 2.0)[0]
    core.check_agents(100.0)  # every node lost
    with pytest.raises(BadRequest, match="no agents are registered"):
        core.submit(spec(1), 100.0)


def test_a_heartbeat_that_changes_its_node_answers_the_version_that_covers_its_own_change(core, nodes):
    """The node's own heartbeat released its canceled job: its answer already says so, so the version it
    carries covers that change (its beacons then show it up to date); any later change is above."""
    job_id = core.submit(spec(2), 1.0)[0]
    assert [a.agent for a in core.allocs.of_job(job_id)] == ["a1"]
    core.cancel(job_id, 2.0)
    before = core.agent_board.version("a1")
    work = core.heartbeat(AgentReport("a1", (), ()), 3.0)  # runs nothing: the allocation is released
    assert core.allocs.of_job(job_id) == () and work.version == core.agent_board.version("a1") > before
    core.submit(spec(2), 4.0)
    assert core.agent_board.version("a1") > work.version  # placed again: above what it was answered


def test_the_agent_board_forgets_no_agent(core):
    """Pokes compare an agent's version with what it was answered: a forgotten one (0) would never be poked
    again after a suppressed poke. The job board forgets (jobs come and go); the agent board does not."""
    core.agent_board.bump(f"n{i}" for i in range(10_000))
    core.board.bump(f"j{i}" for i in range(10_000))
    assert core.agent_board.version("n0") > 0 and core.board.version("j0") == 0


def test_a_placement_that_fails_mid_round_leaves_the_rest_of_the_round_placed_once(core, monkeypatch):
    """A round with two assignments whose first cannot be made concrete (no free ports): that job fails, and
    its end asks for a round while the first is still placing. A nested round used to place the second job,
    and the outer one then placed it again (STARTING -> STARTING): the node's heartbeat failed, every time."""
    from cluster.coordinator import placement

    node = Node(core, "a1", slots=4)
    node.register(now=0)
    holder = core.submit(spec(4), now=1)[0]
    drive([node], 1)
    first, second = core.submit(spec(2, priority=5), now=2)[0], core.submit(spec(2), now=2)[0]
    lease = core.lifecycle.lease

    def no_ports_for_the_first(agent, count, job_id, excluded):
        if job_id == first:
            raise placement.PlacementError("no free ports (a test's)")
        return lease(agent, count, job_id, excluded)

    monkeypatch.setattr(core.lifecycle, "lease", no_ports_for_the_first)
    node.finish(holder, now=3)
    drive([node], 3)  # the heartbeat that frees the node runs the round
    assert state(core, first) == JobState.FAILED and "no free ports" in core.store.job(first).message
    assert state(core, second) == JobState.RUNNING
