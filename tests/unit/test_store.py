"""The StateStore contract (cluster/coordinator/store/base.py), run against every implementation: SQLite in a
file, SQLite in memory, and the dict store. What only SQLite promises (files, migrations, kill -9) is in
test_store_sqlite.py."""

import dataclasses
import threading

import pytest

from cluster.coordinator.store import MemoryStore, SqliteStore
from cluster.shared.model import (AgentRecord, Address, Allocation, AllocState, Checkpoint, Gpu, JobState,
                                  LogLine, MetricRow, WorkerExit)
from tests.specs import flat_spec


@pytest.fixture(params=["sqlite-file", "sqlite-memory", "memory"])
def store(request, tmp_path):
    made = {"sqlite-file": lambda: SqliteStore(str(tmp_path / "state" / "c.sqlite")),
            "sqlite-memory": lambda: SqliteStore(":memory:"), "memory": MemoryStore}[request.param]()
    yield made
    made.close()


def spec(**fields):
    """Through the stored form's codec, so the tests do not depend on how JobSpec is built."""
    return flat_spec(**{"entrypoint": ["x"], "slots": 2, **fields})


def out(text, rank=0, seq=0):
    return LogLine(rank, "stdout", text, 1.0, seq)


class Crash(BaseException):
    """Not an Exception: a KeyboardInterrupt or SystemExit must roll back too."""


# ---------------------------------------------------------------- jobs
def test_job_roundtrip_and_events(store):
    store.insert_job("2-cd", 2, spec(), 9.0, "submitted")  # numbers may arrive out of order
    store.insert_job("1-ab", 1, spec(submission_id="s1", priority=3), 10.0, "submitted")
    store.update_job("1-ab", 11.0, "placed", state=JobState.STARTING)
    job = store.job("1-ab")
    assert (job.id, job.seq, job.state, job.submitted_at) == ("1-ab", 1, JobState.STARTING, 10.0)
    assert job.spec == spec(submission_id="s1", priority=3) and job.spec != spec()
    assert store.events("1-ab") == [(10.0, "submitted"), (11.0, "placed")]
    assert store.events("2-cd") == [(9.0, "submitted")]
    assert store.next_job_seq() == 3
    assert store.job_by_submission("s1").id == "1-ab" and store.job_by_submission("s2") is None
    assert store.job_by_seq(2).id == "2-cd" and store.job_by_seq(7) is None and store.job("9-zz") is None
    assert [j.id for j in store.jobs()] == ["1-ab", "2-cd"]
    assert [j.id for j in store.jobs([JobState.STARTING])] == ["1-ab"] and store.jobs([JobState.RUNNING]) == []
    assert [j.id for j in store.jobs([JobState.QUEUED, JobState.STARTING])] == ["1-ab", "2-cd"]


def test_an_empty_store(store):
    assert store.next_job_seq() == 1 and store.jobs() == [] and store.agents() == [] and store.allocations() == []
    assert store.events("j") == [] and store.exits("j") == [] and store.logs("j") == [] and store.metrics("j") == []
    assert store.latest_checkpoint("j") is None and store.latest_metrics("j") == []


def test_update_job_sets_every_field_that_changes(store):
    store.insert_job("j", 1, spec(), 0.0, "submitted")
    placed = Allocation("j", "a", 0, 2, "h", [30000, 30001], [1], AllocState.STARTED)  # lists come back as tuples
    store.update_job("j", 1.0, None, placement=[placed], state="RUNNING", started_at=1.5)
    store.update_job("j", 2.0, "ended", state=JobState.FAILED, ended_at=2.5, message="rank 1 failed", exit_code=3,
                     failed_rank=1, attempt=2, restarts=1, preempt_requested=1, preempted_step=40, preemptible=1)
    job = store.job("j")
    assert job.state is JobState.FAILED and job.placement == (Allocation("j", "a", 0, 2, "h", (30000, 30001), (1,),
                                                                         AllocState.STARTED),)
    assert (job.started_at, job.ended_at, job.message) == (1.5, 2.5, "rank 1 failed")
    assert (job.exit_code, job.failed_rank) == (3, 1)
    assert (job.attempt, job.restarts, job.preempted_step) == (2, 1, 40)
    assert job.preempt_requested is True and job.preemptible is True
    assert store.events("j") == [(0.0, "submitted"), (2.0, "ended")]  # no event given: none recorded
    store.update_job("j", 3.0, None, placement=[])
    assert store.job("j").placement == () and store.job("j").message == "rank 1 failed"


