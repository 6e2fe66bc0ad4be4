"""What an agent owes the coordinator: log lines, metric rows and worker exits, per job.

Items are numbered per agent process (its `source`), so a batch retried
after a coordinator crash is stored once. Batches are bounded in count and
bytes, well under the message cap. Shipping never stalls on a bad item: a
refused batch (INVALID_ARGUMENT) is split until the refused item stands alone,
which is then dropped with a line in the job's log saying so. A transient
answer (the coordinator's disk full, the coordinator restarting or slow) drops
nothing: everything is kept and sent again in order after a back-off, and the
agent's log says once per job that its output is delayed. What is kept is
bounded (MAX_HELD_BYTES for the agent, MAX_QUEUED items a job): past that a
job's oldest items go, and its log says how many in one line where they were.
Lines longer than MAX_LINE_CHARS keep their end, with the count of cut
characters in the line; a progress bar's transient updates come as lines of
stream PROGRESS (cluster/shared/output_lines.py), at most one a second per rank.
Items come in typed (cluster/shared/model.py) and are queued as their wire
messages: this is the agent's shipping edge.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import threading
import time
from typing import Callable

import grpc

from cluster.shared.model import MetricRow, WorkerExit
from cluster.shared.output_lines import MAX_LINE_CHARS, keep_end
from cluster.shared.rpc import Client, ClientError
from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb
from cluster.shared.work import exit_to_pb, metric_to_pb

log = logging.getLogger("tfdist.agent")
MAX_BATCH_ITEMS = 500
MAX_BATCH_BYTES = 1 << 20  # the message cap is 8 MiB
MAX_QUEUED = 200_000  # per job; a coordinator away for long keeps the newest
# Unsent lines and rows of all the agent's jobs together: the memory is the node's, whatever the number of
# jobs on it. A job printing on past it loses its own oldest items, never another job's.
MAX_HELD_BYTES = 256 << 20
REFUSED = (grpc.StatusCode.INVALID_ARGUMENT,)  # this item is wrong: sending it again changes nothing
# The coordinator could not take it now (RESOURCE_EXHAUSTED: its disk is full; gRPC's own cap is never
# reached, batches being 1 MiB at most): kept and sent again later.
TRANSIENT = (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
FIRST_BACKOFF = 0.5  # seconds before the first retry after a transient answer
MAX_BACKOFF = 10.0  # the longest wait between retries: output arrives at most this long after there is room


def cut_line(text: str) -> str:
    """A line over the cap keeps its end (output_lines.keep_end): where a long line got to is at its end. The
    gang's reader already cuts so; this holds for every line shipped (tfdist's own notes too)."""
    return keep_end(text, MAX_LINE_CHARS)


@dataclasses.dataclass(frozen=True)
class Backoff:
    """When shipping may try again after a transient answer: FIRST_BACKOFF after the first, doubling up to
    MAX_BACKOFF, so a full disk is not hammered yet room is noticed within seconds; a delivered batch
    starts over (`Backoff()`). Pure: the time is passed in."""

    delay: float = 0.0  # the current wait (0: the last call was answered)
    until: float = 0.0  # no call before this

    def failed(self, now: float) -> Backoff:
        delay = min(MAX_BACKOFF, self.delay * 2) if self.delay else FIRST_BACKOFF
        return Backoff(delay, now + delay)

    def left(self, now: float) -> float:
        return max(0.0, self.until - now)


@dataclasses.dataclass
class _Delay:
    """A job whose output the coordinator could not take: since when, and what was delivered since."""

    since: float
    delivered: int = 0


class _Queue:
    """Numbered items of one kind for one job, with their wire sizes."""

    def __init__(self, next_seq: int = 1):
        self.items: collections.deque = collections.deque()  # (seq, message, bytes)
        self.next_seq = next_seq
        self.bytes = 0
        self.lost = 0  # oldest items dropped to the bounds, not yet said in the job's log
        self.in_flight = 0  # the last seq of the batch being sent (0: none)
        self.dropped_in_flight = 0  # items of that batch a bound dropped meanwhile: lost only if it fails
        self.batch_limit = MAX_BATCH_ITEMS  # halves while the coordinator refuses batches

    def add(self, item) -> int:
        """Appends; returns the bytes held in addition (less an oldest item dropped over MAX_QUEUED)."""
        size = item.ByteSize() + 16
        self.items.append((self.next_seq, item, size))
        self.next_seq += 1
        self.bytes += size
        return size - (self.drop_oldest() if len(self.items) > MAX_QUEUED else 0)

    def drop_oldest(self) -> int:
        """Drops the oldest item to a bound; returns its bytes."""
        seq, _, size = self.items.popleft()
        self.bytes -= size
        if seq <= self.in_flight:
            self.dropped_in_flight += 1
        else:
            self.lost += 1
        return size

    def landed(self, delivered: bool) -> None:
        """The batch in flight was answered: what a bound dropped of it meanwhile is lost unless delivered."""
        self.lost += 0 if delivered else self.dropped_in_flight
        self.in_flight = self.dropped_in_flight = 0

    def sent(self, last_seq: int) -> int:
        """Forgets the items up to `last_seq`, delivered or refused (any a bound dropped meanwhile are gone
        already); returns their bytes."""
        freed = 0
        while self.items and self.items[0][0] <= last_seq:
            freed += self.items.popleft()[2]
        self.bytes -= freed
        return freed

    def batch(self) -> list:
        taken, size = [], 0
        for seq, item, item_size in self.items:
            size += item_size
            if taken and (len(taken) >= self.batch_limit or size > MAX_BATCH_BYTES):
                break
            taken.append((seq, item))
        return taken


class Outbox:
    def __init__(self, client: Client, agent: str, source: str, clock: Callable[[], float] = time.monotonic):
        self.client, self.agent, self.source, self.clock = client, agent, source, clock
        self._lock = threading.Lock()
        self._logs: dict[str, _Queue] = {}
        self._metrics: dict[str, _Queue] = {}
        # Numbers go on where a forgotten job's queue stopped: a restarted job's run (same job id, same
        # source) must not look like a retry of the previous run's batches.
        self._carried: collections.OrderedDict[tuple[str, str], int] = collections.OrderedDict()
        self._exits: collections.deque = collections.deque()  # (job id, pb.WorkerExit)
        self._held_bytes = 0  # of every queue's items together (MAX_HELD_BYTES)
        self.dropped = 0  # items refused by the coordinator and dropped, over the agent's life
        self.lost = 0  # items dropped to the bounds, over the agent's life
        self.backoff = Backoff()
        self._delays: dict[str, _Delay] = {}  # jobs whose output is delayed (under the lock: forget() too)
        self.wake = threading.Event()

    # ---------------------------------------------------------------- adding
    def line(self, job_id: str, rank: int, stream: str, text: str) -> None:
        with self._lock:
            line = pb.LogLine(rank=rank, stream=stream, text=cut_line(text), time=time.time())
            self._add(self._logs, "logs", job_id, line)

    def metric(self, job_id: str, row: MetricRow) -> None:
        """Queues a row (kept as its wire message: batches are bounded by its size)."""
        item = metric_to_pb(row)
        with self._lock:
            self._add(self._metrics, "metrics", job_id, item)

    def exit(self, job_id: str, exit_: WorkerExit) -> None:
        item = exit_to_pb(exit_)
        with self._lock:
            self._exits.append((job_id, item))
        self.wake.set()

    def owes(self, job_id: str) -> bool:
        with self._lock:
            return bool(self._logs.get(job_id) and self._logs[job_id].items) or \
                bool(self._metrics.get(job_id) and self._metrics[job_id].items) or \
                any(j == job_id for j, _ in self._exits)

    def _add(self, queues: dict, kind: str, job_id: str, item) -> None:
        """Under the lock: queues `item`; over MAX_HELD_BYTES the oldest items of the queue holding the most
        go (the job that filled the memory pays, not one that just printed its first line)."""
        queue = queues.get(job_id)
        if queue is None:
            queue = queues[job_id] = _Queue(self._carried.pop((kind, job_id), 1))
        self._held_bytes += queue.add(item)
        while self._held_bytes > MAX_HELD_BYTES:
            largest = max((q for q in (*self._logs.values(), *self._metrics.values()) if len(q.items) > 1),
                          key=lambda q: q.bytes, default=None)
            if largest is None:
                break
            self._held_bytes -= largest.drop_oldest()

    def forget(self, job_id: str) -> None:
        with self._lock:
            for kind, queues in (("logs", self._logs), ("metrics", self._metrics)):
                queue = queues.pop(job_id, None)
                if queue is not None:
                    self._carried[(kind, job_id)] = queue.next_seq
                    if queue.items:  # the drain gave up (agent.DRAIN_LIMIT) or the agent stops
                        log.warning("job %s: dropping %d unsent %s", job_id, len(queue.items), kind)
                    self._held_bytes -= queue.sent(queue.next_seq)  # a batch in flight then frees nothing twice
            while len(self._carried) > 20_000:
                self._carried.popitem(last=False)
            self._delays.pop(job_id, None)

    # ---------------------------------------------------------------- shipping
    def backing_off(self) -> float:
        """Seconds until shipping tries again after a transient answer (0: it may now)."""
        return self.backoff.left(self.clock())

    def ship_once(self) -> None:
        """Sends everything owed, in order. A transient answer keeps everything and backs off: until then a
        call sends nothing. Other errors raise ClientError, keeping what was not sent."""
        if self.backing_off() > 0:
            return
        try:
            self._ship_kind(self._metrics, self._send_metrics, "metric row")
            self._ship_kind(self._logs, self._send_logs, "log line")
            self._ship_exits()
        except ClientError as e:
            if e.code not in TRANSIENT:
                raise
            self._held(e)
            return
        now = self.clock()
        with self._lock:
            delivered, self._delays = self._delays, {}
        for job_id, delay in delivered.items():
            log.info("job %s: delayed output delivered: %d items, %.1f s after the coordinator first could "
                     "not take them", job_id, delay.delivered, now - delay.since)

    def _held(self, error: ClientError) -> None:
        """A transient answer: back off, and say once per job and outage that its output is delayed."""
        now = self.clock()
        self.backoff = self.backoff.failed(now)
        with self._lock:
            held = collections.Counter()
            for queues in (self._logs, self._metrics):
                for job_id, queue in queues.items():
                    held[job_id] += len(queue.items)
            for job_id, _ in self._exits:
                held[job_id] += 1
            newly = [job_id for job_id, count in held.items() if count and job_id not in self._delays]
            for job_id in newly:
                self._delays[job_id] = _Delay(now)
        for job_id in newly:
            log.warning("job %s: output delayed: the coordinator could not take it (%s); holding %d items and "
                        "sending them in order once it can (retrying in %.1f s, then less often)",
                        job_id, error, held[job_id], self.backoff.delay)
        log.debug("shipping held for %.1f s: %s", self.backoff.delay, error)

    def _delivered(self, job_id: str, count: int) -> None:
        self.backoff = Backoff()
        with self._lock:
            delay = self._delays.get(job_id)
            if delay is not None:
                delay.delivered += count

    def _ship_exits(self) -> None:
        while True:  # after the logs: a job's last lines arrive before its exit
            with self._lock:
                if not self._exits:
                    return
                job_id, exit_ = self._exits[0]
                if self._logs.get(job_id) and self._logs[job_id].items:
                    return
            try:
                self.client.call(self.client.agents.ReportExit,
                                 pb.ReportExitRequest(agent=self.agent, job_id=job_id, exit=exit_))
                self._delivered(job_id, 1)
            except ClientError as e:
                if e.code != grpc.StatusCode.NOT_FOUND:
                    raise
                log.warning("dropping the exit of rank %d: %s", exit_.rank, e)  # the job is gone
            with self._lock:
                self._exits.popleft()

    def _send_logs(self, job_id: str, batch: list) -> None:
        self.client.call(self.client.agents.PushLogs, pb.PushLogsRequest(
            agent=self.agent, job_id=job_id, lines=[item for _, item in batch], source=self.source,
            first_seq=batch[0][0]))

    def _send_metrics(self, job_id: str, batch: list) -> None:
        self.client.call(self.client.agents.ReportMetrics, pb.ReportMetricsRequest(
            agent=self.agent, job_id=job_id, metrics=[item for _, item in batch], source=self.source,
            first_seq=batch[0][0]))

    def _ship_kind(self, queues: dict, send, what: str) -> None:
        with self._lock:
            jobs = [j for j, q in queues.items() if q.items]
        for job_id in jobs:
            queue = queues.get(job_id)
            while queue is not None:
                with self._lock:
                    taken = queue.batch()
                    lost = queue.lost
                    queue.in_flight = taken[-1][0] if taken else 0
                if not taken:
                    break
                note = self._lost_note(taken[0][1].rank, lost, what) if lost else None
                batch = taken
                if note is not None and what == "log line":  # where the lines were lost, numbered as the last
                    batch = [(taken[0][0] - 1, note)] + taken
                try:
                    send(job_id, batch)
                except ClientError as e:
                    with self._lock:
                        queue.landed(False)
                    if e.code == grpc.StatusCode.NOT_FOUND:  # the job is gone: nobody will read these
                        log.warning("job %s: dropping %d unsent %ss: %s", job_id, len(queue.items), what, e)
                        with self._lock:
                            self._held_bytes -= queue.sent(queue.next_seq)
                            queue.lost = 0
                        break
                    if e.code not in REFUSED:
                        raise
                    if len(taken) > 1:  # narrow it down to the refused item
                        queue.batch_limit = max(1, len(taken) // 2)
                        continue
                    self._drop(job_id, queue, taken[0], what, e)
                    continue
                with self._lock:
                    queue.landed(True)
                    self._held_bytes -= queue.sent(taken[-1][0])
                    queue.lost -= lost
                    queue.batch_limit = min(MAX_BATCH_ITEMS, queue.batch_limit * 2)
                self._delivered(job_id, len(taken))
                if note is not None:
                    self.lost += lost
                    log.warning("job %s: %s", job_id, note.text)
                    if what != "log line":
                        self.line(job_id, note.rank, note.stream, note.text)

    def _lost_note(self, rank: int, lost: int, what: str) -> pb.LogLine:
        """The one line a job's log gets for the items of a kind the bounds dropped since the last delivery."""
        return pb.LogLine(rank=rank, stream="stderr", time=time.time(), text=(
            f"tfdist: agent {self.agent} dropped {lost:,} {what}s of this job, the oldest it held while the "
            f"coordinator could not take them: an agent holds at most {MAX_HELD_BYTES >> 20} MiB of unsent "
            f"output, {MAX_QUEUED:,} {what}s a job (free the coordinator's disk sooner, or print less)"))

    def _drop(self, job_id: str, queue: _Queue, refused: tuple, what: str, error: ClientError) -> None:
        seq, item = refused
        with self._lock:
            self._held_bytes -= queue.sent(seq)
        self.dropped += 1
        rank = getattr(item, "rank", 0)
        note = f"tfdist: agent {self.agent} dropped a {what} of rank {rank} that the coordinator refused: {error}"
        log.warning("job %s: %s", job_id, note)
        self.line(job_id, rank, "stderr", note)
