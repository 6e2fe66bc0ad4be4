"""The gang supervisor with real (non-TF) processes: prefixes, exit codes, teardown, timeouts, signals."""

import os
import signal
import subprocess
import sys
import textwrap
import time

from cluster.agent import listening
from cluster.agent.gang import Gang, WorkerLaunch
from tests.conftest import cli_env, run_cli


def _py(code):
    return [sys.executable, "-c", textwrap.dedent(code)]


def _gang(commands, marker, **kw):
    lines = []
    workers = [WorkerLaunch(rank=r, command=c, env=cli_env(marker, RANK=str(r))) for r, c in enumerate(commands)]
    return Gang(workers, lambda rank, stream, line: lines.append((rank, stream, line)), **kw), lines


def test_success_collects_lines_by_rank_and_stream(marker):
    gang, lines = _gang([_py("import sys; print('out'); print('err', file=sys.stderr)")] * 2, marker)
    gang.start()
    result = gang.run()
    assert result.ok and result.exit_codes == {0: 0, 1: 0}
    assert sorted(lines) == [(0, "stderr", "err"), (0, "stdout", "out"), (1, "stderr", "err"), (1, "stdout", "out")]


def test_first_failure_stops_siblings_and_keeps_last_lines(marker):
    crash = _py("""
        import sys, time
        time.sleep(0.5)
        print('about to fail')
        sys.exit(3)
    """)
    hang = _py("import time; print('working', flush=True); time.sleep(600)")
    gang, _ = _gang([hang, crash, hang], marker, stop_grace=2)
    gang.start()
    t0 = time.monotonic()
    result = gang.run()
    assert time.monotonic() - t0 < 30
    assert result.failure.rank == 1 and result.failure.exit_code == 3
    assert result.failure.describe() == "rank 1 exited with code 3"
    assert result.failure.last_lines == ("about to fail",)
    assert result.exit_codes[0] == -signal.SIGTERM and result.exit_codes[2] == -signal.SIGTERM


def test_sigterm_ignored_gets_sigkill_after_grace_and_grandchildren_die(marker, tmp_path):
    # Rank 1 fails only once rank 0 ignores SIGTERM and has its child (a file says so): under load rank 0's
    # Python could take over a second to get there, and the stop then found it still taking SIGTERM.
    ignoring = tmp_path / "ignoring"
    stubborn = _py(f"""
        import signal, subprocess, sys, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])
        open({str(ignoring)!r}, 'w').close()
        print('ready', flush=True)
        time.sleep(600)
    """)
    fails = _py(f"""
        import os, sys, time
        deadline = time.monotonic() + 120
        while not os.path.exists({str(ignoring)!r}) and time.monotonic() < deadline:
            time.sleep(0.05)
        sys.exit(7)
    """)
    gang, _ = _gang([stubborn, fails], marker, stop_grace=1)
    gang.start()
    result = gang.run()
    assert result.failure.rank == 1 and result.exit_codes[0] == -signal.SIGKILL


def test_joined_ranks_are_those_that_wrote_their_ready_file(tmp_path, marker):
    joins = _py(f"open({str(tmp_path / 'r0')!r}, 'w').close(); import time; time.sleep(600)")
    never = _py("import time; time.sleep(600)")
    workers = [WorkerLaunch(0, joins, cli_env(marker), ready_file=str(tmp_path / "r0")),
               WorkerLaunch(1, never, cli_env(marker), ready_file=str(tmp_path / "r1"))]
    gang = Gang(workers, lambda *a: None, stop_grace=1)
    gang.start()
    deadline = time.monotonic() + 60
    while gang.joined_ranks() != [0] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gang.joined_ranks() == [0]  # rank 1 never joins; the coordinator decides when to give up
    gang.stop()
    result = gang.run()
    assert result.exit_codes == {0: -signal.SIGTERM, 1: -signal.SIGTERM} and result.failure is None


