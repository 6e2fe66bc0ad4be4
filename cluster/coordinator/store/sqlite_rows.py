"""SQLite rows to typed values, shared by the store and its readers; and what a row that cannot be read
becomes: one log line naming the job (once per job and process), and the row is skipped, so one bad row
(hand-edited, written by a newer release, bit rot) never breaks listing jobs, the scheduler or a restart."""

from __future__ import annotations

import functools
import json
import logging
import sqlite3
import threading
from typing import Any, Callable, Iterable

from google.protobuf import json_format

from cluster.shared.model import Allocation, AllocState, Checkpoint, Job, JobSpec, JobState, LogLine
from tfdist.errors import TfdistError

log = logging.getLogger("tfdist.coordinator")
Query = Callable[[str, tuple], list[sqlite3.Row]]
# What decoding a damaged row raises: bad JSON, an unknown state, a missing or mistyped field, a spec
# its codec refuses (json_format.Error: JSON that is no job spec, e.g. a layout no release wrote).
ROW_ERRORS = (ValueError, TypeError, KeyError, AttributeError, IndexError, TfdistError, json_format.Error)
TERMINAL = tuple(s.value for s in JobState if s.terminal)


class BadRows:
    """Which stored rows could not be read: each is logged once (by job id), then skipped quietly."""

    def __init__(self, path: str):
        self.path = path
        self._seen: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def report(self, table: str, whose: str, error: BaseException) -> None:
        """`whose`: "job ID" or "agent NAME"."""
        with self._lock:
            if (table, whose) in self._seen:
                return
            self._seen.add((table, whose))
        log.error("%s: a row of table %s in %s cannot be read (%s: %s); it is skipped. Fix or delete the row, "
                  "or leave it: nothing else is affected", whose, table, self.path, type(error).__name__, error)


def alloc_to_json(a: Allocation) -> dict:
    return {"agent": a.agent, "node_rank": a.node_rank, "slots": a.slots, "address": a.address,
            "ports": list(a.ports), "gpus": list(a.gpus), "state": a.state.value}


def alloc_from(job_id: str, d: Any) -> Allocation:
    gpus = d["gpus"]
    return Allocation(job_id=job_id, agent=d["agent"], node_rank=d["node_rank"], slots=d["slots"],
                      address=d["address"], ports=tuple(d["ports"] if isinstance(d["ports"], list)
                                                        else json.loads(d["ports"])),
                      gpus=tuple(gpus if isinstance(gpus, list) else json.loads(gpus)), state=AllocState(d["state"]))


@functools.lru_cache(maxsize=4096)
def spec_from(text: str) -> JobSpec:
    """A stored spec, decoded once: a spec never changes after it is stored (JobSpec is frozen), and the
    jobs on a node are read on each of its heartbeats."""
    return JobSpec.from_dict(json.loads(text))


@functools.lru_cache(maxsize=4096)
def placement_from(job_id: str, text: str) -> tuple[Allocation, ...]:
    """A stored placement, decoded once per placement (a job on 100 nodes has 100 entries)."""
    return tuple(alloc_from(job_id, d) for d in json.loads(text))


def job_from(r: sqlite3.Row) -> Job:
    return Job(id=r["id"], seq=r["seq"], spec=spec_from(r["spec"]), state=JobState(r["state"]),
               submitted_at=r["submitted_at"], started_at=r["started_at"], ended_at=r["ended_at"],
               message=r["message"] or "", exit_code=r["exit_code"], failed_rank=r["failed_rank"],
               placement=placement_from(r["id"], r["placement"]),
               attempt=r["attempt"], restarts=r["restarts"], preempt_requested=bool(r["preempt_requested"]),
               preempted_step=r["preempted_step"], preemptible=bool(r["preemptible"]), owner=r["owner"] or "")


