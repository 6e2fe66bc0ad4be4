"""The coordinator's state directory (issue 16, Measured 6 and 7): one coordinator per directory, private
files, state that cannot be read refused in one line (never an empty start), and rows that cannot be read
skipped and reported once, never breaking `tfdist jobs`. Real coordinator processes on real SQLite files."""

import json
import os
import shutil
import signal
import socket
import sqlite3
import time
import stat
import subprocess
import tempfile

import pytest

from cluster.coordinator.store import SqliteStore
from cluster.coordinator.store.state_file import LOCK_NAME, StateInUseError, UnreadableStateError
from cluster.shared.model import JobState, WorkerExit
from tests.conftest import LocalCluster, run_cli
from tests.other_user import NOBODY
from tfdist.errors import UnsafePathError
from tests.specs import flat_spec



def spec(**fields):
    return flat_spec(**{"entrypoint": ["x"], "slots": 1, **fields})


def one_line(result) -> str:
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def start_coordinator(state_dir, marker, timeout=60):
    """`tfdist coordinator` on STATE_DIR as a real process, run to its exit (a refusal) or its banner."""
    return run_cli(["coordinator", "--listen", "127.0.0.1:0", "--state-dir", str(state_dir)], marker, timeout=timeout)


# ---------------------------------------------------------------- one coordinator per state dir
def test_a_second_coordinator_on_the_state_dir_is_refused_naming_the_first(tmp_path, marker):
    first = LocalCluster(tmp_path, marker)
    try:
        with open(os.path.join(first.state_dir, "coordinator.sqlite"), "rb"):
            pass
        refused = start_coordinator(first.state_dir, marker)
        assert refused.returncode == 2
        assert one_line(refused) == (f"tfdist: error: state dir {first.state_dir} is in use by the coordinator pid "
                                     f"{first.coordinator.pid} on host {socket.gethostname()}; stop it first (or give "
                                     "this coordinator another --state-dir)")
        assert first.coordinator.poll() is None and first.cli("jobs").returncode == 0  # the first goes on
        first.coordinator.send_signal(signal.SIGKILL)  # the kernel lets go of a dead holder's lock
        first.coordinator.wait(timeout=30)
        first.start_coordinator("127.0.0.1:0")
        assert first.cli("jobs").returncode == 0
    finally:
        first.close()


def test_the_lock_is_refused_in_process_too_and_released_by_close(tmp_path):
    path = str(tmp_path / "state" / "coordinator.sqlite")
    held = SqliteStore(path)
    with pytest.raises(StateInUseError, match=f"in use by the coordinator pid {os.getpid()} on host"):
        SqliteStore(path)
    assert json.loads((tmp_path / "state" / LOCK_NAME).read_text()) == {"pid": os.getpid(),
                                                                      "host": socket.gethostname()}
    held.close()
    SqliteStore(path).close()


# ---------------------------------------------------------------- private
def modes(state_dir):
    return {name: stat.S_IMODE(os.lstat(os.path.join(state_dir, name)).st_mode) for name in os.listdir(state_dir)}


def test_the_state_dir_is_0700_and_its_files_0600_wal_and_shm_included(tmp_path):
    old_umask = os.umask(0o022)
    try:
        state_dir = str(tmp_path / "state")
        s = SqliteStore(os.path.join(state_dir, "coordinator.sqlite"))
        s.insert_job("1-a", 1, spec(environment={"API_KEY": "secret"}), 0.0, "submitted")
        reader = s.reader()
        assert reader.job("1-a").id == "1-a"
        assert stat.S_IMODE(os.stat(state_dir).st_mode) == 0o700
        assert modes(state_dir) == {"coordinator.sqlite": 0o600, "coordinator.sqlite-wal": 0o600,
                                    "coordinator.sqlite-shm": 0o600, LOCK_NAME: 0o600}
        s.close()
    finally:
        os.umask(old_umask)


def test_an_older_releases_0644_files_are_tightened(tmp_path):
    state_dir = tmp_path / "state"
    path = str(state_dir / "coordinator.sqlite")
    SqliteStore(path).close()
    os.chmod(path, 0o644)
    s = SqliteStore(path)
    assert modes(state_dir)["coordinator.sqlite"] == 0o600
    s.close()


