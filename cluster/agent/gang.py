"""Runs the worker processes of one node as a gang: all succeed or all stop.

Used by `tfdist launch` locally (and by the agent on every node). Each
worker runs in its own process group so a stop reaches its children too.
Output lines are handed to a sink tagged with the rank (a progress bar's
`\r` updates as PROGRESS, cluster/agent/worker_output.py); the last lines of
each rank, less known noise, are kept for the failure summary. Workers get the user's umask
(tfdist.private_files.original_umask), not a daemon's 077.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import os
import queue
import select
import shutil
import signal
import subprocess
import threading
import time
from typing import Callable, Mapping, Sequence

from cluster.agent.listening import listened_by_sessions
from cluster.agent.worker_output import Splitter
from cluster.shared.model import describe_exit
from cluster.shared.output_lines import PROGRESS, Kind, NoiseFilter
from tfdist.errors import TfdistError
from tfdist.private_files import original_umask

# (rank, "stdout"|"stderr", a line without newline), or (rank, PROGRESS, the newest `\r` update of a line)
OutputSink = Callable[[int, str, str], None]
# (rank, exit code, last lines), as each worker exits.
ExitSink = Callable[[int, int, tuple], None]
TAIL_LINES = 20
PROGRESS_EVERY = 1.0  # seconds between the chief's progress updates handed on (rank 0: the view shows it)
OTHER_RANKS_PROGRESS_EVERY = 10.0  # the other ranks' (shown with --all-ranks only; each is a stored line)
READ_SIZE = 65536
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child: SIGKILL when the thread that started it dies (a killed launcher or agent
    must not leave workers behind). A preexec_fn makes Python fork the whole (large, threaded) parent;
    `_start_argv` prefers util-linux's setpriv, which sets the same signal after a cheap vfork."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


_setpriv_lock = threading.Lock()


def find_setpriv_early() -> None:
    """Asks for setpriv in the background now (its `--help` is a process start, 3-5 ms), so a run's start
    finds the answer waiting: a node's runs call this when they are made."""
    threading.Thread(target=_setpriv, name="find-setpriv", daemon=True).start()


def _setpriv() -> str | None:
    with _setpriv_lock:  # one look, however many threads ask at once
        return _look_for_setpriv()


@functools.cache
def _look_for_setpriv() -> str | None:
    """util-linux's setpriv, if it has --pdeathsig (2.33 and later; Debian 12 has 2.38, RHEL 8 2.32)."""
    path = shutil.which("setpriv")
    if path is None:
        return None
    try:
        shown = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return path if "--pdeathsig" in shown else None


def _start_argv(command: Sequence[str], env: Mapping[str, str], cwd: str | None) -> tuple[list[str], Callable | None]:
    """How to start `command` tied to this thread: through setpriv --pdeathsig (the child is then vforked
    and execs setpriv, which execs the command: the same pid and process group), else with a preexec_fn.
    A command that does not resolve here is started directly, so its OSError says why, as before."""
    wrapper = _setpriv()
    program = command[0]
    if os.sep in program:
        found = os.access(os.path.join(cwd or os.getcwd(), program), os.X_OK)
    else:
        found = shutil.which(program, path=env.get("PATH", os.defpath)) is not None
    if wrapper is None or not found:
        return list(command), _die_with_parent
    return [wrapper, "--pdeathsig", "KILL", "--", *command], None


@dataclasses.dataclass(frozen=True)
class WorkerLaunch:
    rank: int
    command: Sequence[str]
    # the complete environment of the process: secrets included, so never in a repr (a log line, a traceback)
    env: Mapping[str, str] = dataclasses.field(repr=False)
    ready_file: str | None = None  # created by tfdist.init() once the worker joined
    port: int | None = None  # its TF server port: listening also counts as joined
    expendable: bool = False  # its failure does not stop the others (a parameter-server worker)


@dataclasses.dataclass(frozen=True)
class WorkerFailure:
    rank: int
    exit_code: int
    reason: str
    last_lines: tuple[str, ...]

    def describe(self) -> str:
        return f"rank {self.rank} {self.reason}"