def test_an_unknown_job_gets_only_the_event(store):
    store.update_job("nope", 1.0, "late report", state=JobState.FAILED)
    assert store.job("nope") is None and store.jobs() == [] and store.events("nope") == [(1.0, "late report")]


def test_a_second_job_of_one_id_or_submission_is_refused(store):
    store.insert_job("1-ab", 1, spec(submission_id="s1"), 0.0, "submitted")
    store.insert_job("2-cd", 2, spec(), 0.0, "submitted")
    store.insert_job("3-ef", 3, spec(), 0.0, "submitted")  # no submission id: any number of them
    with pytest.raises(Exception):
        store.insert_job("1-ab", 4, spec(), 5.0, "again")
    with pytest.raises(Exception):
        store.insert_job("4-gh", 4, spec(submission_id="s1"), 5.0, "again")
    assert [j.id for j in store.jobs()] == ["1-ab", "2-cd", "3-ef"] and store.job("1-ab").seq == 1
    assert store.events("1-ab") == [(0.0, "submitted")] and store.events("4-gh") == []
    assert store.job_by_submission("s1").id == "1-ab"


# ---------------------------------------------------------------- agents and allocations
def test_agents_are_replaced_by_name(store):
    b = AgentRecord("b", 2, (Address("10.0.0.2", 24, "eth0"),))
    store.upsert_agent(b, 0.0)
    store.upsert_agent(AgentRecord("a", 1, (Address("10.0.0.1", 24),)), 0.0)
    a = AgentRecord("a", 2, (Address("10.0.0.9", 16),), (Gpu(0, "GPU-x"), Gpu(1, "GPU-y", "A100")))
    store.upsert_agent(a, 5.0)
    assert store.agents() == [a, b]


def test_allocations_by_job_and_node_rank(store):
    second = Allocation("j2", "a", 1, 2, "h1", (3,), (), AllocState.LEASED)
    first = Allocation("j2", "b", 0, 2, "h2", (4,), (0, 1), AllocState.STARTED)
    store.set_allocations("j2", [second, first])
    store.set_allocations("j1", [Allocation("j1", "c", 0, 1, "h3", (5,))])
    assert store.allocations("j2") == [first, second]
    assert [(a.job_id, a.agent) for a in store.allocations()] == [("j1", "c"), ("j2", "b"), ("j2", "a")]
    store.set_allocations("j2", [dataclasses.replace(first, state=AllocState.RELEASING)])
    assert store.allocations("j2") == [dataclasses.replace(first, state=AllocState.RELEASING)]
    store.set_allocations("j1", [])
    assert store.allocations("j1") == [] and [a.job_id for a in store.allocations()] == ["j2"]


def test_two_allocations_on_one_agent_are_refused(store):
    kept = Allocation("j", "a", 0, 2, "h", (1,))
    store.set_allocations("j", [kept])
    with pytest.raises(Exception):
        store.set_allocations("j", [Allocation("j", "b", 0, 2, "h", (1,)), Allocation("j", "b", 1, 2, "h", (2,))])
    assert store.allocations("j") == [kept]


# ---------------------------------------------------------------- exits and checkpoints
def test_exits_count_once_per_attempt_and_rank(store):
    assert store.record_exit("j", WorkerExit(1, "a", 9, ["boom"], 2.0, "stalled", True, 0)) is True
    assert store.record_exit("j", WorkerExit(0, "a", 0, (), 2.0)) is True
    assert store.record_exit("j", WorkerExit(1, "a", 7, (), 3.0)) is False  # a retried report counts once
    assert store.record_exit("j", WorkerExit(1, "b", 0, (), 1.0, attempt=1)) is True  # the next run's rank 1
    assert store.record_exit("other", WorkerExit(1, "a", 5, (), 0.5)) is True
    first_run = [WorkerExit(0, "a", 0, (), 2.0), WorkerExit(1, "a", 9, ("boom",), 2.0, "stalled", True, 0)]
    assert store.exits("j", 0) == first_run
    assert store.exits("j", 1) == [WorkerExit(1, "b", 0, (), 1.0, attempt=1)]
    assert store.exits("j") == first_run + [WorkerExit(1, "b", 0, (), 1.0, attempt=1)]  # by attempt before time
    assert store.exits("j", 2) == [] and [e.exit_code for e in store.exits("other")] == [5]


