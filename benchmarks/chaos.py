"""The long chaos run: the coordinator killed with `kill -9` at least 100 times at random moments
while jobs of 1, 2 and 4 slots are submitted, placed, run and end on two agents (tests/chaos.py).
Prints a table and writes benchmarks/results/chaos.json. `make chaos` runs it.

    .venv/bin/python benchmarks/chaos.py [--kills 100] [--jobs 90] [--seed 1]
"""

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)

from tests.chaos import ChaosRun  # noqa: E402
from tests.conftest import processes_with_marker  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=100)
    parser.add_argument("--jobs", type=int, default=90)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", default=os.path.join(HERE, "results", "chaos.json"))
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="tfdist-chaos-")
    marker = uuid.uuid4().hex
    run = ChaosRun(tmp, marker, kills=args.kills, jobs=args.jobs, seed=args.seed, log=lambda *a: None)
    try:
        result = run.run()
    finally:
        run.close()
        deadline = time.monotonic() + 15
        while processes_with_marker(marker) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = processes_with_marker(marker)
        shutil.rmtree(tmp, ignore_errors=True)
    result.update(seed=args.seed, processes_left=len(left), machine=f"{platform.machine()}, {os.cpu_count()} cores")
    rows = [("coordinator kill -9", result["kills"]), ("jobs acknowledged", result["jobs"]),
            ("jobs ending other than without kills", len(result["problems"])),
            ("median restart to answering (s)", f"{result['restart_seconds_median']:.2f}"),
            ("processes left behind", result["processes_left"]), ("run time (s)", result["seconds"])]
    width = max(len(r[0]) for r in rows)
    print(f"{'what'.ljust(width)}  value")
    for name, value in rows:
        print(f"{name.ljust(width)}  {value}")
    for problem in result["problems"]:
        print("PROBLEM:", problem)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    return 0 if not result["problems"] and not left else 1


if __name__ == "__main__":
    sys.exit(main())
