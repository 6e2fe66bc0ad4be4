"""Adaptive ASHA against running every trial to the end, on a simulated cluster of 4 one-slot nodes.

1. Real learning curves: the `--trials` trials each search draws (the same values for both searches at one seed:
   trial N's values come from the experiment's seed and N) are trained for real, in this process, with the
   digits model of examples/search/train.py (Keras on TensorFlow, CPU), `--epochs` epochs each: val_loss and
   the seconds of every epoch. An epoch is `--passes` passes over the digits (one pass takes a quarter of a
   second, far less than a trial's start-up: a search of such epochs measures start-ups, not training). A trial process's start-up (Python, TensorFlow and Keras imported) is measured
   by starting one, median of 3.
2. The search on a simulated cluster: the real coordinator core (scheduler, job machine, the experiments
   runner and its searcher, a SQLite store) with 4 scripted one-slot nodes, in virtual time. Each started
   trial spends the start-up, then reports its real val_loss at each epoch's end after that epoch's real
   seconds, saves a checkpoint there, stops at the next epoch's end when asked to pause, and continues from
   its checkpoint when resumed (the start-up again).
   - adaptive_asha: max_length `--epochs` epochs, 3 rungs, divisor 2, aggressive, 4 at once;
   - the alternative: random (the same values), every trial trained to `--epochs` epochs, 4 at once.
   Measured: the fraction of node-time busy (a trial holds the node) over the search's wall time; the wall
   time until the best trial reported its best value, and until the search ended; which trial is best.
3. The same, with every epoch `--longer` times as long (the same curves: a model whose epochs take longer
   against the same start-up), which is where early stopping pays.

Repeated for `--seeds` seeds (medians across them). Prints the table; writes benchmarks/results/experiments.json.

    .venv/bin/python benchmarks/experiments.py [--seeds 3] [--trials 16] [--epochs 8]
"""

from __future__ import annotations

import argparse
import dataclasses
import heapq
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)

from benchmarks.compare import save_json  # noqa: E402

NODES = 4
SPACE = {"learning_rate": {"type": "log", "base": 10, "minval": -4, "maxval": -1.5},
         "units": {"type": "categorical", "vals": [16, 64]}, "global_batch_size": 64}


def searcher(name: str, trials: int, epochs: int) -> dict:
    common = {"metric": "val_loss", "max_trials": trials, "max_concurrent_trials": NODES,
              "max_length": {"epochs": epochs}}
    if name == "adaptive_asha":
        return {"name": name, **common, "max_rungs": 3, "divisor": 2, "mode": "aggressive"}
    return {"name": "random", **common}


def drawn_values(seed: int, trials: int, epochs: int) -> list[dict]:
    from cluster.coordinator.experiments import search
    from cluster.shared import searcher as searcher_lib

    config = searcher_lib.parse(dict(searcher("random", trials, epochs), max_concurrent_trials=trials))
    state, _ = search.begin(config, SPACE, seed)
    return [t.values for t in state.trials]