def test_checkpoints_count_once_per_step_and_the_highest_step_is_latest(store):
    assert store.record_checkpoint("j", Checkpoint(20, "/c/20", 0, 5.0)) is True
    assert store.record_checkpoint("j", Checkpoint(10, "/c/10", 0, 6.0)) is True  # reported late
    assert store.record_checkpoint("j", Checkpoint(20, "/c/20-again", 1, 7.0)) is False
    assert store.latest_checkpoint("j") == Checkpoint(20, "/c/20", 0, 5.0)
    assert store.latest_checkpoint("other") is None


# ---------------------------------------------------------------- logs and metrics
def test_logs_are_numbered_per_job_in_arrival_order(store):
    assert store.append_logs("j", [out("one", seq=50), LogLine(1, "stderr", "two", 1.1)]) == 2  # own seq ignored
    store.append_logs("k", [out("other job")])
    store.append_logs("j", [out("three"), out("four", rank=1)])
    assert [(l.seq, l.rank, l.stream, l.text) for l in store.logs("j")] == [
        (1, 0, "stdout", "one"), (2, 1, "stderr", "two"), (3, 0, "stdout", "three"), (4, 1, "stdout", "four")]
    assert store.logs("k") == [out("other job", seq=1)]
    assert [l.text for l in store.logs("j", after_seq=1, rank=0)] == ["three"]
    assert [l.seq for l in store.logs("j", after_seq=1, limit=2)] == [2, 3]
    assert [l.seq for l in store.logs("j", rank=1, limit=1)] == [2] and store.logs("j", after_seq=4) == []


def test_retried_batches_are_stored_once(store):
    assert store.append_logs("j", [out("a"), out("b")], "n1/x", first_seq=1) == 2
    # The same batch again (its answer was lost), then one overlapping and going further.
    assert store.append_logs("j", [out("a"), out("b")], "n1/x", first_seq=1) == 0
    assert store.append_logs("j", [out("b"), out("c")], "n1/x", first_seq=2) == 1
    assert store.append_logs("j", [out("a")], "n2/y", first_seq=1) == 1  # another source
    assert store.append_logs("k", [out("a")], "n1/x", first_seq=1) == 1  # another job
    assert store.append_logs("j", [out("u")], "", first_seq=1) == 1  # no source: taken whole, every time
    assert store.append_logs("j", [out("u")], "", first_seq=1) == 1
    assert store.append_logs("j", [out("v")], "n1/x", first_seq=0) == 1  # unnumbered
    assert [l.text for l in store.logs("j")] == ["a", "b", "c", "a", "u", "u", "v"]
    assert store.append_metrics("j", [MetricRow(0, 1, "loss", 0.5, 1.0)], "n1/x", first_seq=1) == 1  # a kind apart
    assert store.append_metrics("j", [MetricRow(0, 1, "loss", 0.5, 1.0)], "n1/x", first_seq=1) == 0
    assert store.append_metrics("j", [MetricRow(0, 1, "loss", 0.5, 1.0), MetricRow(0, 2, "loss", 0.4, 2.0)],
                                "n1/x", first_seq=1) == 1
    assert [m.step for m in store.metrics("j")] == [1, 2]


