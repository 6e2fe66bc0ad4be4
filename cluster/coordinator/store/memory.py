"""The coordinator's state in dicts: the `StateStore` contract without a file (nothing survives the process).

For tests of the coordinator core and for trying the core without SQLite. Every write goes through
`_put` or `_append`, which log how to undo it; a transaction that raises replays that log backwards, so
it leaves nothing, as SQLite's ROLLBACK does. One re-entrant lock makes it thread-safe the way the
SQLite store is: a transaction holds it from begin to commit, and every read takes it.
The job spec is kept as the JobSpec object itself.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import threading
from typing import Any, Callable, Iterable, Iterator

from cluster.coordinator.store.base import UPDATABLE_JOB_FIELDS, StateReader, StateStore, already_shipped
from cluster.shared.model import (AgentRecord, Allocation, AllocState, Checkpoint, Experiment, Job, JobSpec, JobState,
                                  LogLine, MetricRow, WorkerExit)
from tfdist.errors import InternalError

_FLAGS = ("preempt_requested", "preemptible")  # stored 0/1 by callers, read as bools


def _placed(job_id: str, a: Allocation) -> Allocation:
    """An allocation as the store gives it back: of this job, tuples, a state enum."""
    return dataclasses.replace(a, job_id=job_id, ports=tuple(a.ports), gpus=tuple(a.gpus), state=AllocState(a.state))


class MemoryStore(StateStore):
    """Dicts keyed as the SQLite tables are; see the module's docstring."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._depth = 0  # nesting of transaction() in the thread holding _lock
        self._undo: list[Callable[[], Any]] = []  # how to take back each write of the open transaction
        self._agents: dict[str, AgentRecord] = {}
        self._jobs: dict[str, Job] = {}
        self._submissions: dict[str, str] = {}  # submission id -> job id
        self._events: dict[str, list[tuple[float, str]]] = {}
        self._allocations: dict[str, tuple[Allocation, ...]] = {}  # job -> by node rank
        self._exits: dict[str, dict[tuple[int, int], WorkerExit]] = {}  # job -> (attempt, rank) -> exit
        self._checkpoints: dict[str, dict[int, Checkpoint]] = {}  # job -> step -> checkpoint
        self._metrics: dict[str, list[MetricRow]] = {}  # job -> rows in arrival order
        self._logs: dict[str, list[LogLine]] = {}  # job -> lines, seq 1, 2, ...
        self._shipped: dict[tuple[str, str, str], int] = {}  # (job, source, kind) -> last seq stored
        self._seq_floor = 0  # the highest job number pruned: never given again
        self._experiments: dict[str, Experiment] = {}

    def close(self) -> None:
        """Nothing is held open."""

    def reader(self) -> MemoryReader:
        return MemoryReader(self)

    # ---------------------------------------------------------------- transactions
    @contextlib.contextmanager
    def transaction(self, durable: bool = False) -> Iterator[None]:
        """As StateStore's; `durable` promises nothing more here (nothing outlives the process)."""
        with self._lock:
            outer = self._depth == 0
            self._depth += 1
            try:
                yield
            except BaseException:
                self._depth -= 1
                if outer:
                    while self._undo:
                        self._undo.pop()()
                raise
            self._depth -= 1
            if outer:
                self._undo.clear()
                self.commits += 1

    def _put(self, table: dict, key: Any, value: Any) -> None:
        """table[key] = value, undoably. Only inside a transaction (every write method opens one)."""
        if key in table:
            old = table[key]
            self._undo.append(lambda: table.__setitem__(key, old))
        else:
            self._undo.append(lambda: table.pop(key))
        table[key] = value

    def _append(self, table: dict[str, list], key: str, item: Any) -> None:
        """table[key].append(item), undoably (an emptied list reads as no rows)."""
        rows = table.setdefault(key, [])
        rows.append(item)
        self._undo.append(rows.pop)

    # ---------------------------------------------------------------- agents
    def upsert_agent(self, agent: AgentRecord, now: float) -> None:
        with self.transaction():
            self._put(self._agents, agent.name, dataclasses.replace(
                agent, addresses=tuple(agent.addresses), gpus=tuple(agent.gpus)))

    def agents(self) -> list[AgentRecord]:
        with self._lock:
            return [self._agents[name] for name in sorted(self._agents)]

    # ---------------------------------------------------------------- jobs
    def next_job_seq(self) -> int:
        with self._lock:
            return max([self._seq_floor, *(j.seq for j in self._jobs.values())]) + 1

    def insert_job(self, job_id: str, seq: int, spec: JobSpec, now: float, event: str, owner: str = "") -> None:
        with self.transaction(durable=True):
            if job_id in self._jobs:
                raise InternalError(f"job {job_id} is already stored; a new job needs a new id")
            if spec.submission_id and spec.submission_id in self._submissions:
                raise InternalError(f"submission {spec.submission_id} already made job "
                                    f"{self._submissions[spec.submission_id]}; look it up with job_by_submission")
            self._put(self._jobs, job_id, Job(id=job_id, seq=seq, spec=spec, state=JobState.QUEUED, submitted_at=now,
                                                    owner=owner))
            if spec.submission_id:
                self._put(self._submissions, spec.submission_id, job_id)
            self._append(self._events, job_id, (now, event))

    def update_job(self, job_id: str, now: float, event: str | None = None, *,
                   placement: Iterable[Allocation] | None = None, **fields: Any) -> None:
        unknown = sorted(set(fields) - UPDATABLE_JOB_FIELDS)
        if unknown:
            raise InternalError(f"update_job({job_id}): {unknown} are not job fields that change; "
                                f"expected some of {sorted(UPDATABLE_JOB_FIELDS)}")
        if "state" in fields:
            fields["state"] = JobState(fields["state"])
        for flag in _FLAGS:
            if flag in fields:
                fields[flag] = bool(fields[flag])
        if placement is not None:
            fields["placement"] = tuple(_placed(job_id, a) for a in placement)
        with self.transaction():
            job = self._jobs.get(job_id)
            if job is not None and fields:
                self._put(self._jobs, job_id, dataclasses.replace(job, **fields))
            if event:
                self._append(self._events, job_id, (now, event))

    def job(self, job_id: str) -> Job | None:
        with self._lock:
            return self._jobs.get(job_id)

    def job_by_seq(self, seq: int) -> Job | None:
        with self._lock:
            return next((j for j in self._jobs.values() if j.seq == seq), None)

    def job_by_submission(self, submission_id: str) -> Job | None:
        with self._lock:
            job_id = self._submissions.get(submission_id) if submission_id else None
            return self._jobs.get(job_id) if job_id else None

    def jobs(self, states: Iterable[JobState] | None = None) -> list[Job]:
        with self._lock:
            wanted = None if states is None else {JobState(s) for s in states}
            return sorted((j for j in self._jobs.values() if wanted is None or j.state in wanted),
                          key=lambda j: j.seq)

    def jobs_page(self, states: Iterable[JobState] | None = None, before_seq: int | None = None,
                  limit: int = 500) -> tuple[list[Job], int | None]:
        with self._lock:
            older = [j for j in reversed(self.jobs(states)) if before_seq is None or j.seq < before_seq]
            return older[:limit], (older[limit - 1].seq if len(older) > limit else None)

    def count_jobs(self, states: Iterable[JobState] | None = None) -> int:
        return len(self.jobs(states))

    def prune_finished(self, now: float, keep_jobs: int, keep_seconds: float, max_jobs: int) -> list[str]:
        with self.transaction():
            finished = [j for j in self.jobs() if j.state.terminal]
            kept = {j.id for j in finished[-keep_jobs:]} if keep_jobs > 0 else {j.id for j in finished}
            gone = [j for j in finished if (j.id not in kept or (keep_seconds > 0 and j.ended_at is not None and
                                                                  j.ended_at < now - keep_seconds))
                    and not self._allocations.get(j.id)][:max_jobs]
            for j in gone:
                self._prune(j)
            return [j.id for j in gone]

    def _prune(self, job: Job) -> None:
        """The job and everything of it goes; undoably, like every write."""
        for table in (self._jobs, self._events, self._allocations, self._exits, self._checkpoints, self._metrics,
                      self._logs):
            if job.id in table:
                old = table.pop(job.id)
                self._undo.append(lambda t=table, o=old: t.__setitem__(job.id, o))
        for key in [k for k in self._shipped if k[0] == job.id]:
            old = self._shipped.pop(key)
            self._undo.append(lambda k=key, o=old: self._shipped.__setitem__(k, o))
        if job.spec.submission_id and self._submissions.get(job.spec.submission_id) == job.id:
            self._undo.append(lambda s=job.spec.submission_id: self._submissions.__setitem__(s, job.id))
            del self._submissions[job.spec.submission_id]
        floor = self._seq_floor
        self._undo.append(lambda: setattr(self, "_seq_floor", floor))
        self._seq_floor = max(floor, job.seq)

    def purge_output(self, max_rows: int) -> int:
        return 0  # `prune_finished` took the output with the job

    def put_experiment(self, experiment: Experiment) -> None:
        with self.transaction():
            known = self._experiments.get(experiment.id)
            if known is not None:
                experiment = dataclasses.replace(known, state=experiment.state, ended_at=experiment.ended_at,
                                                 message=experiment.message, search=experiment.search,
                                                 held=tuple(experiment.held))
            self._put(self._experiments, experiment.id, experiment)

    def experiment(self, ref: str | int) -> Experiment | None:
        with self._lock:
            if isinstance(ref, int):
                return next((e for e in self._experiments.values() if e.seq == ref), None)
            return self._experiments.get(ref)

    def experiments(self) -> list[Experiment]:
        with self._lock:
            return sorted(self._experiments.values(), key=lambda e: e.seq)

    def next_experiment_seq(self) -> int:
        with self._lock:
            return max([0, *(e.seq for e in self._experiments.values())]) + 1

    def events(self, job_id: str) -> list[tuple[float, str]]:
        with self._lock:
            return list(self._events.get(job_id, ()))

    # ---------------------------------------------------------------- allocations
    def set_allocations(self, job_id: str, allocations: Iterable[Allocation]) -> None:
        placed = sorted((_placed(job_id, a) for a in allocations), key=lambda a: a.node_rank)
        agents = [a.agent for a in placed]
        if len(set(agents)) != len(agents):
            raise InternalError(f"job {job_id}: one allocation per agent, got agents {agents}")
        with self.transaction():
            self._put(self._allocations, job_id, tuple(placed))

    def allocations(self, job_id: str | None = None) -> list[Allocation]:
        with self._lock:
            if job_id is not None:
                return list(self._allocations.get(job_id, ()))
            return [a for j in sorted(self._allocations) for a in self._allocations[j]]

    # ---------------------------------------------------------------- exits
    def record_exit(self, job_id: str, e: WorkerExit) -> bool:
        with self.transaction():
            exits = self._exits.setdefault(job_id, {})
            if (e.attempt, e.rank) in exits:
                return False
            self._put(exits, (e.attempt, e.rank), dataclasses.replace(
                e, last_lines=tuple(e.last_lines), reason=e.reason or "", tolerated=bool(e.tolerated)))
            return True

    def exits(self, job_id: str, attempt: int | None = None) -> list[WorkerExit]:
        with self._lock:
            found = [e for e in self._exits.get(job_id, {}).values() if attempt is None or e.attempt == attempt]
            return sorted(found, key=lambda e: (e.attempt, e.time, e.rank))

    # ---------------------------------------------------------------- checkpoints
    def record_checkpoint(self, job_id: str, c: Checkpoint) -> bool:
        with self.transaction():
            checkpoints = self._checkpoints.setdefault(job_id, {})
            if c.step in checkpoints:
                return False
            self._put(checkpoints, c.step, c)
            return True

    def latest_checkpoint(self, job_id: str) -> Checkpoint | None:
        with self._lock:
            checkpoints = self._checkpoints.get(job_id, {})
            return checkpoints[max(checkpoints)] if checkpoints else None

    # ---------------------------------------------------------------- shipped output
    def _fresh(self, job_id: str, source: str, kind: str, first_seq: int, count: int) -> int:
        """As the SQLite store's: how many leading items of the batch were stored before; records it."""
        if not source or first_seq <= 0:
            return 0
        last = self._shipped.get((job_id, source, kind), 0)
        self._put(self._shipped, (job_id, source, kind), max(last, first_seq + count - 1))
        return already_shipped(last, first_seq, count)

    def append_metrics(self, job_id: str, rows: list[MetricRow], source: str = "", first_seq: int = 0) -> int:
        with self.transaction():
            skip = self._fresh(job_id, source, "metrics", first_seq, len(rows))
            for m in rows[skip:]:
                self._append(self._metrics, job_id, dataclasses.replace(m, note=""))
            return len(rows) - skip

    def metrics(self, job_id: str, name: str | None = None) -> list[MetricRow]:
        with self._lock:
            rows = [m for m in self._metrics.get(job_id, ()) if name is None or m.name == name]
            return sorted(rows, key=lambda m: m.step)  # stable: arrival order within a step

    def latest_metrics(self, job_id: str) -> list[MetricRow]:
        with self._lock:
            newest: dict[str, MetricRow] = {}
            for m in self._metrics.get(job_id, ()):
                if m.name not in newest or m.step >= newest[m.name].step:
                    newest[m.name] = m
            return [newest[name] for name in sorted(newest)]

    # ---------------------------------------------------------------- logs
    def append_logs(self, job_id: str, lines: list[LogLine], source: str = "", first_seq: int = 0) -> int:
        with self.transaction():
            skip = self._fresh(job_id, source, "logs", first_seq, len(lines))
            stored = self._logs.get(job_id)
            seq = stored[-1].seq if stored else 0
            for i, line in enumerate(lines[skip:]):
                self._append(self._logs, job_id, dataclasses.replace(line, seq=seq + i + 1))
            return len(lines) - skip

    def log_count(self, job_id: str) -> int:
        with self._lock:
            return len(self._logs.get(job_id, []))

    def logs(self, job_id: str, after_seq: int = 0, rank: int = -1, limit: int = 1000) -> list[LogLine]:
        with self._lock:
            stored = self._logs.get(job_id, [])
            # Lines are numbered 1, 2, ... in list order: those after `after_seq` start at that index.
            matching = (l for l in stored[max(after_seq, 0):] if rank < 0 or l.rank == rank)
            return list(matching if limit < 0 else itertools.islice(matching, limit))


