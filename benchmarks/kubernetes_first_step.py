"""tfdist on a real Kubernetes node (issue 45, Must 5): from `tfdist launch --config C` to the job's first
training step, against the same image's same script run as a plain pod made by hand, in the same run; and the
worker image's size and build time.

It starts what the suite's real-node tests start (tests/kubernetes/conftest.py): a control plane
(tests/kubernetes/control_plane.py) and a real node (tests/kubernetes/real_node.py: containerd, the kubelet,
kube-proxy, CoreDNS; with a containerd root of its own, so the image imports are cold), loads the suite's e2e
image (tests/kubernetes/tfdist_on_node.py: `tfdist kubernetes image` with the suite's job scripts), deploys the
coordinator from the shipped manifests and reaches it at its Service, as a user does. Then, alternating, --runs
rounds (after --warmup rounds not counted) of:

- tfdist, 1 slot and --slots slots: `tfdist launch --config C` (this machine's client, cwd a directory no pod
  has) of an MWMS job running tests/integration/workers/first_step_fit.py, a small Keras fit whose chief prints
  time.time() at the end of its first step: first step = that stamp - the time the launch was started;
- by hand: a pod of the same image running the same script (one process, no TF_CONFIG) created through the API
  as the admin (restricted securityContext like the job pods, placed by the scheduler with a nodeSelector,
  imagePullPolicy Never): first step = the stamp (read from the pod's log) - the time of the create call.

Where the time went comes from the script's own stamps (script start, TensorFlow imported, first step), a pod
watch (when each pod was seen created and Running: the kubelet reports Running at its next relist, up to ~1 s
late) and, for tfdist, the job's submitted_at and started_at (every node started its workers) from
`tfdist job ID --json`.

The image: `tfdist kubernetes image` (the default worker image into its cache) timed --runs times once it is
cached, its archive's bytes and its layers' unpacked bytes; the containerd import of that archive into the
node's fresh containerd (what `--load-into` runs); with --cold, the build from an empty --cache-dir (downloads
the pinned wheels, ~400 MB, and runs mmdebstrap: minutes).

    .venv/bin/python benchmarks/kubernetes_first_step.py [--runs 3] [--slots 2] [--cold]

Runs as root (the real node). Everything it starts is stopped on success, failure or Ctrl-C; it fails if the
node left anything. Prints the tables and writes benchmarks/results/kubernetes_first_step.json.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import uuid
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)

from benchmarks.compare import alternate, save_json  # noqa: E402

CLI = [sys.executable, "-m", "cluster.client.cli"]
SCRIPT = "workers/first_step_fit.py"  # in the e2e image's /workspace (tests/integration/workers)
STAMP = re.compile(r"STAMP (\w+) (\d+\.\d+)")
BY_HAND_NS = "first-step-by-hand"
BY_HAND = "by hand (plain pod)"
RUN_TIMEOUT = 600.0  # seconds one launch or pod may take
JOB = """name: first-step-{slots}
entrypoint: python {script}
resources: {{slots_per_trial: {slots}}}
distribution: {{mode: mwms}}
"""
# The moments of a run, in order; a segment is named by the moment it ends at and runs from the moment before
# it on that run's path (a plain pod has no submission and no agent: its "script started" counts from Running).
MOMENTS = (("start", "launch/create call"), ("submitted", "submitted (client)"), ("pod_created", "pod created"),
           ("pod_running", "pod Running (kubelet)"), ("workers_started", "workers started (agent)"),
           ("script_start", "script started"), ("tf_imported", "TensorFlow imported"),
           ("first_step", "first step done"))

class Interrupted(BaseException):
    pass


def _on_term(signum, frame):
    raise Interrupted(f"signal {signum}")


# ------------------------------------------------------------------------------------------------ the image
def image_cli(*args: str, timeout: float = 1800) -> tuple[float, str, str]:
    """`tfdist kubernetes image ARGS`: (seconds, archive path, digest)."""
    began = time.monotonic()
    done = subprocess.run([*CLI, "kubernetes", "image", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)
    seconds = time.monotonic() - began
    found = re.search(r"oci-archive:(\S+?)(?::[^:@/\s]+)?@(sha256:[0-9a-f]{64})", done.stdout)  # FILE[:TAG]@DIGEST
    if done.returncode != 0 or found is None:
        raise RuntimeError(f"tfdist kubernetes image {' '.join(args)} failed ({done.returncode}):\n"
                           f"{done.stdout[-2000:]}{done.stderr[-3000:]}")
    return seconds, found.group(1), found.group(2)


def unpacked_bytes(archive: str) -> dict:
    """The image's layers as stored (gzip) and unpacked (each decompressed in full, counted)."""
    with tarfile.open(archive) as tar:
        index = json.load(tar.extractfile("index.json"))
        blob = lambda digest: tar.extractfile("blobs/sha256/" + digest.split(":", 1)[1])  # noqa: E731
        manifest = json.load(blob(index["manifests"][0]["digest"]))
        layers = []
        for layer in manifest["layers"]:
            inflate, total, f = zlib.decompressobj(16 + zlib.MAX_WBITS), 0, blob(layer["digest"])
            while chunk := f.read(1 << 20):
                total += len(inflate.decompress(chunk))
            layers.append({"compressed": layer["size"], "unpacked": total + len(inflate.flush())})
    return {"layers": layers, "compressed": sum(x["compressed"] for x in layers),
            "unpacked": sum(x["unpacked"] for x in layers)}


