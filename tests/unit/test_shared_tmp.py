"""The agent's per-user temp directories on a machine shared with other users (issue 16, Measured 2):
`$TMPDIR/tfdist-ports-UID` (port leases) and `$TMPDIR/tfdist-agent-UID` (worker process groups). User nobody
(setpriv) comes first: pre-creates them, plants symlinks at a lock file and at the `.tmp` file, holds the
lock files. Each case is one UnsafePathError line naming the directory and nobody, nothing is written
through a symlink, and a real `tfdist launch` exits with that line, not "no free ports". Also: workers get
the user's umask, not the daemon's 077."""

import fcntl
import os
import select
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap

import pytest

from cluster.agent.gang import Gang, WorkerLaunch
from cluster.agent.leftovers import GroupsFile, dead_agents_groups
from cluster.agent.ports import lease_dir, lease_exact, lease_for_job, lease_range
from tests.conftest import LocalCluster, cli_env, run_cli
from tests.other_user import NOBODY, runnable_python
from tfdist.errors import UnsafePathError

UID = os.geteuid()


def as_nobody(*argv):
    subprocess.run([*NOBODY, *argv], check=True, timeout=30)


@pytest.fixture
def shared(monkeypatch):
    """TMPDIR: a fresh /tmp-like directory (1777, root's) that nobody can reach and write to."""
    path = tempfile.mkdtemp(prefix="tfdist-test-shared-")
    os.chmod(path, 0o1777)
    monkeypatch.setattr(tempfile, "tempdir", path)
    yield path
    shutil.rmtree(path)


@pytest.fixture
def secret(shared):
    """A file of root's that a symlink of nobody's points at: it must stay as it is."""
    path = os.path.join(shared, "root-secret")
    with open(path, "w") as f:
        f.write("precious")
    os.chmod(path, 0o600)
    return path


def nobody_made(shared, name, mode="777"):
    path = os.path.join(shared, name)
    as_nobody("mkdir", "-m", mode, path)
    return path


def refusal(error: pytest.ExceptionInfo, path: str) -> str:
    text = str(error.value)
    assert "\n" not in text, text
    assert text.startswith(f"{path} belongs to nobody (uid 65534), not to you"), text
    return text


class LockHolder:
    """nobody's process holding flocks on lock files in nobody's lease directory, until closed."""

    def __init__(self, directory, ports, marker):
        code = textwrap.dedent(f"""
            import fcntl, os, sys
            fds = [os.open(os.path.join({directory!r}, f"{{p}}.lock"), os.O_RDWR | os.O_CREAT, 0o666) for p in {ports!r}]
            for fd in fds:
                fcntl.flock(fd, fcntl.LOCK_EX)
            print("held", flush=True)
            sys.stdin.read()
        """)
        self.proc = subprocess.Popen([*NOBODY, runnable_python(), "-c", code], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=cli_env(marker), text=True)
        ready, _, _ = select.select([self.proc.stdout], [], [], 30)
        assert ready and self.proc.stdout.readline() == "held\n", "nobody's lock holder did not take its locks in 30s"

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


# ---------------------------------------------------------------- the lease directory
def test_a_lease_dir_nobody_made_first_is_refused_not_busy(shared, marker):
    ports_dir = nobody_made(shared, f"tfdist-ports-{UID}")
    holder = LockHolder(ports_dir, [22000, 22001], marker)
    try:
        with pytest.raises(UnsafePathError) as refused:  # on main: lease_exact said both ports were busy
            lease_exact([22000, 22001])
        refusal(refused, ports_dir)
        assert sorted(os.listdir(ports_dir)) == ["22000.lock", "22001.lock"]  # nothing of ours added
    finally:
        holder.close()


def test_the_agents_loop_logs_a_lease_dir_made_unsafe_while_it_ran_and_goes_on(shared, caplog):
    """After the agent's start-up check (a temp cleaner removed the directory, nobody made it again): one
    error line naming it and nobody, every port reported busy, no exception to end the agent's loop."""
    ports_dir = nobody_made(shared, f"tfdist-ports-{UID}")
    lease, busy = lease_for_job("1-a", [22000, 22001])
    assert busy == [22000, 22001] and lease.ports == []
    [record] = [r for r in caplog.records if r.levelname == "ERROR"]
    assert record.getMessage().startswith(f"job 1-a: cannot lease ports: {ports_dir} belongs to nobody (uid 65534)")
    assert os.listdir(ports_dir) == []


