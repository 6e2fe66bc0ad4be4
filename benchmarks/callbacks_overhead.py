"""tfdist's Keras callbacks (MetricsReporter every 50 batches, StepWatchdog, LearningRateWarmup over the
whole run: their worst case; Checkpoint, whose per-step work is the preemption check, with its store
poller running against a real job store) against the same training without them: seconds per step of
Keras 3 fit on an MLP with steps of a few milliseconds, one process with tfdist's metrics and progress
files set as an agent sets them, runs interleaved, medians; also the absolute cost per step, and the
same with a checkpoint every 100 steps.

    .venv/bin/python benchmarks/callbacks_overhead.py [--runs 7] [--steps 400]

Prints a table and writes benchmarks/results/callbacks_overhead.json.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def once(variant: str, steps: int, tmp: str, store: str, secret: str) -> float:
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="3",
               TFDIST_METRICS_FILE=os.path.join(tmp, "metrics"), TFDIST_PROGRESS_FILE=os.path.join(tmp, "progress"),
               TFDIST_CHECKPOINT_DIR=os.path.join(tmp, "ckpt", variant), TFDIST_STORE=store,
               TFDIST_STORE_SECRET=secret)
    out = subprocess.run([sys.executable, os.path.join(HERE, "callbacks_worker.py"), variant, str(steps)], env=env,
                         capture_output=True, text=True, timeout=600, check=True).stdout
    return json.loads(re.search(r"BENCH (\{.*\})", out).group(1))["seconds_per_step"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--steps", type=int, default=400)
    args = parser.parse_args()
    samples = {"without": [], "with": [], "saving": []}
    sys.path.insert(0, REPO)
    from cluster.agent.job_store import JobStore

    store = JobStore("127.0.0.1", 0).start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            address = f"127.0.0.1:{store.port}"
            for _ in range(args.runs):
                for variant in samples:
                    samples[variant].append(once(variant, args.steps, tmp, address, store.secret))
            direct = [once("direct", args.steps, tmp, address, store.secret) for _ in range(args.runs)]
    finally:
        store.stop()
    medians = {k: statistics.median(v) for k, v in samples.items()}
    overhead = medians["with"] / medians["without"] - 1
    saving = medians["saving"] / medians["without"] - 1
    own = statistics.median(direct)
    print("| variant | ms per step (median of %d) |\n|---|---|" % args.runs)
    for k, v in medians.items():
        print(f"| {k} | {v * 1000:.3f} |")
    spread = {k: (min(v), max(v)) for k, v in samples.items()}
    print(f"overhead: {overhead * 100:+.2f}% ({(medians['with'] - medians['without']) * 1e6:+.0f} us per step); runs "
          + ", ".join(f"{k} {lo * 1000:.2f}-{hi * 1000:.2f} ms" for k, (lo, hi) in spread.items()))
    print(f"with a checkpoint every 100 steps: {saving * 100:+.2f}%")
    print(f"the callbacks' own work, hooks called directly: {own * 1e6:.1f} us per step = "
          f"{own / medians['without'] * 100:.3f}% of a step")
    out = os.path.join(HERE, "results", "callbacks_overhead.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump({"steps": args.steps, "runs": args.runs, "samples": samples, "medians": medians,
                   "overhead": overhead, "saving_overhead": saving, "direct_seconds_per_step": direct}, f, indent=2)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
