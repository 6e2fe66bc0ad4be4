"""Following a job from the client side: stream its logs with `[rank=N]` (through a view:
cluster/client/progress_view.py), report waits, summarize the outcome, and map it to an exit code."""

from __future__ import annotations

import dataclasses
import sys
import time
from typing import TYPE_CHECKING, TextIO

from cluster.client import exit_codes
from cluster.client.progress_view import FULL, QUIET, Renderer, ViewOptions
from cluster.shared.model import describe_exit
from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb
from tfdist.errors import TfdistError

if TYPE_CHECKING:  # a gRPC Client, or a local launch's in-process one (no gRPC imported for it)
    from cluster.shared.rpc import Client

TERMINAL = ("SUCCEEDED", "FAILED", "CANCELED")
WAITING = ("QUEUED", "STARTING", "RUNNING")  # states whose waiting_reason says what it waits for (RUNNING: ranks)


LONG_POLL = 2.0  # seconds the coordinator may hold a GetLogs call open
RECONNECT_FOR = 300.0  # a follower waits this long for a coordinator that went away (restart)


class _Reconnecting:
    """Retries calls while the coordinator is unreachable: a restart must not end `tfdist launch`
    (the job goes on without it)."""

    def __init__(self, client: Client, say, patience: float = RECONNECT_FOR):
        self.client, self.say, self.patience = client, say, patience  # say: writes one line of tfdist's

    def __call__(self, fn, *args, **kwargs):
        deadline = None
        while True:
            try:
                result = fn(*args, **kwargs)
                if deadline is not None:
                    self.say("tfdist: reconnected to the coordinator")
                return result
            except TfdistError as e:
                if e.grpc_code != "UNAVAILABLE" or self.patience <= 0:
                    raise
                if deadline is None:
                    deadline = time.monotonic() + self.patience
                    self.say(f"tfdist: lost the coordinator at {self.client.address}; the job goes on, "
                             f"retrying for {self.patience:.0f}s")
                if time.monotonic() > deadline:
                    raise
                time.sleep(1.0)


def stream_logs(client: Client, job_id: str, *, follow: bool, rank: int = -1, stdout: TextIO = sys.stdout,
                stderr: TextIO = sys.stderr, after_seq: int = 0, view: ViewOptions = FULL, json: bool = False) -> int:
    """Prints the job's lines (`tfdist logs`: by default the full log, every line on stdout with its stream
    marked; `json`: JSON Lines): without `follow`, every line stored now (page after page); with it, until the
    job ended (riding out a coordinator restart, saying why a job waits). Returns the last seq seen."""
    if json:
        out: Renderer | JsonLines = JsonLines(job_id, stdout, stderr)
    else:
        out = Renderer.of(view if follow else dataclasses.replace(view, progress=False), stdout, stderr)
    try:
        if follow:
            return _follow(client, job_id, out, after_seq, rank)[1]
        call = _Reconnecting(client, out.note, 0.0)
        while lines := call(client.logs, job_id, after_seq=after_seq, rank=rank).lines:
            out.lines(lines)
            after_seq = lines[-1].seq
        return after_seq
    finally:
        out.close()


class JsonLines:
    """`tfdist logs --json`: one object per stored line (docs/json.md), progress updates included (stream
    "progress"); tfdist's own lines about the job have rank null. Said to stderr: why the job waits."""

    def __init__(self, job_id: str, stdout: TextIO, stderr: TextIO):
        self.job_id, self.stdout, self.stderr = job_id, stdout, stderr

    def lines(self, lines) -> None:
        from cluster.client import json_output

        for line in lines:
            self.stdout.write(json_output.line({
                "job_id": self.job_id, "seq": line.seq, "rank": line.rank if line.rank >= 0 else None,
                "stream": line.stream, "time": json_output.when(line.time), "text": line.text}) + "\n")
        self.stdout.flush()

    def note(self, text: str) -> None:
        self.stderr.write(text + "\n")
        self.stderr.flush()

    def close(self) -> None:
        self.stdout.flush()


