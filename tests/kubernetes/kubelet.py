"""A kubelet for tests against the real control plane: it registers a Node with the allocatable it is given,
keeps its Lease and Ready condition fresh, and runs each pod bound to it as processes, the way a real
kubelet runs containers, minus the images: the worker container's command and args with the pod's
environment (values, the pod's own fields, Secret keys), its Secret volumes at their mountPaths and its
hostname (in mount and UTS namespaces of its own: tests/kubernetes/pod_exec.py), and the names of its
headless Service resolvable (a hosts file bound over /etc/hosts). With a `PodNetwork` each pod also gets a
network namespace and an address on one bridge, so a gang's pods use the same ports as real pods would.
The pod's status follows its process: Running with its IP, then Succeeded or Failed with the exit code;
a deleted pod's process gets SIGTERM, SIGKILL after the grace, and the pod is then removed.

Pods are found by listing (every POLL seconds), not watching: level-triggered and stoppable at once. Runs
as root (namespaces). Every process is in its own process group and stopped by `stop()`.
"""

from __future__ import annotations

import datetime
import itertools
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from lightkube import ApiError, Client
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Node, NodeStatus, Pod, PodStatus, Secret
from lightkube.types import PatchType

from tests import volume_layout

POD_EXEC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pod_exec.py")
POLL = 0.2
RENEW_EVERY = 5.0  # seconds between Lease renewals (the node lifecycle controller's grace is 40 s)
LABEL = {"type": "test-kubelet"}
_ids = itertools.count(1)


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


class Hosts:
    """A hosts file naming pods by their Service's DNS names, rewritten in place (pods have this very file,
    this inode, bound over /etc/hosts, so a peer named later is seen at once)."""

    def __init__(self, path: str):
        self.path = path
        self._names: dict[str, str] = {}
        self._lock = threading.Lock()
        self._write()

    def name(self, names: list[str], address: str) -> None:
        with self._lock:
            self._names.update({n: address for n in names})
            self._write()

    def _write(self) -> None:
        lines = ["127.0.0.1 localhost", "::1 localhost ip6-localhost"]
        lines += [f"{address} {name}" for name, address in sorted(self._names.items())]
        with open(self.path, "a+") as f:
            f.seek(0)
            f.truncate()
            f.write("\n".join(lines) + "\n")


class PodNetwork:
    """A bridge in a hub network namespace; each pod a namespace on it with the next address of SUBNET.0/24
    (.1 is left for a coordinator on the bridge); one hosts file every pod of the network sees."""

    SUBNET = "198.19.0"

    def __init__(self, root: str, subnet: str = SUBNET):
        self.subnet = subnet  # a /24 of its own per network that joins the host (join_host)
        self.tag = f"tk{os.getpid() % 10000}x{next(_ids)}"
        self.hub = f"{self.tag}h"
        self.namespaces: list[str] = []
        self._next = itertools.count(2)
        self._lock = threading.Lock()
        self.hosts = Hosts(os.path.join(root, "hosts"))
        _ip("netns", "add", self.hub)
        _ip("-n", self.hub, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.hub, "link", "set", "br0", "up")

    def attach(self, label: str = "") -> tuple[str, str]:
        """A new namespace on the bridge: (its name, its address)."""
        with self._lock:
            n = next(self._next)
        ns = f"{self.tag}{label or 'p'}{n}"
        _ip("netns", "add", ns)
        self.namespaces.append(ns)
        outer = f"{self.tag}v{n}"
        _ip("link", "add", outer, "type", "veth", "peer", "name", "eth0", "netns", ns)
        _ip("link", "set", outer, "netns", self.hub)
        _ip("-n", self.hub, "link", "set", outer, "master", "br0", "up")
        address = f"{self.subnet}.{n}"
        _ip("-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
        _ip("-n", ns, "link", "set", "eth0", "up")
        _ip("-n", ns, "link", "set", "lo", "up")
        return ns, address

    def join_host(self) -> str:
        """This machine's own network namespace on the bridge at SUBNET.1 (where a coordinator listens for the
        pods, and still reaches the API server on loopback); the link goes with the hub."""
        outer, inner = f"{self.tag}c", f"{self.tag}cp"
        _ip("link", "add", outer, "type", "veth", "peer", "name", inner)
        _ip("link", "set", inner, "netns", self.hub)
        _ip("-n", self.hub, "link", "set", inner, "master", "br0", "up")
        address = f"{self.subnet}.1"
        _ip("addr", "add", f"{address}/24", "dev", outer)
        _ip("link", "set", outer, "up")
        self._host_link = outer
        return address

    def remove(self) -> None:
        if getattr(self, "_host_link", None):
            subprocess.run(["ip", "link", "del", self._host_link], capture_output=True, timeout=30)
        for ns in reversed([self.hub, *self.namespaces]):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)