def test_listeners_from_the_kernels_socket_diagnostics(marker):
    """netlink's answer names the listeners /proc/net/tcp shows (IPv4 and IPv6) with their sockets' inodes,
    and a closed listener is gone from it; a bound socket that does not listen is no listener. (Other tests
    may listen meanwhile: the tables are compared on this test's own ports.)"""
    import socket
    with socket.socket() as s, socket.socket(socket.AF_INET6) as s6, socket.socket() as bound:
        s.bind(("127.0.0.1", 0))
        s.listen()
        s6.bind(("::1", 0))
        s6.listen()
        bound.bind(("127.0.0.1", 0))
        mine = {sock.getsockname()[1]: frozenset({os.fstat(sock.fileno()).st_ino}) for sock in (s, s6)}
        asked = {**listening._asked(socket.AF_INET), **listening._asked(socket.AF_INET6)}
        assert {port: asked.get(port) for port in mine} == mine
        assert bound.getsockname()[1] not in asked
        from_proc = listening._read_proc()  # the fallback agrees
        assert {port: from_proc.get(port) for port in mine} == mine
        assert bound.getsockname()[1] not in from_proc
        port = s.getsockname()[1]
    assert port not in listening.listeners()


def test_a_port_counts_as_joined_only_when_the_worker_itself_listens_on_it(marker):
    """Rank 0's worker starts a child that listens on rank 0's port (the worker's session: joined). Rank 1's
    port is listened on by another process (this test's, as another job's worker or a daemon could once the
    port number was free): rank 1 has not joined. Before, any listener on the port counted, and such a rank
    was taken as joined: its job waited forever instead of failing at its startup timeout."""
    import socket
    with socket.socket() as free, socket.socket() as squatter:
        free.bind(("127.0.0.1", 0))
        own_port = free.getsockname()[1]
        free.close()
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        listens = _py(f"""
            import subprocess, sys
            subprocess.run([sys.executable, "-c", "import socket, time; s = socket.socket(); "
                            "s.bind(('127.0.0.1', {own_port})); s.listen(); print('up', flush=True); time.sleep(60)"])
            """)
        sleeps = _py("import time; time.sleep(60)")
        lines = []
        gang = Gang([WorkerLaunch(0, listens, cli_env(marker), port=own_port),
                     WorkerLaunch(1, sleeps, cli_env(marker), port=squatter.getsockname()[1])],
                    lambda rank, stream, line: lines.append(line), stop_grace=0.5)
        gang.start()
        try:
            deadline = time.monotonic() + 60
            while gang.joined_ranks() != [0] and time.monotonic() < deadline:
                time.sleep(0.05)
            assert gang.joined_ranks() == [0], lines
        finally:
            gang.stop()
            gang.run()