def test_a_symlinked_lock_file_creates_nothing_where_nobody_chose(shared, secret):
    ports_dir = nobody_made(shared, f"tfdist-ports-{UID}")
    chosen = os.path.join(shared, "chosen-by-nobody")
    as_nobody("ln", "-s", chosen, os.path.join(ports_dir, "22000.lock"))
    as_nobody("ln", "-s", secret, os.path.join(ports_dir, "22001.lock"))
    with pytest.raises(UnsafePathError) as refused:
        lease_exact([22000, 22001])
    refusal(refused, ports_dir)
    assert not os.path.lexists(chosen)  # on main: root created it
    assert open(secret).read() == "precious" and stat.S_IMODE(os.stat(secret).st_mode) == 0o600


def test_our_own_lease_dir_is_0700_its_locks_0600_and_a_symlink_in_it_is_not_followed(shared):
    low, high = lease_range()
    lease, busy = lease_exact([high])
    try:
        directory = os.path.join(shared, f"tfdist-ports-{UID}")
        assert lease_dir() == directory and stat.S_IMODE(os.lstat(directory).st_mode) == 0o700
        lock = os.path.join(directory, f"{high}.lock")
        assert busy or stat.S_IMODE(os.lstat(lock).st_mode) == 0o600
    finally:
        lease.release()
    target = os.path.join(shared, "target")
    os.symlink(target, os.path.join(directory, f"{high - 1}.lock"))  # only root could, in a 0700 dir of root's
    with pytest.raises(UnsafePathError, match=f"{high - 1}.lock is a symlink"):
        lease_exact([high, high - 1])
    assert not os.path.lexists(target)
    with open(lock, "rb") as f:  # the lock taken before the refusal was let go
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)


# ---------------------------------------------------------------- the agent's directory
def test_an_agent_dir_nobody_made_first_is_refused_and_the_tmp_symlink_not_written(shared, secret):
    agent_dir = nobody_made(shared, f"tfdist-agent-{UID}")
    pid = os.getpid()
    for planted in (f"local.{pid}.groups.json.tmp", f"local.{pid}.groups.json"):  # the temp name main used
        as_nobody("ln", "-s", secret, os.path.join(agent_dir, planted))
    with pytest.raises(UnsafePathError) as refused:
        GroupsFile("local").save({"1-7e9c": [13524]})
    refusal(refused, agent_dir)
    assert open(secret).read() == "precious"  # on main: {"1-7e9c": [13524]}


def test_a_groups_file_nobody_planted_is_never_read(shared):
    """Its process groups would be killed: in a directory that is not ours, nothing is read or removed."""
    agent_dir = nobody_made(shared, f"tfdist-agent-{UID}")
    planted = os.path.join(agent_dir, "local.999999999.groups.json")  # "a dead agent's"
    as_nobody("sh", "-c", f"echo '{{\"1-a\": [1]}}' > {planted}")
    with pytest.raises(UnsafePathError) as refused:
        dead_agents_groups(agent_dir, "local")
    refusal(refused, agent_dir)
    assert os.path.exists(planted)


def test_our_agent_dir_is_0700_and_a_symlink_at_the_groups_file_is_replaced(shared, secret):
    groups = GroupsFile("local")
    assert groups.directory == os.path.join(shared, f"tfdist-agent-{UID}")
    assert stat.S_IMODE(os.lstat(groups.directory).st_mode) == 0o700
    os.symlink(secret, groups.path)  # only root could, in a 0700 dir of root's
    groups.save({"1-7e9c": [13524]})
    assert open(secret).read() == "precious" and not os.path.islink(groups.path)
    assert stat.S_IMODE(os.lstat(groups.path).st_mode) == 0o600
    assert os.listdir(groups.directory) == [os.path.basename(groups.path)]
    assert dead_agents_groups(groups.directory, "local") == {}  # our own pid: a running agent's, left alone


