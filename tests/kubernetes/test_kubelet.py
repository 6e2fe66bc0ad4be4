"""The test kubelet (tests/kubernetes/kubelet.py) on the real control plane: a pod's command runs as a process
with its environment, Secret volume, hostname and its Service's names; its exit code becomes the pod's
status; pods of one gang on two nodes reach each other by name on the same port; a deleted pod's process
is stopped and the pod removed. What the Kubernetes engine's training tests will stand on."""

from __future__ import annotations

import sys
import textwrap

import pytest
from lightkube import codecs
from lightkube.resources.core_v1 import Namespace, Pod

from tests.conftest import MARKER_VAR
from tests.kubernetes.cluster_helpers import gone, namespace, wait_for
from tests.kubernetes.kubelet import PodNetwork, TestKubelet

pytestmark = pytest.mark.timeout(180)


def _pod(name, ns, node, code, *, hostname=None, subdomain=None, env=(), mounts=(), volumes=(), grace=None):
    spec = {"nodeName": node, "restartPolicy": "Never", "automountServiceAccountToken": False,
            "containers": [{"name": "worker", "image": "test", "command": [sys.executable, "-c", textwrap.dedent(code)],
                            "env": list(env), "volumeMounts": list(mounts)}], "volumes": list(volumes)}
    if hostname:
        spec.update(hostname=hostname, subdomain=subdomain)
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return codecs.from_dict({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
                             "spec": spec})


def _terminated(admin, name, ns):
    pod = admin.get(Pod, name, namespace=ns)
    if pod.status.phase not in ("Succeeded", "Failed"):
        return None
    return pod.status.phase, pod.status.containerStatuses[0].state.terminated.exitCode


def test_a_pod_runs_with_its_env_secret_hostname_and_names_and_its_exit_code_is_its_status(plane, admin, tmp_path, marker):
    ns = namespace(admin, "kubelet-one")
    kubelet = TestKubelet(admin, "tk-one", {"cpu": "4", "memory": "8Gi", "pods": "10"}, str(tmp_path),
                          env={MARKER_VAR: marker}).start()
    try:
        admin.create(codecs.from_dict({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": ns},
                                       "stringData": {"token": "t0k3n", "node-0.json": '{"rank": 0}'}}))
        code = """
            import json, os, socket, sys
            assert os.environ["PLAIN"] == "1" and os.environ["FROM_SECRET"] == "t0k3n", dict(os.environ)
            assert os.environ["MY_NAME"] == "one" and socket.gethostname() == "w0"
            assert json.load(open("/var/run/tfdist-test/node-0.json")) == {"rank": 0}
            assert oct(os.stat("/var/run/tfdist-test/node-0.json").st_mode & 0o777) == "0o400"
            assert socket.gethostbyname("w0.job.kubelet-one.svc") == "127.0.0.1"
            sys.exit(3)
        """
        admin.create(_pod("one", ns, "tk-one", code, hostname="w0", subdomain="job",
                          env=[{"name": "PLAIN", "value": "1"},
                               {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "s", "key": "token"}}},
                               {"name": "MY_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                          mounts=[{"name": "job", "mountPath": "/var/run/tfdist-test", "readOnly": True}],
                          volumes=[{"name": "job", "secret": {"secretName": "s", "defaultMode": 0o400}}]))
        ended = wait_for("the pod's process ended", lambda: _terminated(admin, "one", ns))
        assert ended == ("Failed", 3), open(tmp_path / "tk-one" / "kubelet-one_one.log").read()
        assert not kubelet.errors
    finally:
        kubelet.stop()
        admin.delete(Namespace, ns)


def test_a_gangs_pods_on_two_nodes_reach_each_other_by_name_on_the_same_port(plane, admin, tmp_path, marker):
    ns = namespace(admin, "kubelet-gang")
    network = PodNetwork(str(tmp_path))
    kubelets = [TestKubelet(admin, f"tk-gang-{i}", {"cpu": "4", "memory": "8Gi", "pods": "10"}, str(tmp_path),
                            network=network, env={MARKER_VAR: marker}).start() for i in range(2)]
    try:
        code = """
            import socket, sys, time
            me, peer = sys.argv[1], sys.argv[2]
            server = socket.create_server(("0.0.0.0", 2222))  # the same port in both pods: their own networks
            deadline = time.monotonic() + 60
            while True:
                try:
                    with socket.create_connection((f"{peer}.gang.kubelet-gang.svc", 2222), timeout=2) as c:
                        c.sendall(me.encode())
                    break
                except OSError:
                    assert time.monotonic() < deadline, "peer never answered"
                    time.sleep(0.1)
            conn, _ = server.accept()
            assert conn.recv(16).decode() == peer
        """
        for i, (me, peer) in enumerate((("n0", "n1"), ("n1", "n0"))):
            pod = _pod(me, ns, f"tk-gang-{i}", code, hostname=me, subdomain="gang")
            pod.spec.containers[0].args = [me, peer]
            admin.create(pod)
        for name in ("n0", "n1"):
            assert wait_for(f"pod {name} ended", lambda: _terminated(admin, name, ns)) == ("Succeeded", 0), \
                open(tmp_path / f"tk-gang-{name[1]}" / f"kubelet-gang_{name}.log").read()
        ips = {admin.get(Pod, n, namespace=ns).status.podIP for n in ("n0", "n1")}
        assert len(ips) == 2 and all(ip.startswith("198.19.0.") for ip in ips)
        assert not [e for k in kubelets for e in k.errors]
    finally:
        for kubelet in kubelets:
            kubelet.stop()
        network.remove()
        admin.delete(Namespace, ns)


def test_a_deleted_pods_process_is_stopped_and_the_pod_removed(plane, admin, tmp_path, marker):
    ns = namespace(admin, "kubelet-delete")
    kubelet = TestKubelet(admin, "tk-delete", {"cpu": "4", "memory": "8Gi", "pods": "10"}, str(tmp_path),
                          env={MARKER_VAR: marker}).start()
    try:
        admin.create(_pod("sleeper", ns, "tk-delete", "import time; time.sleep(600)", grace=1))
        wait_for("the sleeper Running", lambda: admin.get(Pod, "sleeper", namespace=ns).status.phase == "Running")
        admin.delete(Pod, "sleeper", namespace=ns)
        wait_for("the deleted pod removed", lambda: gone(admin, Pod, "sleeper", ns))
        wait_for("its process gone", lambda: not kubelet._running)
    finally:
        kubelet.stop()
        admin.delete(Namespace, ns)