def test_a_state_dir_open_to_others_or_made_by_another_user_is_refused(tmp_path, marker):
    open_dir = tmp_path / "open"
    open_dir.mkdir(mode=0o755)
    os.chmod(open_dir, 0o755)
    refused = start_coordinator(open_dir, marker)
    assert refused.returncode != 0 and "is open to other users (mode 0755" in one_line(refused)
    shared = tempfile.mkdtemp(prefix="tfdist-test-shared-")  # a /tmp-like place every user can write to
    try:
        os.chmod(shared, 0o1777)
        theirs = os.path.join(shared, "state")
        subprocess.run([*NOBODY, "mkdir", "-m", "700", theirs], check=True, timeout=30)  # nobody came first
        refused = start_coordinator(theirs, marker)
        assert refused.returncode != 0 and "another user made it first" in one_line(refused)
    finally:
        shutil.rmtree(shared)
    assert os.listdir(open_dir) == []


def test_a_symlink_planted_at_the_state_file_is_refused(tmp_path):
    state_dir = tmp_path / "state"
    state_dir.mkdir(mode=0o700)
    target = tmp_path / "elsewhere.sqlite"
    os.symlink(target, state_dir / "coordinator.sqlite")
    with pytest.raises(UnsafePathError, match="is a symlink"):
        SqliteStore(str(state_dir / "coordinator.sqlite"))
    assert not target.exists()


# ---------------------------------------------------------------- state that cannot be read
def foreign(path):
    db = sqlite3.connect(path)
    db.executescript("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL); INSERT INTO invoices VALUES (1, 2);")
    db.close()


def truncated(path):
    s = SqliteStore(path)
    for i in range(1, 200):
        s.insert_job(f"{i}-a", i, spec(environment={"PAD": "x" * 4000}), 0.0, "submitted")
    s.close()
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)


def tfdist_then_emptied(path):
    s = SqliteStore(path)
    s.insert_job("1-a", 1, spec(), 0.0, "submitted")
    s.close()
    open(path, "w").close()


BROKEN = {
    "foreign": (foreign, "is an SQLite database of another program (tables invoices), not tfdist's state; move it "
                         "away, or choose another --state-dir"),
    "truncated": (truncated, "is truncated: "),
    "text": (lambda p: open(p, "w").write("jobs:\n  - 1\n" * 50), "is not an SQLite database (it starts with "
                                                                  "b'jobs:\\n  - 1\\njobs'), so not tfdist's state"),
    "directory": (os.mkdir, "is a directory, not tfdist's state; move it away"),
    "emptied": (tfdist_then_emptied, "is empty (0 bytes): tfdist writes a new state file whole, so this one lost its "
                                     "content; restore it from a backup, or move it away to start with no jobs"),
}


@pytest.mark.parametrize("kind", BROKEN)
def test_state_that_cannot_be_read_is_refused_in_one_line_and_left_as_it_was(tmp_path, marker, kind):
    make, said = BROKEN[kind]
    state_dir = tmp_path / "state"
    state_dir.mkdir(mode=0o700)
    path = str(state_dir / "coordinator.sqlite")
    make(path)
    before = open(path, "rb").read() if os.path.isfile(path) else None
    refused = start_coordinator(state_dir, marker)
    assert refused.returncode == 2
    assert one_line(refused).startswith(f"tfdist: error: state file {path} ") and said in refused.stderr
    assert (open(path, "rb").read() if os.path.isfile(path) else None) == before  # untouched
    with pytest.raises(UnreadableStateError):
        SqliteStore(path)
    SqliteStore(str(tmp_path / "fresh" / "coordinator.sqlite")).close()  # the lock went with the refusal


def test_a_brand_new_state_is_made_whole_and_a_crash_while_making_it_leaves_none(tmp_path):
    state_dir = tmp_path / "state"
    state_dir.mkdir(mode=0o700)
    (state_dir / "coordinator.sqlite.new").write_bytes(b"half-made by a run that crashed")
    s = SqliteStore(str(state_dir / "coordinator.sqlite"))
    assert s.jobs() == [] and not (state_dir / "coordinator.sqlite.new").exists()
    s.close()
    assert sqlite3.connect(str(state_dir / "coordinator.sqlite")).execute("PRAGMA application_id").fetchone()[0]


# ---------------------------------------------------------------- rows that cannot be read
def damage(path):
    """Four jobs; job 2's spec is not JSON, job 3's state is one no release knows, job 1's exit has damaged
    last lines."""
    s = SqliteStore(path)
    now = time.time()  # job 4 ended just now: within the default retention
    for i in (1, 2, 3, 4):
        s.insert_job(f"{i}-a", i, spec(name=f"job{i}"), now + i, "submitted")
    s.update_job("4-a", now + 5, "done", state=JobState.SUCCEEDED, ended_at=now + 5)
    s.record_exit("1-a", WorkerExit(0, "n1", 1, ("boom",), now + 2))
    s.close()
    db = sqlite3.connect(path)
    db.execute("UPDATE jobs SET spec='{not json' WHERE id='2-a'")
    db.execute("UPDATE jobs SET state='EXPLODED' WHERE id='3-a'")
    db.execute("UPDATE exits SET last_lines='[\"cut' WHERE job_id='1-a'")
    db.commit()
    db.close()


