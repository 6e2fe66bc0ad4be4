"""`tfdist metrics --plot` draws curves: per-batch values as lines, a metric's val_/test_ values in its
panel, epoch ends as vertical lines (the matplotlib objects are checked, not pixels)."""

import os

import pytest

from cluster.client import metrics_report
from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb
from tests.conftest import PLOT_SITE


@pytest.fixture(autouse=True)
def matplotlib_beside_the_venv(monkeypatch):
    """matplotlib is kept beside the test venv (Makefile: $(VENV)/.plot), on the path for these tests only: in
    a process that imports Keras later, it would be imported by Keras too."""
    assert os.path.isdir(PLOT_SITE), f"{PLOT_SITE} is missing: run `make plot`"
    monkeypatch.syspath_prepend(PLOT_SITE)


def history() -> pb.GetMetricsResponse:
    """What an example reports: loss/accuracy every 4 of 22 batches an epoch, epoch ends with val_ values,
    and the test values once at the end."""
    metrics = []
    for epoch in range(1, 4):
        for step in range((epoch - 1) * 22 + 4, epoch * 22, 4):
            metrics += [pb.Metric(step=step, name="loss", value=1 / step), pb.Metric(step=step, name="accuracy",
                                                                                    value=1 - 1 / step)]
        end = epoch * 22
        metrics += [pb.Metric(step=end, name=n, value=v) for n, v in
                    (("loss", 1 / end), ("accuracy", 0.9), ("epoch", epoch), ("val_loss", 0.5), ("val_accuracy", 0.8))]
    metrics += [pb.Metric(step=66, name="test_loss", value=0.4), pb.Metric(step=66, name="test_accuracy", value=0.85)]
    return pb.GetMetricsResponse(job_id="3-ab12", metrics=metrics)


def test_the_plot_has_curves():
    fig = metrics_report.figure(history())
    axes = fig.get_axes()
    assert [ax.get_title() for ax in axes] == ["loss", "accuracy"]  # `epoch` is no panel
    for ax, name in zip(axes, ("loss", "accuracy")):
        lines = {line.get_label(): line for line in ax.get_lines() if not line.get_label().startswith("_")}
        assert {label: len(line.get_xdata()) for label, line in lines.items()} == \
            {name: 18, f"val_{name}": 3, f"test_{name}": 1}  # 5 batch reports + the end, per epoch
        assert list(lines[name].get_xdata()) == sorted(lines[name].get_xdata())
        assert lines[name].get_marker() in (None, "None", "")  # a line, not dots
        assert lines[f"test_{name}"].get_marker() == "o"  # a lone value shows as a dot
        epoch_lines = [line for line in ax.get_lines() if list(line.get_xdata()) in ([22, 22], [44, 44], [66, 66])]
        assert len(epoch_lines) == 3


def test_the_plot_is_a_png_and_an_empty_history_is_one_line(tmp_path):
    metrics_report.plot(history(), str(tmp_path / "m.png"))
    assert (tmp_path / "m.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(Exception, match="job 4 has no metrics to plot yet"):
        metrics_report.figure(pb.GetMetricsResponse(job_id="4"))
    only_epochs = metrics_report.panels(["epoch"])  # a history of nothing but epochs still draws them
    assert only_epochs == {"epoch": ["epoch"]}
