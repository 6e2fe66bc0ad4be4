"""Plain JAX, a torchrun DDP script and Keras 3 on JAX under tfdist's worker API, two processes on this
machine: each gets what its framework's own launcher would give it. keras.io's `keras.distribution` example
(ModelParallel with a LayoutMap) runs across two hosts: tests/multihost/test_jax_torch_hosts.py."""

import json
import os
import re
import sys

import numpy as np
import pytest
import yaml

from tests.conftest import REPO, WITH_JAX, run_cli, wait_for
from tests.integration.test_restarts import steps_by_attempt, trained

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


def test_plain_jax_initialize_without_arguments_joins_the_job_even_where_slurm_s_variables_are_set(tmp_path,
                                                                                                 marker):
    """JAX's own Slurm detection would take the allocation's variables (a coordinator on a port tfdist never
    leased, 4 processes); tfdist's cluster comes first."""
    slurm = {"SLURM_JOB_ID": "4242", "SLURM_STEP_NODELIST": "n[1-4]", "SLURM_NTASKS": "4", "SLURM_PROCID": "3",
             "SLURM_LOCALID": "0", **WITH_JAX}  # every variable JAX's SlurmCluster looks for, in the workers' environment
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


def test_keras_on_jax_restarts_from_its_checkpoint_and_pauses_every_rank_at_one_step(tmp_path, local_cluster):
    """tfdist's own worker API under the JAX backend (tests/integration/workers/resumable_fit.py, unchanged
    from the TensorFlow modes): a killed rank restarts the gang from the latest checkpoint (max_restarts),
    `tfdist preempt` stops both ranks at one step with a checkpoint, `tfdist resume` continues after it; the
    checkpoint is the model's and optimizer's variables (tfdist/keras_state.py), the metrics are reported."""
    from tests.integration.test_restarts import TOTAL_STEPS, stopped_steps, write_config

    config = write_config(tmp_path, {"SLOW": 0.3, "SLOW_RUNS": 2, "KILL_AT": 7, **WITH_JAX}, mode="jax",
                          max_restarts=1)
    cluster, job_id = killed_paused_resumed(local_cluster(), tmp_path, config, stopped_steps, TOTAL_STEPS)
    rows = [json.loads(line) for line in cluster.cli("metrics", job_id, "--json").stdout.splitlines()]
    assert rows and rows[-1]["step"] == TOTAL_STEPS and "loss" in rows[-1]["metrics"], rows[-3:]  # MetricsReporter's


def test_a_torch_loop_restarts_from_its_checkpoint_and_pauses_every_rank_at_one_step(tmp_path, local_cluster):
    """tfdist's worker API in a DDP loop (tests/integration/workers/torch_resumable.py): `tfdist.TorchState`
    checkpoints recorded with the job, a killed rank restarting the gang from the latest (max_restarts),
    `tfdist preempt` stopping both ranks at one step through `ctx.should_preempt`, `tfdist resume` continuing
    after it, and the data fetched once for the node however many runs read it."""
    variables = {"OUT": str(tmp_path), "SLOW": "0.3", "SLOW_RUNS": "2", "KILL_AT": "7",
                 "DATA_ROOT": str(tmp_path / "data")}
    config = tmp_path / "torch.yaml"
    config.write_text(yaml.safe_dump({
        "entrypoint": [sys.executable, os.path.join(REPO, "tests", "integration", "workers", "torch_resumable.py")],
        "resources": {"slots_per_trial": 2}, "distribution": {"mode": "torch"}, "max_restarts": 1,
        "checkpoint_storage": {"host_path": str(tmp_path / "ckpt")}, "environment": {"variables": variables}}))
    stopped = lambda logs: {int(r): int(s) for r, s in  # noqa: E731  (the worker's own line)
                            re.findall(r"\[rank=(\d+)\] rank \d+ stopped at step (\d+)", logs)}
    cluster, job_id = killed_paused_resumed(local_cluster(), tmp_path, str(config), stopped, 30)
    assert "resumed from checkpoint" in cluster.cli("logs", job_id).stdout
    assert (tmp_path / "fetches.txt").read_text() == "0\n"  # the node's local chief, once, in the first run
    assert (tmp_path / "data" / "torch-data" / "node0" / "data.npz").exists()
    assert not [name for name in os.listdir(tmp_path / "data" / "torch-data") if name.startswith("rank")]


def killed_paused_resumed(cluster, tmp_path, config: str, stopped_steps, total_steps: int):
    """The scenario of the restart tests: rank 1 kills itself after step 7 of the first run (KILL_AT), the gang
    restarts from the checkpoint of step 5 (max_restarts: 1), `tfdist preempt` pauses both ranks at one step,
    `tfdist resume` continues right after it, and every step is trained. Returns the cluster and the job's id."""
    cluster.start_agent("n1", "--slots", "2")
    cluster.wait_agents("n1")
    job = cluster.cli("launch", "--detach", "--config", config)
    assert job.returncode == 0, job.stderr
    job_id = job.stdout.strip()
    running = lambda: cluster.job(job_id)["state"] in ("QUEUED", "STARTING", "RUNNING")  # noqa: E731
    wait_for(lambda: trained(tmp_path, 1) >= 8, "the restarted run's step 8", alive=running)
    runs = steps_by_attempt(tmp_path)
    assert max(runs[0]) == 7 and min(runs[1]) == 6, runs  # killed at 7, restarted from the checkpoint at 5
    assert cluster.cli("preempt", job_id).returncode == 0
    cluster.wait_for(lambda: cluster.job(job_id)["state"] == "PAUSED", "the job to pause")
    logs = cluster.cli("logs", job_id).stdout
    stops = stopped_steps(logs)
    assert set(stops) == {0, 1} and len(set(stops.values())) == 1, logs[-3000:]  # both ranks, one step
    assert cluster.cli("resume", job_id).returncode == 0
    cluster.wait_for(lambda: cluster.job(job_id)["state"] == "SUCCEEDED", "the job to finish", timeout=180)
    runs = steps_by_attempt(tmp_path)
    assert sorted(runs) == [0, 1, 2] and min(runs[2]) == stops[0] + 1, runs  # resumed right after the pause
    assert sorted(set(s for attempt in runs for s in runs[attempt])) == list(range(1, total_steps + 1)), runs
    return cluster, job_id


def test_rank_0_keeps_torch_s_store_until_every_rank_has_ended_its_group(tmp_path, marker):
    """Measured (the restart test above, in a fresh clone's `make test`): the third run trained to its end,
    rank 0 destroyed its group, and 15 ms later rank 1 died of SIGABRT ("terminate called without an active
    exception"), failing the job: the store it still used was served by rank 0's process, gone with its group.
    Here rank 1 uses the store half a second after rank 0 ended its group (without tfdist's keep: Broken pipe)."""
    script = os.path.join(REPO, "tests", "integration", "workers", "torch_store_after_destroy.py")
    result = run_cli(["launch", "--slots", "2", "--distribution", "torch", "--", sys.executable, script,
                      str(tmp_path)], marker, timeout=240)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert "[rank=1] STORE rank 0 ended its group" in result.stdout, result.stdout[-2000:]