def _poll(call, client: Client, job_id: str, after_seq: int, rank: int, wait: float) -> pb.GetLogsResponse:
    """One long poll. A busy coordinator may answer at once with nothing (it has no waiting slot
    left): then pause here instead of asking again straight away."""
    started = time.monotonic()
    response = call(client.logs, job_id, after_seq=after_seq, rank=rank, wait=wait)
    if wait and not response.lines and not response.job_ended and time.monotonic() - started < wait / 4:
        time.sleep(wait / 4)
    return response


def summary(job: pb.Job) -> list[str]:
    lines = [f"tfdist: rank {e.rank} on node {e.agent} {describe_exit(e.exit_code)} during the job, which went on "
             "without it" for e in job.exits if e.tolerated]
    if job.state == "SUCCEEDED":
        return lines
    if job.state == "PAUSED":
        lines.append(f"tfdist: job {job.id} paused: {job.message}; `tfdist resume {job.id}` continues from "
                     f"the checkpoint at step {job.latest_checkpoint.step}" if job.latest_checkpoint.step >= 0 else
                     f"tfdist: job {job.id} paused: {job.message}; `tfdist resume {job.id}` runs it again")
        return lines
    lines.append(f"tfdist: job {job.id} {job.state.lower()}: {job.message}")
    first = root_cause_exit(job)
    if job.state == "FAILED" and first is not None:
        if first.last_lines:
            lines.append(f"tfdist: last lines of rank {first.rank} (node {first.agent}):")
            lines.extend(f"  {l}" for l in first.last_lines)
    return lines


def root_cause_exit(job: pb.Job) -> pb.WorkerExit | None:
    """The exit whose last lines explain the failure: the rank the coordinator named, else the
    first non-zero exit."""
    failed = [e for e in job.exits if e.rank == job.failed_rank] or [e for e in job.exits if e.exit_code != 0]
    return failed[0] if failed else None


PAUSED_EXIT = exit_codes.PAUSED  # nothing failed and nothing finished; `tfdist resume ID` continues


def exit_code(job: pb.Job) -> int:
    """What the follower of an ended (or paused) job exits with (cluster/client/exit_codes.py)."""
    code = exit_codes.of_job(job.state, job.exit_code)
    return exit_codes.FAILED if code is None else code


def last_seq(client: Client, job_id: str) -> int:
    """The job's last line so far: a follower of a resumed job starts after the lines it printed before."""
    seq = 0
    while lines := client.logs(job_id, after_seq=seq).lines:
        seq = lines[-1].seq
    return seq


def follow_job(client: Client, job_id: str, stdout: TextIO = sys.stdout, stderr: TextIO = sys.stderr,
               after_seq: int = 0, view: ViewOptions = QUIET) -> pb.Job:
    """Streams the job's output after line `after_seq` until it ends (long polls: lines arrive as they
    are shipped), through the quiet view by default; says why it waits while queued or starting."""
    out = Renderer.of(view, stdout, stderr)
    try:
        return _follow(client, job_id, out, after_seq)[0]
    finally:
        out.close()


def _follow(client: Client, job_id: str, out: Renderer | JsonLines, after_seq: int,
            rank: int = -1) -> tuple[pb.Job, int]:
    """Until the job ended: its lines, and each new reason it waits (QUEUED: for nodes; STARTING: for ranks
    to join). Returns the ended job and the last seq seen."""
    said_waiting = ""
    call = _Reconnecting(client, out.note)
    while True:
        response = _poll(call, client, job_id, after_seq, rank, LONG_POLL)
        out.lines(response.lines)
        if response.lines:
            after_seq = response.lines[-1].seq
            continue
        job = call(client.job, job_id)
        if response.job_ended:
            return job, after_seq
        if job.state in WAITING and job.waiting_reason and job.waiting_reason != said_waiting:
            out.note(f"tfdist: job {job_id} {job.state.lower()}: {job.waiting_reason}")
            said_waiting = job.waiting_reason