def image_measures(runs: int, cold: bool) -> dict:
    first, archive, digest = image_cli()  # builds what changed, if anything
    cached = [image_cli()[0] for _ in range(runs)]
    result = {"archive": archive, "digest": digest, "first_call_s": round(first, 2),
              "cached_s": [round(s, 3) for s in cached], "archive_bytes": os.path.getsize(archive),
              **unpacked_bytes(archive)}
    if cold:
        cache = tempfile.mkdtemp(prefix="tfdist-bench-cold-cache-")
        try:
            seconds, _, cold_digest = image_cli("--cache-dir", cache, timeout=3600)
            result["cold"] = {"seconds": round(seconds, 1), "digest": cold_digest,
                              "same_digest": cold_digest == digest}
        except (RuntimeError, subprocess.TimeoutExpired) as e:  # no network here, say: the rest still runs
            result["cold"] = {"error": str(e)[-2000:]}
            print(f"the cold build failed: {e}", file=sys.stderr)
        finally:
            shutil.rmtree(cache, ignore_errors=True)
    return result


# ------------------------------------------------------------------------------------------------ pod watch
class PodWatch:
    """When each pod was first seen (ADDED) and first seen Running, by wall clock, from one watch of every
    namespace (a thread; it ends with the control plane)."""

    def __init__(self, kubeconfig: str):
        from lightkube import Client, KubeConfig

        self.client = Client(KubeConfig.from_file(kubeconfig), field_manager="tfdist-bench")
        self.seen: dict[tuple[str, str], dict] = {}
        self.changed = threading.Condition()
        self.stopped = False
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _watch(self) -> None:
        from lightkube.resources.core_v1 import Pod

        try:
            for _, pod in self.client.watch(Pod, namespace="*", server_timeout=30):
                if self.stopped:
                    return
                now = time.time()
                key = (pod.metadata.namespace, pod.metadata.name)
                with self.changed:
                    entry = self.seen.setdefault(key, {"uid": pod.metadata.uid, "pod_created": now})
                    if entry["uid"] != pod.metadata.uid:  # a pod of the same name again
                        entry = self.seen[key] = {"uid": pod.metadata.uid, "pod_created": now}
                    entry["job_id"] = (pod.metadata.annotations or {}).get("tfdist.io/job-id")
                    phase = pod.status.phase if pod.status else ""
                    running = any(s.state and s.state.running for s in (pod.status.containerStatuses or ())) \
                        if pod.status else False
                    if (running or phase in ("Running", "Succeeded", "Failed")) and "pod_running" not in entry:
                        entry["pod_running"] = now
                        entry["running_missed"] = phase != "Running" and not running
                    if phase in ("Succeeded", "Failed") and "ended" not in entry:
                        entry["ended"], entry["phase"] = now, phase
                    self.changed.notify_all()
        except Exception:  # noqa: BLE001 (the plane stopped: the watch ends)
            pass

    def wait(self, what: str, probe, timeout: float):
        deadline = time.monotonic() + timeout
        with self.changed:
            while True:
                answer = probe()
                if answer:
                    return answer
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{what}: not within {timeout:g} s")
                self.changed.wait(min(left, 1.0))

    def of_job(self, job_id: str) -> list[dict]:
        with self.changed:
            return [dict(e) for e in self.seen.values() if e.get("job_id") == job_id]

    def stop(self) -> None:
        self.stopped = True


