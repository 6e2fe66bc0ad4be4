"""Time from `sbatch` to the first training step on a real Slurm: `tfdist launch` inside the allocation
against the HPC guide's hand-written batch script (node names from scontrol, a TF_CONFIG per node with fixed
ports, one `srun -w NODE ... &` per node).

Starts a private 2-node Slurm (tests/slurm/cluster.py: slurmctld and one slurmd per network-namespace node),
submits the same MWMS training script (benchmarks/bench_worker.py) with each batch script, alternating,
and reports medians of time to the chief's first step and to the job's end, with ratios to the
hand-written script. Writes benchmarks/results/slurm_start.json. Root (namespaces).

    .venv/bin/python benchmarks/slurm_start.py [--runs 5]
"""

import argparse
import os
import re
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)

import compare  # noqa: E402
from tests.slurm.cluster import SlurmCluster  # noqa: E402

WORKER = os.path.join(HERE, "bench_worker.py")
HEADER = "#!/bin/bash\n#SBATCH --job-name=distr\n#SBATCH --nodes=2\n#SBATCH --ntasks=2\n#SBATCH --ntasks-per-node=1\n"
# The guide's script, as written there but for `module load` and its site's DNS: it resolves
# addresses with `dig +short NODE.site` (unused afterwards: TF_CONFIG names the nodes); the
# test cluster's node names are in /etc/hosts, so `getent hosts` takes dig's place.
HANDWRITTEN = HEADER + f"""
function print_nodelist {{
    scontrol show hostname $SLURM_NODELIST
}}
NODE_1=$(print_nodelist | awk '{{print $1}}' | sort -u | head -n 1)
NODE_2=$(print_nodelist | awk '{{print $1}}' | sort -u | tail -n 1)
IP_1=$(getent hosts ${{NODE_1}} | awk '{{print $1}}')
IP_2=$(getent hosts ${{NODE_2}} | awk '{{print $1}}')

# On the first node
TF_CONFIG='{{"cluster": {{"worker": ["'"${{NODE_1}}"':33562", "'"${{NODE_2}}"':33561"]}}, "task": {{"index": 0, \
"type": "worker"}}}}' srun -w ${{NODE_1}} -N 1 --ntasks=1 {sys.executable} {WORKER} &

# On the second node
TF_CONFIG='{{"cluster": {{"worker": ["'"${{NODE_1}}"':33562", "'"${{NODE_2}}"':33561"]}}, "task": {{"index": 1, \
"type": "worker"}}}}' srun -w ${{NODE_2}} -N 1 --ntasks=1 {sys.executable} {WORKER} &

wait
"""
TFDIST = HEADER + f"\n{sys.executable} -m cluster.client.cli launch -- {WORKER}\n"
VARIANTS = {"hand-written TF_CONFIG script": HANDWRITTEN, "tfdist launch": TFDIST}
BASELINE = "hand-written TF_CONFIG script"


def run_once(slurm: SlurmCluster, tmp: str, script: str) -> dict:
    path = os.path.join(tmp, "job.sh")
    with open(path, "w") as f:
        f.write(script)
    out = os.path.join(tmp, f"run-{time.monotonic_ns()}.out")
    start = time.time()
    job = slurm.run(["sbatch", "--parsable", f"--output={out}", path], timeout=60,
                    env={"PYTHONPATH": REPO, "TF_CPP_MIN_LOG_LEVEL": "3"}, cwd=REPO).stdout.strip()
    deadline = time.monotonic() + 600
    while True:  # sbatch --wait polls at growing intervals: watch the job's state more closely
        state = slurm.run(["scontrol", "show", "job", "-o", job]).stdout
        if "JobState=COMPLETED" in state or "JobState=FAILED" in state or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    end = time.time()
    text = open(out).read() if os.path.exists(out) else ""
    first = re.findall(r"BENCH first_step=([0-9.]+)", text)
    if "JobState=COMPLETED" not in state or not first:
        raise SystemExit(f"job {job} did not complete: {state}\n{text[-3000:]}")
    return {"first_step_s": float(first[0]) - start, "end_s": end - start}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", default=os.path.join(HERE, "results", "slurm_start.json"))
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp, SlurmCluster(os.path.join(tmp, "slurm"), nodes=2, cpus=2) as slurm:
        for script in VARIANTS.values():  # warm the page cache: the first TF import is slower
            run_once(slurm, tmp, script)
        samples = compare.alternate(VARIANTS, args.runs, lambda script: run_once(slurm, tmp, script))
    rows = compare.summarize(samples, BASELINE, ("first_step_s", "end_s"), "batch script")
    compare.print_table(rows, "batch script", 30, [("sbatch -> first step (s)", "first_step_s"),
                                                   ("sbatch -> end (s)", "end_s")])
    compare.write_json(args.out, "slurm_start", args.runs, rows,
                       cluster="2 slurmd nodes in network namespaces on this machine, Slurm 22.05")

if __name__ == "__main__":
    main()
