"""A user's own directories on a machine shared with other users (issue 16, Measured 2; issue 30, Measured 2).

Port leases and agents' records of their workers' process groups once lived at fixed names in the shared temp
directory (`$TMPDIR/tfdist-ports-UID`, `$TMPDIR/tfdist-agent-UID`): tfdist refused one another user made first,
and so any local user's `mkdir -m 777` stopped every launch and agent of the user it was named for. They now
live in the user's own runtime directory (cluster/shared/user_dirs.py). User nobody (setpriv) still comes
first at the old names, plants symlinks and holds the lock files: a launch and an agent run as if nothing
were there, and nothing is written where nobody chose. Where the runtime directory itself is not the user's
(pointed at a shared place that nobody got to first), the old guarantees hold: one UnsafePathError line naming
it and nobody, nothing written through a symlink. Also: workers get the user's umask, not the daemon's 077."""

import fcntl
import logging
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
from cluster.shared import user_dirs
from tests.conftest import LocalCluster, cli_env, run_cli
from tests.other_user import NOBODY, runnable_python
from tfdist.errors import UnsafePathError

UID = os.geteuid()
OLD_NAMES = (f"tfdist-ports-{UID}", f"tfdist-agent-{UID}")  # where main kept them, in the shared temp directory
LOCKED = list(range(22000, 22010))  # the lease range of the launches here; nobody holds its old lock files


def as_nobody(*argv):
    subprocess.run([*NOBODY, *argv], check=True, timeout=30)


@pytest.fixture
def shared(monkeypatch, tmp_path):
    """TMPDIR: a fresh /tmp-like directory (1777, root's) that nobody can reach and write to. The runtime
    directory is a private one of the test's (as ~/.tfdist/runtime or $XDG_RUNTIME_DIR/tfdist is).
    (tmp_path first: pytest's own temp root is chosen before TMPDIR changes.)"""
    path = tempfile.mkdtemp(prefix="tfdist-test-shared-")
    os.chmod(path, 0o1777)
    home = tempfile.mkdtemp(prefix="tfdist-test-home-")  # machine dirs live under the home, ~/.tfdist/machines
    monkeypatch.setattr(tempfile, "tempdir", path)
    monkeypatch.setenv("TMPDIR", path)
    monkeypatch.setenv("HOME", home)
    yield path
    shutil.rmtree(path)
    shutil.rmtree(home)


@pytest.fixture
def secret(shared):
    """A file of root's that a symlink of nobody's points at: it must stay as it is."""
    path = os.path.join(shared, "root-secret")
    with open(path, "w") as f:
        f.write("precious")
    os.chmod(path, 0o600)
    return path


def nobody_made(parent, name, mode="777"):
    path = os.path.join(parent, name)
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
        if not (ready and self.proc.stdout.readline() == "held\n"):
            self.proc.kill()  # not left waiting on its stdin
            self.proc.wait(timeout=30)
            raise AssertionError("nobody's lock holder did not take its locks in 30s")

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


class OldNamesPlanted:
    """Everything nobody can do at the old fixed names before the user comes: both directories made (777),
    symlinks to root's secret at the lock and groups files main would have used, every lock of LOCKED held."""

    def __init__(self, shared, secret, marker):
        self.ports_dir, self.agent_dir = (nobody_made(shared, name) for name in OLD_NAMES)
        self.chosen = os.path.join(shared, "chosen-by-nobody")
        as_nobody("ln", "-s", self.chosen, os.path.join(self.ports_dir, f"{LOCKED[-1] + 1}.lock"))
        for planted in (f"local.{os.getpid()}.groups.json", "n1.groups.json.tmp"):
            as_nobody("ln", "-s", secret, os.path.join(self.agent_dir, planted))
        self.holder = LockHolder(self.ports_dir, LOCKED, marker)
        self.before = self.contents()

    def contents(self):
        return {d: sorted(os.listdir(d)) for d in (self.ports_dir, self.agent_dir)}

    def close(self, secret):
        self.holder.close()
        assert self.contents() == self.before  # nothing of ours was added where nobody chose
        assert not os.path.lexists(self.chosen)
        assert open(secret).read() == "precious" and stat.S_IMODE(os.stat(secret).st_mode) == 0o600


@pytest.fixture
def planted(shared, secret, marker):
    plants = OldNamesPlanted(shared, secret, marker)
    yield plants
    plants.close(secret)


