"""The committed generated code matches the .proto: regenerate with `python -m cluster.shared.protos.generate`."""

import subprocess
import sys

from tests.conftest import REPO


def test_generated_code_is_not_stale():
    result = subprocess.run([sys.executable, "-m", "cluster.shared.protos.generate", "--check"], cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_wire_package_is_versioned():
    from cluster.shared.protos.tfdist.v1 import cluster_pb2

    assert cluster_pb2.DESCRIPTOR.package == "tfdist.v1"
