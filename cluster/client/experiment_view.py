"""An experiment as people and scripts read it: its trials as a table (values, state, latest and best metric,
rung, why stopped), its JSON (docs/json.md), and the follower `tfdist launch` reprints when it changes."""

from __future__ import annotations

import datetime
import math
import sys
import time
from typing import Any, Callable

from cluster.client import json_output
from cluster.client.tables import table
from cluster.shared import jobspec
from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb

TERMINAL = ("COMPLETED", "CANCELED", "FAILED")
FOLLOW_INTERVAL = 1.0  # seconds between looks at a followed experiment


def _number(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.4g}"


def _values(hparams: dict[str, Any], prefix: str = "") -> str:
    parts = []
    for key, value in hparams.items():
        if isinstance(value, dict):
            parts.append(_values(value, f"{prefix}{key}."))
        elif key != "global_batch_size" or prefix:
            parts.append(f"{prefix}{key}={value:.4g}" if isinstance(value, float) else f"{prefix}{key}={value}")
    return " ".join(p for p in parts if p)


def trials_table(experiment: pb.Experiment) -> str:
    headers = ["TRIAL", "JOB", "STATE", "VALUES", f"LATEST {experiment.metric}", "BEST", "RUNG", "WHY"]
    rows = []
    for t in experiment.trials:
        state = "WAITING" if t.waiting and t.state == "PAUSED" else t.state
        rung = f"{t.rung + 1}" if experiment.searcher == "adaptive_asha" else "-"
        best = ("*" if t.number == experiment.best_trial else "") + _number(t.best if t.HasField("best") else None)
        rows.append([str(t.number), t.job_id, state, _values(jobspec.map_from_pb(t.hparams)),
                     _number(t.latest if t.HasField("latest") else None) + (f" @{t.length}" if t.HasField("latest")
                                                                           else ""), best, rung, t.why])
    return table(headers, rows)


def headline(experiment: pb.Experiment) -> str:
    done = sum(1 for t in experiment.trials if t.state in ("SUCCEEDED", "FAILED", "CANCELED"))
    rungs = f", rungs at {', '.join(map(str, experiment.rung_lengths))} {experiment.length_unit}" \
        if experiment.rung_lengths else ""
    said = f": {experiment.message}" if experiment.message else ""
    return (f"experiment {experiment.id} ({experiment.name}) {experiment.state}{said}\n"
            f"  {experiment.searcher} search of {experiment.metric} ("
            f"{'smaller' if experiment.smaller_is_better else 'larger'} is better), {experiment.trials_made} of "
            f"{experiment.max_trials} trials made, {done} ended{rungs}; seed {experiment.seed}")


def to_json(experiment: pb.Experiment) -> dict[str, Any]:
    """`tfdist experiment ID --json` (docs/json.md)."""
    best = next((t for t in experiment.trials if t.number == experiment.best_trial), None)
    return {
        "id": experiment.id, "name": experiment.name, "state": experiment.state, "owner": experiment.owner,
        "searcher": experiment.searcher, "metric": experiment.metric,
        "smaller_is_better": experiment.smaller_is_better, "seed": experiment.seed,
        "max_trials": experiment.max_trials, "trials_made": experiment.trials_made,
        "length_unit": experiment.length_unit,
        "rung_lengths": list(experiment.rung_lengths), "message": experiment.message,
        "created_at": json_output.when(experiment.created_at), "ended_at": json_output.when(experiment.ended_at),
        "best_trial": _trial(best) if best else None,
        "trials": [_trial(t) for t in experiment.trials],
    }


def _trial(t: pb.Trial) -> dict[str, Any]:
    return {"trial": t.number, "job_id": t.job_id, "state": t.state, "hyperparameters": jobspec.map_from_pb(t.hparams),
            "latest": json_output.number(t.latest) if t.HasField("latest") else None, "length": t.length,
            "best": json_output.number(t.best) if t.HasField("best") else None, "rung": t.rung,
            "waiting": t.waiting, "why": t.why,
            "checkpoint": {"path": t.checkpoint, "step": t.checkpoint_step} if t.checkpoint else None}


def print_experiment(experiment: pb.Experiment, as_json: bool) -> int:
    if as_json:
        print(json_output.dumps(to_json(experiment)))
        return 0
    print(headline(experiment))
    best = next((t for t in experiment.trials if t.number == experiment.best_trial), None)
    if best is not None:
        where = f"; checkpoint {best.checkpoint} (step {best.checkpoint_step})" if best.checkpoint else ""
        print(f"  best: trial {best.number} (job {best.job_id}) {experiment.metric} {_number(best.best)}{where}")
    print(trials_table(experiment))
    return 0


def follow_experiment(client, experiment_id: str, stop: Callable[[], bool] = lambda: False,
                      out=sys.stdout) -> pb.Experiment:
    """Prints the experiment's table whenever it changes, until it ends (or `stop()`); its last answer."""
    shown = ""
    while True:
        experiment = client.experiment(experiment_id)
        text = f"{datetime.datetime.now():%H:%M:%S} {headline(experiment)}\n{trials_table(experiment)}\n"
        if text.split(" ", 1)[1] != shown.split(" ", 1)[-1]:
            out.write(text + "\n")
            out.flush()
            shown = text
        if experiment.state in TERMINAL or stop():
            return experiment
        time.sleep(FOLLOW_INTERVAL)
