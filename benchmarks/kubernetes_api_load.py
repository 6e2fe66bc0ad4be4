"""The Kubernetes engine's load on the API server on a big cluster: `--nodes` KWOK nodes of 8 GPUs (1,000) and
`--others` pods of other workloads on them (10,000, in another namespace, a few replaced each second), with a
coordinator of the code at `--checkout before=DIR` and of this checkout, one after the other, on the same
control plane, in the same run.

KWOK posts each node's status every `--node-heartbeat` seconds (300, up to a fifth more: a kubelet posts it
every 5 min when nothing changed, its heartbeats being Leases; the suite's KWOK stages post every 15-35 s).

Each coordinator runs `tfdist coordinator --engine kubernetes` with its shipped RBAC, with
benchmarks/http_counting.py imported first: every HTTP request it sends to the API server is counted by verb
and resource, with the bytes it reads back (as sent: lists gzipped, watch streams not). From its start to
offering every node is timed; then:

1. Idle: `--minutes` of the cluster as it goes on (`--churn` other pods replaced a second): requests and
   MB read per minute.
2. Jobs: `--jobs` two-node jobs one after the other, each submitted, its pods Running (KWOK), canceled and
   its pods gone: requests and MB per job (the window's, less the idle rate over the window's length).

    .venv/bin/python benchmarks/kubernetes_api_load.py --checkout before=/tmp/before [--nodes 1000 --others 10000]

Prints the table and writes benchmarks/results/kubernetes_api_load.json.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)

from benchmarks.compare import save_json  # noqa: E402

GPUS = 8
OTHERS = "bench-others"
RUN = ("import runpy, sys; sys.path.insert(0, {bench!r}); import http_counting; sys.argv = {argv!r}; "
       "runpy.run_module('cluster.client.cli', run_name='__main__', alter_sys=True)")


class Coordinator:
    """`tfdist coordinator --engine kubernetes` of the code at `checkout`, its API traffic counted."""

    def __init__(self, plane, admin, root: str, checkout: str, side: str, pool: str):
        from cluster.shared.credentials import Authority
        from cluster.shared.rpc import Client
        from tests.kubernetes.cluster_helpers import coordinator_rights

        self.namespace, self.admin = f"bench-load-{side}", admin
        kubeconfig, self.objects = coordinator_rights(plane, admin, self.namespace)
        state = os.path.join(root, f"state-{side}")
        self.counts = os.path.join(root, f"http-{side}.json")
        argv = ["tfdist", "coordinator", "--engine", "kubernetes", "--namespace", self.namespace, "--kubeconfig",
                kubeconfig, "--listen", "127.0.0.1:0", "--http", "off", "--state-dir", state, "--image", "bench",
                "--node-selector", f"pool={pool}", "--pod-start-timeout", "600"]
        env = {**os.environ, "PYTHONPATH": checkout, "TFDIST_BENCH_HTTP_COUNTS": self.counts}
        self.started = time.monotonic()
        self.proc = subprocess.Popen([sys.executable, "-c", RUN.format(bench=HERE, argv=argv)], cwd=checkout,
                                     env=env, stdout=subprocess.PIPE, stderr=open(os.path.join(root, f"{side}.log"), "w"),
                                     text=True)
        banner = self.proc.stdout.readline()
        if " listening on " not in banner:
            raise RuntimeError(f"the {side} coordinator did not start: {open(os.path.join(root, f'{side}.log')).read()[-2000:]}")
        address = banner.split(" listening on ")[1].split()[0]
        self.client = Client(address, Authority.load(os.path.join(state, "credentials")).issue("admin", "bench", address),
                             timeout=120)

    def read(self) -> dict:
        """The counts as last written (each second)."""
        before = os.path.getmtime(self.counts) if os.path.exists(self.counts) else 0
        wait(lambda: os.path.exists(self.counts) and os.path.getmtime(self.counts) > before, "fresh counts", 10, 0.1)
        with open(self.counts) as f:
            return json.load(f)

    def offered(self) -> int:
        return sum(1 for a in self.client.list_agents() if a.state == "ALIVE" and a.free_slots == a.slots == GPUS)

    def submit(self) -> str:
        from cluster.shared import jobspec
        from cluster.shared.config import ExperimentConfig

        spec = jobspec.job_spec(ExperimentConfig(name="bench", entrypoint=("true",), slots_per_trial=2 * GPUS,
                                                 distribution_mode="mwms"), submission_id=uuid.uuid4().hex)
        return self.client.submit(jobspec.to_pb(spec))

    def close(self) -> None:
        from tests.kubernetes.cluster_helpers import remove_rights

        self.client.close()
        self.proc.terminate()
        self.proc.wait(timeout=60)
        remove_rights(self.admin, self.objects)


def wait(probe, what: str, timeout: float = 300.0, every: float = 0.2):
    from tests.kubernetes.cluster_helpers import wait_for

    return wait_for(what, probe, timeout, every)


def difference(after: dict, before: dict) -> dict:
    return {kind: {k: v - before[kind].get(k, 0) for k, v in after[kind].items() if v - before[kind].get(k, 0)}
            for kind in ("requests", "bytes")}


def other_pod(name: str, node: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": OTHERS, "labels": {"app": "other"}},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "other", "resources": {
                "requests": {"cpu": "100m", "memory": "64Mi"}}}]}}


def populate(admin, nodes: int, others: int) -> list[str]:
    """The KWOK nodes (label pool=load) and the other workloads' pods bound on them; returns the nodes' names."""
    from lightkube import codecs
    from lightkube.models.core_v1 import NodeStatus
    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.resources.core_v1 import Node, Pod

    from tests.kubernetes.cluster_helpers import KWOK_LABEL, namespace

    from cluster.engines.kubernetes.api import warm_up

    warm_up()  # each kind decoded once before threads do it at once (msgspec's first decodes race: SIGSEGV)
    names = [f"load-{i:04d}" for i in range(nodes)]
    namespace(admin, OTHERS)
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda name: admin.create(Node(metadata=ObjectMeta(name=name, labels={**KWOK_LABEL, "pool": "load"}),
                                                     status=NodeStatus(allocatable={"cpu": "32", "memory": "256Gi", "pods": "110",
                                                                                    "nvidia.com/gpu": str(GPUS)}))), names))
        list(pool.map(lambda i: admin.create(codecs.from_dict(other_pod(f"other-{i}", names[i % nodes]))), range(others)))
    wait(lambda: sum(1 for p in admin.list(Pod, namespace=OTHERS, chunk_size=1000) if p.status.phase == "Running") == others,
         f"the {others} other pods Running", timeout=900, every=5)
    return names


class Churn:
    """`per_second` of the other pods replaced each second (deleted, made again on another node)."""

    def __init__(self, admin, names: list[str], others: int, per_second: float):
        self.admin, self.names, self.others, self.per_second = admin, names, others, per_second
        self.stop, self.made = threading.Event(), others
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        from lightkube import codecs
        from lightkube.resources.core_v1 import Pod

        rng = random.Random(3)
        alive = [f"other-{i}" for i in range(self.others)]
        while not self.stop.wait(1.0 / self.per_second if self.per_second else 3600):
            victim = alive.pop(rng.randrange(len(alive)))
            self.admin.delete(Pod, victim, namespace=OTHERS, grace_period=0)
            name = f"other-{self.made}"
            self.made += 1
            self.admin.create(codecs.from_dict(other_pod(name, rng.choice(self.names))))
            alive.append(name)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=30)


def measure(plane, admin, root: str, checkout: str, side: str, nodes: int, minutes: float, jobs: int) -> dict:
    from lightkube.resources.core_v1 import Pod

    coordinator = Coordinator(plane, admin, root, checkout, side, "load")
    try:
        wait(lambda: coordinator.offered() == nodes, f"the {side} coordinator offering the {nodes} nodes", 600, 0.5)
        result: dict = {"seconds_to_offer_every_node": round(time.monotonic() - coordinator.started, 1)}
        first = coordinator.read()
        time.sleep(minutes * 60)  # the window measured: the cluster as it goes on
        idle = difference(coordinator.read(), first)
        result["per_minute"] = {k: {n: v / minutes for n, v in d.items()} for k, d in idle.items()}
        mark, began = coordinator.read(), time.monotonic()

        def ours() -> list:
            return [p for p in admin.list(Pod, namespace=coordinator.namespace) if (p.metadata.labels or {}).get("tfdist.io/job")]

        for _ in range(jobs):
            job_id = coordinator.submit()
            wait(lambda: len(ours()) == 2 and all(p.status.phase == "Running" for p in ours()), f"job {job_id}'s pods Running")
            coordinator.client.cancel(job_id)
            wait(lambda: not ours(), f"job {job_id}'s pods gone")
            wait(lambda: coordinator.offered() == nodes, "its nodes offered again", 120, 0.2)
        window = (time.monotonic() - began) / 60
        busy = difference(coordinator.read(), mark)
        result["per_job"] = {k: {n: max(0.0, (v - result["per_minute"][k].get(n, 0) * window) / jobs)
                                 for n, v in d.items()} for k, d in busy.items()}
        result["job_window_minutes"] = round(window, 2)
        return result
    finally:
        coordinator.close()


def heartbeat_stages(root: str, seconds: float) -> str:
    """The suite's KWOK stages with a node's status posted every `seconds` to 1.2 * `seconds`."""
    from tests.kubernetes.control_plane import KWOK_STAGES

    text = open(KWOK_STAGES).read()
    old = "durationMilliseconds: 15000\n    jitterDurationMilliseconds: 20000"
    assert old in text, "the node-heartbeat stage changed: update benchmarks/kubernetes_api_load.py"
    path = os.path.join(root, "kwok_stages.yaml")
    with open(path, "w") as f:
        f.write(text.replace(old, f"durationMilliseconds: {int(seconds * 1000)}\n    "  # KWOK waits between the
                                  f"jitterDurationMilliseconds: {int(seconds * 1200)}"))  # two (not their sum)
    return path


def total(counts: dict, kind: str) -> float:
    return sum(counts[kind].values())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkout", required=True, help="before=DIR: the code to compare with (a git worktree)")
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--others", type=int, default=10000)
    parser.add_argument("--churn", type=float, default=1.0, help="other pods replaced a second")
    parser.add_argument("--minutes", type=float, default=2.0)
    parser.add_argument("--jobs", type=int, default=10)
    parser.add_argument("--node-heartbeat", type=float, default=300.0, help="seconds between a node's status posts")
    parser.add_argument("--out", default="kubernetes_api_load.json", help="the results' file in benchmarks/results")
    parser.add_argument("--this", default=REPO, help="the code measured against --checkout (default this checkout; "
                                                     "a worktree of it keeps edits out of a long run)")
    args = parser.parse_args()
    label, _, before = args.checkout.partition("=")
    from lightkube import Client, KubeConfig

    from tests.kubernetes.control_plane import ControlPlane, bin_dir

    root = tempfile.mkdtemp(prefix="tfdist-k8s-load-")
    plane = ControlPlane(bin_dir(), os.path.join(root, "plane"))
    plane.start()
    results = {}
    try:
        plane.start_kwok(stages=heartbeat_stages(root, args.node_heartbeat))
        admin = Client(KubeConfig.from_file(plane.admin()), field_manager="tfdist-bench")
        started = time.monotonic()
        names = populate(admin, args.nodes, args.others)
        print(f"{args.nodes} nodes and {args.others} other pods made in {time.monotonic() - started:.0f} s", flush=True)
        churn = Churn(Client(KubeConfig.from_file(plane.admin()), field_manager="tfdist-bench"), names, args.others,
                      args.churn)
        try:
            for side, checkout in ((label, os.path.abspath(before)), ("this checkout", os.path.abspath(args.this))):
                results[side] = measure(plane, admin, root, checkout, side.replace(" ", "-"), args.nodes, args.minutes,
                                        args.jobs)
                print(f"{side}: {json.dumps(results[side])}", flush=True)
        finally:
            churn.close()
    finally:
        plane.stop()
    print(f"\n| {args.nodes} nodes, {args.others} other pods ({args.churn:g} replaced/s) | requests/min | MB read/min | "
          "requests/job | MB read/job | s to offer every node |")
    print("|---|---|---|---|---|---|")
    for side, r in results.items():
        print(f"| {side} | {total(r['per_minute'], 'requests'):.1f} | {total(r['per_minute'], 'bytes') / 1e6:.2f} | "
              f"{total(r['per_job'], 'requests'):.1f} | {total(r['per_job'], 'bytes') / 1e6:.3f} | "
              f"{r['seconds_to_offer_every_node']} |")
    save_json(os.path.join(HERE, "results", args.out), {
        "benchmark": "kubernetes_api_load", "nodes": args.nodes, "other_pods": args.others, "churn_per_second": args.churn,
        "idle_minutes": args.minutes, "jobs": args.jobs, "node_heartbeat_seconds": args.node_heartbeat,
        "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
