"""The Kubernetes engine on the real control plane (the one `make kubernetes` builds), with KWOK's fake nodes of
8 GPUs, against the same pods made directly for the default scheduler, in the same run.

1. Start latency: for 2- and 8-node gangs, `--jobs` jobs each, one at a time: from the submission (tfdist: a
   SubmitJob call to a coordinator of the kubernetes engine, running as its shipped RBAC; direct: the first
   pod created) to every pod of the gang Running. p50 and p99. Then the job is canceled (its pods deleted)
   and the next starts once they are gone.
2. The coordinator's API calls per job (what its engine counted, from its log at exit), periodic ones
   (node offers every 5 s, the pod watch) included.
3. `--nodes` nodes and `--gangs` gangs of 2 to 16 nodes submitted at once (far more than fit): each gang,
   once all its pods run, is ended; sampled every 0.2 s, the GPU-seconds that pods of incomplete gangs
   (some of their pods bound, not all) hold, of those the GPU-seconds of gangs incomplete for more than
   STUCK_AFTER seconds after their first pod was bound (half-placed: past the moments their pods are created
   and bound one by one), and how many gangs never completed within `--deadline`.

    .venv/bin/python benchmarks/kubernetes_gangs.py [--jobs 20] [--nodes 100] [--gangs 50]

Prints the tables and writes benchmarks/results/kubernetes_gangs.json.
"""

from __future__ import annotations

import argparse
import os
import random
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

from benchmarks.compare import save_json  # noqa: E402

GPUS = 8
STUCK_AFTER = 2.0  # seconds a gang may be partly bound while its pods are created and bound; after: half-placed


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


class Coordinator:
    """`tfdist coordinator --engine kubernetes` over KWOK nodes labelled pool=POOL, as its ServiceAccount."""

    def __init__(self, plane, admin, root: str, namespace: str, pool: str):
        from cluster.shared.credentials import Authority
        from cluster.shared.rpc import Client
        from tests.kubernetes.cluster_helpers import coordinator_rights

        self.namespace, self.admin = namespace, admin
        kubeconfig, self.objects = coordinator_rights(plane, admin, namespace)
        state = os.path.join(root, f"state-{namespace}")
        self.log_path = os.path.join(root, f"coordinator-{namespace}.log")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cluster.client.cli", "coordinator", "--engine", "kubernetes", "--namespace",
             namespace, "--kubeconfig", kubeconfig, "--listen", "127.0.0.1:0", "--http", "off", "--state-dir", state,
             "--image", "bench", "--node-selector", f"pool={pool}", "--pod-start-timeout", "600"],
            cwd=REPO, stdout=subprocess.PIPE, stderr=open(self.log_path, "w"), text=True)
        banner = self.proc.stdout.readline()
        self.address = banner.split(" listening on ")[1].split()[0]
        credential = Authority.load(os.path.join(state, "credentials")).issue("admin", "bench", self.address)
        self.client = Client(self.address, credential, timeout=60)

    def submit(self, nodes: int) -> str:
        from cluster.shared import jobspec
        from cluster.shared.config import ExperimentConfig

        spec = jobspec.job_spec(ExperimentConfig(name="bench", entrypoint=("true",), slots_per_trial=nodes * GPUS,
                                                 distribution_mode="mwms"), submission_id=uuid.uuid4().hex)
        return self.client.submit(jobspec.to_pb(spec))

    def cancel(self, job_id: str) -> None:
        self.client.cancel(job_id)

    def offered(self) -> int:
        """Nodes offered and wholly free."""
        return sum(1 for a in self.client.list_agents() if a.state == "ALIVE" and a.free_slots == a.slots == GPUS)

    def close(self) -> dict[str, int]:
        """Stops it; the API calls its engine counted."""
        from tests.kubernetes.cluster_helpers import remove_rights

        self.client.close()
        self.proc.terminate()
        self.proc.wait(timeout=30)
        remove_rights(self.admin, self.objects)
        text = open(self.log_path).read()
        found = re.findall(r"API calls made: (.*?)(?:; objects received: .*)?$", text, re.M)
        return {k: int(v) for k, v in (kv.split("=") for kv in found[-1].split(", "))} if found else {}


def pods_by_group(admin, namespace: str, label: str) -> dict[str, list]:
    from lightkube.resources.core_v1 import Pod

    groups: dict[str, list] = {}
    for pod in admin.list(Pod, namespace=namespace):
        key = (pod.metadata.labels or {}).get(label)
        if key and pod.metadata.deletionTimestamp is None:
            groups.setdefault(key, []).append(pod)
    return groups


def wait(probe, what: str, timeout: float = 120.0, every: float = 0.01):
    from tests.kubernetes.cluster_helpers import wait_for

    return wait_for(what, probe, timeout, every)


