"""What an agent owes the coordinator: log lines, metric rows and worker exits, per job.

Items are numbered per agent process (its `source`), so a batch retried
after a coordinator crash is stored once. Batches are bounded in count and
bytes, well under the message cap. Shipping never stalls on a bad item: a
refused batch is split until the refused item stands alone, which is then
dropped with a line in the job's log saying so. Lines longer than
MAX_LINE_CHARS keep their end, with the count of cut characters in the line;
a progress bar's transient updates come as lines of stream PROGRESS
(cluster/shared/output_lines.py), at most one a second per rank.
Items come in typed (cluster/shared/model.py) and are queued as their wire
messages: this is the agent's shipping edge.
"""

from __future__ import annotations

import collections
import logging
import threading
import time

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
REFUSED = (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED)


def cut_line(text: str) -> str:
    """A line over the cap keeps its end (output_lines.keep_end): where a long line got to is at its end. The
    gang's reader already cuts so; this holds for every line shipped (tfdist's own notes too)."""
    return keep_end(text, MAX_LINE_CHARS)


class _Queue:
    """Numbered items of one kind for one job."""

    def __init__(self, next_seq: int = 1):
        self.items: collections.deque = collections.deque()  # (seq, message)
        self.next_seq = next_seq
        self.batch_limit = MAX_BATCH_ITEMS  # halves while the coordinator refuses batches

    def add(self, item) -> None:
        self.items.append((self.next_seq, item))
        self.next_seq += 1
        if len(self.items) > MAX_QUEUED:
            self.items.popleft()

    def batch(self) -> list:
        taken, size = [], 0
        for seq, item in self.items:
            size += item.ByteSize() + 16
            if taken and (len(taken) >= self.batch_limit or size > MAX_BATCH_BYTES):
                break
            taken.append((seq, item))
        return taken


class Outbox:
    def __init__(self, client: Client, agent: str, source: str):
        self.client, self.agent, self.source = client, agent, source
        self._lock = threading.Lock()
        self._logs: dict[str, _Queue] = {}
        self._metrics: dict[str, _Queue] = {}
        # Numbers go on where a forgotten job's queue stopped: a restarted job's run (same job id, same
        # source) must not look like a retry of the previous run's batches.
        self._carried: collections.OrderedDict[tuple[str, str], int] = collections.OrderedDict()
        self._exits: collections.deque = collections.deque()  # (job id, pb.WorkerExit)
        self.dropped = 0  # items refused by the coordinator and dropped, over the agent's life
        self.wake = threading.Event()

    # ---------------------------------------------------------------- adding
    def line(self, job_id: str, rank: int, stream: str, text: str) -> None:
        with self._lock:
            line = pb.LogLine(rank=rank, stream=stream, text=cut_line(text), time=time.time())
            self._queue(self._logs, "logs", job_id).add(line)

    def metric(self, job_id: str, row: MetricRow) -> None:
        """Queues a row (kept as its wire message: batches are bounded by its size)."""
        item = metric_to_pb(row)
        with self._lock:
            self._queue(self._metrics, "metrics", job_id).add(item)

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

    def _queue(self, queues: dict, kind: str, job_id: str) -> _Queue:
        queue = queues.get(job_id)
        if queue is None:
            queue = queues[job_id] = _Queue(self._carried.pop((kind, job_id), 1))
        return queue

    def forget(self, job_id: str) -> None:
        with self._lock:
            for kind, queues in (("logs", self._logs), ("metrics", self._metrics)):
                queue = queues.pop(job_id, None)
                if queue is not None:
                    self._carried[(kind, job_id)] = queue.next_seq
            while len(self._carried) > 20_000:
                self._carried.popitem(last=False)

    # ---------------------------------------------------------------- shipping
    def ship_once(self) -> None:
        """Sends everything owed; raises ClientError while the coordinator is unreachable."""
        self._ship_kind(self._metrics, self._send_metrics, "metric row")
        self._ship_kind(self._logs, self._send_logs, "log line")
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
            queue = queues[job_id]
            while True:
                with self._lock:
                    batch = queue.batch()
                if not batch:
                    break
                try:
                    send(job_id, batch)
                except ClientError as e:
                    if e.code == grpc.StatusCode.NOT_FOUND:  # the job is gone: nobody will read these
                        log.warning("job %s: dropping %d unsent %ss: %s", job_id, len(queue.items), what, e)
                        with self._lock:
                            queue.items.clear()
                        break
                    if e.code not in REFUSED:
                        raise
                    if len(batch) > 1:  # narrow it down to the refused item
                        queue.batch_limit = max(1, len(batch) // 2)
                        continue
                    self._drop(job_id, queue, what, e)
                    continue
                with self._lock:
                    for _ in batch:
                        queue.items.popleft()
                    queue.batch_limit = min(MAX_BATCH_ITEMS, queue.batch_limit * 2)

    def _drop(self, job_id: str, queue: _Queue, what: str, error: ClientError) -> None:
        with self._lock:
            seq, item = queue.items.popleft()
        self.dropped += 1
        rank = getattr(item, "rank", 0)
        note = f"tfdist: agent {self.agent} dropped a {what} of rank {rank} that the coordinator refused: {error}"
        log.warning("job %s: %s", job_id, note)
        self.line(job_id, rank, "stderr", note)
