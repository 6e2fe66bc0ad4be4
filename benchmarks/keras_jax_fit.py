"""A Keras 3 fit on the JAX backend under `tfdist launch` (mode jax, one slot) against the same script
started by hand, on a GPU where the machine has one: examples per second of the timed fit (inside the
workload, after a warm-up fit that compiles the step, benchmarks/keras_jax_fit_worker.py) and the wall
time of the whole command, alternating rounds, medians of --runs.

It also checks the pinning: a local launch's slot is one of this machine's GPUs (as an agent offers them),
so under tfdist the worker's CUDA_VISIBLE_DEVICES names the GPU the job got and JAX sees exactly that one
device; by hand JAX sees every GPU. With --require-gpu (the device
check, tools/device_check.sh) it exits 1 when there is no GPU or the pinning is not so.

    python benchmarks/keras_jax_fit.py [--runs 3] [--steps 500] [--batch 512] [--require-gpu]

Needs JAX and Keras, not TensorFlow. Prints a table and writes benchmarks/results/keras_jax_fit.json.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)

from benchmarks.compare import alternate, print_table, summarize, write_json  # noqa: E402
from cluster.shared.gpus import discover_gpus  # noqa: E402
from cluster.shared.model import Gpu  # noqa: E402

WORKLOAD = os.path.join(HERE, "keras_jax_fit_worker.py")
BENCH = re.compile(r"BENCH (\{.*\})")
MEASURES = ("examples_per_s", "wall_s")


def commands(args) -> dict[str, list[str]]:
    """By hand, and under `tfdist launch` (the CLI as a module: the same code as the `tfdist` script, found
    whether tfdist was installed into a venv or onto PYTHONPATH, as on the device machine)."""
    workload = [WORKLOAD, "--steps", str(args.steps), "--warmup", str(args.warmup), "--batch", str(args.batch),
                "--width", str(args.width)]
    launch = [sys.executable, "-m", "cluster.client.cli", "launch", "--slots", "1", "--distribution", "jax", "--"]
    return {"by hand": [sys.executable, *workload], "tfdist launch": [*launch, "python", *workload]}


def run_once(command: list[str], state_dir: str, timeout: float) -> tuple[dict, dict]:
    """One run: its sample ({measure: value}) and the workload's own report (where it trained)."""
    env = dict(os.environ, XDG_STATE_HOME=state_dir)  # the launches' local runs stay in a directory of their own
    env.pop("CUDA_VISIBLE_DEVICES", None)  # by hand: every GPU; under tfdist: the one its agent pins
    started = time.perf_counter()
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - started
    output = result.stdout + result.stderr
    found = BENCH.search(output)
    if result.returncode != 0 or not found:
        raise RuntimeError(f"{' '.join(command)} exited {result.returncode} without a BENCH line:\n{output[-3000:]}")
    report = json.loads(found.group(1))
    return {"examples_per_s": report["examples"] / report["seconds"], "wall_s": wall}, report


def pinning_problems(by_hand: dict, launched: dict, gpus: list[Gpu]) -> list[str]:
    """What is wrong with where each run trained, given the machine's GPUs: empty when all is as it should be."""
    problems = []
    if not gpus:
        return ["no GPU on this machine (nvidia-smi and NVML found none): the runs trained on the CPU"]
    for name, report in (("by hand", by_hand), ("tfdist launch", launched)):
        if report["backend"] != "gpu":
            problems.append(f"{name}: JAX trained on {report['backend']}, not the GPU")
    pinned = launched["cuda_visible_devices"]
    if pinned not in {str(g.index) for g in gpus} | {g.uuid for g in gpus}:
        problems.append(f"tfdist launch: CUDA_VISIBLE_DEVICES is {pinned!r}, not one of this machine's GPUs "
                        f"({', '.join(str(g.index) for g in gpus)}) given to the job's one slot")
    elif len(launched["local_devices"]) != 1:
        problems.append(f"tfdist launch: JAX sees {launched['local_devices']} with CUDA_VISIBLE_DEVICES="
                        f"{pinned}, not exactly the one GPU pinned")
    if len(by_hand["local_devices"]) != len(gpus):
        problems.append(f"by hand: JAX sees {by_hand['local_devices']}, not the machine's {len(gpus)} GPUs")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--timeout", type=float, default=300, help="seconds for one run")
    parser.add_argument("--require-gpu", action="store_true", help="exit 1 without a GPU or with a wrong pinning")
    parser.add_argument("--json", default=os.path.join(HERE, "results", "keras_jax_fit.json"))
    args = parser.parse_args()

    gpus = discover_gpus({})  # all of them, as an agent or a local launch finds them (nvidia-smi, else NVML)
    card = ", ".join(g.name for g in gpus) or "none (CPU)"
    print(f"GPUs: {card}", file=sys.stderr)
    reports: dict[str, dict] = {}  # each way's last report

    def once(variant: tuple[str, list[str]]) -> dict:
        name, command = variant
        sample, reports[name] = run_once(command, state_dir, args.timeout)
        return sample

    with tempfile.TemporaryDirectory(prefix="tfdist-bench-") as state_dir:
        samples = alternate({name: (name, command) for name, command in commands(args).items()}, args.runs, once)
    rows = summarize(samples, "by hand", MEASURES, "started")
    by_hand, launched = reports["by hand"], reports["tfdist launch"]
    problems = pinning_problems(by_hand, launched, gpus)

    print(f"\nKeras 3 fit on JAX ({by_hand['backend']}; GPU: {card}), batch {args.batch}, {args.steps} timed steps, "
          f"medians of {args.runs}\n")
    print_table(rows, "started", 13, [("examples/s", "examples_per_s"), ("wall s", "wall_s")])
    print(f"\nunder tfdist: CUDA_VISIBLE_DEVICES={launched['cuda_visible_devices']!r}, JAX sees "
          f"{launched['local_devices']}; by hand JAX sees {by_hand['local_devices']}")
    for problem in problems:
        print(f"PROBLEM: {problem}")
    write_json(args.json, "keras_jax_fit", args.runs, rows, gpu=card, steps=args.steps, batch=args.batch,
               width=args.width, pinning={"tfdist launch": launched, "by hand": by_hand}, problems=problems)
    return 1 if problems and args.require_gpu else 0


if __name__ == "__main__":
    sys.exit(main())