def test_metrics_by_step_and_the_latest_of_each(store):
    store.append_metrics("j", [MetricRow(0, 2, "loss", 0.7, 2.0), MetricRow(0, 1, "acc", 0.5, 1.0),
                               MetricRow(1, 1, "loss", 0.9, 1.0, note="dropped")])
    store.append_metrics("j", [MetricRow(1, 2, "loss", 0.6, 2.1)])
    store.append_metrics("k", [MetricRow(0, 9, "loss", 0.1, 9.0)])
    assert store.metrics("j", "loss") == [MetricRow(1, 1, "loss", 0.9, 1.0), MetricRow(0, 2, "loss", 0.7, 2.0),
                                          MetricRow(1, 2, "loss", 0.6, 2.1)]  # by step, then arrival; no note
    assert [m.name for m in store.metrics("j")] == ["acc", "loss", "loss", "loss"] and store.metrics("j", "x") == []
    assert store.latest_metrics("j") == [MetricRow(0, 1, "acc", 0.5, 1.0), MetricRow(1, 2, "loss", 0.6, 2.1)]


# ---------------------------------------------------------------- transactions
def write_everything(store, job_id="j"):
    store.update_job(job_id, 1.0, "half", state=JobState.STARTING, attempt=1)
    store.insert_job("new", 2, spec(submission_id="s-new"), 1.0, "submitted")
    store.upsert_agent(AgentRecord("a", 2, ()), 1.0)
    store.set_allocations(job_id, [Allocation(job_id, "a", 0, 2, "h", (1, 2))])
    store.record_exit(job_id, WorkerExit(0, "a", 1))
    store.record_checkpoint(job_id, Checkpoint(5, "/c", 0, 1.0))
    store.append_logs(job_id, [out("lost")], "n1/x", first_seq=2)
    store.append_metrics(job_id, [MetricRow(0, 1, "loss", 0.5, 1.0)], "n1/x", first_seq=1)


@pytest.mark.parametrize("error", [RuntimeError, Crash])
def test_a_failed_event_leaves_nothing(store, error):
    store.insert_job("j", 1, spec(), 0.0, "submitted")
    store.append_logs("j", [out("kept")], "n1/x", first_seq=1)
    with pytest.raises(error):
        with store.transaction():
            write_everything(store)
            with store.transaction():  # a nested use joins the outermost
                store.append_logs("j", [out("lost too")])
            raise error("crash in the middle")
    assert store.job("j").state == JobState.QUEUED and store.job("j").attempt == 0
    assert [j.id for j in store.jobs()] == ["j"] and store.job_by_submission("s-new") is None
    assert store.next_job_seq() == 2 and store.events("j") == [(0.0, "submitted")]
    assert store.agents() == [] and store.allocations() == [] and store.exits("j") == []
    assert store.latest_checkpoint("j") is None and store.metrics("j") == []
    assert [l.text for l in store.logs("j")] == ["kept"]
    # What was undone can happen again: the same reports are new, and numbers continue from the last commit.
    assert store.record_exit("j", WorkerExit(0, "a", 1)) is True
    assert store.append_logs("j", [out("kept"), out("again")], "n1/x", first_seq=1) == 1
    assert store.append_metrics("j", [MetricRow(0, 1, "loss", 0.5, 1.0)], "n1/x", first_seq=1) == 1
    assert [(l.seq, l.text) for l in store.logs("j")] == [(1, "kept"), (2, "again")]


def test_a_nested_failure_rolls_back_the_whole_event(store):
    store.insert_job("j", 1, spec(), 0.0, "submitted")
    with pytest.raises(RuntimeError):
        with store.transaction(durable=True):
            store.update_job("j", 1.0, "outer", state=JobState.STARTING)
            with store.transaction():
                store.append_logs("j", [out("inner")])
                raise RuntimeError("inner")
    assert store.job("j").state == JobState.QUEUED and store.logs("j") == [] and len(store.events("j")) == 1


def test_an_event_commits_all_of_itself(store):
    store.insert_job("j", 1, spec(), 0.0, "submitted")
    with store.transaction(durable=True):
        write_everything(store)
        with store.transaction():
            store.append_logs("j", [out("inner")])
    assert store.job("j").state == JobState.STARTING and store.job_by_submission("s-new").id == "new"
    assert [e.rank for e in store.exits("j")] == [0] and store.latest_checkpoint("j").step == 5
    assert [l.text for l in store.logs("j")] == ["lost", "inner"] and len(store.metrics("j")) == 1
    assert [a.agent for a in store.allocations("j")] == ["a"] and [a.name for a in store.agents()] == ["a"]


