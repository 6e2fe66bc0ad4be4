"""Keras 3 on JAX, plain JAX and a torchrun DDP script under `tfdist launch`, two processes on this machine,
unchanged: each gets what its framework's own launcher would give it (across two hosts:
tests/multihost/test_jax_torch_hosts.py)."""

import os
import sys

import numpy as np
import pytest
import yaml

from tests.conftest import REPO, run_cli

pytestmark = [pytest.mark.timeout(300)]
KERAS_JAX = os.path.join(REPO, "examples", "keras_jax", "train.py")
TORCH_DDP = os.path.join(REPO, "examples", "torch", "ddp.py")
JAX_PLAIN = os.path.join(REPO, "tests", "integration", "workers", "jax_plain.py")


def same_weights(out, ranks=2):
    first, *others = (np.load(out / f"rank{r}.npz") for r in range(ranks))
    assert first.files
    for other in others:
        assert sorted(other.files) == sorted(first.files)
        for name in first.files:
            np.testing.assert_array_equal(first[name], other[name])
    return first


def test_a_keras_io_model_parallel_script_trains_over_two_processes_with_one_set_of_weights(tmp_path, marker):
    """Measured 1: nothing a JAX process reads reached it. Now keras.io's LayoutMap script, unchanged but for
    the multi-process `keras.distribution.initialize()` Keras asks for, shards its Dense layers over both."""
    result = run_cli(["launch", "--slots", "2", "--distribution", "jax", "--", sys.executable, KERAS_JAX,
                      "--model-parallel", "--out", str(tmp_path)], marker, timeout=240)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    assert out.count("distribution=ModelParallel devices=2") == 2, out[-3000:]
    weights = same_weights(tmp_path)
    assert weights["d1.kernel"].shape == (784, 200)  # gathered from both processes' shards


def test_plain_jax_initialize_without_arguments_joins_the_job_even_where_slurm_s_variables_are_set(tmp_path,
                                                                                                 marker):
    """JAX's own Slurm detection would take the allocation's variables (a coordinator on a port tfdist never
    leased, 4 processes); tfdist's cluster comes first."""
    slurm = {"SLURM_JOB_ID": "4242", "SLURM_STEP_NODELIST": "n[1-4]", "SLURM_NTASKS": "4", "SLURM_PROCID": "3",
             "SLURM_LOCALID": "0"}  # every variable JAX's SlurmCluster looks for, in the workers' environment
    config = tmp_path / "plain.yaml"
    config.write_text(yaml.safe_dump({"entrypoint": f"{sys.executable} {JAX_PLAIN}", "resources": {"slots_per_trial": 2},
                                      "distribution": {"mode": "jax"}, "environment": {"variables": slurm}}))
    result = run_cli(["launch", "--config", str(config)], marker, timeout=180)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    assert "[rank=0] process 0 of 2 gathered [1, 2]" in out and "[rank=1] process 1 of 2 gathered [1, 2]" in out, \
        out[-3000:]


def test_a_torchrun_ddp_script_runs_unchanged_with_one_set_of_weights(tmp_path, marker):
    result = run_cli(["launch", "--slots", "2", "--distribution", "torch", "--", sys.executable, TORCH_DDP,
                      "--out", str(tmp_path)], marker, timeout=240)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    assert "[rank=0] rank 0 of 2 (local 0) done" in out and "[rank=1] rank 1 of 2 (local 1) done" in out, out[-3000:]
    losses = [float(line.split("loss ")[1]) for line in out.splitlines() if "[rank=0] epoch " in line]
    assert len(losses) == 3 and losses[-1] < losses[0], out[-3000:]
    same_weights(tmp_path)
