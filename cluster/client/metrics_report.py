"""`tfdist metrics ID`: a job's metric history as a table, JSON lines or CSV, and a PNG on request.

Rows are (step, rank) with one column per metric name, in step order as reported. The PNG draws each
metric against the step in its own panel (matplotlib, an optional extra: `pip install 'tfdist[plot]'`).
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


def plot(history: pb.GetMetricsResponse, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    names, table = rows(history)
    if not names:
        raise UserError(f"job {history.job_id} has no metrics to plot yet")
    fig, axes = plt.subplots(len(names), 1, figsize=(8, 2.4 * len(names)), squeeze=False)
    for ax, name in zip(axes[:, 0], names):
        for rank in sorted({r for _, r, v in table if name in v}):
            points = [(s, v[name]) for s, r, v in table if r == rank and name in v]
            ax.plot([p[0] for p in points], [p[1] for p in points], marker=".", label=f"rank {rank}")
        ax.set_title(name)
        ax.set_xlabel("step")
        ax.grid(True, alpha=0.3)
        ax.legend(loc="best", fontsize="small")
    fig.suptitle(f"job {history.job_id}")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
