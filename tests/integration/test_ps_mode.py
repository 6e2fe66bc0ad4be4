"""Parameter-server mode: one script for every task, tf.keras `fit` (tf_keras) counting every step,
the job ending with the chief, a worker's death tolerated, Keras 3 refused (real TensorFlow)."""

import os
import re

import pytest

from tests.conftest import REPO, run_cli

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
WORKER = os.path.join(REPO, "tests", "integration", "workers", "ps_fit.py")


def test_fit_counts_every_step_and_the_job_ends_with_the_chief(tmp_path, marker):
    (tmp_path / "ps.yaml").write_text("resources: {slots_per_trial: 2}\n"
                                      "distribution: {mode: ps, num_ps: 2, evaluator: true}\n"
                                      "hyperparameters: {global_batch_size: 32}\n")
    result = run_cli(["launch", "--config", str(tmp_path / "ps.yaml"), "--", WORKER], marker)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "distribution ps (distribution.mode is ps)" in result.stderr
    # rank 0 chief; 1-2 workers; 3-4 ps; 5 evaluator. Workers and ps tasks never return from init().
    assert "[rank=0] role=chief rank=0 chief=True evaluator=False per_worker=16 workers=2" in result.stdout
    assert "[rank=5] role=evaluator rank=5 chief=False evaluator=True per_worker=16 workers=2" in result.stdout
    for rank in (1, 2, 3, 4):
        assert f"[rank={rank}] role=" not in result.stdout
    assert ("[rank=0] keras=tf_keras strategy=ParameterServerStrategyV2 iterations=40 expected=40 loss_fell=True"
            in result.stdout)
    # the marker fixture then checks that the ps and worker tasks were stopped


def test_a_killed_worker_task_does_not_stop_training(tmp_path, marker):
    result = run_cli(["launch", "--slots", "3", "--distribution", "ps", "--", WORKER, "kill-worker", str(tmp_path)],
                     marker)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "[rank=0] a worker task was killed after epoch 0" in result.stdout
    assert ("[rank=0] keras=tf_keras strategy=ParameterServerStrategyV2 iterations=40 expected=40 loss_fell=True"
            in result.stdout)
    assert ("tfdist: rank 2 on node local was killed by signal SIGKILL during the job, which went on without it"
            in result.stderr)


def test_a_restarted_job_resumes_from_the_epoch_checkpoint_under_tf_keras(tmp_path, marker):
    (tmp_path / "ps.yaml").write_text(f"resources: {{slots_per_trial: 2}}\ndistribution: {{mode: ps}}\n"
                                      f"max_restarts: 1\ncheckpoint_storage: {tmp_path / 'ckpt'}\n")
    result = run_cli(["launch", "--config", str(tmp_path / "ps.yaml"), "--", WORKER, "chief-crash"], marker)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "rank 0 on node local exited with code 3; the other workers were stopped; restarting the job" in \
        result.stderr
    assert "[rank=0] tfdist: resumed from checkpoint " in result.stderr and "ckpt-20 at step 20 (run 2" in \
        result.stderr
    # tf_keras's fit starts at epoch 2: 20 steps before the crash and 20 after make the planned 40.
    assert "[rank=0] keras=tf_keras strategy=ParameterServerStrategyV2 iterations=40 expected=40" in result.stdout


def test_keras_3_variables_under_parameter_servers_are_refused(marker):
    result = run_cli(["launch", "--slots", "1", "--distribution", "ps", "--", WORKER, "keras3"], marker)
    assert result.returncode == 1
    assert re.search(r"tfdist: job \d+-[0-9a-f]+ failed: rank 0 on node local exited with code 1", result.stderr)
    assert ("KerasParameterServerError: Keras 3 variables under ParameterServerStrategy lose optimizer updates"
            in result.stderr)
    assert "use `from tensorflow import keras` instead of `import keras`" in result.stderr