def test_an_inner_failure_caught_inside_the_event_does_not_undo_it(store):
    """Nested uses join the outermost (no savepoints): only the outermost commits or rolls back."""
    store.insert_job("j", 1, spec(), 0.0, "submitted")
    with store.transaction():
        try:
            with store.transaction():
                store.append_logs("j", [out("written before the error")])
                raise RuntimeError("caught below")
        except RuntimeError:
            pass
        store.append_logs("j", [out("after")])
    assert [l.text for l in store.logs("j")] == ["written before the error", "after"]


# ---------------------------------------------------------------- threads and the reader
def test_threads_append_concurrently_and_every_line_gets_its_own_number(store):
    def ship(rank):
        for i in range(40):
            store.append_logs("j", [out(f"{rank}-{i}", rank=rank)])

    threads = [threading.Thread(target=ship, args=(rank,)) for rank in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lines = store.logs("j", limit=-1)
    assert [l.seq for l in lines] == list(range(1, 161))
    assert sorted(l.text for l in lines) == sorted(f"{r}-{i}" for r in range(4) for i in range(40))
    for rank in range(4):  # each thread's lines in its own order
        assert [l.text for l in lines if l.rank == rank] == [f"{rank}-{i}" for i in range(40)]


def test_the_reader_sees_commits(store):
    reader = store.reader()
    store.insert_job("1-ab", 1, spec(), 0.0, "submitted")
    store.append_logs("1-ab", [out("x"), out("y", rank=1)])
    assert reader.job("1-ab").id == "1-ab" and reader.job_by_seq(1).id == "1-ab" and reader.job("2-cd") is None
    assert reader.job_by_seq(2) is None and [l.text for l in reader.logs("1-ab", 0, -1, 10)] == ["x", "y"]
    assert [l.text for l in reader.logs("1-ab", 0, 1, 10)] == ["y"] and reader.logs("1-ab", 1, 0, 10) == []
    assert not reader.ended("1-ab") and not reader.ended("2-cd")
    store.set_allocations("1-ab", [Allocation("1-ab", "a", 0, 2, "h", (1,))])
    store.update_job("1-ab", 1.0, "failed", state=JobState.FAILED)
    assert reader.job("1-ab").state == JobState.FAILED and not reader.ended("1-ab")  # a node still holds it
    store.set_allocations("1-ab", [])
    assert reader.ended("1-ab")
    store.insert_job("2-cd", 2, spec(), 0.0, "submitted")
    store.update_job("2-cd", 1.0, "paused", state=JobState.PAUSED)
    assert reader.ended("2-cd") and store.reader().ended("2-cd")


def test_the_reader_never_sees_another_threads_transaction(store):
    """A follower reads the last commit: a transaction in progress (later rolled back) is never seen."""
    store.insert_job("j", 1, spec(), 0.0, "submitted")
    opened, release, seen = threading.Event(), threading.Event(), {}

    def event():
        with pytest.raises(RuntimeError):
            with store.transaction():
                store.update_job("j", 1.0, "failed", state=JobState.FAILED)  # ended, if it were seen
                store.append_logs("j", [out("uncommitted")])
                opened.set()
                release.wait(10)
                raise RuntimeError("rolled back")

    reader = store.reader()
    reads = {"job": lambda: reader.job("j").state, "by_seq": lambda: reader.job_by_seq(1).state,
             "logs": lambda: reader.logs("j", 0, -1, 10), "ended": lambda: reader.ended("j")}
    writer = threading.Thread(target=event)
    writer.start()
    assert opened.wait(10)
    followers = [threading.Thread(target=lambda name=name, read=read: seen.__setitem__(name, read()))
                 for name, read in reads.items()]  # each reads while the transaction is open
    for follower in followers:
        follower.start()
    followers[0].join(0.2)  # SQLite in a file answers at once; the others wait for the transaction to end
    release.set()
    writer.join(10)
    for follower in followers:
        follower.join(10)
    assert seen == {"job": JobState.QUEUED, "by_seq": JobState.QUEUED, "logs": [], "ended": False}