def test_launch_forwards_sigterm_to_every_worker(tmp_path, marker):
    script = tmp_path / "w.py"
    script.write_text(textwrap.dedent("""
        import os, signal, sys, time
        def bye(signum, frame):
            print('got', signal.Signals(signum).name, flush=True)
            sys.exit(0)
        signal.signal(signal.SIGTERM, bye)
        open(os.environ['TFDIST_READY_FILE'], 'w').close()
        print('ready', flush=True)
        time.sleep(600)
    """))
    proc = subprocess.Popen([sys.executable, "-m", "cluster.client.cli", "launch", "--slots", "2", "--", str(script)],
                            env=cli_env(marker), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    seen = 0
    while seen < 2:
        line = proc.stdout.readline()
        assert line, proc.stderr.read()
        seen += "ready" in line
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    # SIGTERM cancels the job; its workers get SIGTERM and their last lines still arrive.
    assert "[rank=0] got SIGTERM" in out and "[rank=1] got SIGTERM" in out
    assert proc.returncode == 128 + signal.SIGTERM
    assert "SIGTERM: canceling job" in err and "canceled: canceled by the user" in err


def test_launch_exit_code_and_summary_with_plain_processes(tmp_path, marker):
    # Rank 2 fails only once the others have printed (and flushed): its failure stops them, and under load a
    # rank still starting up was stopped before its line (a fresh clone's Bazel run lost rank 0's).
    script = tmp_path / "w.py"
    script.write_text(f"""import os, sys, time
rank = os.environ['TFDIST_RANK']
print('hello from', rank, flush=True)
if rank != '2':
    open(os.path.join({str(tmp_path)!r}, 'printed-' + rank), 'w').close()
    sys.exit(0)
deadline = time.monotonic() + 50
while not all(os.path.exists(os.path.join({str(tmp_path)!r}, 'printed-' + r)) for r in '01'):
    if time.monotonic() > deadline:
        sys.exit(9)
    time.sleep(0.05)
sys.exit(4)
""")
    result = run_cli(["launch", "--slots", "3", "--", str(script)], marker, timeout=60)
    assert result.returncode == 4
    assert "[rank=2] hello from 2" in result.stdout and "[rank=0] hello from 0" in result.stdout
    assert "failed: rank 2 on node local exited with code 4; the other workers were stopped" in result.stderr
    assert "  hello from 2" in result.stderr


def test_a_failed_gangs_survivors_get_the_failure_grace(marker):
    # Like a MultiWorkerMirroredStrategy worker, which takes SIGTERM as a preemption notice and stays.
    stubborn = _py("""
        import signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print('ready', flush=True)
        time.sleep(600)
    """)
    gang, _ = _gang([stubborn, _py("import time, sys; time.sleep(1); sys.exit(7)")], marker, stop_grace=120,
                    failure_grace=0.5)
    gang.start()
    result = gang.run()  # would wait out the 120 s stop grace without the failure grace
    assert result.failure.rank == 1 and result.exit_codes[0] == -signal.SIGKILL


def test_a_worker_that_cannot_start_raises_a_tfdist_error(marker, tmp_path):
    import pytest

    from cluster.agent.gang import LaunchError
    from tfdist.errors import TfdistError

    gang, _ = _gang([_py("pass")], marker, cwd=str(tmp_path / "gone"))
    with pytest.raises(LaunchError, match="^cannot start rank 0: ") as caught:
        gang.start()
    assert isinstance(caught.value, TfdistError) and (caught.value.exit_code, caught.value.grpc_code) == (1, "INTERNAL")


PDEATHSIG_CODE = ("import ctypes, os; v = ctypes.c_int(); ctypes.CDLL('libc.so.6').prctl(2, ctypes.byref(v)); "
                  "print(v.value, os.getpid(), os.getpgid(0))")  # PR_GET_PDEATHSIG


def test_workers_die_with_their_thread_whether_started_through_setpriv_or_a_preexec_fn(marker, monkeypatch):
    """Each worker has SIGKILL as its parent-death signal and is its own process group, its pid the command's:
    through util-linux's setpriv (a vfork, not a fork of the whole launcher; what this Debian machine has),
    and with the preexec_fn where setpriv is missing or the command does not resolve (its OSError says why)."""
    from cluster.agent import gang as gang_module

    assert gang_module._setpriv() is not None, "util-linux's setpriv (Debian 12: 2.38) is expected on this machine"
    assert gang_module._start_argv(("python", "-c", "pass"), {"PATH": os.environ["PATH"]}, None)[1] is None
    assert gang_module._start_argv(("no-such-program-tfdist",), {"PATH": os.environ["PATH"]}, None)[1] is not None
    for through_util_linux in (True, False):
        if not through_util_linux:
            monkeypatch.setattr(gang_module, "_setpriv", lambda: None)
        gang, lines = _gang([_py(PDEATHSIG_CODE)] * 2, marker)
        gang.start()
        pids = {rank: p.pid for rank, p in gang._procs.items()}
        assert gang.run().ok
        for rank, stream, line in lines:
            signum, pid, group = map(int, line.split())
            assert (stream, signum, pid, group) == ("stdout", signal.SIGKILL, pids[rank], pids[rank]), \
                (through_util_linux, line)
        assert len(lines) == 2


def test_a_stop_that_comes_before_or_during_the_start_leaves_no_worker_running(marker):
    """A cancel can reach a node between its run being registered and its workers starting: no worker may start
    after the stop (nothing would ever signal it), and those started before it are stopped."""
    hang = _py("import time; time.sleep(600)")
    gang, _ = _gang([hang] * 2, marker, stop_grace=2)
    gang.stop()
    gang.start()
    assert gang.process_groups() == [] and gang.run().exit_codes == {}

    import threading

    gang, _ = _gang([hang] * 6, marker, stop_grace=2)
    starting = threading.Thread(target=gang.start)
    starting.start()
    gang.stop()  # somewhere in the middle of the start (or before, or after: each is fine)
    starting.join(timeout=60)
    t0 = time.monotonic()
    result = gang.run()
    assert time.monotonic() - t0 < 30 and len(result.exit_codes) == len(gang.process_groups()) <= 6
    for pid in gang.process_groups():  # every started worker's group is gone
        try:
            os.killpg(pid, 0)
            raise AssertionError(f"worker group {pid} outlived the stop")
        except ProcessLookupError:
            pass
