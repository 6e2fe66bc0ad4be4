"""The Horovod that `make horovod` builds (0.28.1 against TensorFlow 2.21, Gloo only) works: two
processes all-reduce over Gloo. tfdist's own Horovod mode (its rendezvous, no horovodrun) comes next."""

import os
import subprocess
import sys

import pytest

from tests.conftest import cli_env

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
CODE = ("import horovod.tensorflow as hvd, tensorflow as tf\n"
        "hvd.init()\n"
        "total = hvd.allreduce(tf.constant([float(hvd.rank() + 1)]), op=hvd.Sum)\n"
        "print(f'rank {hvd.rank()} size {hvd.size()} sum {float(total[0])}', flush=True)\n")


def test_two_processes_allreduce_over_gloo(marker):
    horovodrun = os.path.join(os.path.dirname(sys.executable), "horovodrun")
    assert os.path.exists(horovodrun), "horovod is not built: run `make horovod`"
    result = subprocess.run([horovodrun, "-np", "2", "-H", "localhost:2", "--gloo", sys.executable, "-c", CODE],
                            env=cli_env(marker, TF_CPP_MIN_LOG_LEVEL="3"), capture_output=True, text=True,
                            timeout=240)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    for rank in (0, 1):
        assert f"rank {rank} size 2 sum 3.0" in result.stdout
