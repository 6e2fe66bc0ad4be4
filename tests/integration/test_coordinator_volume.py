"""The shipped coordinator Deployment's command on the volume a block device gives it (issue 45, Measured 2):
its mount root is root's, and the kubelet's fsGroup pass makes it `root:1000 2775`. The coordinator runs as
uid 1000 (the Deployment's runAsUser) with the Deployment's own --state-dir and HOME, on a folder laid out so,
and must start; with the old layout (its state in the mount root itself) it refused to. Only the engine is the
local one (no Kubernetes API here); tests/kubernetes/test_real_node.py runs the whole Deployment on a real
kubelet's volume."""

import os
import re
import shutil
import subprocess
import tempfile

import pytest

from cluster.engines.kubernetes import deploy
from tests.conftest import wait_for
from tests.other_user import as_uid

pytestmark = pytest.mark.timeout(120)
UID = 1000


def _deployment_container() -> dict:
    objects = deploy.coordinator_objects("tfdist", "registry.example.com/tfdist:1")
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsUser"] == pod["securityContext"]["fsGroup"] == UID
    return pod["containers"][0]


@pytest.fixture
def volume_root():
    """A folder as the kubelet leaves a block volume's root with fsGroup 1000, reachable by uid 1000."""
    top = tempfile.mkdtemp(prefix="tfdist-test-volume-")
    os.chmod(top, 0o755)
    root = os.path.join(top, "mnt")
    os.mkdir(root)
    os.chown(root, 0, UID)
    os.chmod(root, 0o2775)
    yield root
    shutil.rmtree(top)


def _run_as_1000(python, container: dict, root: str, port: int):
    mount = next(m["mountPath"] for m in container["volumeMounts"] if m["name"] == "state")
    argv = [a.replace(mount, root) for a in container["command"][1:]]  # the Deployment's flags, the mount moved
    argv[argv.index("--engine") + 1] = "local"
    argv[argv.index("--listen") + 1] = f"127.0.0.1:{port}"
    env = {e["name"]: e["value"].replace(mount, root) for e in container["env"]}
    return subprocess.Popen([*as_uid(UID), python.python, "-m", "cluster.client.cli", *argv],
                            env=python.env(**env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_the_shipped_coordinator_starts_on_a_volume_root_that_is_roots(other_user_python, volume_root):
    from tests.kubernetes.control_plane import _free_port

    container = _deployment_container()
    coordinator = _run_as_1000(other_user_python, container, volume_root, _free_port())
    try:
        state = os.path.join(volume_root, "state")
        wait_for(lambda: os.path.exists(os.path.join(state, "coordinator.sqlite")), "the coordinator's state",
                 timeout=60, alive=lambda: coordinator.poll() is None)
    finally:
        coordinator.terminate()
        out = coordinator.communicate(timeout=30)[0]
    assert coordinator.returncode == 0, out[-3000:]
    assert re.search(r"listening on 127\.0\.0\.1:\d+ \(TLS; state in .*/mnt/state\)", out), out[-3000:]
    st = os.stat(os.path.join(volume_root, "state"))
    assert (st.st_uid, st.st_mode & 0o777) == (UID, 0o700)  # a folder of its own under the root


def test_its_state_in_the_volume_root_itself_is_refused_in_one_line(other_user_python, volume_root):
    """What the manifests did before: --state-dir was the mount root, never the coordinator's own folder."""
    from tests.kubernetes.control_plane import _free_port

    container = _deployment_container()
    mount = next(m["mountPath"] for m in container["volumeMounts"] if m["name"] == "state")
    container = {**container, "command": [a if a != deploy.STATE else mount for a in container["command"]]}
    coordinator = _run_as_1000(other_user_python, container, volume_root, _free_port())
    out = coordinator.communicate(timeout=60)[0]
    assert coordinator.returncode != 0 and "Traceback" not in out
    assert f"{volume_root} belongs to root" in out, out[-2000:]