# ------------------------------------------------------------------------------------------------ the runs
def stamps(text: str) -> dict[str, float]:
    found: dict[str, float] = {}
    for what, when in STAMP.findall(text):
        found.setdefault(what, float(when))
    return found


def segments(moments: dict[str, float]) -> dict[str, float]:
    """Seconds from each known moment to the next known one, named by the later."""
    known = [(key, label) for key, label in MOMENTS if moments.get(key)]
    return {label: round(moments[key] - moments[before], 3) for (before, _), (key, label) in zip(known, known[1:])}

def tfdist_run(deployed, watch: PodWatch, config: str, slots: int) -> dict:
    from tests.kubernetes.cluster_helpers import wait_for

    start = time.time()
    began = time.monotonic()
    proc = deployed.start("launch", "--config", config)
    try:
        out, err = proc.communicate(timeout=RUN_TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)
    wall = time.monotonic() - began
    found = stamps(out)
    job_id = re.search(r"job (\S+) submitted", err + out)
    if proc.returncode != 0 or "first_step" not in found or job_id is None:
        raise RuntimeError(f"tfdist launch ({slots} slots) exited {proc.returncode}:\n{out[-3000:]}\n{err[-3000:]}")
    job = deployed.job(job_id.group(1))
    pods = watch.of_job(job_id.group(1))
    moments = {"start": start, "submitted": job["submitted_at"], "workers_started": job["started_at"], **found}
    if len(pods) == 1:  # one pod per node: the real node's
        moments.update({k: pods[0][k] for k in ("pod_created", "pod_running") if k in pods[0]})
    wait_for("the job's objects deleted", lambda: not deployed.objects(), timeout=120, every=0.2)
    return {"first_step_s": found["first_step"] - start, "to_script_s": found["script_start"] - start, "wall_s": wall,
            "segments": segments(moments), "job_id": job_id.group(1), "pods": len(pods), "state": job["state"],
            "running_missed": any(p.get("running_missed") for p in pods)}


def by_hand_pod(name: str, image: str) -> dict:
    from tests.kubernetes.real_node import LABEL, TOLERATION

    restricted = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": True,
                  "seccompProfile": {"type": "RuntimeDefault"}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": BY_HAND_NS},
            "spec": {"restartPolicy": "Never", "automountServiceAccountToken": False, "nodeSelector": LABEL,
                     "tolerations": [TOLERATION], "terminationGracePeriodSeconds": 5,
                     "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000,
                                         "fsGroup": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
                     "containers": [{"name": "main", "image": image, "imagePullPolicy": "Never",
                                     "workingDir": "/workspace", "command": ["python", SCRIPT],
                                     "securityContext": restricted}]}}


