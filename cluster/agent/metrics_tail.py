"""Tails the metrics files workers append to (tfdist.report_metrics: one JSON object a line) and hands
each complete line's rows on once; a malformed line is skipped, a bad metric name is said in the job's
log instead of shipped."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import threading
from typing import Callable

from cluster.shared.model import MetricRow
from tfdist.errors import UnsafePathError
from tfdist.metrics import MAX_NAME as MAX_METRIC_NAME
from tfdist.private_files import open_private

log = logging.getLogger("tfdist.agent")
MAX_NOTE = 4096

RowSink = Callable[[str, MetricRow], None]  # (job id, row)
NoteSink = Callable[[str, int, str], None]  # (job id, rank, a line for the rank's stderr)


@dataclasses.dataclass(frozen=True)
class MetricsLine:
    rank: int
    rows: tuple[MetricRow, ...]
    notes: tuple[str, ...]  # what was dropped from the line, for the rank's stderr


def parse_metrics_line(raw: bytes) -> MetricsLine | None:
    """The rows of one line and the notes on what was dropped from it; None if the line is malformed.
    Values that are not numbers are left out silently (a worker may record strings for itself)."""
    try:
        record = json.loads(raw)
        rank, step, at = int(record["rank"]), int(record["step"]), float(record["time"])
        values = dict(record["values"])
        note = str(record.get("note", ""))[:MAX_NOTE]
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    rows, notes = [], []
    for name, value in values.items():
        name = str(name)
        if not name or len(name) > MAX_METRIC_NAME:
            notes.append(f"tfdist: dropped metric {name[:40]!r}{'...' if len(name) > 40 else ''} of step {step}: "
                         f"a metric name has 1-{MAX_METRIC_NAME} characters ({len(name)} given)")
            continue
        try:
            number = float(value)
        except (TypeError, ValueError):
            continue
        rows.append(MetricRow(rank=rank, step=step, name=name, value=number, time=at, note=note))
    return MetricsLine(rank, tuple(rows), tuple(notes))


class MetricsTail:
    """Offsets into every running job's metrics files. One reader at a time (the shipper, a worker's
    exit, a job's end), and the sinks are called under that lock: each line is handed on once, and a
    worker's rows are queued before a reader that came later returns."""

    def __init__(self, on_row: RowSink, on_note: NoteSink):
        self.on_row, self.on_note = on_row, on_note
        self._read_lock = threading.Lock()
        self._lock = threading.Lock()
        self._offsets: dict[str, dict[str, int]] = {}  # job -> {file: offset read up to}

    def add(self, job_id: str, paths) -> None:
        with self._lock:
            self._offsets[job_id] = {path: 0 for path in paths}

    def forget(self, job_id: str) -> None:
        with self._lock:
            self._offsets.pop(job_id, None)

    def read(self, final: bool = False, only: str | None = None) -> None:
        """New complete lines of the files (of job `only`, else all); a partial last line waits, unless
        `final` (the job is over: nothing will complete it)."""
        with self._read_lock:
            with self._lock:
                files = {job: dict(paths) for job, paths in self._offsets.items() if only in (None, job)}
            for job_id, paths in files.items():
                for path, offset in paths.items():
                    self._read_file(job_id, path, offset, final)

    def _read_file(self, job_id: str, path: str, offset: int, final: bool) -> None:
        try:
            with os.fdopen(open_private(path), "rb") as f:  # a symlink there is not followed
                f.seek(offset)
                data = f.read()
        except FileNotFoundError:
            return
        except UnsafePathError as e:
            log.warning("job %s: not reading its metrics file: %s", job_id, e)
            with self._lock:
                self._offsets.get(job_id, {}).pop(path, None)
            return
        complete = data if final else data[:data.rfind(b"\n") + 1]
        for raw in complete.splitlines():
            parsed = parse_metrics_line(raw)
            if parsed is None:
                log.warning("job %s: skipping a malformed metrics line in %s", job_id, path)
                continue
            for text in parsed.notes:
                self.on_note(job_id, parsed.rank, text)
            for row in parsed.rows:
                self.on_row(job_id, row)
        with self._lock:
            if job_id in self._offsets:
                self._offsets[job_id][path] = offset + len(complete)