def last_lines(r: sqlite3.Row, bad: BadRows) -> tuple[str, ...]:
    """An exit's last lines; damaged ones are said to be so (the exit itself still counts)."""
    try:
        return tuple(str(line) for line in json.loads(r["last_lines"]))
    except ROW_ERRORS as e:
        bad.report("exits", f"job {r['job_id']}", e)
        return ("(these lines cannot be read from the coordinator's state)",)


def readable_jobs(rows: Iterable[sqlite3.Row], bad: BadRows) -> list[Job]:
    jobs = []
    for r in rows:
        try:
            jobs.append(job_from(r))
        except ROW_ERRORS as e:
            bad.report("jobs", f"job {r['id']}", e)
    return jobs


def readable_allocations(rows: Iterable[sqlite3.Row], bad: BadRows) -> list[Allocation]:
    allocations = []
    for r in rows:
        try:
            allocations.append(alloc_from(r["job_id"], r))
        except ROW_ERRORS as e:
            bad.report("allocations", f"job {r['job_id']}", e)
    return allocations


def one_job(query: Query, bad: BadRows, column: str, value) -> Job | None:
    """The job whose `column` is `value`; None also for a row that cannot be read (reported)."""
    found = readable_jobs(query(f"SELECT * FROM jobs WHERE {column}=?", (value,)), bad)
    return found[0] if found else None


def _where_states(states: Iterable[JobState] | None) -> tuple[str, tuple]:
    if states is None:
        return "1", ()
    values = tuple(JobState(s).value for s in states)
    return f"state IN ({','.join('?' * len(values))})", values


def jobs_page(query: Query, bad: BadRows, states: Iterable[JobState] | None, before_seq: int | None,
              limit: int) -> tuple[list[Job], int | None]:
    """Up to `limit` rows of jobs (in `states`) numbered below `before_seq`, newest first, less those that
    cannot be read; and the number to continue below (None: nothing older matches)."""
    where, args = _where_states(states)
    if before_seq is not None:
        where, args = f"{where} AND seq < ?", (*args, before_seq)
    rows = query(f"SELECT * FROM jobs WHERE {where} ORDER BY seq DESC LIMIT ?", (*args, limit + 1))
    more = len(rows) > limit
    rows = rows[:limit]
    return readable_jobs(rows, bad), (rows[-1]["seq"] if more else None)


def count_jobs(query: Query, states: Iterable[JobState] | None) -> int:
    where, args = _where_states(states)
    return query(f"SELECT COUNT(*) AS n FROM jobs WHERE {where}", args)[0]["n"]


def read_logs(query: Query, job_id: str, after_seq: int, rank: int, limit: int) -> list[LogLine]:
    if rank >= 0:
        rows = query("SELECT * FROM logs WHERE job_id=? AND seq>? AND rank=? ORDER BY seq LIMIT ?",
                     (job_id, after_seq, rank, limit))
    else:
        rows = query("SELECT * FROM logs WHERE job_id=? AND seq>? ORDER BY seq LIMIT ?", (job_id, after_seq, limit))
    return [LogLine(rank=r["rank"], stream=r["stream"], text=r["text"], time=r["time"], seq=r["seq"]) for r in rows]


def ended(query: Query, job_id: str) -> bool:
    """Ended or paused, and no node holds the job any more; a state this release does not know counts as
    ended (nothing of it can run)."""
    rows = query("SELECT state, (SELECT COUNT(*) FROM allocations WHERE job_id=?) AS held FROM jobs WHERE id=?",
                 (job_id, job_id))
    if not rows:
        return False
    try:
        stopped = JobState(rows[0]["state"]).stopped
    except ValueError:
        stopped = True
    return stopped and rows[0]["held"] == 0


def latest_checkpoint(query: Query, job_id: str) -> Checkpoint | None:
    rows = query("SELECT step, path, attempt, time FROM checkpoints WHERE job_id=? ORDER BY step DESC LIMIT 1",
                 (job_id,))
    return Checkpoint(**rows[0]) if rows else None
