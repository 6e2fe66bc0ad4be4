"""A local launch's fixed cost: `tfdist launch --slots 2 -- python -c pass` against the hand-written launcher
running the same empty command in two processes with TF_CONFIG (benchmarks/handwritten_launcher.py).

Alternating rounds, medians, bytecode compiled beforehand (PYTHONDONTWRITEBYTECODE unset). `--checkout
NAME=DIR` adds the launch of another checkout (a `git worktree` of an earlier commit) in the same rounds, so
a change is measured against the code before it in the same minutes. Writes
benchmarks/results/launch_fixed_cost.json.

    .venv/bin/python benchmarks/launch_fixed_cost.py [--runs 10] [--checkout before=/tmp/before]
"""

import argparse
import compileall
import os
import subprocess
import sys
import tempfile
import time

import compare

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
EMPTY = ["-c", "pass"]
BASELINE = "hand-written launcher"


def launch_variant(checkout: str) -> dict:
    return {"argv": [sys.executable, "-m", "cluster.client.cli", "launch", "--slots", "2", "--", "python", *EMPTY],
            "cwd": checkout}


def run_once(variant: dict, scratch: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(PYTHONPATH=variant["cwd"], TF_CPP_MIN_LOG_LEVEL="3", TFDIST_RUNTIME_DIR=os.path.join(scratch, "run"),
               XDG_STATE_HOME=os.path.join(scratch, "state"))
    start = time.perf_counter()
    proc = subprocess.run(variant["argv"], env=env, cwd=variant["cwd"], capture_output=True, text=True, timeout=120)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{variant['argv']} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return {"wall_s": wall}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--checkout", action="append", default=[], metavar="NAME=DIR",
                        help="also time this checkout's launch (e.g. a worktree of the commit before a change)")
    parser.add_argument("--out", default=os.path.join(HERE, "results", "launch_fixed_cost.json"))
    args = parser.parse_args()
    variants = {BASELINE: {"argv": [sys.executable, os.path.join(HERE, "handwritten_launcher.py"), "2", *EMPTY],
                           "cwd": REPO},
                "tfdist launch": launch_variant(REPO)}
    for spec in args.checkout:
        name, _, path = spec.partition("=")
        if not path or not os.path.isdir(os.path.join(path, "cluster")):
            parser.error(f"--checkout {spec!r}: give NAME=DIR, DIR a tfdist checkout")
        variants[f"tfdist launch ({name})"] = launch_variant(os.path.abspath(path))
    for variant in variants.values():
        compileall.compile_dir(variant["cwd"], quiet=1, rx=__import__("re").compile(r"/(\.venv|\.git|node_modules)/"))
    with tempfile.TemporaryDirectory(prefix="tfdist-bench-") as scratch:
        for variant in variants.values():
            run_once(variant, scratch)  # warm: caches, the first local run's directories
        samples = compare.alternate(variants, args.runs, lambda v: run_once(v, scratch))
    rows = compare.summarize(samples, BASELINE, ["wall_s"], "launcher")
    base = next(r for r in rows if r["launcher"] == BASELINE)["median_wall_s"]
    for row in rows:
        row["over_hand_s"] = round(row["median_wall_s"] - base, 3)
    compare.print_table(rows, "launcher", 34, [("wall (s)", "wall_s")])
    for row in rows:
        print(f"{row['launcher']}: +{row['over_hand_s']:.3f} s over the hand launcher")
    compare.write_json(args.out, "launch_fixed_cost", args.runs, rows, command="python -c pass, 2 processes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