def running(pods, size: int) -> bool:
    return len(pods) == size and all((p.status.phase or "") == "Running" for p in pods)


def start_latency(plane, admin, root: str, jobs: int) -> dict:
    from lightkube.resources.core_v1 import Namespace, Pod

    from cluster.engines.kubernetes.manifests import job_name
    from tests.kubernetes.cluster_helpers import gpu_pod, namespace

    make_nodes(admin, [f"lat-{i}" for i in range(8)], "lat")
    coordinator = Coordinator(plane, admin, root, "bench-latency", "lat")
    direct_ns = namespace(admin, "bench-direct")
    results: dict = {"tfdist": {}, "direct": {}}
    try:
        wait(lambda: coordinator.offered() == 8, "the 8 nodes offered", every=0.2)
        for size in (2, 8):
            times = []
            for _ in range(jobs):
                started = time.perf_counter()
                job_id = coordinator.submit(size)
                wait(lambda: running(pods_by_group(admin, coordinator.namespace, "tfdist.io/job").get(job_name(job_id), []),
                                     size), f"job {job_id}'s pods Running")
                times.append(time.perf_counter() - started)
                coordinator.cancel(job_id)
                wait(lambda: not pods_by_group(admin, coordinator.namespace, "tfdist.io/job"), "its pods deleted")
                wait(lambda: coordinator.offered() == 8, "its nodes offered again", every=0.05)
            results["tfdist"][size] = times
            times = []
            for n in range(jobs):
                started = time.perf_counter()
                for i in range(size):
                    pod = gpu_pod(f"d{size}-{n}-{i}", direct_ns, GPUS, {"gang": f"d{size}-{n}"})
                    pod.spec.nodeSelector = {"pool": "lat"}
                    admin.create(pod)
                wait(lambda: running(pods_by_group(admin, direct_ns, "gang").get(f"d{size}-{n}", []), size),
                     "the direct pods Running")
                times.append(time.perf_counter() - started)
                for i in range(size):
                    admin.delete(Pod, f"d{size}-{n}-{i}", namespace=direct_ns, grace_period=0)
                wait(lambda: not list(admin.list(Pod, namespace=direct_ns)), "the direct pods deleted")
            results["direct"][size] = times
    finally:
        calls = coordinator.close()
        admin.delete(Namespace, direct_ns)
    results["api_calls"] = calls
    results["jobs"] = 2 * jobs
    return results


def make_nodes(admin, names: list[str], pool: str) -> None:
    from lightkube.models.core_v1 import NodeStatus
    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.resources.core_v1 import Node

    from tests.kubernetes.cluster_helpers import KWOK_LABEL, ready

    for name in names:
        admin.create(Node(metadata=ObjectMeta(name=name, labels={**KWOK_LABEL, "pool": pool}),
                          status=NodeStatus(allocatable={"cpu": "32", "memory": "256Gi", "pods": "110",
                                                         "nvidia.com/gpu": str(GPUS)})))
    wait(lambda: all(ready(admin.get(Node, n)) for n in names), f"{len(names)} nodes Ready", timeout=120, every=0.5)


def sample_gangs(admin, namespace: str, label: str, sizes: dict[str, int], end, deadline: float) -> dict:
    """Samples every 0.2 s until every gang completed once or `deadline`; `end(key)` ends a complete gang."""
    incomplete_gpu_seconds, stuck_gpu_seconds, worst, done = 0.0, 0.0, 0, set()
    first_bound: dict[str, float] = {}  # gang -> when a pod of it was first seen bound
    last = time.monotonic()
    started = last
    while len(done) < len(sizes) and time.monotonic() - started < deadline:
        groups = pods_by_group(admin, namespace, label)
        now = time.monotonic()
        incomplete = 0
        for key, pods in groups.items():
            bound = [p for p in pods if p.spec.nodeName]
            if key not in sizes or key in done:
                continue
            if running(pods, sizes[key]):
                done.add(key)
                end(key)
            elif bound:
                incomplete += 1
                held = len(bound) * GPUS * (now - last)
                incomplete_gpu_seconds += held
                if now - first_bound.setdefault(key, now) > STUCK_AFTER:  # past its pods' creation: half-placed
                    stuck_gpu_seconds += held
        worst = max(worst, incomplete)
        last = now
        time.sleep(0.2)
    return {"gangs": len(sizes), "completed": len(done), "seconds": round(time.monotonic() - started, 1),
            "incomplete_gpu_seconds": round(incomplete_gpu_seconds, 1), "most_incomplete_at_once": worst,
            "half_placed_gpu_seconds": round(stuck_gpu_seconds, 1)}


