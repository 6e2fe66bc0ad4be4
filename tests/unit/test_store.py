"""One contract, run against the SQLite store in a file and in memory."""

import pytest

from cluster.shared.model import (AgentRecord, Address, Allocation, AllocState, Gpu, JobSpec, JobState, LogLine,
                           MetricRow, WorkerExit)
from cluster.coordinator.store import Reader, Store


@pytest.fixture(params=["file", "memory"])
def store(request, tmp_path):
    s = Store(str(tmp_path / "state" / "c.sqlite") if request.param == "file" else ":memory:")
    yield s
    s.close()


def spec(**kw):
    return JobSpec(entrypoint=("x",), slots=2, **kw)


def test_job_roundtrip_and_events(store):
    store.insert_job("1-ab", 1, spec(submission_id="s1"), 10.0, "submitted")
    store.update_job("1-ab", 11.0, "placed", state=JobState.STARTING)
    job = store.job("1-ab")
    assert job.state == JobState.STARTING and job.spec == spec(submission_id="s1") and job.seq == 1
    assert [m for _, m in store.events("1-ab")] == ["submitted", "placed"]
    assert store.next_job_seq() == 2 and store.job_by_submission("s1").id == "1-ab"
    assert [j.id for j in store.jobs([JobState.STARTING])] == ["1-ab"] and store.jobs([JobState.QUEUED]) == []


def test_allocations_exits_logs(store):
    store.insert_job("j", 1, spec(), 0.0, "s")
    alloc = Allocation("j", "a", 0, 2, "h", (1, 2), (3, 4), AllocState.LEASED)
    store.set_allocations("j", [alloc])
    assert store.allocations("j") == [alloc]
    assert store.record_exit("j", WorkerExit(0, "a", 0, ("bye",), 1.0)) is True
    assert store.record_exit("j", WorkerExit(0, "a", 0, ("bye",), 1.0)) is False  # a retried report counts once
    assert store.exits("j") == [WorkerExit(0, "a", 0, ("bye",), 1.0)]
    store.append_logs("j", [LogLine(0, "stdout", "one", 1.0), LogLine(1, "stderr", "two", 1.1)])
    store.append_logs("j", [LogLine(0, "stdout", "three", 1.2)])
    assert [(l.seq, l.text) for l in store.logs("j")] == [(1, "one"), (2, "two"), (3, "three")]
    assert [l.text for l in store.logs("j", after_seq=1, rank=0)] == ["three"]


def out(text):
    return LogLine(0, "stdout", text, 1.0)


def test_retried_batches_are_stored_once(store):
    store.insert_job("j", 1, spec(), 0.0, "s")
    assert store.append_logs("j", [out("a"), out("b")], "n1/x", first_seq=1) == 2
    # The same batch again (its answer was lost), then one overlapping and going further.
    assert store.append_logs("j", [out("a"), out("b")], "n1/x", first_seq=1) == 0
    assert store.append_logs("j", [out("b"), out("c")], "n1/x", first_seq=2) == 1
    assert store.append_logs("j", [out("a")], "n2/y", first_seq=1) == 1  # another source
    assert [l.text for l in store.logs("j")] == ["a", "b", "c", "a"]
    assert store.append_metrics("j", [MetricRow(0, 1, "loss", 0.5, 1.0)], "n1/x", first_seq=1) == 1
    assert store.append_metrics("j", [MetricRow(0, 1, "loss", 0.5, 1.0)], "n1/x", first_seq=1) == 0
    assert len(store.metrics("j")) == 1


def test_a_failed_event_leaves_nothing(store):
    store.insert_job("j", 1, spec(), 0.0, "s")
    with pytest.raises(RuntimeError):
        with store.transaction():
            store.update_job("j", 1.0, "half", state=JobState.STARTING)
            store.set_allocations("j", [Allocation("j", "a", 0, 2, "h", (1, 2))])
            raise RuntimeError("crash in the middle")
    assert store.job("j").state == JobState.QUEUED and store.allocations() == [] and len(store.events("j")) == 1


def test_survives_reopen(tmp_path):
    path = str(tmp_path / "c.sqlite")
    s = Store(path)
    s.insert_job("j", 1, spec(), 0.0, "s")
    record = AgentRecord("n1", 2, (Address("1.2.3.4", 24),), (Gpu(0, "GPU-a"), Gpu(1, "GPU-b")))
    s.upsert_agent(record, 0.0)
    s.append_logs("j", [LogLine(0, "stdout", "x", 0.0)])
    s.close()
    s = Store(path)
    assert s.job("j").spec == spec() and s.agents() == [record]
    s.append_logs("j", [LogLine(0, "stdout", "y", 0.0)])
    assert [l.seq for l in s.logs("j")] == [1, 2]
    reader = Reader(s)
    assert reader.job("j").id == "j" and [l.text for l in reader.logs("j", 0, -1, 10)] == ["x", "y"]
    assert not reader.ended("j")


def test_first_release_state_files_are_migrated(tmp_path):
    import sqlite3
    path = str(tmp_path / "old.sqlite")
    db = sqlite3.connect(path)
    db.executescript("""
CREATE TABLE jobs (id TEXT PRIMARY KEY, seq INTEGER NOT NULL, spec TEXT NOT NULL, state TEXT NOT NULL,
  priority INTEGER NOT NULL, slots INTEGER NOT NULL, submitted_at REAL NOT NULL, started_at REAL, ended_at REAL,
  message TEXT NOT NULL DEFAULT '', exit_code INTEGER);
CREATE TABLE allocations (job_id TEXT NOT NULL, agent TEXT NOT NULL, node_rank INTEGER NOT NULL,
  slots INTEGER NOT NULL, address TEXT NOT NULL, ports TEXT NOT NULL, state TEXT NOT NULL,
  PRIMARY KEY (job_id, agent));
INSERT INTO jobs VALUES ('1-aa', 1, '{"slots": 1, "entrypoint": ["x"]}', 'STARTING', 0, 1, 0, NULL, NULL, '', NULL);
INSERT INTO allocations VALUES ('1-aa', 'n1', 0, 1, '127.0.0.1', '[29500]', 'PREPARING');
""")
    db.commit()
    db.close()
    s = Store(path)
    assert s.allocations("1-aa") == [Allocation("1-aa", "n1", 0, 1, "127.0.0.1", (29500,), (), AllocState.LEASING)]
    assert s.job("1-aa").placement == ()


def test_metrics_and_latest(store):
    store.append_metrics("j", [MetricRow(0, 1, "loss", 0.9, 1.0), MetricRow(0, 1, "acc", 0.5, 1.0), MetricRow(1, 2, "loss", 0.7, 2.0)])
    store.append_metrics("j", [MetricRow(0, 2, "loss", 0.6, 2.1)])
    assert [(m.step, m.value) for m in store.metrics("j", "loss")] == [(1, 0.9), (2, 0.7), (2, 0.6)]
    latest = {m.name: (m.rank, m.step, m.value) for m in store.latest_metrics("j")}
    assert latest == {"acc": (0, 1, 0.5), "loss": (0, 2, 0.6)}
    assert store.latest_metrics("other") == []
