"""The coordinator's state, as one interface: what the coordinator core may ask of a store.

Two implementations keep it: `SqliteStore` (durable; what a coordinator runs on) and `MemoryStore`
(dicts; nothing survives the process). tests/unit/test_store.py runs one contract suite against both,
so the core can rely on this file alone (Flower's `LinkState`, `SqliteLinkState`, `InMemoryLinkState`).

The contract every implementation keeps:
- Transactions. `with store.transaction():` makes everything inside all-or-nothing: an exception
  (any BaseException) leaves none of it, and a commit leaves all of it. Uses nest: an inner one joins the
  outermost, which alone commits or rolls back. Every write method joins the open transaction, or runs
  in one of its own. One thread at a time holds a transaction; other threads' calls wait for it.
- Retried reports count once: `record_exit` per (job, attempt, rank), `record_checkpoint` per (job, step),
  `append_logs` and `append_metrics` per (job, source, kind) by the batch's `first_seq`.
- Order: jobs by seq, agents by name, allocations by (job, node rank), exits by (attempt, time, rank),
  metrics by step then arrival, logs by the seq the store gives them (1, 2, ... per job, in arrival order).
- Values come back as they were stored (frozen dataclasses; tuples, not lists).
- `reader()` serves log followers and job listings, which never take the coordinator's lock: it sees the
  last commit, never a transaction in progress.
- Rows that cannot be read (SQLite: bad JSON, a state this release does not know) are skipped by every
  read, and reported once by job id; a lookup of one answers None.
- Retention: `prune_finished` removes finished jobs past a rule (retention.py), `purge_output` their
  output in bounded batches; job numbers are never given again.
"""

from __future__ import annotations

import abc
import contextlib
from typing import Any, Iterable

from cluster.shared.model import (AgentRecord, Allocation, Checkpoint, Experiment, Job, JobSpec, JobState, LogLine,
                                  MetricRow, WorkerExit)

# The Job fields `update_job` may set (besides `placement`): what changes over a job's life.
UPDATABLE_JOB_FIELDS = frozenset({
    "state", "started_at", "ended_at", "message", "exit_code", "failed_rank", "attempt", "restarts",
    "preempt_requested", "preempted_step", "preemptible"})


class StateReader(abc.ABC):
    """Read-only access for log followers, outside the coordinator's lock: sees the last commit only."""

    @abc.abstractmethod
    def job(self, job_id: str) -> Job | None:
        """The job with this id, or None."""

    @abc.abstractmethod
    def job_by_seq(self, seq: int) -> Job | None:
        """The job with this number (what `tfdist` prints before the id's dash), or None."""

    @abc.abstractmethod
    def ended(self, job_id: str) -> bool:
        """Ended or paused, and no node holds the job any more: its agents shipped every line first."""

    @abc.abstractmethod
    def logs(self, job_id: str, after_seq: int, rank: int, limit: int) -> list[LogLine]:
        """As `StateStore.logs`."""

    @abc.abstractmethod
    def jobs_page(self, states: Iterable[JobState] | None = None, before_seq: int | None = None,
                  limit: int = 500) -> tuple[list[Job], int | None]:
        """As `StateStore.jobs_page`."""

    @abc.abstractmethod
    def count_jobs(self, states: Iterable[JobState] | None = None) -> int:
        """As `StateStore.count_jobs`."""

    @abc.abstractmethod
    def experiment(self, ref: str | int) -> Experiment | None:
        """As `StateStore.experiment`."""

    @abc.abstractmethod
    def experiments(self) -> list[Experiment]:
        """As `StateStore.experiments`."""

    @abc.abstractmethod
    def latest_checkpoint(self, job_id: str) -> Checkpoint | None:
        """As `StateStore.latest_checkpoint`."""


