"""Launch overhead: `tfdist launch --slots 2` against a hand-written TF_CONFIG launcher.

Runs the same MWMS training script under each launcher, alternating, and
reports medians of time-to-first-step and total wall time, with ratios to
the hand-written launcher. Writes benchmarks/results/launch_overhead.json.

    .venv/bin/python benchmarks/launch_overhead.py [--runs 5]
"""

import argparse
import os
import subprocess
import sys
import time

import compare

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
WORKER = os.path.join(HERE, "bench_worker.py")

VARIANTS = {
    "hand-written launcher": [sys.executable, os.path.join(HERE, "handwritten_launcher.py"), "2", WORKER],
    "tfdist launch": [sys.executable, "-m", "cluster.client.cli", "launch", "--slots", "2", "--", WORKER],
    "tfdist launch + tfdist.init()": [sys.executable, "-m", "cluster.client.cli", "launch", "--slots", "2", "--",
                                      WORKER, "--use-tfdist"],
}
BASELINE = "hand-written launcher"


def run_once(command):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=REPO)
    start = time.time()
    proc = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    end = time.time()
    if proc.returncode != 0:
        raise SystemExit(f"{command} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    first = [float(line.split("first_step=")[1]) for line in proc.stdout.splitlines() if "BENCH first_step=" in line]
    return {"first_step_s": first[0] - start, "wall_s": end - start}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", default=os.path.join(HERE, "results", "launch_overhead.json"))
    args = parser.parse_args()

    run_once(VARIANTS[BASELINE])  # warm the page cache: the first TF import is slower
    samples = compare.alternate(VARIANTS, args.runs, run_once)
    rows = compare.summarize(samples, BASELINE, ("first_step_s", "wall_s"), "launcher")
    compare.print_table(rows, "launcher", 32, [("first step (s)", "first_step_s"), ("wall (s)", "wall_s")])
    compare.write_json(args.out, "launch_overhead", args.runs, rows)

if __name__ == "__main__":
    main()