# ---------------------------------------------------------------- nobody came first at the old names
def test_what_nobody_made_at_the_old_names_blocks_no_lease_and_no_record(planted):
    lease, busy = lease_exact(LOCKED[:2])  # on main: refused (UnsafePathError naming nobody's directory)
    try:
        assert busy == [] and lease.ports == LOCKED[:2]
        assert lease_dir() == user_dirs.machine_dir_path("ports")
    finally:
        lease.release()
    GroupsFile("local").save({"1-7e9c": [13524]})  # on main: refused
    assert not lease_dir().startswith(tempfile.gettempdir())


def test_a_launch_runs_where_nobody_made_the_old_dirs_first(shared, planted, marker):
    """The measured case: `mkdir -m 777 /tmp/tfdist-agent-0` as nobody, then root's launch exited 125."""
    result = run_cli(["launch", "--slots", "2", "--", "python", "-c", "pass"], marker, timeout=180,
                     TMPDIR=shared, TFDIST_PORT_RANGE=f"{LOCKED[0]}-{LOCKED[-1]}")
    assert result.returncode == 0, result.stderr


def test_an_agent_runs_jobs_where_nobody_made_the_old_dirs_first(shared, planted, tmp_path, marker):
    """The measured case for `tfdist agent` (it exited 1): a real coordinator and agent, a real job."""
    cluster = LocalCluster(tmp_path, marker, ["--port-range", f"{LOCKED[0]}-{LOCKED[-1]}"])
    try:
        cluster.start_agent("n1", "--slots", "1", env={"TMPDIR": shared})
        cluster.wait_agents("n1")
        done = cluster.cli("launch", "--slots", "1", "--", "python", "-c", "print('ran')")
        assert done.returncode == 0 and "ran" in done.stdout, (done.stderr, cluster.logs())
    finally:
        cluster.close()


# ---------------------------------------------------------------- a runtime directory that is not ours
def test_a_runtime_dir_nobody_made_first_is_refused_not_busy(shared, monkeypatch, marker):
    runtime = nobody_made(shared, ".tfdist")  # where ~/.tfdist would be, were the shared directory HOME
    monkeypatch.setenv("HOME", shared)
    with pytest.raises(UnsafePathError) as refused:
        lease_exact([22000, 22001])
    refusal(refused, runtime)
    with pytest.raises(UnsafePathError) as refused:
        GroupsFile("local")
    refusal(refused, runtime)
    assert os.listdir(runtime) == []  # nothing of ours added


def test_the_agents_loop_logs_a_lease_dir_made_unsafe_while_it_ran_and_goes_on(shared, monkeypatch, caplog):
    """After the agent's start-up check (its runtime directory was removed and nobody made it again): one
    error line naming it and nobody, every port reported busy, no exception to end the agent's loop."""
    runtime = nobody_made(shared, ".tfdist")  # where ~/.tfdist would be, were the shared directory HOME
    monkeypatch.setenv("HOME", shared)
    lease, busy = lease_for_job("1-a", [22000, 22001])
    assert busy == [22000, 22001] and lease.ports == []
    [record] = [r for r in caplog.records if r.levelname == "ERROR"]
    assert record.getMessage().startswith(f"job 1-a: cannot lease ports: {runtime} belongs to nobody (uid 65534)")
    assert os.listdir(runtime) == []


def test_a_groups_file_in_a_dir_that_is_not_ours_is_never_read(shared):
    """Its process groups would be killed: in a directory that is not ours, nothing is read or removed."""
    agent_dir = nobody_made(shared, "agents")
    planted = os.path.join(agent_dir, "local.999999999.groups.json")  # "a dead agent's"
    as_nobody("sh", "-c", f"echo '{{\"1-a\": [1]}}' > {planted}")
    with pytest.raises(UnsafePathError) as refused:
        dead_agents_groups(agent_dir, "local")
    refusal(refused, agent_dir)
    assert os.path.exists(planted)


def test_launch_refuses_a_runtime_dir_nobody_made_first_in_one_line(shared, marker):
    runtime = nobody_made(shared, ".tfdist")  # where ~/.tfdist would be, were the shared directory HOME
    result = run_cli(["launch", "--slots", "1", "--", "python", "-c", "pass"], marker, timeout=120,
                     TMPDIR=shared, HOME=shared)
    assert result.returncode == 125 and "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()  # a warning that other terminals will not find it, then the error
    assert all(line.startswith("tfdist: ") for line in lines), lines
    assert lines[-1].startswith(f"tfdist: error: {runtime} belongs to nobody (uid 65534)"), lines
    assert os.listdir(runtime) == []