def by_hand_run(admin, watch: PodWatch, image: str) -> dict:
    from lightkube import codecs
    from lightkube.resources.core_v1 import Pod

    name = f"first-step-{uuid.uuid4().hex[:8]}"
    obj = codecs.from_dict(by_hand_pod(name, image))
    start = time.time()
    began = time.monotonic()
    admin.create(obj)
    try:
        entry = watch.wait(f"pod {name} finished", lambda: "ended" in watch.seen.get((BY_HAND_NS, name), {}) and
                           dict(watch.seen[(BY_HAND_NS, name)]), RUN_TIMEOUT)
        wall = time.monotonic() - began
        log = "".join(admin.log(name, namespace=BY_HAND_NS))
    finally:
        admin.delete(Pod, name, namespace=BY_HAND_NS, grace_period=0)
    found = stamps(log)
    if entry["phase"] != "Succeeded" or "first_step" not in found:
        raise RuntimeError(f"the plain pod {name} ended {entry['phase']}:\n{log[-3000:]}")
    moments = {"start": start, "pod_created": entry["pod_created"], "pod_running": entry["pod_running"], **found}
    watch.wait(f"pod {name} gone", lambda: not [p for p in admin.list(Pod, namespace=BY_HAND_NS)], 120)
    return {"first_step_s": found["first_step"] - start, "to_script_s": found["script_start"] - start, "wall_s": wall,
            "segments": segments(moments), "running_missed": entry.get("running_missed", False)}


