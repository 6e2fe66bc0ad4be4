"""optimizations.aggregation_frequency 1 against 8, under Horovod and under MWMS, across two
network-namespace hosts (one rank each) whose links are shaped to 100 Mbit/s, plus the same run unshaped (close to pure compute). The ideal
speed-up of k=8 is 8x when communication is all the time a step takes, and never more than the unshaped
run's throughput allows:  ideal = min(8, unshaped / shaped(k=1)).
Medians of --runs runs; examples per second.

    sudo .venv/bin/python benchmarks/aggregation.py [--runs 3] [--steps 64] [--rate 100mbit] [--modes horovod,mwms]

Prints a table and writes benchmarks/results/aggregation.json.
"""

import argparse
import json
import os
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)

from tests.multihost.conftest import Cluster, make_hosts  # noqa: E402

WORKLOAD = os.path.join(HERE, "aggregation_worker.py")


def shape(hosts, rate: str | None) -> None:
    for name in ("a1", "a2"):
        ns = hosts[name].ns
        subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", "eth0", "root"], capture_output=True)
        if rate:
            subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate",
                            rate, "burst", "256kb", "latency", "400ms"], check=True, timeout=30)


def run(cluster, tmp: str, mode: str, k: int, steps: int) -> float:
    config = os.path.join(tmp, f"{mode}-k{k}.yaml")
    with open(config, "w") as f:
        f.write(f"optimizations: {{aggregation_frequency: {k}}}\nresources: {{slots_per_trial: 2}}\n"
                f"distribution: {{mode: {mode}}}\nhyperparameters: {{global_batch_size: 64}}\n"
                "environment: {variables: {TF_CPP_MIN_LOG_LEVEL: 3}}\n")
    result = cluster.cli("launch", "--config", config, "--", WORKLOAD, str(steps), timeout=900)
    if result.returncode != 0:
        raise RuntimeError(result.stderr[-3000:])
    return json.loads(re.search(r"BENCH (\{.*\})", result.stdout).group(1))["examples_per_s"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--rate", default="100mbit")
    parser.add_argument("--modes", default="horovod,mwms")
    args = parser.parse_args()
    modes = args.modes.split(",")
    rows = ("unshaped, k=1", f"{args.rate}, k=1", f"{args.rate}, k=8")
    samples = {mode: {row: [] for row in rows} for mode in modes}
    with make_hosts() as hosts, tempfile.TemporaryDirectory() as tmp:
        cluster = Cluster(hosts, pathlib.Path(tmp), uuid.uuid4().hex, slots_per_agent=1)
        try:
            for _ in range(args.runs):
                for mode in modes:  # interleaved: drift in the machine's speed hits every mode alike
                    shape(hosts, None)
                    samples[mode][rows[0]].append(run(cluster, tmp, mode, 1, args.steps))
                    shape(hosts, args.rate)
                    samples[mode][rows[1]].append(run(cluster, tmp, mode, 1, args.steps))
                    samples[mode][rows[2]].append(run(cluster, tmp, mode, 8, args.steps))
        finally:
            cluster.close()
    results = {}
    print("| mode | run | examples/s (median) |\n|---|---|---|")
    for mode in modes:
        med = {row: statistics.median(v) for row, v in samples[mode].items()}
        speedup = med[rows[2]] / med[rows[1]]
        ideal_speedup = min(8.0, med[rows[0]] / med[rows[1]])
        for row, v in med.items():
            print(f"| {mode} | {row} | {v:,.0f} |")
        print(f"| {mode} | ideal {args.rate}, k=8 | {ideal_speedup * med[rows[1]]:,.0f} |")
        results[mode] = {"samples": samples[mode], "medians": med, "ideal_k8": ideal_speedup * med[rows[1]],
                         "speedup": speedup, "ideal_speedup": ideal_speedup}
    for mode in modes:
        r = results[mode]
        print(f"{mode}: k=8 speed-up on {args.rate}: {r['speedup']:.2f}x (ideal {r['ideal_speedup']:.2f}x, "
              f"{r['speedup'] / r['ideal_speedup']:.0%} of it)")
    out = os.path.join(HERE, "results", "aggregation.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump({"steps": args.steps, "runs": args.runs, "rate": args.rate, "modes": results}, f, indent=2)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
