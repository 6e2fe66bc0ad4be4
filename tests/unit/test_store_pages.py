"""The StateStore contract, continued (same three implementations as test_store.py): the owner is stored,
jobs come a page at a time newest first, and retention prunes finished jobs by its rule, in batches, never
an active one or one holding a node, never giving a job number again."""

import pytest

from cluster.coordinator.store import MemoryStore, SqliteStore
from cluster.coordinator.store.retention import DAY, Pruner, Retention
from cluster.shared.model import Allocation, Checkpoint, JobState, LogLine, MetricRow, WorkerExit
from tests.unit.test_store import spec, store  # noqa: F401 (the fixture: every implementation)

FINISHED = (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELED)


def add(store, n, state=JobState.SUCCEEDED, ended=1000.0, first=1):
    for seq in range(first, first + n):
        store.insert_job(f"{seq}-x", seq, spec(), 0.0, "submitted", owner=f"user{seq % 2}")
        if state != JobState.QUEUED:
            store.update_job(f"{seq}-x", ended, "ended", state=state, ended_at=ended)


def test_the_owner_is_stored(store):
    store.insert_job("1-a", 1, spec(), 0.0, "submitted", owner="alice")
    store.insert_job("2-b", 2, spec(), 0.0, "submitted")
    assert [(j.id, j.owner) for j in store.jobs()] == [("1-a", "alice"), ("2-b", "")]
    assert store.job("1-a").owner == "alice" and store.reader().job("1-a").owner == "alice"


def test_jobs_come_a_page_at_a_time_newest_first(store):
    add(store, 7)
    add(store, 3, JobState.QUEUED, first=8)
    for source in (store, store.reader()):
        page, below = source.jobs_page(limit=4)
        assert [j.seq for j in page] == [10, 9, 8, 7] and below == 7
        page, below = source.jobs_page(before_seq=below, limit=4)
        assert [j.seq for j in page] == [6, 5, 4, 3] and below == 3
        page, below = source.jobs_page(before_seq=below, limit=4)
        assert [j.seq for j in page] == [2, 1] and below is None
        page, below = source.jobs_page([JobState.QUEUED], limit=3)
        assert [j.seq for j in page] == [10, 9, 8] and below is None  # exactly full: nothing older matches
        assert source.jobs_page([JobState.RUNNING]) == ([], None)
        assert source.count_jobs() == 10 and source.count_jobs([JobState.QUEUED]) == 3
        assert source.count_jobs(FINISHED) == 7 and source.count_jobs([JobState.PAUSED]) == 0


def output(store, job_id, lines=3):
    store.append_logs(job_id, [LogLine(0, "stdout", f"line {i}", 1.0) for i in range(lines)])
    store.append_metrics(job_id, [MetricRow(0, 1, "loss", 0.5, 1.0)])
    store.record_exit(job_id, WorkerExit(0, "a", 0))
    store.record_checkpoint(job_id, Checkpoint(1, "/c", 0, 1.0))


def purge(store):
    while store.purge_output(2):
        pass


def test_finished_jobs_past_the_newest_n_are_pruned_with_everything_of_theirs(store):
    add(store, 5)
    add(store, 2, JobState.QUEUED, first=6)
    for i in range(1, 8):
        output(store, f"{i}-x")
    assert store.prune_finished(now=2000.0, keep_jobs=3, keep_seconds=0, max_jobs=100) == ["1-x", "2-x"]
    purge(store)
    assert [j.seq for j in store.jobs()] == [3, 4, 5, 6, 7]
    for gone in ("1-x", "2-x"):
        assert store.job(gone) is None and store.logs(gone) == [] and store.metrics(gone) == []
        assert store.exits(gone) == [] and store.latest_checkpoint(gone) is None and store.events(gone) == []
    assert len(store.logs("3-x")) == 3 and store.exits("3-x") and store.latest_checkpoint("3-x")
    assert store.prune_finished(now=2000.0, keep_jobs=3, keep_seconds=0, max_jobs=100) == []  # the rule holds now


def test_finished_jobs_that_ended_long_ago_are_pruned_and_active_ones_never(store):
    add(store, 2, ended=100.0)
    add(store, 2, ended=80000.0, first=3)
    add(store, 2, JobState.QUEUED, first=5)
    store.update_job("6-x", 1.0, "paused", state=JobState.PAUSED)
    store.set_allocations("1-x", [Allocation("1-x", "a", 0, 2, "h", (1,))])  # still holds a node
    assert store.prune_finished(now=100.0 + DAY, keep_jobs=0, keep_seconds=DAY / 2, max_jobs=100) == ["2-x"]
    assert [j.seq for j in store.jobs()] == [1, 3, 4, 5, 6]
    assert store.prune_finished(now=1e9, keep_jobs=0, keep_seconds=0, max_jobs=100) == []  # no limit: keep all


