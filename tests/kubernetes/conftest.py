"""A real control plane per test session (per pytest worker: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler from `make kubernetes`'s cached build, and KWOK for fake nodes; ~9 s to start, so the modules
share it); no process outlives the session. Each test makes its own nodes and namespace and removes them:
tests on one worker run one after another, so one test's nodes never take another's pods."""

import os
import time
import uuid

import pytest

from tests.conftest import MARKER_VAR, processes_with_marker
from tests.kubernetes.control_plane import ControlPlane, bin_dir


@pytest.fixture(scope="session")
def plane(tmp_path_factory):
    marker = uuid.uuid4().hex
    control_plane = ControlPlane(bin_dir(), str(tmp_path_factory.mktemp("k8s") / "plane"), env={MARKER_VAR: marker})
    control_plane.start()
    try:
        control_plane.start_kwok()
        yield control_plane
    finally:
        control_plane.stop()
        assert not processes_with_marker(marker), "control plane processes left behind"


@pytest.fixture(scope="session")
def admin(plane):
    from lightkube import Client, KubeConfig

    return Client(KubeConfig.from_file(plane.admin()), field_manager="tfdist-tests")


@pytest.fixture(scope="module")
def real_node(plane, tmp_path_factory):
    """A real Kubernetes node (tests/kubernetes/real_node.py: containerd, kubelet, kube-proxy, CoreDNS) joined
    to this worker's plane; one on the machine at a time (a machine-wide lock). Module-scoped: keep every test
    that needs it in tests/kubernetes/test_real_node.py, so `--dist loadscope` runs them on one worker and the
    node is started once per session and stopped before that worker's next module (which may list Nodes).
    A node that cannot start fails the test with the reason; the teardown fails if anything was left."""
    from tests.kubernetes.real_node import RealNode

    node = RealNode(plane, str(tmp_path_factory.mktemp("real-node")))
    node.start()
    began, cpu = time.monotonic(), node.cpu_seconds()
    try:
        yield node
    finally:
        used, held = node.cpu_seconds() - cpu, time.monotonic() - began
        node.stop()
        print(f"\nreal node: {node.timings}; {used:.1f} CPU s over {held:.0f} s held")
        left = node.leftovers()
        assert not left, f"the real node left {left}"


@pytest.fixture(scope="module")
def real_node_image(real_node):
    """The name of a small test image (Debian essential + python3-minimal) loaded into the real node's
    containerd: built once into the node cache (tests/kubernetes/node/images.py)."""
    from tests.kubernetes.node.images import python_image

    archive, name = python_image(real_node.cache)
    return real_node.load_image(archive, name)
