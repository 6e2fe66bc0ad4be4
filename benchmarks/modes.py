"""Distribution modes side by side: examples per second of the same small model (an MLP of ~400k
parameters in plain TensorFlow variables, benchmarks/modes_worker.py) on the same number of examples,
under MWMS, Horovod and parameter servers, each started by tfdist and by the launcher users write by
hand (TF_CONFIG processes for MWMS and PS, `horovodrun --gloo` for Horovod), on 2 and 4 workers on this
machine, then on two network-namespace hosts joined by a link shaped to 1 Gbit/s (tfdist only, one
worker per host). Timing starts after 5 warm-up steps, inside the workload; medians of --runs runs.

    .venv/bin/python benchmarks/modes.py [--runs 3] [--steps 150] [--batch 256] [--skip-hosts]

Prints a table and writes benchmarks/results/modes.json. The two-host part needs root.
"""

import argparse
import json
import os
import pathlib
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)

from tests.conftest import cli_env, processes_with_marker  # noqa: E402

WORKLOAD = os.path.join(HERE, "modes_worker.py")
MODES = ("mwms", "horovod", "ps")
BENCH = re.compile(r"BENCH (\{.*\})")


def examples_per_second(output: str) -> float:
    found = BENCH.search(output)
    if not found:
        raise RuntimeError("no BENCH line in the output:\n" + output[-3000:])
    data = json.loads(found.group(1))
    return data["examples"] / data["seconds"]


def run(command, marker, timeout=600) -> float:
    env = cli_env(marker, TF_CPP_MIN_LOG_LEVEL="3")
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env["PATH"]  # horovodrun's `python`
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {result.returncode}:\n{result.stderr[-3000:]}")
    leftover = processes_with_marker(marker)
    for pid in leftover:  # a launcher that leaves servers behind must not slow the next run
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
    return examples_per_second(result.stdout + result.stderr)


def local_commands(mode: str, workers: int, steps: int, batch: int) -> dict[str, list[str]]:
    workload = [WORKLOAD, mode, str(steps), str(batch)]
    tfdist = [sys.executable, "-m", "cluster.client.cli", "launch", "--slots", str(workers), "--distribution", mode,
              "--", *workload]
    if mode == "mwms":
        by_hand = [sys.executable, os.path.join(HERE, "handwritten_launcher.py"), str(workers), *workload]
    elif mode == "ps":
        by_hand = [sys.executable, os.path.join(HERE, "handwritten_ps_launcher.py"), str(workers), *workload]
    else:
        by_hand = [os.path.join(os.path.dirname(sys.executable), "horovodrun"), "-np", str(workers), "-H",
                   f"localhost:{workers}", "--gloo", "python", *workload]
    return {"tfdist": tfdist, "by hand": by_hand}


def bench_local(runs: int, steps: int, batch: int) -> list[dict]:
    rows = []
    for workers in (2, 4):
        for mode in MODES:
            commands = local_commands(mode, workers, steps, batch)
            samples: dict[str, list[float]] = {k: [] for k in commands}
            for _ in range(runs):
                for launcher, command in commands.items():  # interleaved: drift hits both alike
                    samples[launcher].append(run(command, uuid.uuid4().hex))
            rows.append({"setting": "one machine", "workers": workers, "mode": mode,
                         **{f"{k} ex/s": statistics.median(v) for k, v in samples.items()},
                         "samples": samples})
            print(f"  {workers} workers {mode}: " + ", ".join(f"{k} {statistics.median(v):,.0f} ex/s"
                                                            for k, v in samples.items()), flush=True)
    return rows


def bench_two_hosts(runs: int, steps: int, batch: int, rate: str) -> list[dict]:
    from tests.multihost.conftest import Cluster, make_hosts

    rows = []
    marker = uuid.uuid4().hex
    with make_hosts() as hosts, tempfile.TemporaryDirectory() as tmp:
        for name in ("a1", "a2"):
            subprocess.run(["ip", "netns", "exec", hosts[name].ns, "tc", "qdisc", "add", "dev", "eth0", "root", "tbf",
                            "rate", rate, "burst", "1mb", "latency", "50ms"], check=True, timeout=30)
        cluster = Cluster(hosts, pathlib.Path(tmp), marker, slots_per_agent=1)
        try:
            for mode in MODES:
                samples = []
                for _ in range(runs):
                    result = cluster.cli("launch", "--slots", "2", "--distribution", mode, "--", WORKLOAD, mode,
                                 str(steps), str(batch), timeout=600)
                    if result.returncode != 0:
                        raise RuntimeError(f"{mode} on two hosts failed:\n{result.stderr[-3000:]}")
                    samples.append(examples_per_second(result.stdout + result.stderr))
                rows.append({"setting": f"two hosts, {rate}", "workers": 2, "mode": mode,
                             "tfdist ex/s": statistics.median(samples), "samples": {"tfdist": samples}})
                print(f"  two hosts {mode}: {statistics.median(samples):,.0f} ex/s", flush=True)
        finally:
            cluster.close()
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| setting | workers | mode | tfdist ex/s | by hand ex/s | tfdist / by hand |", "|---|---|---|---|---|---|"]
    for r in rows:
        ours, hand = r["tfdist ex/s"], r.get("by hand ex/s")
        by_hand = f"{hand:,.0f}" if hand else "-"
        ratio = f"{ours / hand:.2f}" if hand else "-"
        lines.append(f"| {r['setting']} | {r['workers']} | {r['mode']} | {ours:,.0f} | {by_hand} | {ratio} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--batch", type=int, default=256, help="global batch (examples per step)")
    parser.add_argument("--rate", default="1gbit", help="the two hosts' link (tc tbf rate)")
    parser.add_argument("--skip-hosts", action="store_true", help="only the one-machine part (no root needed)")
    args = parser.parse_args()
    started = time.time()
    print(f"modes: {args.steps} steps x global batch {args.batch} per run, {args.runs} runs, medians", flush=True)
    rows = bench_local(args.runs, args.steps, args.batch)
    if not args.skip_hosts:
        rows += bench_two_hosts(args.runs, args.steps, args.batch, args.rate)
    print(table(rows))
    out = os.path.join(HERE, "results", "modes.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump({"machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
                   "steps": args.steps, "global_batch": args.batch, "runs": args.runs,
                   "seconds": round(time.time() - started), "rows": rows}, f, indent=2)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
