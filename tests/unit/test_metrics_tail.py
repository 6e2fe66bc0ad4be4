"""Tailing the workers' metrics files: complete lines once, a partial line when final, bad names said."""

import json

from cluster.agent.metrics_tail import MetricsLine, MetricsTail, parse_metrics_line
from cluster.shared.model import MetricRow
from tfdist.metrics import MAX_NAME


def _line(rank=0, step=1, values=None, note=None):
    record = {"rank": rank, "step": step, "time": 10.5, "values": values or {"loss": 0.5}}
    if note is not None:
        record["note"] = note
    return (json.dumps(record) + "\n").encode()


def test_a_line_becomes_rows_and_notes_on_what_was_dropped():
    long = "x" * (MAX_NAME + 1)
    parsed = parse_metrics_line(_line(2, 7, {"loss": 0.5, "acc": "0.9", "text": "n/a", long: 1.0, "": 2.0}, "ckpt"))
    assert parsed == MetricsLine(2, (MetricRow(2, 7, "loss", 0.5, 10.5, "ckpt"), MetricRow(2, 7, "acc", 0.9, 10.5, "ckpt")), (
        f"tfdist: dropped metric {'x' * 40!r}... of step 7: a metric name has 1-{MAX_NAME} characters "
        f"({MAX_NAME + 1} given)",
        f"tfdist: dropped metric '' of step 7: a metric name has 1-{MAX_NAME} characters (0 given)"))


def test_a_malformed_line_is_none():
    assert parse_metrics_line(b"{not json") is None
    assert parse_metrics_line(b'{"rank": 0, "step": 1}') is None
    assert parse_metrics_line(b'[1, 2]') is None


def test_complete_lines_are_read_once_and_a_partial_one_when_final(tmp_path):
    rows, notes = [], []
    tail = MetricsTail(lambda job, row: rows.append((job, row)), lambda job, rank, text: notes.append((job, rank, text)))
    path = tmp_path / "rank0.metrics"
    tail.add("j", [str(path), str(tmp_path / "missing.metrics")])
    path.write_bytes(_line(step=1) + b"garbage\n" + _line(step=2, values={"": 1})[:20])
    tail.read()
    tail.read()
    assert rows == [("j", MetricRow(0, 1, "loss", 0.5, 10.5))] and notes == []
    with open(path, "wb") as f:  # the worker completes its line
        f.write(_line(step=1) + b"garbage\n" + _line(step=2, values={"": 1}) + _line(step=3)[:-1])
    tail.read(only="other")
    assert len(rows) == 1
    tail.read(final=True, only="j")
    assert rows[1:] == [("j", MetricRow(0, 3, "loss", 0.5, 10.5))]
    assert notes == [("j", 0, f"tfdist: dropped metric '' of step 2: a metric name has 1-{MAX_NAME} characters "
                                "(0 given)")]
    tail.forget("j")
    path.write_bytes(path.read_bytes() + _line(step=4))
    tail.read(final=True)
    assert len(rows) == 2