@dataclasses.dataclass(frozen=True)
class GangResult:
    exit_codes: dict[int, int]
    failure: WorkerFailure | None  # the first failure: the root cause

    @property
    def ok(self) -> bool:
        return self.failure is None and all(c == 0 for c in self.exit_codes.values())


class Gang:
    def __init__(self, workers: Sequence[WorkerLaunch], sink: OutputSink, *, stop_grace: float = 5.0,
                 failure_grace: float | None = None, cwd: str | None = None, on_exit: ExitSink | None = None):
        """Call start() and run() from one thread that lives until the gang ends: workers
        are tied to it and die with it. Whether every rank joins in time is the coordinator's
        call (it sees the whole job); `joined_ranks()` says who has joined here."""
        self.workers = list(workers)
        self.sink = sink
        self.on_exit = on_exit
        self.stop_grace = stop_grace
        # A failed gang's collectives are broken: its survivors get less time to leave (a worker of
        # MultiWorkerMirroredStrategy does not even die on SIGTERM: TensorFlow takes it as a
        # preemption notice, so it waits out the grace and then gets SIGKILL).
        self.failure_grace = stop_grace if failure_grace is None else failure_grace
        self._kill_at: float | None = None
        self.cwd = cwd
        self._procs: dict[int, subprocess.Popen] = {}
        self._tails: dict[int, collections.deque] = {}
        self._pumps: dict[int, list[threading.Thread]] = {}
        self._exits: "queue.Queue[tuple[int, int]]" = queue.Queue()
        self._threads: list[threading.Thread] = []
        self._joined: set[int] = set()
        self._stopping = False
        # start() and stop() one at a time: a stop that comes while the gang is starting (a cancel racing the
        # start) signals every worker started so far, and no worker starts after it.
        self._starting = threading.RLock()

    # -- lifecycle -------------------------------------------------------
    def start(self) -> None:
        for w in self.workers:
            with self._starting:
                if self._stopping:  # stopped before this worker started: it never does
                    return
                self._start_one(w)

    def _start_one(self, w: WorkerLaunch) -> None:
        self._tails[w.rank] = collections.deque(maxlen=TAIL_LINES)
        argv, preexec = _start_argv(w.command, w.env, self.cwd)
        try:
            proc = subprocess.Popen(
                argv, env=dict(w.env), cwd=self.cwd, stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                preexec_fn=preexec, umask=original_umask())  # the user's, not a daemon's 077
        except OSError as e:
            self.stop()
            if self.cwd and not os.path.isdir(self.cwd):  # Popen names the command, not the directory
                raise LaunchError(f"cannot start rank {w.rank}: the job's working directory {self.cwd} does not "
                                  "exist on this node; launch from a directory every node has, or on Kubernetes "
                                  "set kubernetes.working_dir or the image's WorkingDir") from None
            raise LaunchError(f"cannot start rank {w.rank}: {w.command[0]}: {e.strerror}") from None
        self._procs[w.rank] = proc
        self._pumps[w.rank] = [self._spawn(self._pump, w.rank, name, getattr(proc, name))
                               for name in ("stdout", "stderr")]
        self._spawn(self._wait, w.rank, proc)

    def run(self) -> GangResult:
        """Waits for the gang; stops every worker on the first failure."""
        exit_codes: dict[int, int] = {}
        failure: WorkerFailure | None = None
        while len(exit_codes) < len(self._procs):
            rank, code = self._exits.get()
            exit_codes[rank] = code
            if self.on_exit:
                self.on_exit(rank, code, self._tail(rank))
            if code != 0 and failure is None and not self._stopping and not self._expendable(rank):
                failure = WorkerFailure(rank, code, describe_exit(code), self._tail(rank))
                self.stop(self.failure_grace)
        for t in self._threads:
            t.join(timeout=5)
        self._kill_groups()  # the job is over: nothing a worker started outlives it
        return GangResult(exit_codes, failure)

    def _expendable(self, rank: int) -> bool:
        return any(w.rank == rank and w.expendable for w in self.workers)

    @property
    def stopping(self) -> bool:
        return self._stopping

    def joined_ranks(self) -> list[int]:
        """Ranks that joined: tfdist.init() wrote their ready file, or the worker (its session: each worker
        starts one) listens on its port. Another process listening on that port number is not the rank
        joining (cluster/agent/listening.py)."""
        waiting = [w for w in self.workers if w.rank not in self._joined and w.rank in self._procs]
        sessions = {w.port: self._procs[w.rank].pid for w in waiting if w.port is not None}
        listening = listened_by_sessions(sessions) if sessions else set()
        for w in waiting:
            if (w.ready_file and os.path.exists(w.ready_file)) or w.port in listening:
                self._joined.add(w.rank)
        return sorted(self._joined)

    def dump_stacks(self) -> None:
        """SIGUSR1 to every worker (not its group): tfdist's worker start-up has faulthandler print every
        thread's Python stack on it, into the job's logs."""
        for proc in self._procs.values():
            if proc.poll() is None:
                try:
                    os.kill(proc.pid, signal.SIGUSR1)
                except ProcessLookupError:
                    pass

    def process_groups(self) -> list[int]:
        return [p.pid for p in self._procs.values()]

    def stop(self, grace: float | None = None) -> None:
        """SIGTERM to every worker's process group, SIGKILL `grace` seconds later (default: the gang's
        stop grace), in the background. A later stop with a shorter grace brings the SIGKILL forward.
        Exits after a stop are consequences, not failures of their own."""
        kill_at = time.monotonic() + (self.stop_grace if grace is None else grace)
        with self._starting:
            first = not self._stopping
            self._stopping = True
            if self._kill_at is None or kill_at < self._kill_at:
                self._kill_at = kill_at
            if first:
                self._signal_all(signal.SIGTERM)
        if first:
            threading.Thread(target=self._kill_after_grace, daemon=True).start()

    # -- internals -------------------------------------------------------
    def _spawn(self, fn, *args) -> threading.Thread:
        t = threading.Thread(target=fn, args=args, daemon=True)
        t.start()
        self._threads.append(t)
        return t

    def _pump(self, rank: int, stream_name: str, stream) -> None:
        """Hands on the stream's lines as they end and its newest `\\r` update at a bounded rate
        (worker_output.py); the failure summary's last lines skip known noise (output_lines.py)."""
        splitter = Splitter(PROGRESS_EVERY if rank == 0 else OTHER_RANKS_PROGRESS_EVERY)
        noise = NoiseFilter()
        fd = stream.fileno()
        poller = select.poll()  # not select(): an agent running many workers has descriptors past 1024
        poller.register(fd, select.POLLIN)
        ended = False
        while not ended:  # waits for output, or until the held update is due
            due = splitter.next_due(time.monotonic())
            ready = poller.poll(None if due is None else due * 1000)
            data = os.read(fd, READ_SIZE) if ready else b""
            ended = bool(ready) and not data
            for piece in splitter.end(time.monotonic()) if ended else splitter.feed(data, time.monotonic()):
                if piece.progress:
                    self.sink(rank, PROGRESS, piece.text)
                    continue
                if noise.kind(piece.text) is not Kind.NOISE:
                    self._tails[rank].append(piece.text)
                self.sink(rank, stream_name, piece.text)
        stream.close()

    def _wait(self, rank: int, proc: subprocess.Popen) -> None:
        self._exits.put((rank, proc.wait()))

    def _tail(self, rank: int) -> tuple[str, ...]:
        for pump in self._pumps.get(rank, ()):  # what the worker printed last is read first
            pump.join(timeout=2)
        return tuple(self._tails[rank])

    def _signal_all(self, signum: int) -> None:
        for proc in self._procs.values():
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signum)
                except ProcessLookupError:
                    pass

    def _kill_after_grace(self) -> None:
        while time.monotonic() < self._kill_at:
            if all(p.poll() is not None for p in self._procs.values()):
                break
            time.sleep(0.05)
        self._kill_groups()

    def _kill_groups(self) -> None:
        for proc in self._procs.values():
            try:  # the whole group: children the worker started die with it
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


class LaunchError(TfdistError, RuntimeError):
    """A worker could not be started at all (its program could not be executed here): the run fails
    on this node (exit code 1, gRPC INTERNAL), not the user's request as such, nor an unreachable peer."""