def by_hand_namespace(admin) -> None:
    """A namespace PodSecurity holds to "restricted", as tfdist's, with its default ServiceAccount made."""
    from lightkube import codecs
    from lightkube.resources.core_v1 import ServiceAccount

    from tests.kubernetes.cluster_helpers import gone, wait_for

    admin.create(codecs.from_dict({"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": BY_HAND_NS, "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}))
    wait_for(f"the default ServiceAccount of {BY_HAND_NS}",
             lambda: not gone(admin, ServiceAccount, "default", BY_HAND_NS), timeout=60)


def remove_by_hand_namespace(admin) -> None:
    from lightkube import ApiError
    from lightkube.resources.core_v1 import Namespace, Pod

    from tests.kubernetes.cluster_helpers import wait_for

    try:
        admin.deletecollection(Pod, namespace=BY_HAND_NS)
        admin.delete(Namespace, BY_HAND_NS)
    except ApiError as e:
        if e.status.code != 404:
            raise
    wait_for(f"the pods of {BY_HAND_NS} gone", lambda: not list(admin.list(Pod, namespace=BY_HAND_NS)),
             timeout=120, every=0.5)


# ------------------------------------------------------------------------------------------------ summary
def row(name: str, samples: list[dict], base: dict | None) -> dict:
    """`base`: the plain pod's row (None: this is it)."""
    firsts, walls = [s["first_step_s"] for s in samples], [s["wall_s"] for s in samples]
    med, to_script = statistics.median(firsts), statistics.median(s["to_script_s"] for s in samples)
    names = [label for _, label in MOMENTS if any(label in s["segments"] for s in samples)]
    return {"way": name, "runs": len(samples), "median_first_step_s": round(med, 3),
            "min_first_step_s": round(min(firsts), 3), "max_first_step_s": round(max(firsts), 3),
            "over_by_hand_s": round(med - base["median_first_step_s"], 3) if base is not None else None,
            "median_to_script_s": round(to_script, 3),
            "to_script_over_by_hand_s": round(to_script - base["median_to_script_s"], 3) if base is not None else None,
            "median_wall_s": round(statistics.median(walls), 3),
            "median_segments_s": {n: round(statistics.median(s["segments"][n] for s in samples
                                                             if n in s["segments"]), 3) for n in names},
            "samples": samples}


def print_tables(rows: list[dict], image: dict, timings: dict) -> None:
    print("\n| way | to first step (s), median [min-max] | over by hand | to script start (s) | over by hand |"
          " to the end (s) |")
    print("|---|---:|---:|---:|---:|---:|")
    sign = lambda x: "" if x is None else f"{x:+.2f}"  # noqa: E731
    for r in rows:
        print(f"| {r['way']} | {r['median_first_step_s']:.2f} [{r['min_first_step_s']:.2f}-{r['max_first_step_s']:.2f}]"
              f" | {sign(r['over_by_hand_s'])} | {r['median_to_script_s']:.2f} | {sign(r['to_script_over_by_hand_s'])}"
              f" | {r['median_wall_s']:.2f} |")
    print("\nwhere the time went (medians, s; each from the moment before it on that path):\n")
    print("| to | " + " | ".join(r["way"] for r in rows) + " |")
    print("|---|" + "---:|" * len(rows))
    for _, name in MOMENTS[1:]:
        cells = [f"{r['median_segments_s'][name]:.2f}" if name in r["median_segments_s"] else "" for r in rows]
        if any(cells):
            print(f"| {name} | " + " | ".join(cells) + " |")
    mb = lambda n: f"{n / 1e6:.0f} MB"  # noqa: E731
    print(f"\nimage ({image['digest'][:19]}): {mb(image['archive_bytes'])} archive ({len(image['layers'])} gzip "
          f"layers), {mb(image['unpacked'])} unpacked; `tfdist kubernetes image` cached: median "
          f"{statistics.median(image['cached_s']):.2f} s; first call {image['first_call_s']:.1f} s")
    if "seconds" in image.get("cold", {}):
        print(f"cold build (empty --cache-dir): {image['cold']['seconds']:.0f} s, same digest: "
              f"{image['cold']['same_digest']}")
    print(f"containerd import (`--load-into`'s ctr import, a fresh containerd): {timings.get('import_worker_s')} s; "
          f"the e2e image on top of it: {timings.get('import_e2e_s')} s")


# ------------------------------------------------------------------------------------------------ main
def wait_for_node_lock(limit: float) -> None:
    """Until no other session's real node holds the machine (RealNode.start() takes the lock itself)."""
    from tests.kubernetes.real_node import LOCK_FILE

    fd = os.open(LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    deadline, told = time.monotonic() + limit, False
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(fd, fcntl.LOCK_UN)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"another real node held {LOCK_FILE} for {limit:g} s")
                if not told:
                    print("another session's real node holds the machine: waiting", file=sys.stderr)
                    told = True
                time.sleep(5)
    finally:
        os.close(fd)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1, help="rounds first, not counted")
    parser.add_argument("--slots", type=int, default=2, help="the larger job's slots (the real node has 2)")
    parser.add_argument("--cold", action="store_true", help="also build the image from an empty cache (minutes)")
    parser.add_argument("--lock-wait", type=float, default=3600, help="seconds to wait for another real node")
    parser.add_argument("--json", default=os.path.join(HERE, "results", "kubernetes_first_step.json"))
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("the real node runs as root", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _on_term)

    from lightkube import Client, KubeConfig

    from tests.conftest import MARKER_VAR, processes_with_marker
    from tests.kubernetes import tfdist_on_node as on_node
    from tests.kubernetes.control_plane import ControlPlane, bin_dir
    from tests.kubernetes.real_node import SOCKET, RealNode

    timings: dict = {}
    print("the image: tfdist kubernetes image, cached and (--cold) from an empty cache", file=sys.stderr)
    image = image_measures(args.runs, args.cold)
    began = time.monotonic()
    e2e = on_node.image_archive()
    timings["e2e_image_build_s"] = round(time.monotonic() - began, 2)

    wait_for_node_lock(args.lock_wait)
    root = tempfile.mkdtemp(prefix="tfdist-bench-first-step-")
    marker = uuid.uuid4().hex
    plane = ControlPlane(bin_dir(), os.path.join(root, "plane"), env={MARKER_VAR: marker})
    node = deployed = watch = admin = None
    namespace_made = False
    ways: dict[str, list[dict]] = {}
    problems: list[str] = []
    try:
        began = time.monotonic()
        plane.start()
        timings["plane_start_s"] = round(time.monotonic() - began, 2)
        admin = Client(KubeConfig.from_file(plane.admin()), field_manager="tfdist-bench")
        node = RealNode(plane, os.path.join(root, "node"), persistent_images=False)  # cold imports
        node.start()
        watch = PodWatch(plane.admin())

        from cluster.client.image.command import ctr_import_argv

        began = time.monotonic()  # what `tfdist kubernetes image --load-into SOCKET` runs
        done = subprocess.run(ctr_import_argv(image["archive"], SOCKET), capture_output=True, text=True,
                              timeout=900, stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            raise RuntimeError(f"ctr import: {done.stderr[-2000:]}")
        timings["import_worker_s"] = round(time.monotonic() - began, 2)
        began = time.monotonic()
        on_node.load(node, e2e)
        timings["import_e2e_s"] = round(time.monotonic() - began, 2)

        began = time.monotonic()
        deployed = on_node.Deployed(admin, plane, node)
        deployed.up(os.path.join(root, "volumes"))
        timings["coordinator_deployed_s"] = round(time.monotonic() - began, 2)
        forwarded = getattr(deployed, "forward", None) is not None  # as tests/kubernetes/tfdist_on_node.py reaches it
        timings["coordinator_reached_through"] = "kubectl port-forward" if forwarded else f"{deployed.address}:7470"
        by_hand_namespace(admin)
        namespace_made = True

        configs = {n: deployed.config(f"first-step-{n}.yaml", JOB.format(slots=n, script=SCRIPT))
                   for n in sorted({1, args.slots})}
        variants = {BY_HAND: ("hand", 0), **{f"tfdist launch, {n} slot{'s' if n > 1 else ''}": ("tfdist", n)
                                             for n in configs}}

        def once(variant: tuple[str, int]) -> dict:
            kind, slots = variant
            if kind == "hand":
                return by_hand_run(admin, watch, on_node.IMAGE)
            return tfdist_run(deployed, watch, configs[slots], slots)

        warm = alternate(variants, args.warmup, once) if args.warmup else {}
        ways = alternate(variants, args.runs, once)
    except (KeyboardInterrupt, Interrupted) as e:
        problems.append(f"interrupted ({e or 'Ctrl-C'})")
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the teardown runs to its end
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for what, step in (("the plain pods' namespace", lambda: namespace_made and remove_by_hand_namespace(admin)),
                           ("tfdist's objects", lambda: deployed and deployed.down()),
                           ("the pod watch", lambda: watch and watch.stop()),
                           ("the real node", lambda: node and node.stop()),
                           ("the control plane", plane.stop)):
            try:
                step()
            except Exception as e:  # noqa: BLE001 (each part is stopped whatever the others did)
                problems.append(f"stopping {what}: {e}")
        left = node.leftovers() if node is not None else []
        if left:
            problems.append(f"the real node left {left}")
        if pids := processes_with_marker(marker):
            problems.append(f"control plane processes left: {pids}")
        if node is not None:
            timings["node"] = {k: round(v, 2) for k, v in node.timings.items()}
        shutil.rmtree(root, ignore_errors=True)
    if problems or not ways:
        print("\n".join(problems) or "no runs", file=sys.stderr)
        return 1

    base = row(BY_HAND, ways[BY_HAND], None)
    rows = [base, *(row(name, samples, base) for name, samples in ways.items() if name != BY_HAND)]
    print_tables(rows, image, timings)
    save_json(args.json, {
        "benchmark": "kubernetes_first_step", "date": time.strftime("%Y-%m-%d"), "runs": args.runs,
        "warmup": args.warmup, "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                           "kernel": platform.release()},
        "image": {k: v for k, v in image.items() if k != "archive"}, "timings": timings, "results": rows,
        "warmup_samples": warm, "leftovers": []})
    return 0


if __name__ == "__main__":
    sys.exit(main())
