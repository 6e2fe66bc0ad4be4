"""What only the SQLite store promises, beyond the contract of test_store.py: the state survives the process
(a reopen, a kill -9 in the middle of an event), a state file of another version is refused (nothing is
migrated: no release had another layout), and the job spec is stored through its codec (`JobSpec.to_json()`)."""

import json
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest

from cluster.coordinator.store import SqliteStore
from cluster.coordinator.store.state_file import UnreadableStateError
from cluster.shared.model import AgentRecord, Address, Gpu, JobSpec, JobState, LogLine
from tests.specs import flat_spec


def spec(**fields):
    return flat_spec(**{"entrypoint": ["x"], "slots": 2, **fields})


def test_survives_reopen(tmp_path):
    path = str(tmp_path / "c.sqlite")
    s = SqliteStore(path)
    s.insert_job("j", 1, spec(), 0.0, "s")
    record = AgentRecord("n1", 2, (Address("1.2.3.4", 24),), (Gpu(0, "GPU-a"), Gpu(1, "GPU-b")))
    s.upsert_agent(record, 0.0)
    s.append_logs("j", [LogLine(0, "stdout", "x", 0.0)])
    s.close()
    s = SqliteStore(path)
    assert s.job("j").spec == spec() and s.agents() == [record]
    s.append_logs("j", [LogLine(0, "stdout", "y", 0.0)])
    assert [l.seq for l in s.logs("j")] == [1, 2]
    reader = s.reader()
    assert reader.job("j").id == "j" and [l.text for l in reader.logs("j", 0, -1, 10)] == ["x", "y"]
    assert not reader.ended("j")
    s.close()


def test_the_spec_is_stored_through_its_codec(tmp_path):
    path = str(tmp_path / "c.sqlite")
    s = SqliteStore(path)
    submitted = spec(submission_id="s1", priority=2)
    s.insert_job("j", 1, submitted, 0.0, "s")
    s.close()
    db = sqlite3.connect(path)
    (stored,), = db.execute("SELECT spec FROM jobs WHERE id='j'").fetchall()
    db.close()
    assert stored == submitted.to_json() and JobSpec.from_dict(json.loads(stored)) == submitted