class _Running:
    def __init__(self, proc: subprocess.Popen, started: str, address: str, netns: str | None, grace: float):
        self.proc, self.started, self.address, self.netns, self.grace = proc, started, address, netns, grace
        self.kill_at: float | None = None
        self.name = ""


class TestKubelet:
    __test__ = False  # a helper, not a test class

    def __init__(self, client: Client, name: str, allocatable: dict[str, str], root: str,
                 network: PodNetwork | None = None, env: dict[str, str] | None = None):
        self.client, self.name, self.allocatable, self.network = client, name, dict(allocatable), network
        self.root = os.path.join(root, name)
        os.makedirs(self.root, mode=0o700, exist_ok=True)
        self.hosts = network.hosts if network else Hosts(os.path.join(self.root, "hosts"))
        self._env = {**os.environ, **(env or {})}
        self._running: dict[str, _Running] = {}  # pod uid -> its process
        self._done: set[str] = set()  # uids whose process ended (never started again: restartPolicy Never)
        self._made_dirs: list[str] = []
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.errors: list[str] = []

    # ---------------------------------------------------------------- the node
    def start(self) -> "TestKubelet":
        warm_up(self.client)
        self.client.create(Node(metadata=ObjectMeta(name=self.name, labels={**LABEL, "kubernetes.io/hostname": self.name})))
        self._node_status()
        self.client.create(Lease(metadata=ObjectMeta(name=self.name, namespace="kube-node-lease"),
                                 spec=LeaseSpec(holderIdentity=self.name, leaseDurationSeconds=40,
                                                renewTime=datetime.datetime.now(datetime.timezone.utc))))
        for target in (self._renew, self._pods):
            thread = threading.Thread(target=target, name=f"kubelet-{self.name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def _node_status(self) -> None:
        now = _now()
        status = {"capacity": self.allocatable, "allocatable": self.allocatable,
                  "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                  "message": "test kubelet", "lastHeartbeatTime": now, "lastTransitionTime": now}],
                  "addresses": [{"type": "Hostname", "address": self.name}],
                  "nodeInfo": {"kubeletVersion": "test", "containerRuntimeVersion": "processes", "architecture": "amd64",
                               "operatingSystem": "linux", "osImage": "", "kernelVersion": "", "kubeProxyVersion": "",
                               "machineID": "", "systemUUID": "", "bootID": ""}}
        self.client.patch(NodeStatus, self.name, {"status": status}, patch_type=PatchType.MERGE)

    def _renew(self) -> None:
        while not self._stop.wait(RENEW_EVERY):
            try:
                self.client.patch(Lease, self.name, {"spec": {"renewTime": datetime.datetime.now(
                    datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")}}, namespace="kube-node-lease",
                    patch_type=PatchType.MERGE)
                self._node_status()
            except Exception as e:  # noqa: BLE001 - said, and the next round tries again
                self.errors.append(f"renew: {e}")

    # ---------------------------------------------------------------- its pods
    def _pods(self) -> None:
        while not self._stop.is_set():
            try:
                self._round()
            except Exception as e:  # noqa: BLE001 - a test reads kubelet.errors
                self.errors.append(f"pods: {e!r}")
            self._stop.wait(POLL)

    def _round(self) -> None:
        pods = {p.metadata.uid: p for p in self.client.list(Pod, namespace="*", fields={"spec.nodeName": self.name})}
        for uid, running in list(self._running.items()):
            pod = pods.get(uid)
            if pod is None or pod.metadata.deletionTimestamp is not None:
                self._stopping(running)
            code = running.proc.poll()
            if code is not None:
                del self._running[uid]
                self._done.add(uid)
                if pod is not None and pod.metadata.deletionTimestamp is None:
                    self._terminated(pod, running, code)
                self._forget(running)
            elif running.kill_at is not None and time.monotonic() > running.kill_at:
                self._signal(running, signal.SIGKILL)
        for uid, pod in pods.items():
            if pod.metadata.deletionTimestamp is not None and uid not in self._running:
                self._remove(pod)
            elif uid not in self._running and uid not in self._done and (pod.status.phase or "Pending") == "Pending":
                self._run(pod)

    def _run(self, pod: Pod) -> None:
        spec, meta = pod.spec, pod.metadata
        container = spec.containers[0]
        command = [*(container.command or ()), *(container.args or ())]
        netns, address = (self.network.attach() if self.network else (None, "127.0.0.1"))
        names = [spec.hostname or meta.name]
        if spec.hostname and spec.subdomain:
            base = f"{spec.hostname}.{spec.subdomain}.{meta.namespace}.svc"
            names += [base, f"{base}.cluster.local"]
        self.hosts.name(names, address)
        env = {**self._env, "HOSTNAME": spec.hostname or meta.name, **self._container_env(pod, container, address)}
        argv = [sys.executable, POD_EXEC, "--hostname", spec.hostname or meta.name, "--hosts", self.hosts.path]
        for mount in container.volumeMounts or ():
            source = self._volume(pod, mount.name)
            if not os.path.exists(mount.mountPath):  # a mount point on the host (empty; removed by stop())
                os.makedirs(mount.mountPath)
                self._made_dirs.append(mount.mountPath)
            argv += ["--bind", f"{source}:{mount.mountPath}"] + (["--read-only", mount.mountPath] if mount.readOnly else [])
        argv += ["--", *command]
        argv = ["unshare", "--mount", "--uts", "--", *argv]
        if netns:
            argv = ["ip", "netns", "exec", netns, *argv]
        log = open(os.path.join(self.root, f"{meta.namespace}_{meta.name}.log"), "ab")
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, cwd=container.workingDir or self.root)
        log.close()
        grace = float(spec.terminationGracePeriodSeconds if spec.terminationGracePeriodSeconds is not None else 30)
        self._running[meta.uid] = running = _Running(proc, _now(), address, netns, grace)
        running.name = meta.name
        self._status(pod, {"phase": "Running", "podIP": address, "podIPs": [{"ip": address}], "startTime": running.started,
                           "conditions": [{"type": t, "status": "True", "lastTransitionTime": running.started}
                                          for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")],
                           "containerStatuses": [{"name": container.name, "image": container.image or "", "imageID": "",
                                                  "ready": True, "restartCount": 0,
                                                  "state": {"running": {"startedAt": running.started}}}]})

    def _container_env(self, pod: Pod, container: Any, address: str) -> dict[str, str]:
        env: dict[str, str] = {}
        for item in container.env or ():
            if item.value is not None:
                env[item.name] = item.value
            elif item.valueFrom and item.valueFrom.fieldRef:
                field = item.valueFrom.fieldRef.fieldPath
                env[item.name] = {"metadata.name": pod.metadata.name, "metadata.namespace": pod.metadata.namespace,
                                  "status.podIP": address, "spec.nodeName": self.name}.get(field, "")
            elif item.valueFrom and item.valueFrom.secretKeyRef:
                ref = item.valueFrom.secretKeyRef
                secret = self.client.get(Secret, ref.name, namespace=pod.metadata.namespace)
                env[item.name] = _decoded(secret).get(ref.key, "")
        return env

    def _volume(self, pod: Pod, name: str) -> str:
        """The volume's files in a folder of this kubelet's: a Secret's keys laid out as a real kubelet's atomic
        writer does (`KEY -> ..data/KEY`, `..data -> ..TIMESTAMP/`, the files root's with the volume's mode and
        the pod's fsGroup as their group: tests/volume_layout.py); otherwise empty."""
        folder = os.path.join(self.root, "volumes", pod.metadata.uid, name)
        os.makedirs(folder, mode=0o700, exist_ok=True)
        volume = next(v for v in pod.spec.volumes or () if v.name == name)
        if volume.secret is not None:
            secret = self.client.get(Secret, volume.secret.secretName, namespace=pod.metadata.namespace)
            mode = volume.secret.defaultMode if volume.secret.defaultMode is not None else 0o644
            values = _decoded(secret)
            paths = {item.key: item.path for item in volume.secret.items} if volume.secret.items else \
                {key: key for key in values}  # `items`: only those keys, at their paths (as a kubelet does)
            group = pod.spec.securityContext.fsGroup if pod.spec.securityContext else None
            if group is not None:
                mode |= 0o040  # the kubelet's fsGroup pass: the group may read
            volume_layout.lay_out(folder, {paths[k]: v.encode() for k, v in values.items() if k in paths}, mode,
                                  gid=group)
        return folder

    def _terminated(self, pod: Pod, running: _Running, code: int) -> None:
        finished = _now()
        container = pod.spec.containers[0]
        exit_code = code if code >= 0 else 128 - code
        self._status(pod, {"phase": "Succeeded" if code == 0 else "Failed",
                           "conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": finished}],
                           "containerStatuses": [{"name": container.name, "image": container.image or "", "imageID": "",
                                                  "ready": False, "restartCount": 0, "state": {"terminated": {
                                                      "exitCode": exit_code, "reason": "Completed" if code == 0 else "Error",
                                                      "startedAt": running.started, "finishedAt": finished}}}]})

    def _status(self, pod: Pod, status: dict[str, Any]) -> None:
        try:
            self.client.patch(PodStatus, pod.metadata.name, {"status": status}, namespace=pod.metadata.namespace,
                              patch_type=PatchType.MERGE)
        except ApiError as e:
            if e.status.code != 404:
                raise

    def _stopping(self, running: _Running) -> None:
        if running.kill_at is None:
            running.kill_at = time.monotonic() + running.grace
            self._signal(running, signal.SIGTERM)

    @staticmethod
    def _signal(running: _Running, signum: int) -> None:
        try:
            os.killpg(running.proc.pid, signum)
        except ProcessLookupError:
            pass

    def _remove(self, pod: Pod) -> None:
        try:
            self.client.delete(Pod, pod.metadata.name, namespace=pod.metadata.namespace, grace_period=0)
        except ApiError as e:
            if e.status.code != 404:
                raise

    def _forget(self, running: _Running) -> None:
        if running.netns:
            subprocess.run(["ip", "netns", "del", running.netns], capture_output=True, timeout=30)

    def running_pods(self) -> list[str]:
        return [r.name for r in list(self._running.values())]

    def kill(self, pod_name: str) -> None:
        """SIGKILL to a running pod's processes (its container killed: an OOM kill, a crash of the node's
        runtime); the pod then ends Failed, as a real kubelet reports it."""
        running = next(r for r in list(self._running.values()) if r.name == pod_name)
        self._signal(running, signal.SIGKILL)

    # ---------------------------------------------------------------- the end
    def stop(self) -> None:
        """Every pod's process killed (its group), the threads ended, the node and its Lease removed."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=10)
        for running in self._running.values():
            self._signal(running, signal.SIGKILL)
            running.proc.wait(timeout=10)
            self._forget(running)
        self._running.clear()
        for path in reversed(self._made_dirs):
            try:
                os.rmdir(path)
            except OSError:
                pass
        for resource, namespace in ((Node, None), (Lease, "kube-node-lease")):
            try:
                self.client.delete(resource, self.name, namespace=namespace) if namespace else \
                    self.client.delete(resource, self.name)
            except ApiError:
                pass
        shutil.rmtree(os.path.join(self.root, "volumes"), ignore_errors=True)


def warm_up(client: Client) -> None:
    """Each kind of object this kubelet reads decoded once, in this thread, before its threads start (what the
    Kubernetes engine does too, and why: cluster/engines/kubernetes/api.warm_up)."""
    from cluster.engines.kubernetes.api import warm_up as decode_each_kind_once

    decode_each_kind_once()
    list(client.list(Pod, namespace="*", fields={"spec.nodeName": "warm-up"}))




def _decoded(secret: Secret) -> dict[str, str]:
    import base64

    values = {k: base64.b64decode(v).decode() for k, v in (secret.data or {}).items()}
    values.update(secret.stringData or {})
    return values
