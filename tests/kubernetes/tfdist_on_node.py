"""tfdist on the real node, set up as docs/kubernetes.md tells a platform engineer to: the image built by
`tfdist kubernetes image` and loaded into the node's containerd (a registry's part), a StorageClass whose
volumes' roots are root's (as a block volume's are), `tfdist kubernetes manifests | kubectl apply -f -`
unchanged, the coordinator reached through `kubectl port-forward`, the admin credential read from the Secret
tfdist-admin with kubectl, and a user's credential issued with it over the coordinator's API (no exec). Jobs are then launched with `tfdist launch` from a directory no pod has."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile

from lightkube import codecs
from lightkube.resources.core_v1 import Node, PersistentVolume, PersistentVolumeClaim, Pod
from lightkube.resources.storage_v1 import StorageClass

from cluster.engines.kubernetes.rbac import COORDINATOR as COORDINATOR_CLAIM  # the manifests' state claim
from tests.conftest import JAX_SITE, REPO
from tests.kubernetes.cluster_helpers import wait_for

NS = "tfdist-real"
STORAGE_CLASS = "tfdist-test-local"  # volumes on the real node whose roots are root's, as a block volume's are
IMAGE = "localhost/tfdist:e2e"  # the worker image and the suite's job scripts (under /workspace/workers)
WORKERS = "/workspace/workers"
IMAGE_JAX_SITE = "/opt/jax-site"
CLI = [sys.executable, "-m", "cluster.client.cli"]


def image_archive() -> tuple[str, str]:
    """The worker image with the suite's job scripts (at /workspace/workers) and JAX (the suite's jax-site, at
    /opt/jax-site: the jax mode's job puts it on its PYTHONPATH) added, built by `tfdist kubernetes image` into
    its cache (a second build with the same inputs does nothing): (archive, digest)."""
    from cluster.client.image import build

    archive = os.path.join(build.default_cache(), "tfdist-e2e.tar")
    built = subprocess.run([*CLI, "kubernetes", "image", "--add", f"{REPO}/tests/integration/workers:{WORKERS}",
                            "--add", f"{JAX_SITE}:{IMAGE_JAX_SITE}", "--tag", "e2e",
                            "--output", f"oci-archive:{archive}"], cwd=REPO, capture_output=True, text=True,
                           timeout=1500)
    digest = re.search(r"@(sha256:[0-9a-f]{64})", built.stdout)
    if built.returncode != 0 or digest is None:
        raise RuntimeError(f"tfdist kubernetes image failed: {built.stdout[-2000:]}{built.stderr[-3000:]}")
    return archive, digest.group(1)


def load(real_node, built: tuple[str, str]) -> str:
    """The image in the node's containerd as IMAGE: imported unless the node's image cache has that very
    image (an older build under the name is replaced)."""
    from cluster.client.image.command import ctr_import_argv
    from tests.kubernetes.real_node import SOCKET

    archive, digest = built
    listed = subprocess.run(real_node._ctr("images", "ls"), capture_output=True, text=True, timeout=60).stdout
    have = {line.split()[0]: line.split()[2] for line in listed.splitlines()[1:] if len(line.split()) > 2}
    if have.get(IMAGE) != digest:
        real_node.remove_image(IMAGE)
        done = subprocess.run(ctr_import_argv(archive, SOCKET), capture_output=True, text=True, timeout=900)
        assert done.returncode == 0 and real_node.has_image(IMAGE), done.stdout + done.stderr
    return IMAGE


class LocalVolumes:
    """A StorageClass with no provisioner and `local` PersistentVolumes on the real node, each a fresh folder
    root:root 0755 (a new filesystem's root): the kubelet's fsGroup pass then makes it root:GROUP 2775. Each is
    bound ahead to the claim it is for (claimRef): two volumes of one class and size would otherwise bind to
    either claim (the coordinator's state was once bound to the checkpoints' folder)."""

    def __init__(self, admin, node: str, root: str):
        self.admin, self.node, self.root, self.names = admin, node, root, []
        self.claims: dict[str, str] = {}  # volume -> the claim it is bound to ahead
        admin.create(codecs.from_dict({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                                       "metadata": {"name": STORAGE_CLASS}, "provisioner": "kubernetes.io/no-provisioner",
                                       "volumeBindingMode": "WaitForFirstConsumer", "reclaimPolicy": "Retain"}))

    def add(self, name: str, claim: str, size: str = "5Gi") -> str:
        path = os.path.join(self.root, name)
        os.makedirs(path, mode=0o755)
        os.chmod(path, 0o755)
        self.admin.create(codecs.from_dict({
            "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"{NS}-{name}"},
            "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"],
                     "persistentVolumeReclaimPolicy": "Retain", "storageClassName": STORAGE_CLASS,
                     "local": {"path": path}, "claimRef": {"namespace": NS, "name": claim},
                     "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                         {"key": "kubernetes.io/hostname", "operator": "In", "values": [self.node]}]}]}}}}))
        self.names.append(f"{NS}-{name}")
        self.claims[f"{NS}-{name}"] = claim
        return path

    def check_bound(self) -> None:
        """Each claim bound to its own volume (what the tests read on the node is what the pods wrote)."""
        def bound() -> bool:
            volumes = {v.metadata.name: v for v in self.admin.list(PersistentVolume) if v.metadata.name in self.names}
            refs = {n: v.spec.claimRef for n, v in volumes.items()}
            if any(v.status is None or v.status.phase != "Bound" for v in volumes.values()):
                return False
            for name, claim in self.claims.items():
                got = self.admin.get(PersistentVolumeClaim, claim, namespace=NS).spec.volumeName
                assert got == name, f"claim {claim} bound to {got}, not to {name} ({refs})"
            return True
        wait_for("the test's PersistentVolumes bound to their claims", bound, timeout=120, every=0.5)

    def remove(self) -> None:
        for name in self.names:
            self.admin.delete(PersistentVolume, name)
        self.admin.delete(StorageClass, STORAGE_CLASS)
        wait_for("the test's PersistentVolumes gone", lambda: not [
            v for v in self.admin.list(PersistentVolume) if v.metadata.name in self.names], timeout=60)


class Kubectl:
    """The real kubectl of the plane's release, as the admin."""

    def __init__(self, plane):
        self.binary = os.path.join(plane.binaries, "kubectl")
        self.kubeconfig = plane.admin()

    def argv(self, *args: str) -> list[str]:
        return [self.binary, "--kubeconfig", self.kubeconfig, *args]

    def __call__(self, *args: str, stdin: str | None = None, timeout: float = 120) -> str:
        done = subprocess.run(self.argv(*args), input=stdin, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {done.stderr.strip()[-2000:]}")
        return done.stdout


class Deployed:
    """The coordinator running as a pod from the shipped manifests, and a user who reaches it."""

    def __init__(self, admin, plane, real_node):
        self.admin, self.plane, self.node = admin, plane, real_node
        self.kubectl = Kubectl(plane)
        self.home = tempfile.mkdtemp(prefix="tfdist-real-user-")  # the user's HOME and launch directory
        self.credential = os.path.join(self.home, "alice.json")
        self.admin_credential = os.path.join(self.home, "admin.json")
        self.address, self.port = "127.0.0.1", 0
        self.forward: subprocess.Popen | None = None
        self.volumes: LocalVolumes | None = None

    # ------------------------------------------------------------------ set up as the docs say
    def up(self, volume_root: str) -> "Deployed":
        self.admin.patch(Node, self.node.name, {"spec": {"taints": []}})  # the coordinator's pod needs no toleration
        self.volumes = LocalVolumes(self.admin, self.node.name, volume_root)
        self.state_volume = self.volumes.add("coordinator-state", claim=COORDINATOR_CLAIM)
        self.checkpoints = self.volumes.add("checkpoints", claim="checkpoints")
        manifests = subprocess.run([*CLI, "kubernetes", "manifests", "--namespace", NS, "--image", IMAGE,
                                    "--storage", "1Gi", "--storage-class", STORAGE_CLASS],
                                   capture_output=True, text=True, timeout=60, cwd=REPO)
        assert manifests.returncode == 0, manifests.stderr
        self.kubectl("apply", "-f", "-", stdin=manifests.stdout)
        self.pod = wait_for("the coordinator's pod Ready", self._coordinator_ready, timeout=240, every=0.5)
        self.kubectl("-n", NS, "apply", "-f", "-", stdin=json.dumps({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "checkpoints"},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": STORAGE_CLASS,
                     "resources": {"requests": {"storage": "1Gi"}}}}))
        self.volumes.check_bound()
        self._admin_credential()
        self._reach()
        self._credential()
        return self

    def _coordinator_ready(self):
        for pod in self.admin.list(Pod, namespace=NS, labels={"app.kubernetes.io/name": "tfdist-coordinator"}):
            ready = [c for c in (pod.status.conditions or ()) if c.type == "Ready" and c.status == "True"]
            if ready:
                return pod.metadata.name
            waiting = [s.state.waiting for s in pod.status.containerStatuses or () if s.state and s.state.waiting]
            if waiting and waiting[0].reason == "CrashLoopBackOff":
                raise AssertionError(f"the coordinator crash-loops: {self.kubectl('-n', NS, 'logs', pod.metadata.name, '--previous')[-3000:]}")
        return None

    def _admin_credential(self) -> None:
        """docs/kubernetes.md step 4, as a namespace's administrator: the admin credential the coordinator keeps
        in the Secret tfdist-admin, read with kubectl (no exec into its pod: the shipped RBAC has none)."""
        encoded = wait_for("the coordinator's admin credential in Secret tfdist-admin", lambda: self.kubectl(
            "-n", NS, "get", "secret", "tfdist-admin", "--ignore-not-found", "-o", "jsonpath={.data.credential\\.json}"),
            timeout=120, every=0.5)
        with open(os.open(self.admin_credential, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
            f.write(base64.b64decode(encoded).decode())

    def _credential(self) -> None:
        """docs/kubernetes.md step 4: alice's credential issued over the coordinator's API."""
        done = subprocess.run([*CLI, "credentials", "--user", "alice", "-o", self.credential, "--credentials",
                               self.admin_credential, "--coordinator", f"{self.address}:{self.port}"], cwd=self.home,
                              env=self.env(), capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr

    def _reach(self) -> None:
        """docs/kubernetes.md step 4, as from a laptop: `kubectl port-forward svc/tfdist-coordinator` (through
        the apiserver, the kubelet and containerd's streaming), the port-forwarded address the coordinator
        answers at."""
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.forward = subprocess.Popen(self.kubectl.argv("-n", NS, "port-forward", "svc/tfdist-coordinator",
                                                          f"{self.port}:7470"),
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        wait_for("the coordinator answering through kubectl port-forward", self._answers, timeout=60, every=0.5)

    def _answers(self) -> bool:
        if self.forward is not None and self.forward.poll() is not None:
            raise AssertionError(f"kubectl port-forward ended: {self.forward.stdout.read()[-2000:]}")
        return subprocess.run([*CLI, "agents", "--credentials", self.admin_credential, "--coordinator",
                               f"{self.address}:{self.port}"], cwd=self.home, env=self.env(), capture_output=True,
                              text=True, timeout=60).returncode == 0

    # ------------------------------------------------------------------ what the user does
    def env(self) -> dict:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TFDIST_")}
        env.update(HOME=self.home, PYTHONPATH=REPO)
        return env

    def cli(self, *args: str, timeout: float = 600, command: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
        """`tfdist ARGS --credentials alice.json --coordinator 127.0.0.1:PORT [-- COMMAND]`, run in the user's
        own directory (which no pod has)."""
        return subprocess.run([*CLI, *args, "--credentials", self.credential, "--coordinator",
                               f"{self.address}:{self.port}", *(("--", *command) if command else ())], cwd=self.home,
                              env=self.env(), capture_output=True, text=True, timeout=timeout)

    def start(self, *args: str) -> subprocess.Popen:
        return subprocess.Popen([*CLI, *args, "--credentials", self.credential, "--coordinator",
                                 f"{self.address}:{self.port}"], cwd=self.home, env=self.env(), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    def job(self, job_id: str) -> dict:
        shown = self.cli("job", job_id, "--json", timeout=60)
        assert shown.returncode == 0, shown.stderr
        return json.loads(shown.stdout)

    def job_pods(self) -> dict[str, str]:
        return {p.metadata.name: p.status.phase or "" for p in self.admin.list(Pod, namespace=NS)
                if (p.metadata.labels or {}).get("tfdist.io/job")}

    def idle(self) -> None:
        """Waits until the node is offered free again and no job's object is left (a test after a failed one
        starts from a clean cluster, not from a node still held by the last job's terminating pod)."""
        wait_for("the node offered free, no job's object left", ThroughTheCli(self).free, timeout=120, every=1.0)

    def objects(self) -> list[str]:
        """What tfdist made for jobs in its namespace (pods, Services, budgets, NetworkPolicies, Secrets)."""
        from lightkube.resources.core_v1 import Secret, Service
        from lightkube.resources.networking_v1 import NetworkPolicy
        from lightkube.resources.policy_v1 import PodDisruptionBudget

        return [f"{r.__name__}/{o.metadata.name}" for r in (Pod, Service, PodDisruptionBudget, NetworkPolicy, Secret)
                for o in self.admin.list(r, namespace=NS) if (o.metadata.labels or {}).get("tfdist.io/job")]

    def kill_container_pid1(self, job_id: str) -> None:
        """SIGKILL to the PID 1 of the job's running pod's container (the pod's agent), through containerd."""
        pod = next(p for p in self.admin.list(Pod, namespace=NS)
                   if (p.metadata.annotations or {}).get("tfdist.io/job-id") == job_id and p.status.phase == "Running")
        container = pod.status.containerStatuses[0].containerID.split("://", 1)[1]
        done = subprocess.run(self.node._ctr("tasks", "kill", "--signal", "SIGKILL", container), capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, done.stderr

    def job_dir(self, name: str) -> str:
        """A folder of the job's volume for a job's own files (its OUT), the pods' user's (1000)."""
        path = os.path.join(self.checkpoints, name)
        os.makedirs(path, exist_ok=True)
        os.chown(path, 1000, 1000)
        return path

    def config(self, name: str, text: str) -> str:
        path = os.path.join(self.home, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    # ------------------------------------------------------------------ tear down
    def down(self) -> None:
        if self.forward is not None and self.forward.poll() is None:
            self.forward.terminate()
            self.forward.wait(timeout=30)
        try:
            manifests = subprocess.run([*CLI, "kubernetes", "manifests", "--namespace", NS, "--image", IMAGE],
                                       capture_output=True, text=True, timeout=60, cwd=REPO).stdout
            self.kubectl("delete", "--wait=true", "--ignore-not-found", "-f", "-", stdin=manifests, timeout=180)
            wait_for(f"namespace {NS}'s pods gone", lambda: not list(self.admin.list(Pod, namespace=NS)),
                     timeout=120, every=0.5)
        finally:
            if self.volumes is not None:
                self.volumes.remove()
            shutil.rmtree(self.home, ignore_errors=True)


class ThroughTheCli:
    """The contract suite's driver (tests/engines/scenarios.py) as a user drives the shipped coordinator: each
    job submitted with `tfdist launch --detach` from a directory no pod has, read with `tfdist job --json` and
    `tfdist logs`, canceled with `tfdist cancel`; the node is free when it is offered free again and none of
    tfdist's objects is left in the namespace. Its workers run in real containers on the real node."""

    patience = 300.0  # a pod's start on a loaded 2-core machine (the image is in the node's containerd already)

    def __init__(self, deployed: Deployed):
        self.deployed = deployed

    def submit(self, script: str) -> str:
        done = self.deployed.cli("launch", "--detach", "--slots", "2", command=("python", "-c", script), timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout.strip()

    def state(self, job_id: str) -> str:
        return self.deployed.job(job_id)["state"]

    def outcome(self, job_id: str) -> str:
        shown = self.deployed.job(job_id)
        return f"{shown['state']}: {shown['outcome']}"

    def lines(self, job_id: str) -> list[str]:
        logs = self.deployed.cli("logs", job_id, timeout=60).stdout
        return sorted(m.group(1) for m in re.finditer(r"^\[rank=\d+\] (.*)$", logs, re.M)
                      if not m.group(1).startswith("tfdist"))

    def exits(self, job_id: str) -> list[tuple[int, int]]:
        return sorted((e["rank"], e["exit_code"]) for e in self.deployed.job(job_id)["exits"])

    def placed(self, job_id: str) -> bool:
        shown = self.deployed.job(job_id)
        return shown["state"] in ("STARTING", "RUNNING") and bool(shown["placement"])

    def cancel(self, job_id: str) -> str:
        done = self.deployed.cli("cancel", job_id, timeout=60)
        assert done.returncode == 0, done.stderr
        return self.state(job_id)

    def free(self) -> bool:
        shown = self.deployed.cli("agents", "--json", timeout=60)
        agents = json.loads(shown.stdout)["agents"] if shown.returncode == 0 else []
        return not self.deployed.objects() and any(a["name"] == self.deployed.node.name and a["state"] == "ALIVE" and
                                                   a["free_slots"] == a["slots"] for a in agents)


def steps_by_attempt(out: str) -> dict[int, list[int]]:
    """The steps the resumable job's runs trained (the chief's "attempt step" lines in OUT/steps.txt, on the
    job's volume, which is a folder of this machine)."""
    runs: dict[int, list[int]] = {}
    try:
        with open(os.path.join(out, "steps.txt")) as f:
            for line in f:
                if line.strip():
                    attempt, step = map(int, line.split())
                    runs.setdefault(attempt, []).append(step)
    except FileNotFoundError:
        pass
    return runs


def trained(out: str, attempt: int) -> int:
    return max(steps_by_attempt(out).get(attempt, [0]))