# ---------------------------------------------------------------- tfdist launch
def test_launch_refuses_temp_dirs_nobody_made_first_in_one_line(shared, marker):
    """The measured case: nobody made both directories, planted a symlink at the `.tmp` file and holds
    the lock files of the whole lease range. On main: `no 2 free ports left ...; widen --port-range`."""
    ports_dir = nobody_made(shared, f"tfdist-ports-{UID}")
    agent_dir = nobody_made(shared, f"tfdist-agent-{UID}")
    line = launch_while_nobody_holds_the_locks(shared, ports_dir, marker)
    assert line.startswith(f"tfdist: error: {agent_dir} belongs to nobody (uid 65534), not to you"), line
    assert "free ports" not in line and os.listdir(agent_dir) == []


def launch_while_nobody_holds_the_locks(shared, ports_dir, marker) -> str:
    """A real `tfdist launch` with TMPDIR=shared while nobody holds every lock file of the lease range in
    `ports_dir`: it must fail with exit 125 (tfdist's own failure) and one line, no traceback; returns that line."""
    holder = LockHolder(ports_dir, list(range(22000, 22010)), marker)
    try:
        result = run_cli(["launch", "--slots", "2", "--", "python", "-c", "pass"], marker, timeout=120,
                         TMPDIR=shared, TFDIST_PORT_RANGE="22000-22009")
    finally:
        holder.close()
    assert result.returncode == 125 and "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


# ---------------------------------------------------------------- workers' umask
DAEMON = textwrap.dedent("""
    import os, sys
    from cluster.agent.gang import Gang, WorkerLaunch
    from tfdist.private_files import daemon_umask
    daemon_umask()
    code = "import os; print(oct(os.umask(0)))"
    gang = Gang([WorkerLaunch(0, [sys.executable, "-c", code], dict(os.environ))], lambda r, s, line: print(line))
    gang.start()
    assert gang.run().ok
    print(oct(os.umask(0)))
""")


def test_workers_get_the_users_umask_not_the_daemons(marker):
    env = cli_env(marker)
    env.pop("TFDIST_USER_UMASK", None)
    out = subprocess.run([sys.executable, "-c", DAEMON], umask=0o002, env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0o2", "0o77"]  # the worker's (the user's), then the daemon's own


def test_a_gang_started_in_process_passes_the_original_umask(marker):
    from tfdist.private_files import original_umask

    lines = []
    old = os.umask(0o077)  # as if a daemon had set it after import
    try:
        gang = Gang([WorkerLaunch(0, [sys.executable, "-c", "import os; print(oct(os.umask(0)))"], cli_env(marker))],
                    lambda rank, stream, line: lines.append(line))
        gang.start()
        assert gang.run().ok
    finally:
        os.umask(old)
    assert lines == [oct(original_umask())] and original_umask() != 0o077



def test_launch_refuses_a_lease_dir_nobody_made_first_in_one_line(shared, marker):
    """Only the lease directory is nobody's, its locks held: the launch names it, and leaves nothing behind."""
    ports_dir = nobody_made(shared, f"tfdist-ports-{UID}")
    line = launch_while_nobody_holds_the_locks(shared, ports_dir, marker)
    assert line.startswith(f"tfdist: error: {ports_dir} belongs to nobody (uid 65534)"), line
    assert sorted(os.listdir(shared)) == [f"tfdist-agent-{UID}", f"tfdist-ports-{UID}"]  # no tfdist-local-* left


def umask_of(pid) -> int:
    with open(f"/proc/{pid}/status") as f:
        return int(next(line for line in f if line.startswith("Umask:")).split()[1], 8)


def test_daemons_run_with_umask_077_and_their_workers_with_the_users(tmp_path, marker):
    old = os.umask(0o022)
    try:
        cluster = LocalCluster(tmp_path, marker)
        try:
            agent = cluster.start_agent("n1", "--slots", "1")
            cluster.wait_agents("n1")
            assert umask_of(cluster.coordinator.pid) == 0o077 and umask_of(agent.pid) == 0o077
            result = cluster.cli("launch", "--slots", "1", "--", "python", "-c", "import os; print(oct(os.umask(0)))")
            assert result.returncode == 0, result.stderr
            assert "0o22" in result.stdout, result.stdout
        finally:
            cluster.close()
    finally:
        os.umask(old)
