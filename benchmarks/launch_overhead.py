"""Launch overhead: `tfdist launch --slots 2` against a hand-written TF_CONFIG launcher.

Runs the same MWMS training script under each launcher, alternating, and
reports medians of time-to-first-step and total wall time, with ratios to
the hand-written launcher. Writes benchmarks/results/launch_overhead.json.

    .venv/bin/python benchmarks/launch_overhead.py [--runs 5]
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
WORKER = os.path.join(HERE, "bench_worker.py")

VARIANTS = {
    "hand-written launcher": [sys.executable, os.path.join(HERE, "handwritten_launcher.py"), "2", WORKER],
    "tfdist launch": [sys.executable, "-m", "cluster.cli", "launch", "--slots", "2", "--", WORKER],
    "tfdist launch + tfdist.init()": [sys.executable, "-m", "cluster.cli", "launch", "--slots", "2", "--",
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

    samples = {name: [] for name in VARIANTS}
    run_once(VARIANTS[BASELINE])  # warm the page cache: the first TF import is slower
    for i in range(args.runs):
        order = list(VARIANTS) if i % 2 == 0 else list(reversed(VARIANTS))  # alternate to cancel drift
        for name in order:
            samples[name].append(run_once(VARIANTS[name]))
            print(f"run {i + 1}/{args.runs} {name}: {samples[name][-1]}", file=sys.stderr)

    base = {k: statistics.median(s[k] for s in samples[BASELINE]) for k in ("first_step_s", "wall_s")}
    rows = []
    for name, runs in samples.items():
        med = {k: statistics.median(s[k] for s in runs) for k in ("first_step_s", "wall_s")}
        rows.append({"launcher": name, "runs": len(runs),
                     "median_first_step_s": round(med["first_step_s"], 3), "median_wall_s": round(med["wall_s"], 3),
                     "first_step_ratio": round(med["first_step_s"] / base["first_step_s"], 3),
                     "wall_ratio": round(med["wall_s"] / base["wall_s"], 3),
                     "samples": runs})

    header = f"| {'launcher':32} | first step (s) | ratio | wall (s) | ratio |"
    print(header)
    print("|" + "|".join("-" * (len(c)) for c in header.split("|")[1:-1]) + "|")
    for r in rows:
        print(f"| {r['launcher']:32} | {r['median_first_step_s']:13.2f} | {r['first_step_ratio']:5.3f} | "
              f"{r['median_wall_s']:8.2f} | {r['wall_ratio']:5.3f} |")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"benchmark": "launch_overhead", "date": time.strftime("%Y-%m-%d"), "runs": args.runs,
                   "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
                   "results": rows}, f, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