class MemoryReader(StateReader):
    """Reads under the store's own lock (never the coordinator's): another thread's transaction is
    waited out, so only commits are seen. The store's transactions do no I/O, so the wait is short."""

    def __init__(self, store: MemoryStore):
        self._store = store

    def job(self, job_id: str) -> Job | None:
        return self._store.job(job_id)

    def job_by_seq(self, seq: int) -> Job | None:
        return self._store.job_by_seq(seq)

    def ended(self, job_id: str) -> bool:
        with self._store._lock:
            job = self._store.job(job_id)
            return job is not None and job.state.stopped and not self._store.allocations(job_id)

    def logs(self, job_id: str, after_seq: int, rank: int, limit: int) -> list[LogLine]:
        return self._store.logs(job_id, after_seq, rank, limit)

    def jobs_page(self, states: Iterable[JobState] | None = None, before_seq: int | None = None,
                  limit: int = 500) -> tuple[list[Job], int | None]:
        return self._store.jobs_page(states, before_seq, limit)

    def count_jobs(self, states: Iterable[JobState] | None = None) -> int:
        return self._store.count_jobs(states)

    def experiment(self, ref: str | int) -> Experiment | None:
        return self._store.experiment(ref)

    def experiments(self) -> list[Experiment]:
        return self._store.experiments()

    def latest_checkpoint(self, job_id: str) -> Checkpoint | None:
        return self._store.latest_checkpoint(job_id)
