"""One error hierarchy: every error carries its CLI exit code and gRPC status, and the control
plane runs without TensorFlow or Keras."""

import subprocess
import sys

import grpc

from cluster.shared.credentials import CredentialError
from cluster.shared.rpc import ClientError
from cluster.shared.commands import CommandError
from cluster.shared.config import ConfigError
from cluster.coordinator.core import BadRequest, NotFound
from cluster.coordinator.placement import PlacementError
from cluster.agent.ports import PortError
from tests.conftest import REPO
from tfdist.batching import BatchSizeError
from tfdist.errors import LaunchEnvironmentError, TfdistError, UnavailableError, UserError


def test_user_mistakes_exit_2_and_are_invalid_arguments():
    for error in (ConfigError, BatchSizeError, CommandError, CredentialError, PortError, BadRequest):
        assert issubclass(error, UserError) and error.exit_code == 2 and error.grpc_code == "INVALID_ARGUMENT"


def test_other_failures_exit_1_with_their_status():
    assert (NotFound.exit_code, NotFound.grpc_code) == (1, "NOT_FOUND")
    assert UnavailableError.grpc_code == "UNAVAILABLE" and PlacementError.exit_code == 1
    assert issubclass(LaunchEnvironmentError, TfdistError)
    refused = ClientError("bad slots", grpc.StatusCode.INVALID_ARGUMENT)
    assert (refused.exit_code, refused.grpc_code) == (2, "INVALID_ARGUMENT")
    assert ClientError("gone", grpc.StatusCode.UNAVAILABLE).exit_code == 1
    for name in (NotFound.grpc_code, BadRequest.grpc_code, UnavailableError.grpc_code, TfdistError.grpc_code):
        assert grpc.StatusCode[name]  # the servicers map by name


def test_the_control_plane_never_imports_tensorflow_or_keras():
    code = ("import sys\n"
            "import cluster.client.cli, cluster.coordinator.server, cluster.agent.agent, cluster.client.launch, cluster.client.follow\n"
            "import cluster.client.tables, cluster.shared.modes, cluster.coordinator.policy\n"
            "from cluster.client.cli import build_parser\n"
            "build_parser()\n"
            "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras', 'tf_keras'))\n"
            "print(heavy)\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
