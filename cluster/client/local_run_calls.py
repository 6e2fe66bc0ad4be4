"""Asking a local run (cluster/client/local_runs.py): the coordinator of its running launch, else one started
in this process on its stored state, which records the run's jobs when let go; and what a listing shows of
them."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from typing import TYPE_CHECKING, Iterator

from cluster.client.local_runs import SETTLED, LocalRun, number_of
from cluster.shared.auth import published, user_name
from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb
from cluster.shared.user_dirs import runtime_dir
from tfdist.errors import UnavailableError

if TYPE_CHECKING:
    from cluster.shared.rpc import Client

BUSY_WAIT = 10.0  # seconds to wait for another command reading the same run to let it go (or its launch to start)


def orphaned(job: pb.Job) -> pb.Job:
    """A stored job its launch left active (the launch was killed: nothing runs it any more), said so in
    its message; other jobs as they are."""
    return left_behind(job, SETTLED, "job", "it")


def left_behind(stored, ended, what: str, runs: str):
    """`stored` (a job or an experiment) as its killed launch left it: unless its state is in `ended`, a copy
    whose message says nothing runs `runs` any more and how to mark it canceled."""
    if stored.state in ended:
        return stored
    shown = type(stored)()
    shown.CopyFrom(stored)
    shown.message = (f"its launch ended without recording how the {what} ended (killed?); nothing runs {runs}: "
                     f"`tfdist cancel {stored.id}` marks it canceled")
    return shown


@dataclasses.dataclass
class Connection:
    client: Client
    live: bool  # a launch (or resume) runs the job now; False: the stored state, nothing runs it


@contextlib.contextmanager
def connect(run: LocalRun) -> Iterator[Connection]:
    """A client of the run's coordinator: the running launch's, else one started here on the stored state
    (which, when let go, records the job)."""
    from cluster.shared.rpc import Client

    # A run whose launch reserved its numbers but has not opened its store yet: opening it here would take its
    # lock first, and the launch would then fail on a state dir "in use" (a reader asking as it started). Its
    # lock is not even looked at (a look holds it for a moment) until the store exists.
    deadline = time.monotonic() + BUSY_WAIT
    while not run.started():
        if run.abandoned():
            raise NotStartedError(f"local run {run.number} holds no job: its launch ended before it started one")
        if time.monotonic() > deadline:
            raise UnavailableError(f"local run {run.number} has not started: its launch opened no state in {run.path} "
                                   f"within {BUSY_WAIT:g}s")
        time.sleep(0.1)
    holder = run.holder()
    deadline = time.monotonic() + BUSY_WAIT
    while holder is not None:
        credential = published_by(holder)
        if credential is not None:
            client = Client(credential.coordinator, credential)
            try:
                yield Connection(client, live=True)
            finally:
                client.close()
            return
        if time.monotonic() > deadline:  # e.g. another `tfdist logs` reading it
            raise UnavailableError(f"local run {run.number}'s state {run.path} is held by process {holder or '?'}, "
                                   f"which publishes no coordinator in {runtime_dir()}; try again once it ended")
        time.sleep(0.1)
        holder = run.holder()
    server = open_stored(run.path)
    client = Client(server.address, server.issue("admin", user_name()))
    try:
        yield Connection(client, live=False)
        run.record_from(client)
    finally:
        client.close()
        server.stop(0.2)


class NotStartedError(UnavailableError):
    """A run whose launch ended before it started a job."""


def published_by(pid: int):
    """The credential the process `pid` published for its coordinator, if it did."""
    return next((credential for owner, credential in published() if owner == pid), None) if pid else None


def open_stored(path: str):
    """A coordinator in this process on a run's stored state, on loopback, with no engine (nothing runs)."""
    from cluster.coordinator.daemon import CoordinatorServer, Settings

    return CoordinatorServer(path, "127.0.0.1:0", settings=Settings()).start()  # no engine: no node is watched


def jobs_of(run: LocalRun, summary: bool = False) -> list[pb.Job]:
    """The run's jobs (a search's: every trial) for a listing: its record when each ended (or is paused) and no
    launch or resume runs them now, else its coordinator's answer (a running launch's, or one started here)."""
    if run.abandoned():
        return []  # its launch ended before it started a job
    recorded = run.recorded_jobs()
    holder = run.holder()
    if recorded is not None and all(job.state in SETTLED for job in recorded) and \
            (holder is None or published_by(holder) is None):
        return recorded  # (a holder that publishes no coordinator is another command reading the run)
    with connect(run) as connection:
        jobs = connection.client.jobs((), 0, summary)
        return list(jobs) if connection.live else [orphaned(job) for job in jobs]


def job_in(run: LocalRun, ref: str) -> pb.Job | None:
    """The run's job `ref` names (its id, or its number), as a listing has it; None if the run has none such."""
    number = number_of(ref)
    return next((job for job in jobs_of(run) if job.id == ref or (ref.isdigit() and number_of(job.id) == number)),
                None)