class StateStore(abc.ABC):
    """Jobs, their events, allocations, exits, checkpoints, metrics and logs; agents as registered.
    Liveness (heartbeat times) is not here: the coordinator rebuilds it when agents re-attach."""

    @abc.abstractmethod
    def close(self) -> None:
        """Lets go of what the store holds open; the store is not used afterwards."""

    @abc.abstractmethod
    def transaction(self, durable: bool = False) -> contextlib.AbstractContextManager[Any]:
        """One all-or-nothing transaction (see the module's docstring); what it yields is the
        implementation's own. `durable` on the outermost: the commit survives a power loss before this
        returns, where the store can promise that (a nested use cannot upgrade a transaction begun)."""

    commits: int = 0  # transactions committed so far: the marks `sync` takes (nothing to sync: stays 0)

    def sync(self, through: int | None = None) -> None:
        """Commits up to mark `through` (a value of `commits`; default: all so far) survive a power loss when
        this returns; callers waiting together share one sync (group commit). Called outside the coordinator's
        lock, after the transaction, before a durable answer. A store nothing outlives has nothing to do."""

    @abc.abstractmethod
    def reader(self) -> StateReader:
        """A reader for log followers (see StateReader); each call gives a new one."""

    # ---------------------------------------------------------------- agents
    @abc.abstractmethod
    def upsert_agent(self, agent: AgentRecord, now: float) -> None:
        """Records the agent, replacing what an agent of that name said before."""

    @abc.abstractmethod
    def agents(self) -> list[AgentRecord]:
        """Every agent that ever registered, by name."""

    # ---------------------------------------------------------------- jobs
    @abc.abstractmethod
    def next_job_seq(self) -> int:
        """One more than the highest job number stored (1 for none)."""

    @abc.abstractmethod
    def insert_job(self, job_id: str, seq: int, spec: JobSpec, now: float, event: str, owner: str = "") -> None:
        """A new QUEUED job with its first event, made durable. An id, or a non-empty submission id,
        that is already stored raises and stores nothing."""

    @abc.abstractmethod
    def update_job(self, job_id: str, now: float, event: str | None = None, *,
                   placement: Iterable[Allocation] | None = None, **fields: Any) -> None:
        """Sets `fields` (names of UPDATABLE_JOB_FIELDS; `state` a JobState or its value; the two flags
        as bools or 0/1) and `placement` on the job, and appends `event` to its events. An unknown job
        gets only the event."""

    @abc.abstractmethod
    def job(self, job_id: str) -> Job | None:
        """The job with this id, or None."""

    @abc.abstractmethod
    def job_by_seq(self, seq: int) -> Job | None:
        """The job with this number, or None."""

    @abc.abstractmethod
    def job_by_submission(self, submission_id: str) -> Job | None:
        """The job a client's submission id made (a retried submit finds it), or None."""

    @abc.abstractmethod
    def jobs(self, states: Iterable[JobState] | None = None) -> list[Job]:
        """Every job, or those in `states`, by seq."""

    @abc.abstractmethod
    def jobs_page(self, states: Iterable[JobState] | None = None, before_seq: int | None = None,
                  limit: int = 500) -> tuple[list[Job], int | None]:
        """Up to `limit` jobs (in `states`, or every one) numbered below `before_seq` (None: from the newest),
        newest first; and the number to ask below for the next page (None: no older job matches)."""

    @abc.abstractmethod
    def count_jobs(self, states: Iterable[JobState] | None = None) -> int:
        """How many jobs are stored (in `states`)."""

    @abc.abstractmethod
    def prune_finished(self, now: float, keep_jobs: int, keep_seconds: float, max_jobs: int) -> list[str]:
        """Removes up to `max_jobs` finished jobs (oldest first) that are not among the newest `keep_jobs`
        finished ones or ended more than `keep_seconds` before `now` (0 turns a limit off), and hold no
        node, with their events, exits and checkpoints; their logs and metrics go with `purge_output`.
        Returns their ids."""

    @abc.abstractmethod
    def purge_output(self, max_rows: int) -> int:
        """Deletes up to about `max_rows` rows of pruned jobs' logs and metrics; 0 when none are left."""

    @abc.abstractmethod
    def events(self, job_id: str) -> list[tuple[float, str]]:
        """The job's events as (time, message), oldest first."""

    # ---------------------------------------------------------------- experiments
    @abc.abstractmethod
    def put_experiment(self, experiment: Experiment) -> None:
        """Stores the experiment: a new one whole; a known id's state, end, message, search and held ops."""

    @abc.abstractmethod
    def experiment(self, ref: str | int) -> Experiment | None:
        """The experiment with this id (str) or number (int), or None."""

    @abc.abstractmethod
    def experiments(self) -> list[Experiment]:
        """Every experiment, by number."""

    @abc.abstractmethod
    def next_experiment_seq(self) -> int:
        """One more than the highest experiment number stored (1 for none)."""

    # ---------------------------------------------------------------- allocations
    @abc.abstractmethod
    def set_allocations(self, job_id: str, allocations: Iterable[Allocation]) -> None:
        """Replaces the job's allocations (none: the job holds no node). One per agent: a second
        allocation on one agent raises and changes nothing."""

    @abc.abstractmethod
    def allocations(self, job_id: str | None = None) -> list[Allocation]:
        """The job's allocations by node rank, or (None) every job's, by job id then node rank."""

    # ---------------------------------------------------------------- exits
    @abc.abstractmethod
    def record_exit(self, job_id: str, e: WorkerExit) -> bool:
        """Returns False if this rank's exit of this attempt was already recorded (a retried report)."""

    @abc.abstractmethod
    def exits(self, job_id: str, attempt: int | None = None) -> list[WorkerExit]:
        """The job's exits: of one attempt, or (None) of every attempt; by attempt, time, rank."""

    # ---------------------------------------------------------------- checkpoints
    @abc.abstractmethod
    def record_checkpoint(self, job_id: str, c: Checkpoint) -> bool:
        """Returns False if this step's checkpoint was already recorded (a retried report)."""

    @abc.abstractmethod
    def latest_checkpoint(self, job_id: str) -> Checkpoint | None:
        """The checkpoint of the highest step, or None."""

    # ---------------------------------------------------------------- metrics
    @abc.abstractmethod
    def append_metrics(self, job_id: str, rows: list[MetricRow], source: str = "", first_seq: int = 0) -> int:
        """Stores the rows (without their `note`); returns how many were new. A batch numbered
        `first_seq`.. by its `source` skips the rows that source's earlier batches already stored;
        an unnumbered batch (no source, or first_seq 0) is stored whole."""

    @abc.abstractmethod
    def metrics(self, job_id: str, name: str | None = None) -> list[MetricRow]:
        """The job's rows (of one metric, or every one) by step, then arrival."""

    @abc.abstractmethod
    def latest_metrics(self, job_id: str) -> list[MetricRow]:
        """The newest row of every metric name (highest step, then the last reported), by name."""

    # ---------------------------------------------------------------- logs
    @abc.abstractmethod
    def append_logs(self, job_id: str, lines: list[LogLine], source: str = "", first_seq: int = 0) -> int:
        """Numbers the lines per job in arrival order (their own seq is ignored); retried batches as
        in `append_metrics`. Returns how many were new."""

    @abc.abstractmethod
    def logs(self, job_id: str, after_seq: int = 0, rank: int = -1, limit: int = 1000) -> list[LogLine]:
        """Up to `limit` lines numbered above `after_seq` (of one rank, or every one: -1), by seq."""

    @abc.abstractmethod
    def log_count(self, job_id: str) -> int:
        """How many lines the job's log holds (the highest seq given)."""


def already_shipped(last_seq: int, first_seq: int, count: int) -> int:
    """How many leading items of a batch numbered first_seq.. a source had shipped before (up to
    `last_seq`): the part of a retried batch to skip."""
    return min(max(0, last_seq - first_seq + 1), count)