def test_pruning_goes_in_batches_and_never_gives_a_number_again(store):
    add(store, 10)
    assert store.prune_finished(now=0.0, keep_jobs=1, keep_seconds=0, max_jobs=4) == ["1-x", "2-x", "3-x", "4-x"]
    assert store.prune_finished(now=0.0, keep_jobs=1, keep_seconds=0, max_jobs=4) == ["5-x", "6-x", "7-x", "8-x"]
    assert store.prune_finished(now=0.0, keep_jobs=1, keep_seconds=0, max_jobs=4) == ["9-x"]
    assert store.next_job_seq() == 11
    assert store.prune_finished(now=1e9, keep_jobs=0, keep_seconds=1.0, max_jobs=4) == ["10-x"]  # even the newest
    assert store.jobs() == [] and store.next_job_seq() == 11


def test_a_failed_prune_leaves_nothing(store):
    add(store, 3)
    with pytest.raises(RuntimeError):
        with store.transaction():
            store.prune_finished(now=0.0, keep_jobs=1, keep_seconds=0, max_jobs=10)
            raise RuntimeError("crash")
    assert [j.seq for j in store.jobs()] == [1, 2, 3] and store.next_job_seq() == 4
    assert store.job("1-x").spec == spec()


def test_purging_the_output_of_pruned_jobs_is_bounded_per_call(tmp_path):
    s = SqliteStore(str(tmp_path / "c.sqlite"))
    add(s, 2)
    output(s, "1-x", lines=7)
    s.prune_finished(now=0.0, keep_jobs=1, keep_seconds=0, max_jobs=10)
    assert [s.purge_output(3) for _ in range(4)] == [3, 3, 3, 0]  # 7 lines, 1 metric row and the queue entry
    assert s.logs("1-x") == [] and s.metrics("1-x") == [] and len(s.logs("2-x")) == 0
    s.close()


def test_one_purge_finishes_many_pruned_jobs_without_output(tmp_path):
    # One job a transaction (a pause between them) fell behind 500 jobs/s ending: a whole round then went
    # to the purge while the jobs table grew (benchmarks/memory_scale.py).
    s = SqliteStore(str(tmp_path / "c.sqlite"))
    add(s, 60)
    output(s, "1-x", lines=2)
    assert len(s.prune_finished(now=0.0, keep_jobs=1, keep_seconds=0, max_jobs=100)) == 59
    assert s.purge_output(5000) == 2 + 1 + 59 and s.purge_output(5000) == 0  # 2 lines, 1 metric row, 59 jobs
    s.close()


@pytest.mark.parametrize("kind", ["sqlite", "memory"])
def test_the_pruner_applies_the_rule_on_its_own_thread(tmp_path, kind):
    s = SqliteStore(str(tmp_path / "c.sqlite")) if kind == "sqlite" else MemoryStore()
    add(s, 30, ended=10.0)
    for i in range(1, 31):
        output(s, f"{i}-x", lines=50)
    pruner = Pruner(s, Retention(keep_jobs=5, keep_days=0, batch_jobs=7, batch_rows=20, pause=0.0), clock=lambda: 20.0)
    jobs, rows = pruner.prune()
    assert jobs == 25 and [j.seq for j in s.jobs()] == [26, 27, 28, 29, 30]
    assert all(s.logs(f"{i}-x") == [] for i in range(1, 26)) and len(s.logs("30-x")) == 50
    assert rows == (25 * 52 if kind == "sqlite" else 0)  # 50 lines + 1 metric + the queue entry, per job
    s.close()


def test_a_store_given_a_retention_prunes_by_itself_until_closed(tmp_path):
    from tests.conftest import wait_for

    path = str(tmp_path / "c.sqlite")
    s = SqliteStore(path)
    add(s, 12, ended=10.0)
    s.close()
    s = SqliteStore(path, retention=Retention(keep_jobs=4, keep_days=0, every=0.05))
    wait_for(lambda: s.count_jobs() == 4, "the store's pruner to keep the newest 4 finished jobs", timeout=30)
    assert [j.seq for j in s.jobs()] == [9, 10, 11, 12]
    s.close()
    assert not s._pruner._thread.is_alive()
