"""Local runs: the job of each local `tfdist launch` (no --coordinator), kept after the launch ended.

Each local launch runs its embedded coordinator on a state dir of its own, `<state>/local/<N>`, where
<state> is the user's `$XDG_STATE_HOME/tfdist` (default ~/.local/state/tfdist; private: 0700, the user's
own, never a symlink) and N is its first job's number (its id is N-XXXX). A run reserves the job numbers it
may give, N..last (`numbers.json`): one for a job of its own, one per trial a search may make; its coordinator
gives no number past them, and a new run numbers after every number an existing run holds, under a lock on the
runs dir (NUMBERING_LOCK), so concurrent launches never share a store or an id, and ids stay stable. Without
--coordinator, `tfdist jobs`, `job`, `logs`, `metrics`, `cancel`, `preempt` and `resume` find a local job in
the run whose numbers hold it: while its launch (or `tfdist resume`) runs they ask that process's coordinator
(published in the runtime dir: cluster/shared/auth.py); once it ended, a coordinator started in this process
on the stored state answers (no agent: nothing runs, and its agent is never declared lost), and `tfdist resume
N` runs an embedded cluster on it again.

Beside the store, `jobs.pb` is every job of the run as the last process holding the store saw them when it let
go: a listing reads it for runs that ended instead of starting a coordinator for each (runs recorded before
kept only their newest job, `job.pb`). A run of a search (a config whose searcher searches) holds its
experiment, eN in run N, whose trials are the run's jobs: `experiments.pb` is that experiment as last seen,
trials and all (cluster/client/local_experiments.py reads it). Growth is bounded: a new launch removes the
oldest ended runs beyond the newest KEEP_RUNS (paused ones stay until resumed or canceled). A local job
without checkpoint_storage checkpoints into `<run>/checkpoints`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import shutil
import socket
import sys
from typing import TYPE_CHECKING, Iterable, Iterator, Mapping, Sequence

from google.protobuf.message import DecodeError

from cluster.shared.auth import process_alive
from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb
from tfdist.errors import UserError
from tfdist.private_files import check_private_dir, open_private, private_dir, read_private, write_private

if TYPE_CHECKING:
    from cluster.shared.rpc import Client

RUNS = "local"
JOBS_RECORD = "jobs.pb"  # every job of the run (pb.ListJobsResponse)
RECORD = "job.pb"  # its newest job only, as runs recorded before jobs.pb
NUMBERS = "numbers.json"  # the job numbers the run holds: {"last_job": LAST}, its first being its own number
NUMBERING_LOCK = "numbering.lock"  # in the runs dir: held while a new run takes its numbers
EXPERIMENTS_RECORD = "experiments.pb"  # a search's run: its experiment (pb.ListExperimentsResponse)
# The coordinator's state dir lock (cluster/coordinator/store/state_file.py, spelled here, not imported): held
# with flock(2) while a process has the store open; it says that process's pid.
LOCK = "coordinator.lock"
RECORD_LIMIT = 8 << 20  # a job as GetJob sends it (rpc.MAX_MESSAGE_BYTES)
JOBS_RECORD_LIMIT = 64 << 20  # a search's trials; past it a listing asks the run's coordinator instead
KEEP_RUNS = 50  # a new launch removes ended runs older than the newest this many
ENDED = ("SUCCEEDED", "FAILED", "CANCELED")
SETTLED = (*ENDED, "PAUSED")  # nothing changes them but a command


# ---------------------------------------------------------------- pure

def state_home(environ: Mapping[str, str], home: str) -> str:
    """This user's tfdist state: $XDG_STATE_HOME/tfdist (an absolute path only, as the XDG spec says),
    else ~/.local/state/tfdist."""
    xdg = environ.get("XDG_STATE_HOME", "")
    return os.path.join(xdg if os.path.isabs(xdg) else os.path.join(home, ".local", "state"), "tfdist")


def run_numbers(names: Iterable[str]) -> list[int]:
    """The run numbers among a runs dir's entries, ascending (anything else there is not a run)."""
    return sorted(int(name) for name in names if name.isdigit() and name == str(int(name)) and int(name) > 0)


def number_of(ref: str) -> int | None:
    """The job number a reference names (`7` or `7-1a2b`), None if it names none."""
    head = ref.split("-", 1)[0]
    return int(head) if head.isdigit() and int(head) > 0 else None


def to_prune(runs: Sequence[tuple[int, str | None]], keep: int) -> list[int]:
    """The runs to remove: of (number, state; None while held or unknown), those that ended, older than
    the newest `keep`."""
    newest_first = sorted(runs, reverse=True)
    return sorted(number for number, state in newest_first[keep:] if state in ENDED)


