"""A real control plane per test session (per pytest worker: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler from `make kubernetes`'s cached build, and KWOK for fake nodes; ~9 s to start, so the modules
share it); no process outlives the session. Each test makes its own nodes and namespace and removes them:
tests on one worker run one after another, so one test's nodes never take another's pods."""

import os
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