def test_a_kill_in_the_middle_of_an_event_leaves_none_of_it(tmp_path):
    """kill -9 while a transaction is open: the reopened file has every commit and nothing of the open one."""
    path = str(tmp_path / "c.sqlite")
    script = textwrap.dedent(f"""
        import os, signal
        from cluster.coordinator.store import SqliteStore
        from cluster.shared.model import Allocation, JobState, LogLine
        from tests.specs import flat_spec
        s = SqliteStore({path!r})
        s.insert_job("j", 1, flat_spec(["x"], 2), 0.0, "submitted")
        s.append_logs("j", [LogLine(0, "stdout", "committed", 0.0)])
        with s.transaction():
            s.update_job("j", 1.0, "placed", state=JobState.STARTING)
            s.set_allocations("j", [Allocation("j", "a", 0, 2, "h", (1, 2))])
            s.append_logs("j", [LogLine(0, "stdout", "open", 1.0)])
            os.kill(os.getpid(), signal.SIGKILL)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == -9, done.stderr
    s = SqliteStore(path)
    assert s.job("j").state == JobState.QUEUED and s.allocations() == []
    assert [m for _, m in s.events("j")] == ["submitted"]
    assert [l.text for l in s.logs("j")] == ["committed"]
    s.close()


def test_a_durable_transaction_syncs_its_commit_and_only_its_own(tmp_path):
    s = SqliteStore(str(tmp_path / "c.sqlite"))
    synchronous = lambda: s._db.execute("PRAGMA synchronous").fetchone()[0]  # 1 NORMAL, 2 FULL
    with s.transaction(durable=True):
        assert synchronous() == 2
    assert synchronous() == 1
    try:
        with s.transaction(durable=True):
            raise RuntimeError("rolled back")
    except RuntimeError:
        pass
    assert synchronous() == 1
    with s.transaction():
        with s.transaction(durable=True):  # a nested request cannot upgrade a transaction begun
            assert synchronous() == 1
    s.close()


def test_group_commit_one_fsync_covers_every_commit_made_before_it(tmp_path, monkeypatch):
    """Durable submissions commit at once and sync after: callers waiting together share one fsync of the
    write-ahead log, and none returns before an fsync that began after its commit."""
    import threading

    s = SqliteStore(str(tmp_path / "c.sqlite"))
    real, syncs, started = s._group._fsync_log, [], threading.Event()
    gate = threading.Event()

    def slow_fsync():
        syncs.append(s.commits)  # the commits this fsync covers (all of them are in the log already)
        started.set()
        gate.wait(10)  # the first one is slow: the others queue behind it
        real()

    monkeypatch.setattr(s._group, "_fsync_log", slow_fsync)
    synced_marks, errors = [], []

    def submitter(i):
        try:
            with s.transaction():
                s.insert_job(f"j{i}", i + 1, spec(), 0.0, "s")
            mark = s.commits
            s.sync(mark)
            synced_marks.append((mark, s._group.synced))
        except Exception as e:  # reported below
            errors.append(e)

    first = threading.Thread(target=submitter, args=(0,))
    first.start()
    assert started.wait(10)
    others = [threading.Thread(target=submitter, args=(i,)) for i in range(1, 33)]
    for t in others:
        t.start()
    deadline = time.monotonic() + 10
    while s.commits < 33 and time.monotonic() < deadline:  # all committed while the first fsync waits
        time.sleep(0.005)
    assert s.commits == 33 and len(synced_marks) == 0  # committed, none acknowledged: nothing synced them yet
    gate.set()
    for t in [first, *others]:
        t.join(10)
    assert not errors and len(synced_marks) == 33
    assert all(synced >= mark for mark, synced in synced_marks)  # each waited for an fsync covering its commit
    assert len(syncs) <= 3, syncs  # the first caller's fsync, then one for the 32 that waited behind it
    s.sync()  # nothing new: no fsync
    assert len(syncs) <= 3
    s.close()
    s = SqliteStore(str(tmp_path / "c.sqlite"))
    assert len(s.jobs()) == 33
    s.close()


def test_a_submission_id_is_found_through_its_index_not_a_scan(tmp_path):
    """A retried submission is found by its id on every submission: with a scan, each one cost the whole
    jobs table (a burst with 10,000 jobs stored ran at a third of its rate)."""
    from cluster.coordinator.store.sqlite import SUBMISSION_QUERY

    s = SqliteStore(str(tmp_path / "c.sqlite"))
    s.insert_job("j1", 1, spec(submission_id="abc"), 0.0, "s")
    plan = " ".join(str(row[3]) for row in s._db.execute("EXPLAIN QUERY PLAN " + SUBMISSION_QUERY, ("abc",)))
    assert "USING INDEX jobs_submission" in plan, plan
    assert s.job_by_submission("abc").id == "j1" and s.job_by_submission("abd") is None
    assert s.job_by_submission("") is None
    s.close()


def test_a_state_file_of_another_version_is_refused_in_one_line(tmp_path):
    """No release had another layout: nothing is migrated, and a development build's file is never half-read."""
    unmarked = str(tmp_path / "unmarked.sqlite")  # before the mark: tfdist's tables, application id 0
    db = sqlite3.connect(unmarked)
    db.executescript("CREATE TABLE jobs (id TEXT PRIMARY KEY, seq INTEGER NOT NULL, spec TEXT NOT NULL);")
    db.close()
    newer = str(tmp_path / "newer.sqlite")  # marked, another schema version
    SqliteStore(newer).close()
    db = sqlite3.connect(newer)
    db.execute("PRAGMA user_version=3")
    db.close()
    for path, version in ((unmarked, 0), (newer, 3)):
        with pytest.raises(UnreadableStateError) as refused:
            SqliteStore(path)
        assert str(refused.value) == (f"state file {path} was written by another version of tfdist (schema {version}, "
                                      "this one reads 2); move it away to start with no jobs, or run the tfdist that "
                                      "wrote it")


def test_a_failed_fsync_is_said_honestly_and_never_retried(tmp_path, monkeypatch):
    """The transaction committed before its sync failed: the message says it was stored but not synced,
    and every later sync fails too (a second fsync could succeed without the pages the kernel dropped)."""
    import errno
    import os

    import pytest

    from tfdist.errors import ResourceExhaustedError

    s = SqliteStore(str(tmp_path / "c.sqlite"))
    with s.transaction():
        s.insert_job("j1", 1, spec(), 0.0, "s")
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(errno.ENOSPC, "No space left")))
    with pytest.raises(ResourceExhaustedError, match="what was just stored could not be synced to disk; free space "
                                                     "and restart the coordinator"):
        s.sync(s.commits)
    monkeypatch.setattr(os, "fsync", real)
    with s.transaction():
        s.insert_job("j2", 2, spec(), 0.0, "s")
    with pytest.raises(ResourceExhaustedError):
        s.sync(s.commits)  # sticky: not acknowledged on a retried fsync
    s.close()