def queued_gangs(plane, admin, root: str, nodes: int, gangs: int, deadline: float) -> dict:
    from lightkube.resources.core_v1 import Namespace, Node, Pod

    from cluster.engines.kubernetes.manifests import job_name
    from tests.kubernetes.cluster_helpers import gpu_pod, namespace

    names = [f"big-{i:03d}" for i in range(nodes)]
    make_nodes(admin, names, "big")
    rng = random.Random(7)
    sizes = [rng.choice((2, 4, 8, 16)) for _ in range(gangs)]
    results = {}
    coordinator = Coordinator(plane, admin, root, "bench-queue", "big")
    try:
        wait(lambda: coordinator.offered() == nodes, f"the {nodes} nodes offered", every=0.5)
        jobs, ids = {}, {}
        for size in sizes:
            job_id = coordinator.submit(size)
            jobs[job_name(job_id)], ids[job_name(job_id)] = size, job_id
        results["tfdist"] = sample_gangs(admin, coordinator.namespace, "tfdist.io/job", jobs,
                                         lambda key: coordinator.cancel(ids[key]), deadline)
    finally:
        results["tfdist_api_calls"] = coordinator.close()
    direct_ns = namespace(admin, "bench-direct-queue")
    try:
        keys = {}
        for g, size in enumerate(sizes):
            keys[f"g{g}"] = size
            for i in range(size):
                pod = gpu_pod(f"g{g}-{i}", direct_ns, GPUS, {"gang": f"g{g}"})
                pod.spec.nodeSelector = {"pool": "big"}
                admin.create(pod)

        def end(key):
            for i in range(keys[key]):
                admin.delete(Pod, f"{key}-{i}", namespace=direct_ns, grace_period=0)

        results["direct"] = sample_gangs(admin, direct_ns, "gang", keys, end, deadline)
    finally:
        admin.delete(Namespace, direct_ns)
        for name in names:
            admin.delete(Node, name)
    results["sizes"] = sizes
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--gangs", type=int, default=50)
    parser.add_argument("--deadline", type=float, default=180.0, help="seconds the queued gangs may take")
    args = parser.parse_args()
    from lightkube import Client, KubeConfig

    from tests.kubernetes.control_plane import ControlPlane, bin_dir

    root = tempfile.mkdtemp(prefix="tfdist-k8s-bench-")
    plane = ControlPlane(bin_dir(), os.path.join(root, "plane"))
    plane.start()
    try:
        plane.start_kwok()
        admin = Client(KubeConfig.from_file(plane.admin()), field_manager="tfdist-bench")
        latency = start_latency(plane, admin, root, args.jobs)
        queue = queued_gangs(plane, admin, root, args.nodes, args.gangs, args.deadline)
    finally:
        plane.stop()
    print("| gang | tfdist p50 | tfdist p99 | default scheduler p50 | default scheduler p99 |")
    print("|---|---|---|---|---|")
    table = {}
    for size in (2, 8):
        row = {k: {"p50": round(statistics.median(latency[k][size]), 3), "p99": round(percentile(latency[k][size], 0.99), 3)}
               for k in ("tfdist", "direct")}
        table[f"{size} nodes"] = row
        print(f"| {size} nodes | {row['tfdist']['p50']:.3f} s | {row['tfdist']['p99']:.3f} s | "
              f"{row['direct']['p50']:.3f} s | {row['direct']['p99']:.3f} s |")
    calls = latency["api_calls"]
    per_job = sum(calls.values()) / latency["jobs"] if calls else float("nan")
    print(f"\nAPI calls by the coordinator: {calls} = {per_job:.1f} per job over {latency['jobs']} jobs")
    print(f"\n| {args.gangs} gangs on {args.nodes} nodes | completed | seconds | GPU-s held by incomplete gangs | "
          f"of those, half-placed (> {STUCK_AFTER:g} s) | most incomplete at once |")
    print("|---|---|---|---|---|---|")
    for k in ("tfdist", "direct"):
        q = queue[k]
        print(f"| {'tfdist' if k == 'tfdist' else 'default scheduler'} | {q['completed']}/{q['gangs']} | {q['seconds']} | "
              f"{q['incomplete_gpu_seconds']} | {q['half_placed_gpu_seconds']} | {q['most_incomplete_at_once']} |")
    save_json(os.path.join(HERE, "results", "kubernetes_gangs.json"), {
        "benchmark": "kubernetes_gangs", "jobs_per_size": args.jobs, "start_latency_seconds": table,
        "samples": {k: {str(s): v for s, v in latency[k].items()} for k in ("tfdist", "direct")},
        "api_calls": calls, "api_calls_per_job": round(per_job, 1), "queued": queue})
    return 0


if __name__ == "__main__":
    sys.exit(main())