# ---------------------------------------------------------------- the runs on disk

def runs_dir(environ: Mapping[str, str] | None = None) -> str:
    return os.path.join(state_home(os.environ if environ is None else environ, os.path.expanduser("~")), RUNS)


@dataclasses.dataclass(frozen=True)
class LocalRun:
    path: str
    number: int  # its first job number
    last: int = 0  # its last job number (below `number`: the same)
    launcher: tuple[int, str] = (0, "")  # (pid, host) of the launch that reserved it ((0, ""): not said)

    def holds(self, number: int) -> bool:
        """Whether job `number` is among the run's numbers."""
        return self.number <= number <= max(self.last, self.number)

    def started(self) -> bool:
        """Whether its launch opened its store (made under the run's lock, which a launch takes first)."""
        from cluster.coordinator.daemon import STATE_FILE

        return os.path.exists(os.path.join(self.path, STATE_FILE))

    def abandoned(self) -> bool:
        """A run whose launch ended before it opened its store (killed, out of memory, refused): it holds no job,
        and it never will. A launch on another host sharing this directory is not judged."""
        if self.started():
            return False
        pid, host = self.launcher
        if not pid:  # reserved by a tfdist that did not say who: only its store would tell
            return True
        return host == socket.gethostname() and not process_alive(pid)

    def holder(self) -> int | None:
        """The pid of the process holding the run's store (a launch, a resume, a reader; 0 if it does not
        say), None when none does."""
        try:
            fd = open_private(os.path.join(self.path, LOCK), os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                try:
                    return int(json.loads(os.pread(fd, 4096, 0) or b"{}")["pid"])
                except (ValueError, KeyError, TypeError):
                    return 0
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        finally:
            os.close(fd)

    def _read(self, name: str, message, limit: int = RECORD_LIMIT):
        """`message` parsed from the run's file `name`; None when there is none (or it does not parse)."""
        try:
            message.ParseFromString(read_private(os.path.join(self.path, name), limit))
        except (FileNotFoundError, DecodeError):
            return None
        return message

    def recorded_jobs(self) -> list[pb.Job] | None:
        """Every job of the run, oldest first, as the last holder of the store saw them when it let go; None if
        they were not recorded (a search's run recorded before jobs.pb kept only its last trial)."""
        listed = self._read(JOBS_RECORD, pb.ListJobsResponse(), JOBS_RECORD_LIMIT)
        if listed is not None:
            return list(listed.jobs)
        job = self._read(RECORD, pb.Job())
        return [job] if job is not None and job.id and not job.spec.experiment_id else None

    def recorded(self) -> pb.Job | None:
        """The run's newest job as recorded (a search's last trial); None if none was."""
        listed = self._read(JOBS_RECORD, pb.ListJobsResponse(), JOBS_RECORD_LIMIT)
        job = listed.jobs[-1] if listed is not None and listed.jobs else self._read(RECORD, pb.Job())
        return job if job is not None and job.id else None

    def record(self, jobs: Sequence[pb.Job]) -> None:
        """Records the run's jobs as `recorded_jobs` reads them back."""
        path = os.path.join(self.path, JOBS_RECORD)
        data = pb.ListJobsResponse(jobs=jobs).SerializeToString()
        if len(data) <= JOBS_RECORD_LIMIT:
            write_private(path, data)
        else:  # a listing asks the run's coordinator instead of reading a stale record
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

    def recorded_experiments(self) -> list[pb.Experiment] | None:
        """The run's experiments (a search's run holds one), trials and all, as the last holder of the store
        saw them when it let go; None if none were recorded."""
        listed = self._read(EXPERIMENTS_RECORD, pb.ListExperimentsResponse())
        return None if listed is None else list(listed.experiments)

    def recorded_ids(self) -> set[str]:
        """The job ids the run's records name: its jobs and its experiments' trials."""
        return {job.id for job in self.recorded_jobs() or ()} | \
            {trial.job_id for e in self.recorded_experiments() or () for trial in e.trials}

    def record_experiments(self, experiments: Sequence[pb.Experiment]) -> None:
        write_private(os.path.join(self.path, EXPERIMENTS_RECORD),
                      pb.ListExperimentsResponse(experiments=experiments).SerializeToString())

    def record_from(self, client: Client) -> None:
        """Records the run's jobs (a search's: its trials) and, for a search's run, its experiment as
        `client`'s coordinator has them now (quietly: a record is a shortcut)."""
        try:
            jobs = client.jobs((), 0, False)
            if jobs:
                self.record(jobs)
            if jobs and jobs[-1].spec.experiment_id:  # its trials' experiment, as `tfdist experiment` shows it
                self.record_experiments([client.experiment(e.id) for e in client.experiments()])
        except Exception as e:  # noqa: BLE001 - a missing record only costs the next listing a coordinator
            sys.stderr.write(f"tfdist: warning: could not record local job {self.number}'s state in {self.path}: "
                             f"{e}\n")


def all_runs() -> list[LocalRun]:
    """This user's local runs, oldest first (none if the runs dir does not exist yet)."""
    root = runs_dir()
    if not os.path.isdir(root):
        return []
    check_private_dir(root)  # never read a dir another user could have written
    return [_run(os.path.join(root, str(n)), n) for n in run_numbers(os.listdir(root))]


def _run(path: str, number: int) -> LocalRun:
    """The run at `path` with the numbers it reserved. One made before runs reserved numbers holds its own, and
    a search's also its recorded trials' (they took later runs' numbers)."""
    try:
        said = json.loads(read_private(os.path.join(path, NUMBERS), 4096))
        return LocalRun(path, number, int(said["last_job"]), (int(said.get("launcher", 0)), str(said.get("host", ""))))
    except FileNotFoundError:
        pass
    except (ValueError, KeyError, TypeError):  # not one tfdist wrote whole: its own number at least
        return LocalRun(path, number, number)
    trials = LocalRun(path, number).recorded_experiments() or ()
    return LocalRun(path, number, max([number, *(number_of(t.job_id) or 0 for e in trials for t in e.trials)]))


def find(ref: str) -> LocalRun | None:
    """The local run holding job `ref` (`7`, `7-1a2b`): the one whose numbers include 7; None if none does."""
    number = number_of(ref)
    holding = [run for run in all_runs() if run.holds(number)] if number else []
    if len(holding) > 1:  # runs made before numbers were reserved: a search's trials took later runs' numbers
        holding = [run for run in holding if ref in run.recorded_ids()] or \
            [run for run in holding if run.number == number] or holding
    return holding[0] if holding else None


def new_run(jobs: int = 1) -> LocalRun:
    """A fresh run dir holding `jobs` job numbers (a search's: one per trial it may make), numbered after every
    number an existing run holds; removes the oldest ended runs beyond KEEP_RUNS first. Concurrent launches take
    their numbers in turn, under a lock on the runs dir: each one's reservation is written before the next looks."""
    environ = os.environ
    root = runs_dir(environ)
    try:
        private_dir(state_home(environ, os.path.expanduser("~")))
        private_dir(root)
    except OSError as e:  # no home to write to (a system account): say where, and what to do
        raise UserError(f"cannot keep this launch's state in {root}: {e.strerror or e}; set XDG_STATE_HOME to a "
                        "directory of your own, or pass --state-dir DIR") from None
    prune(all_runs())
    with _numbering(root):
        number = max((max(run.number, run.last) for run in all_runs()), default=0) + 1
        while True:
            path = os.path.join(root, str(number))
            try:
                os.mkdir(path, 0o700)
                break
            except FileExistsError:  # made without the lock (an older tfdist)
                number += 1
        last = number + max(jobs, 1) - 1
        launcher = (os.getpid(), socket.gethostname())
        write_private(os.path.join(private_dir(path), NUMBERS), json.dumps(
            {"last_job": last, "launcher": launcher[0], "host": launcher[1]}).encode())
    return LocalRun(path, number, last, launcher)


@contextlib.contextmanager
def _numbering(root: str) -> Iterator[None]:
    fd = open_private(os.path.join(root, NUMBERING_LOCK), os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # released when closed
        yield
    finally:
        os.close(fd)


def prune(runs: Sequence[LocalRun]) -> None:
    if len(runs) <= KEEP_RUNS:
        return
    states = []
    for run in runs[:-KEEP_RUNS]:
        if run.abandoned():  # no job, ever: it goes as an ended one does
            states.append((run.number, "CANCELED"))
            continue
        recorded = None if run.holder() is not None else run.recorded()
        states.append((run.number, recorded.state if recorded else None))
    by_number = {run.number: run for run in runs}
    for number in to_prune(states, 0):
        shutil.rmtree(by_number[number].path, ignore_errors=True)


def checkpoint_storage(run: LocalRun) -> str:
    """Where a local job without checkpoint_storage keeps its checkpoints: in its run (private, this
    machine's), so that `tfdist resume N` finds them; they go when the run is pruned."""
    return private_dir(os.path.join(run.path, "checkpoints"))


def remove(run: LocalRun) -> None:
    """A run that never got a job (its launch was refused): nothing to keep."""
    shutil.rmtree(run.path, ignore_errors=True)