def real_curves(values: list[dict], epochs: int, passes: int) -> list[tuple[list[float], list[float]]]:
    """Each trial's (val_loss after each epoch, seconds of each epoch), trained for real."""
    import keras
    import numpy as np
    digits = np.loadtxt(os.path.join(REPO, "examples", "data", "digits.csv.gz"), delimiter=",")
    images = (digits[:, :64].reshape(-1, 8, 8) / 16.0).astype("float32")[..., None]
    labels = digits[:, 64].astype("int32")
    order = np.random.RandomState(0).permutation(len(labels))
    images, labels = images[order], labels[order]
    split = int(0.8 * len(labels))
    curves = []
    for v in values:
        keras.utils.set_random_seed(1)
        model = keras.Sequential([keras.Input((8, 8, 1)), keras.layers.Conv2D(16, 3, activation="relu", padding="same"),
                                  keras.layers.MaxPooling2D(), keras.layers.Flatten(),
                                  keras.layers.Dense(v["units"], activation="relu"), keras.layers.Dense(10)])
        model.compile(optimizer=keras.optimizers.Adam(v["learning_rate"]),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        losses, seconds = [], []
        for _ in range(epochs):
            started = time.perf_counter()
            history = model.fit(images[:split], labels[:split], batch_size=64, epochs=passes, verbose=0,
                                validation_data=(images[split:], labels[split:]), validation_freq=passes)
            seconds.append(time.perf_counter() - started)
            losses.append(float(history.history["val_loss"][-1]))
        curves.append((losses, seconds))
    return curves


def startup_seconds() -> float:
    """A trial process's start-up: Python with TensorFlow and Keras imported (median of 3)."""
    times = []
    for _ in range(3):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import tensorflow, keras, tfdist"], check=True)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


@dataclasses.dataclass
class Outcome:
    busy: float  # fraction of node-time a trial held a node
    wall: float  # seconds until the experiment ended
    to_best: float  # seconds until the best trial reported its best value
    best_trial: int
    best_loss: float
    epochs_trained: int


def simulate(name: str, seed: int, values: list[dict], curves, startup: float, epochs: int) -> Outcome:
    """One search on the simulated cluster (see the module's docstring)."""
    from cluster.coordinator.core import Settings
    from cluster.coordinator.experiments.search import SearchState
    from cluster.coordinator.store import SqliteStore
    from cluster.shared import searcher as searcher_lib
    from cluster.shared.experiment import ExperimentConfig
    from cluster.shared.model import JobSpec, JobState, MetricRow
    from tests.agent_core import AgentCore
    from tests.core_nodes import Node
    from tfdist.metrics import CHECKPOINT_RECORD, PREEMPTED_RECORD, PREEMPTIBLE_RECORD

    state_dir = tempfile.mkdtemp(prefix="tfdist-bench-experiments-")
    core = AgentCore(SqliteStore(os.path.join(state_dir, "c.sqlite")),
                     Settings(lost_after=1e9, port_range=(30000, 30999), startup_timeout=1e9))
    nodes = [Node(core, f"n{i}", slots=1) for i in range(NODES)]
    for node in nodes:
        node.register()
    config = ExperimentConfig(name="bench", entrypoint=("python", "train.py"), slots_per_trial=1,
                              distribution_mode="mwms", hyperparameters=SPACE, seed=seed, checkpoint_storage="/ck",
                              searcher=searcher_lib.parse(searcher(name, len(values), epochs)).to_mapping())
    experiment_id, _ = core.submit(JobSpec(config, working_dir="/w"), now=0.0)
    events: list = []  # (time, order, job id, attempt, epoch)
    order = 0
    saved: dict[str, int] = {}  # job -> the epoch of its latest checkpoint
    tracked: set[tuple[str, int]] = set()
    busy_seconds, last, now = 0.0, 0.0, 0.0
    found: dict[int, float] = {}  # trial -> when it reported its best so far
    trained = 0

    def running_jobs():
        return {job: node for node in nodes for job in node.running}

    def settle():
        nonlocal order
        for _ in range(6):
            for node in nodes:
                node.beat(now)
        for job, node in running_jobs().items():
            attempt = node.started[job].attempt
            if (job, attempt) in tracked:
                continue
            tracked.add((job, attempt))
            trial = core.store.job(job).spec.trial
            _, seconds = curves[trial - 1]
            at = now + startup
            for epoch in range(saved.get(job, 0) + 1, epochs + 1):
                at += seconds[epoch - 1]
                order += 1
                heapq.heappush(events, (at, order, job, attempt, epoch))

    settle()
    while events and not core.store.experiment(experiment_id).terminal:
        now, _, job, attempt, epoch = heapq.heappop(events)
        busy_seconds += (now - last) * sum(1 for n in nodes if n.running)
        last = now
        node = running_jobs().get(job)
        if node is None or node.started[job].attempt != attempt:
            settle()
            continue  # stopped (its trial was stopped, or it paused at an earlier epoch)
        trial = core.store.job(job).spec.trial
        loss = curves[trial - 1][0][epoch - 1]
        trained += 1
        core.push_metrics(node.name, job, [
            MetricRow(0, epoch, PREEMPTIBLE_RECORD, attempt, now),
            MetricRow(0, epoch, CHECKPOINT_RECORD, attempt, now, note=f"/ck/{job}/ckpt-{epoch}"),
            MetricRow(0, epoch, "epoch", epoch, now), MetricRow(0, epoch, "val_loss", loss, now)])
        saved[job] = epoch
        if loss <= min(curves[trial - 1][0][:epoch]):
            found[trial] = now
        current = core.store.job(job)
        if current.state == JobState.RUNNING and current.preempt_requested:
            core.push_metrics(node.name, job, [MetricRow(0, epoch, PREEMPTED_RECORD, attempt, now)])
            node.finish(job, now)
        elif epoch == epochs:
            node.finish(job, now)
        settle()
    experiment = core.store.experiment(experiment_id)
    assert experiment.state.value == "COMPLETED", (experiment.state, experiment.message)
    state = SearchState.from_plain(experiment.search)
    best = min((t for t in state.trials if t.best is not None), key=lambda t: (t.best, t.number))
    core.store.close()
    wall = experiment.ended_at
    return Outcome(busy_seconds / (wall * NODES), wall, found[best.number], best.number, best.best, trained)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--passes", type=int, default=8, help="passes over the digits an epoch makes")
    parser.add_argument("--longer", type=int, default=10, help="the second table's epochs: this many times longer")
    args = parser.parse_args()
    startup = startup_seconds()
    print(f"trial start-up (python + tensorflow + keras + tfdist imported): {startup:.2f} s")
    runs = []
    for seed in range(1, args.seeds + 1):
        values = drawn_values(seed, args.trials, args.epochs)
        curves = real_curves(values, args.epochs, args.passes)
        asha = simulate("adaptive_asha", seed, values, curves, startup, args.epochs)
        full = simulate("random", seed, values, curves, startup, args.epochs)
        longer = [(losses, [s * args.longer for s in secs]) for losses, secs in curves]
        asha_long = simulate("adaptive_asha", seed, values, longer, startup, args.epochs)
        full_long = simulate("random", seed, values, longer, startup, args.epochs)
        runs.append({"seed": seed, "adaptive_asha": dataclasses.asdict(asha), "all_to_the_end": dataclasses.asdict(full),
                     "adaptive_asha_longer": dataclasses.asdict(asha_long),
                     "all_to_the_end_longer": dataclasses.asdict(full_long),
                     "mean_epoch_seconds": statistics.mean(s for _, secs in curves for s in secs),
                     "curves": [{"values": v, "val_loss": c[0], "epoch_seconds": c[1]} for v, c in zip(values, curves)]})
        print(f"seed {seed}: asha best trial {asha.best_trial} ({asha.best_loss:.4f}) in {asha.wall:.1f} s, "
              f"all-to-the-end best trial {full.best_trial} ({full.best_loss:.4f}) in {full.wall:.1f} s")
    rows = []
    for key, label in (("adaptive_asha", "adaptive_asha"), ("all_to_the_end", "random, every trial to the end"),
                       ("adaptive_asha_longer", f"adaptive_asha, epochs x{args.longer}"),
                       ("all_to_the_end_longer", f"every trial to the end, epochs x{args.longer}")):
        med = lambda field: statistics.median(r[key][field] for r in runs)  # noqa: E731
        rows.append((label, med("busy"), med("to_best"), med("wall"), med("epochs_trained")))
    same = sum(r["adaptive_asha"]["best_trial"] == r["all_to_the_end"]["best_trial"] for r in runs)
    same_longer = sum(r["adaptive_asha_longer"]["best_trial"] == r["all_to_the_end"]["best_trial"] for r in runs)
    print(f"\n{NODES} one-slot nodes, {args.trials} trials, max_length {args.epochs} epochs of {args.passes} passes; "
          f"start-up {startup:.1f} s; medians of "
          f"{args.seeds} seeds (each: its own 16 draws, trained for real)")
    print(f"{'search':40} {'node-time busy':>15} {'to the best (s)':>16} {'wall (s)':>9} {'epochs trained':>15}")
    for label, busy, to_best, wall, epochs in rows:
        print(f"{label:40} {busy:>14.1%} {to_best:>16.1f} {wall:>9.1f} {epochs:>15.0f}")
    print(f"the same best trial as running all to the end: {same} of {len(runs)} seeds "
          f"({same_longer} with the longer epochs)")
    save_json(os.path.join(HERE, "results", "experiments.json"),
              {"nodes": NODES, "trials": args.trials, "epochs": args.epochs, "passes": args.passes,
               "startup_seconds": startup,
               "runs": runs, "same_best_trial": same, "same_best_trial_longer": same_longer, "longer": args.longer,
               "medians": {label: {"busy": b, "to_best_seconds": t, "wall_seconds": w, "epochs_trained": e}
                           for label, b, t, w, e in rows}})


if __name__ == "__main__":
    main()
