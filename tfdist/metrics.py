"""Reporting metrics to the coordinator: `tfdist.report_metrics(step, loss=0.1, accuracy=0.9)`.

The worker appends one JSON line per call to the file the agent gave it
(TFDIST_METRICS_FILE); the agent ships new lines to the coordinator, which
keeps them in SQLite (`tfdist job ID` shows the latest of each). No network
and no TensorFlow in the worker's path; without a launcher it does nothing.
"""

from __future__ import annotations

import json
import math
import os
import time

from tfdist import envvars

MAX_NAME = 200  # the one limit: this writer, the agent and the coordinator all check names against it
# tfdist's own records travel with the metrics (same file, same shipping, same dedup) under names
# users cannot take: the coordinator files them (checkpoints table, a preempted run's step).
RECORD_PREFIX = "tfdist."
CHECKPOINT_RECORD = "tfdist.checkpoint"  # step; value: the attempt; note: the checkpoint's path
PREEMPTED_RECORD = "tfdist.preempted"  # step every rank stopped at; value: the attempt
PREEMPTIBLE_RECORD = "tfdist.preemptible"  # the chief checks for preemption at step boundaries; value: the attempt
DIAGNOSE_PREFIX = "tfdist.diagnose."  # `tfdist diagnose`'s timings (tfdist/diagnose.py): stored as metrics


def stored(name: str) -> bool:
    """Whether the coordinator keeps a row of this name with the job's metrics (users' metrics, and the
    diagnose timings its runner reads back; not the records it files elsewhere)."""
    return not name.startswith(RECORD_PREFIX) or name.startswith(DIAGNOSE_PREFIX)


def report_metrics(step: int, **values: float) -> None:
    """Records `values` (name=number) for training step `step` from this rank."""
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step must be a non-negative integer, got {step!r}")
    clean = {}
    for name, value in values.items():
        if len(name) > MAX_NAME:
            raise ValueError(f"metric name {name[:40]!r}... has {len(name)} characters; use at most {MAX_NAME}")
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"metric {name}={value!r} is not a number") from None
        if math.isfinite(number):  # NaN/inf are not stored: JSON cannot carry them
            clean[name] = number
        if name.startswith(RECORD_PREFIX):
            raise ValueError(f"metric name {name!r}: names starting with {RECORD_PREFIX!r} are tfdist's own")
    if clean:
        _append({"step": step, "values": clean})


def report_record(name: str, step: int, value: float, note: str = "") -> None:
    """One of tfdist's own records (CHECKPOINT_RECORD, PREEMPTED_RECORD), for the coordinator."""
    _append({"step": step, "values": {name: float(value)}, "note": note})


def report_records(step: int, values: dict[str, float]) -> None:
    """Several of tfdist's own records of one step, in one line."""
    _append({"step": step, "values": {name: float(value) for name, value in values.items()}})


def _append(record: dict) -> None:
    """One JSON line, written whole in one call (the agent only reads complete lines)."""
    path = os.environ.get(envvars.METRICS_FILE)
    if not path:
        return
    line = json.dumps({"rank": int(os.environ.get(envvars.RANK, "0")), "time": time.time(), **record})
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")