# ---------------------------------------------------------------- our own directories
def test_our_own_lease_dir_is_0700_its_locks_0600_and_a_symlink_in_it_is_not_followed(shared):
    low, high = lease_range()
    lease, busy = lease_exact([high])
    try:
        directory = lease_dir()
        assert directory == os.path.join(os.environ["HOME"], ".tfdist", "machines", user_dirs._host(), "ports")
        assert stat.S_IMODE(os.lstat(directory).st_mode) == 0o700
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


def test_our_agent_dir_is_0700_and_a_symlink_at_the_groups_file_is_replaced(shared, secret):
    groups = GroupsFile("local")
    assert groups.directory == user_dirs.machine_dir_path("agents")
    assert stat.S_IMODE(os.lstat(groups.directory).st_mode) == 0o700
    os.symlink(secret, groups.path)  # only root could, in a 0700 dir of root's
    groups.save({"1-7e9c": [13524]})
    assert open(secret).read() == "precious" and not os.path.islink(groups.path)
    assert stat.S_IMODE(os.lstat(groups.path).st_mode) == 0o600
    assert os.listdir(groups.directory) == [os.path.basename(groups.path)]
    assert dead_agents_groups(groups.directory, "local") == {}  # our own pid: a running agent's, left alone


def test_a_user_with_no_home_gets_a_fresh_private_dir_said_once(shared, secret, monkeypatch, caplog):
    """A system account (a HOME it cannot create, no runtime directory): its own fresh directory, not a fixed name."""
    monkeypatch.delenv(user_dirs.RUNTIME_ENV, raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", tempfile.mkdtemp(dir=shared))  # not used: a login's, gone at logout
    home = os.path.join(secret, "home")  # under a file: not even root can make it
    monkeypatch.setenv("HOME", home)
    monkeypatch.setattr(user_dirs, "_fallback", {})
    with caplog.at_level(logging.WARNING, logger="tfdist"):
        first, again = lease_dir(), lease_dir()
    assert first == again and os.path.dirname(first) == shared and os.path.basename(first) not in OLD_NAMES
    assert stat.S_IMODE(os.lstat(first).st_mode) == 0o700 and os.lstat(first).st_uid == UID
    [said] = [r.getMessage() for r in caplog.records if "cannot create" in r.getMessage()]
    assert said.startswith(f"cannot create {home}/.tfdist/machines/") and first in said
    shutil.rmtree(first)
    assert lease_dir() == first and os.path.isdir(first)  # made again where it was, still private
    shutil.rmtree(first)


# ---------------------------------------------------------------- workers' umask
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


def test_port_leases_are_shared_whatever_the_runtime_dir(shared, monkeypatch, tmp_path):
    """Two processes of the user with different $TFDIST_RUNTIME_DIR (two test runs, two shells) must lease ports
    apart: when the lease directory followed it, concurrent runs' TensorFlow servers could not bind their ports."""
    monkeypatch.setenv(user_dirs.RUNTIME_ENV, str(tmp_path / "one"))
    first = lease_dir()
    monkeypatch.setenv(user_dirs.RUNTIME_ENV, str(tmp_path / "two"))
    assert lease_dir() == first == os.path.join(os.environ["HOME"], ".tfdist", "machines", user_dirs._host(), "ports")


def test_a_read_only_home_leases_from_a_fresh_private_dir_not_every_port_busy(shared, marker):
    """A home that exists but cannot be written (Bazel's sandbox mounts it read-only; a read-only NFS home):
    the lease directory is there and ours, yet no lock file can be made in it. Every port then read busy and a
    launch waited out its limit; now the process leases from a fresh private directory, said once."""
    home = os.environ["HOME"]
    os.makedirs(user_dirs.machine_dir_path("ports"), mode=0o700)  # made earlier, when the home was writable
    os.chmod(os.path.join(home, ".tfdist"), 0o700)
    probe = ("import logging, sys; logging.basicConfig(); from cluster.agent.ports import lease_exact, lease_dir; "
             "lease, busy = lease_exact([22100]); print(lease_dir(), busy)")
    script = f"mount --bind -o ro {home} {home} && mount -o remount,bind,ro {home} && exec \"$0\" -c \"$1\""
    result = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script, sys.executable,
                             probe], capture_output=True, text=True, timeout=60, env=cli_env(marker, HOME=home),
                            cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    assert result.returncode == 0, result.stderr
    directory, busy = result.stdout.split(maxsplit=1)
    assert busy.strip() == "[]" and not directory.startswith(home), result.stdout
    assert result.stderr.count("cannot create") == 1 and "for this process" in result.stderr, result.stderr
