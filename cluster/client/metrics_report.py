"""`tfdist metrics ID`: a job's metric history as a table, JSON lines or CSV, and a PNG on request.

Rows are (step, rank) with one column per metric name, in step order as reported. The PNG draws each
metric against the step, a metric's `val_`/`test_` values in its panel, epoch ends as vertical lines
(matplotlib, an optional extra: `pip install 'tfdist[plot]'`).
"""

from __future__ import annotations

import csv
import os
import sys
from typing import TextIO

from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb
from tfdist.errors import UserError


def rows(history: pb.GetMetricsResponse) -> tuple[list[str], list[tuple[int, int, dict[str, float]]]]:
    """(metric names in first-seen order, [(step, rank, {name: value})] in step order)."""
    names: list[str] = []
    by_key: dict[tuple[int, int], dict[str, float]] = {}
    for m in history.metrics:
        if m.name not in names:
            names.append(m.name)
        by_key.setdefault((m.step, m.rank), {})[m.name] = m.value
    return names, [(step, rank, values) for (step, rank), values in sorted(by_key.items())]


def print_history(history: pb.GetMetricsResponse, shape: str, out: TextIO = sys.stdout) -> None:
    if shape == "json":  # its shape is docs/json.md's (cluster/client/json_output.py)
        from cluster.client import json_output

        for row in json_output.metric_rows(history):
            out.write(json_output.line(row) + "\n")
        return
    names, table = rows(history)
    if shape == "csv":
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(["step", "rank", *names])
        for step, rank, values in table:
            writer.writerow([step, rank, *(repr(values[n]) if n in values else "" for n in names)])
        return
    if not table:
        out.write(f"job {history.job_id} has no metrics yet\n")
        return
    header = ["STEP", "RANK", *names]
    cells = [[str(step), str(rank), *(f"{values[n]:.6g}" if n in values else "-" for n in names)]
             for step, rank, values in table]
    widths = [max(len(r[i]) for r in [header, *cells]) for i in range(len(header))]
    for r in [header, *cells]:
        out.write("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() + "\n")


def check_plot_path(path: str) -> None:
    """Refused before anything is fetched: a wrong suffix, a missing directory or no matplotlib."""
    if not path.lower().endswith(".png"):
        raise UserError(f"--plot {path}: give a .png file name")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise UserError(f"--plot {path}: directory {folder} does not exist")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UserError("--plot needs matplotlib, which is not installed: pip install 'tfdist[plot]'") from None


PREFIXES = ("val_", "test_")  # drawn in the panel of the metric they measure on other data
EPOCH = "epoch"  # MetricsReporter's epoch number: drawn as a vertical line where each epoch ends, not a panel


def panels(names: list[str]) -> dict[str, list[str]]:
    """Panel title -> the metrics drawn in it, in first-seen order: `loss` with `val_loss` and `test_loss`."""
    found: dict[str, list[str]] = {}
    for name in names:
        if name == EPOCH and len(names) > 1:
            continue
        base = next((name[len(p):] for p in PREFIXES if name.startswith(p) and len(name) > len(p)), name)
        found.setdefault(base, []).append(name)
    return found


def figure(history: pb.GetMetricsResponse):
    """The figure `--plot` saves: one panel per metric, a line per metric and rank over the step (a lone
    value is a dot); epoch ends as faint vertical lines."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    from matplotlib.figure import Figure

    names, table = rows(history)
    if not names:
        raise UserError(f"job {history.job_id} has no metrics to plot yet")
    groups = panels(names)
    fig = Figure(figsize=(8, 2.6 * len(groups)))
    epoch_ends = sorted({s for s, _, v in table if EPOCH in v}) if EPOCH not in groups else []
    ranks = sorted({r for _, r, _ in table})
    for i, (title, members) in enumerate(groups.items()):
        ax = fig.add_subplot(len(groups), 1, i + 1)
        for step in epoch_ends:
            ax.axvline(step, color="0.85", linewidth=0.8, zorder=0)
        for name in members:
            for rank in ranks:
                points = [(s, v[name]) for s, r, v in table if r == rank and name in v]
                if not points:
                    continue
                ax.plot([p[0] for p in points], [p[1] for p in points], marker="o" if len(points) < 2 else None,
                        markersize=4, label=name if len(ranks) == 1 else f"{name} (rank {rank})")
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(True, alpha=0.3)
        ax.legend(loc="best", fontsize="small")
    fig.suptitle(f"job {history.job_id}" + (" (vertical lines: epoch ends)" if epoch_ends else ""))
    fig.tight_layout()
    return fig


def plot(history: pb.GetMetricsResponse, path: str) -> None:
    figure(history).savefig(path, dpi=80)
