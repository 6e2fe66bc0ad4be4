"""How the coordinator's state holds up at size (issue 16, Measured 8): N small finished jobs plus M jobs
with a 64 KiB environment value, made through the store API in a real SQLite file; then a real
`tfdist coordinator` on it and the real `tfdist jobs` CLI against it; the client walking every page; and
retention pruning the state down to its rule, with the longest single transaction.

    python benchmarks/state_scale.py [--small 100000] [--big 2000] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from cluster.coordinator.store import SqliteStore  # noqa: E402
from cluster.coordinator.store.retention import Pruner, Retention  # noqa: E402
from cluster.shared.credentials import Authority  # noqa: E402
from cluster.shared.experiment import ExperimentConfig  # noqa: E402
from cluster.shared.model import JobSpec, JobState  # noqa: E402
from cluster.shared.rpc import Client  # noqa: E402


def build(path: str, small: int, big: int) -> float:
    started = time.monotonic()
    store = SqliteStore(path)
    plain = JobSpec(ExperimentConfig(name="sweep", entrypoint=("python", "train.py"), slots_per_trial=2,
                                     distribution_mode="mwms"))
    heavy = JobSpec(ExperimentConfig(name="heavy", entrypoint=("python", "train.py"), slots_per_trial=2,
                                     distribution_mode="mwms", environment_variables={"BLOB": "v" * 65536}))
    seq = 0
    for count, spec in ((small, plain), (big, heavy)):
        for start in range(0, count, 5000):
            with store.transaction():
                for _ in range(min(5000, count - start)):
                    seq += 1
                    store.insert_job(f"{seq}-{seq:04x}", seq, spec, float(seq), "submitted", owner="bench")
                    store.update_job(f"{seq}-{seq:04x}", float(seq), "done", state=JobState.SUCCEEDED,
                                     ended_at=float(seq), exit_code=0)
    for _ in range(50):  # a few active ones
        seq += 1
        store.insert_job(f"{seq}-{seq:04x}", seq, plain, float(seq), "submitted", owner="bench")
    store.close()
    return time.monotonic() - started


def timed(argv: list[str], env: dict) -> tuple[float, subprocess.CompletedProcess]:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "cluster.client.cli", *argv], env=env, capture_output=True,
                          text=True, timeout=1800)
    return time.monotonic() - started, done


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--small", type=int, default=100_000)
    parser.add_argument("--big", type=int, default=2_000)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    root = args.dir or tempfile.mkdtemp(prefix="tfdist-state-scale-")
    state_dir = os.path.join(root, "state")
    path = os.path.join(state_dir, "coordinator.sqlite")
    print(f"building {args.small} small + {args.big} 64-KiB-env finished jobs (+50 queued) in {path}", flush=True)
    print(f"  built in {build(path, args.small, args.big):.1f}s; file {os.path.getsize(path) / 2**20:.0f} MiB",
          flush=True)

    env = {**os.environ, "PYTHONPATH": REPO, "TFDIST_RUNTIME_DIR": os.path.join(root, "runtime")}
    started = time.monotonic()
    coordinator = subprocess.Popen([sys.executable, "-m", "cluster.client.cli", "coordinator", "--listen",
                                    "127.0.0.1:0", "--state-dir", state_dir], env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL, text=True)
    try:
        banner = coordinator.stdout.readline()
        address = banner.split(" listening on ")[1].split()[0]
        print(f"coordinator up in {time.monotonic() - started:.1f}s at {address}", flush=True)
        env["TFDIST_COORDINATOR"] = address
        for argv in (["jobs"], ["jobs", "--json"]):
            took, done = timed(argv, env)
            print(f"`tfdist {' '.join(argv)}`: exit {done.returncode} in {took:.2f}s, {len(done.stdout.splitlines())} "
                  f"lines of output; stderr: {done.stderr.strip()[:200]}", flush=True)
        client = Client(address, Authority.load(os.path.join(state_dir, "credentials")).issue("user", "bench"),
                        timeout=60)
        for summary in (True, False):
            started = time.monotonic()
            jobs = client.jobs(summary=summary)
            print(f"Client.jobs(summary={summary}): {len(jobs)} jobs (total {jobs.total}) in "
                  f"{time.monotonic() - started:.1f}s", flush=True)
        client.close()
    finally:
        coordinator.terminate()
        coordinator.wait(timeout=60)

    store = SqliteStore(path)
    longest = 0.0
    prune, purge = store.prune_finished, store.purge_output

    def timed_call(fn):
        def call(*a):
            nonlocal longest
            t = time.monotonic()
            try:
                return fn(*a)
            finally:
                longest = max(longest, time.monotonic() - t)
        return call

    store.prune_finished, store.purge_output = timed_call(prune), timed_call(purge)
    started = time.monotonic()
    jobs, rows = Pruner(store, Retention(keep_jobs=10_000, keep_days=0, pause=0.0)).prune()
    print(f"retention to the newest 10,000 finished: {jobs} jobs pruned ({rows} rows of output) in "
          f"{time.monotonic() - started:.1f}s; longest transaction {longest * 1000:.0f} ms; "
          f"{store.count_jobs()} jobs left", flush=True)
    store.close()


if __name__ == "__main__":
    main()
