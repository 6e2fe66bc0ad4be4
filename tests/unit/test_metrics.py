import json

import pytest

from tfdist import report_metrics


def test_report_metrics_appends_json_lines(tmp_path, monkeypatch):
    path = tmp_path / "rank1.metrics"
    monkeypatch.setenv("TFDIST_METRICS_FILE", str(path))
    monkeypatch.setenv("TFDIST_RANK", "1")
    report_metrics(3, loss=0.25, accuracy=1, skipped=float("nan"))
    report_metrics(4, loss=0.2)
    lines = [json.loads(l) for l in path.read_text().splitlines()]
    assert [(l["rank"], l["step"], l["values"]) for l in lines] == [
        (1, 3, {"loss": 0.25, "accuracy": 1.0}), (1, 4, {"loss": 0.2})]


def test_without_a_launcher_it_does_nothing(monkeypatch):
    monkeypatch.delenv("TFDIST_METRICS_FILE", raising=False)
    report_metrics(1, loss=0.1)


def test_bad_values_are_named():
    with pytest.raises(ValueError, match="step must be a non-negative integer, got -1"):
        report_metrics(-1, loss=1)
    with pytest.raises(ValueError, match="metric loss='high' is not a number"):
        report_metrics(1, loss="high")
    with pytest.raises(ValueError, match=r"metric name 'mmmm.*'... has 300 characters; use at most 200"):
        report_metrics(1, **{"m" * 300: 1.0})  # refused at the source: it would never be stored