def test_a_spec_that_is_json_but_no_job_spec_is_a_row_skipped_not_a_store_that_fails(tmp_path, caplog):
    """The layout before the spec codec (`{"slots": 1, ...}`, which no release wrote and nothing reads any more):
    its job is reported once and skipped; the coordinator, which lists jobs as it starts, still starts."""
    path = str(tmp_path / "c.sqlite")
    s = SqliteStore(path)
    for i in (1, 2):
        s.insert_job(f"{i}-a", i, spec(name=f"job{i}"), float(i), "submitted")
    s.close()
    db = sqlite3.connect(path)
    db.execute("""UPDATE jobs SET spec='{"slots": 1, "entrypoint": ["x"]}' WHERE id='2-a'""")
    db.commit()
    db.close()
    s = SqliteStore(path)
    assert [j.id for j in s.jobs()] == ["1-a"] and s.job("2-a") is None
    s.close()
    assert sum("2-a" in r.getMessage() for r in caplog.records) == 1, [r.getMessage() for r in caplog.records]


def test_rows_that_cannot_be_read_are_skipped_and_reported_once(tmp_path, caplog):
    path = str(tmp_path / "c.sqlite")
    damage(path)
    s = SqliteStore(path)
    for _ in range(3):
        assert [j.id for j in s.jobs()] == ["1-a", "4-a"] and [j.id for j in s.jobs([JobState.QUEUED])] == ["1-a"]
        assert s.job("2-a") is None and s.job("3-a") is None and s.reader().job("3-a") is None
        assert [j.id for j in s.jobs_page()[0]] == ["4-a", "1-a"] and s.count_jobs() == 4
        assert s.reader().ended("3-a")  # a follower of it stops: nothing of it can run
        assert [(e.exit_code, e.last_lines) for e in s.exits("1-a")] == [
            (1, ("(these lines cannot be read from the coordinator's state)",))]  # the exit itself still counts
    reports = [r.getMessage() for r in caplog.records if "cannot be read" in r.getMessage()]
    assert len(reports) == 3, reports
    assert reports[2].startswith("job 1-a: a row of table exits") and "JSONDecodeError" in reports[2]
    assert reports[0].startswith("job 2-a: a row of table jobs") and "JSONDecodeError" in reports[0]
    assert reports[1].startswith("job 3-a: a row of table jobs") and "'EXPLODED' is not a valid JobState" in reports[1]
    s.close()


def test_tfdist_jobs_works_over_rows_that_cannot_be_read(tmp_path, marker):
    state_dir = tmp_path / "state"
    state_dir.mkdir(mode=0o700)
    damage(str(state_dir / "coordinator.sqlite"))
    cluster = LocalCluster(tmp_path, marker, state_dir=str(state_dir))
    try:
        for _ in range(2):
            listed = cluster.cli("jobs")
            assert listed.returncode == 0, listed.stderr
            assert [line.split()[0] for line in listed.stdout.splitlines()[1:]] == ["1-a", "4-a"]
            assert [j["id"] for j in cluster.json("jobs")["jobs"]] == ["1-a", "4-a"]
        assert cluster.cli("job", "1-a").returncode == 0
        shown = cluster.cli("job", "3-a")
        assert shown.returncode == 1 and "job 3-a not found" in one_line(shown)
        log = (tmp_path / "coordinator.log").read_text()
        assert log.count("job 2-a: a row of table jobs") == 1 and log.count("job 3-a: a row of table jobs") == 1, log
    finally:
        cluster.close()


def test_a_state_file_another_program_holds_locked_is_one_line_naming_that(tmp_path):
    path = str(tmp_path / "c.sqlite")
    SqliteStore(path).close()
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")  # e.g. someone's `sqlite3` shell in the middle of an edit
    try:
        with pytest.raises(UnreadableStateError, match=f"state file {path} is locked by another program .*; stop it"):
            SqliteStore(path)  # after SQLite's busy timeout
    finally:
        other.execute("ROLLBACK")
        other.close()
    SqliteStore(path).close()
