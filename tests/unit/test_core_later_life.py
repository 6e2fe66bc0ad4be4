"""The coordinator's logic without gRPC, a job's later life: restarts from checkpoints, preemption and
resume, durable submits, bounded logs, the nodes' work versions (scripted nodes: tests/core_nodes.py)."""

import dataclasses
import json
import time

import pytest

from cluster.coordinator.core import BadRequest
from cluster.coordinator.answers import job_to_pb
from cluster.coordinator.views import job_view
from cluster.shared.work import AgentReport
from cluster.shared.model import JobState, WorkerExit

from tests.core_nodes import ADDR, Node, core, drive, nodes, spec, state  # noqa: F401 (fixtures: core, nodes)


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
