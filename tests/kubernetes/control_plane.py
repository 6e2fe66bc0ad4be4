"""A real Kubernetes control plane for tests: etcd, kube-apiserver (client certificates, RBAC and the Node
authorizer, service accounts), kube-controller-manager and kube-scheduler, on loopback, from the binaries
tests/kubernetes/build_control_plane.sh keeps in the user's cache. Every wait is bounded and names the
component that did not answer; every process dies with the test process (PR_SET_PDEATHSIG) and is stopped
by `stop()` (SIGTERM, then SIGKILL), so nothing outlives a test.

    plane = ControlPlane(bin_dir, tmp_path / "k8s").start()
    plane.kubeconfig("admin")  # a kubeconfig file: cluster-admin (system:masters)
    plane.stop()
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.request
from typing import Sequence

import yaml

from tests.kubernetes.pki import ClusterPKI, Pair

START_TIMEOUT = 120.0  # seconds the whole plane has to become ready (8.5-11.4 s measured on 2 cores)
STOP_GRACE = 5.0
SERVICE_RANGE = "10.96.0.0/16"
HERE = os.path.dirname(os.path.abspath(__file__))
BUILD_SCRIPT = os.path.join(HERE, "build_control_plane.sh")
KWOK_STAGES = os.path.join(HERE, "kwok_stages.yaml")


def bin_dir() -> str:
    """Where the cached build is (or will be): what build_control_plane.sh --print-dir says."""
    return subprocess.run([BUILD_SCRIPT, "--print-dir"], capture_output=True, text=True, check=True,
                          timeout=30).stdout.strip()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class ControlPlaneError(RuntimeError):
    pass


class ControlPlane:
    def __init__(self, binaries: str, root: str, env: dict[str, str] | None = None):
        missing = [p for p in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
                   if not os.access(os.path.join(binaries, p), os.X_OK)]
        if missing:
            raise ControlPlaneError(f"{', '.join(missing)} not built in {binaries}: run `make kubernetes` "
                                    f"({BUILD_SCRIPT})")
        self.binaries, self.root = binaries, root
        os.makedirs(root, mode=0o700, exist_ok=True)
        self.pki = ClusterPKI(os.path.join(root, "pki"))
        self.apiserver_port = _free_port()
        self.server = f"https://127.0.0.1:{self.apiserver_port}"
        self.processes: dict[str, subprocess.Popen] = {}
        self._logs: dict[str, str] = {}
        self._env = {**os.environ, **(env or {})}
        self._kubeconfigs: dict[tuple, str] = {}

    # ---------------------------------------------------------------- files
    def kubeconfig(self, user: str, groups: Sequence[str] = (), token: str | None = None) -> str:
        """A kubeconfig for `user` (a client certificate with `groups`), or for a bearer `token`; made once."""
        key = (user, tuple(groups), token)
        if key in self._kubeconfigs:
            return self._kubeconfigs[key]
        name = user.replace(":", "-") + (f"-token-{len(self._kubeconfigs)}" if token is not None else "")
        path = os.path.join(self.root, f"{name}.kubeconfig")
        if token is not None:
            credentials = {"token": token}
        else:
            pair = self.pki.client(user, tuple(groups))
            credentials = {"client-certificate": pair.cert, "client-key": pair.key}
        config = {"apiVersion": "v1", "kind": "Config", "current-context": "test",
                  "clusters": [{"name": "test", "cluster": {"server": self.server,
                                                            "certificate-authority": self.pki.ca}}],
                  "users": [{"name": name, "user": credentials}],
                  "contexts": [{"name": "test", "context": {"cluster": "test", "user": name}}]}
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            yaml.safe_dump(config, f)
        self._kubeconfigs[key] = path
        return path

    def admin(self) -> str:
        return self.kubeconfig("admin", ("system:masters",))

    # ---------------------------------------------------------------- processes
    def _start(self, name: str, argv: list[str]) -> None:
        log = os.path.join(self.root, f"{name}.log")
        self._logs[name] = log
        with open(log, "wb") as out:
            self.processes[name] = subprocess.Popen(
                [os.path.join(self.binaries, argv[0]), *argv[1:]], stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=_die_with_parent, cwd=self.root,
                env=self._env)

    def log_tail(self, name: str, lines: int = 15) -> str:
        try:
            with open(self._logs[name], errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except (KeyError, OSError):
            return ""

    def start(self, timeout: float = START_TIMEOUT) -> "ControlPlane":
        deadline = time.monotonic() + timeout
        try:
            self._start_etcd(deadline)
            self._start_apiserver(deadline)
            self._start_controllers()
            self._wait_ready(deadline)
        except BaseException:
            self.stop()
            raise
        return self

    def start_kwok(self, label: str = "type=kwok", timeout: float = 30.0, stages: str = KWOK_STAGES) -> None:
        """KWOK for the fake nodes labelled `label` (`stages`, tests/kubernetes/kwok_stages.yaml by default:
        Ready at once, pods Running at once), as its own identity bound to cluster-admin by the test's RBAC setup. Stopped
        with the plane."""
        home = os.path.join(self.root, "kwok-home")  # its default config path (~/.kwok) must not be the user's
        os.makedirs(home, mode=0o700, exist_ok=True)
        self._env["HOME"] = home
        self._start("kwok", ["kwok", f"--kubeconfig={self.admin()}", f"--config={stages}",
                             f"--manage-nodes-with-label-selector={label}", "--node-lease-duration-seconds=40",
                             "--server-address=127.0.0.1:0"])
        self._wait("kwok", lambda: "Watch nodes" in self.log_tail("kwok", 50), time.monotonic() + timeout)

    def _start_etcd(self, deadline: float) -> None:
        client, peer = _free_port(), _free_port()
        self.etcd = f"http://127.0.0.1:{client}"
        self._start("etcd", ["etcd", "--name=test", f"--data-dir={os.path.join(self.root, 'etcd')}",
                             f"--listen-client-urls={self.etcd}", f"--advertise-client-urls={self.etcd}",
                             f"--listen-peer-urls=http://127.0.0.1:{peer}",
                             f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                             f"--initial-cluster=test=http://127.0.0.1:{peer}", "--unsafe-no-fsync",
                             "--log-level=warn"])
        self._wait("etcd", lambda: _http_ok(f"{self.etcd}/health"), deadline)

    def _start_apiserver(self, deadline: float) -> None:
        serving = self.pki.serving("kube-apiserver", ["127.0.0.1", "localhost", "kubernetes",
                                                      "kubernetes.default", "kubernetes.default.svc", "10.96.0.1"])
        kubelet_client = self.pki.client("kube-apiserver-kubelet-client", ("system:masters",))
        self._start("kube-apiserver", [
            "kube-apiserver", f"--etcd-servers={self.etcd}", "--bind-address=127.0.0.1",
            f"--secure-port={self.apiserver_port}", "--advertise-address=127.0.0.1",
            "--endpoint-reconciler-type=none",  # loopback cannot be the `kubernetes` Service's endpoint
            f"--tls-cert-file={serving.cert}", f"--tls-private-key-file={serving.key}",
            f"--client-ca-file={self.pki.ca}", "--authorization-mode=Node,RBAC", "--anonymous-auth=false",
            "--service-account-issuer=https://kubernetes.default.svc", f"--service-account-key-file={self.pki.sa_pub}",
            f"--service-account-signing-key-file={self.pki.sa_key}", f"--service-cluster-ip-range={SERVICE_RANGE}",
            # what it shows a kubelet (pods/log, exec, port-forward): a client certificate in system:masters, and
            # the kubelet's serving certificate checked against the cluster CA at its InternalIP (a real node,
            # tests/kubernetes/real_node.py; fake nodes serve nothing)
            f"--kubelet-client-certificate={kubelet_client.cert}", f"--kubelet-client-key={kubelet_client.key}",
            f"--kubelet-certificate-authority={self.pki.ca}", "--kubelet-preferred-address-types=InternalIP",
            "--profiling=false", "--v=1"])
        admin = self._admin_context()
        self._wait("kube-apiserver", lambda: _http_ok(f"{self.server}/readyz", admin), deadline)

    def _start_controllers(self) -> None:
        scheduler = self.kubeconfig("system:kube-scheduler")
        manager = self.kubeconfig("system:kube-controller-manager")
        self.health_ports = {"kube-scheduler": _free_port(), "kube-controller-manager": _free_port()}
        self._start("kube-scheduler", ["kube-scheduler", f"--kubeconfig={scheduler}",
                                       f"--authentication-kubeconfig={scheduler}",
                                       f"--authorization-kubeconfig={scheduler}", "--leader-elect=false",
                                       "--bind-address=127.0.0.1",
                                       f"--secure-port={self.health_ports['kube-scheduler']}", "--v=1"])
        self._start("kube-controller-manager", [
            "kube-controller-manager", f"--kubeconfig={manager}", f"--authentication-kubeconfig={manager}",
            f"--authorization-kubeconfig={manager}", "--leader-elect=false", "--use-service-account-credentials",
            f"--service-account-private-key-file={self.pki.sa_key}", f"--root-ca-file={self.pki.ca}",
            f"--service-cluster-ip-range={SERVICE_RANGE}", "--bind-address=127.0.0.1",
            f"--secure-port={self.health_ports['kube-controller-manager']}", "--v=1"])

    def _admin_context(self) -> ssl.SSLContext:
        if not hasattr(self, "_admin_ssl"):
            pair: Pair = self.pki.client("test-admin", ("system:masters",))
            context = ssl.create_default_context(cafile=self.pki.ca)
            context.load_cert_chain(pair.cert, pair.key)
            self._admin_ssl = context
        return self._admin_ssl

    def _wait_ready(self, deadline: float) -> None:
        """Each controller answers its health check, and the default ServiceAccount of `default` exists
        (the controllers run: a pod can be created)."""
        unverified = ssl._create_unverified_context()  # their serving certificates are self-signed
        for name, port in self.health_ports.items():
            self._wait(name, lambda: _http_ok(f"https://127.0.0.1:{port}/healthz", unverified), deadline)
        url = f"{self.server}/api/v1/namespaces/default/serviceaccounts/default"
        self._wait("kube-controller-manager", lambda: _http_ok(url, self._admin_context()), deadline)

    def _wait(self, name: str, ready, deadline: float) -> None:
        while True:
            for other, proc in self.processes.items():
                if proc.poll() is not None:
                    raise ControlPlaneError(f"{other} exited ({proc.returncode}) while {name} started:\n"
                                            f"{self.log_tail(other)}")
            if ready():
                return
            if time.monotonic() > deadline:
                raise ControlPlaneError(f"{name} did not answer within the control plane's start bound:\n"
                                        f"{self.log_tail(name)}")
            time.sleep(0.1)

    def stop(self) -> None:
        """Each component, newest first (the apiserver before its etcd: the other way round it waits out its
        grace on a store that is gone): SIGTERM, SIGKILL after STOP_GRACE."""
        for proc in reversed(list(self.processes.values())):
            stop_process(proc, STOP_GRACE)


def stop_process(proc: subprocess.Popen, grace: float) -> None:
    """SIGTERM to its process group, SIGKILL `grace` seconds later if it is still there."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def _http_ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as answer:
            return answer.status == 200
    except (OSError, ValueError):
        return False
