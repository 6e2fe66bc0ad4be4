"""`tfdist launch` with real TensorFlow workers on loopback (MultiWorkerMirroredStrategy)."""

import json
import os
import sys

import numpy as np
import pytest

from tests.conftest import REPO, run_cli

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
WORKER = os.path.join(os.path.dirname(__file__), "workers", "train_worker.py")


def _results(out, size):
    infos = [json.load(open(out / f"rank{r}.json")) for r in range(size)]
    weights = [list(np.load(out / f"rank{r}.npz").values()) for r in range(size)]
    return infos, weights


def _assert_identical(weights):
    for other in weights[1:]:
        assert len(other) == len(weights[0])
        for a, b in zip(weights[0], other):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("slots", [3])  # two workers' fit: the examples' tests (digits, TensorBoard)
def test_keras3_fit_trains_in_sync(tmp_path, marker, slots):
    result = run_cli(["launch", "--slots", str(slots), "--", WORKER, "--mode", "fit", "--out", str(tmp_path)], marker)
    assert result.returncode == 0, result.stderr[-3000:]
    infos, weights = _results(tmp_path, slots)
    _assert_identical(weights)
    for info in infos:
        assert info["size"] == slots and info["replicas"] == slots
        assert info["losses"][-1] < info["losses"][0]
        assert info["losses"] == infos[0]["losses"]  # logs are reduced across workers
        assert "accuracy" in info["evaluation"]
    for r in range(slots):
        assert f"[rank={r}] rank {r} done" in result.stdout
    # Every worker saved; only the chief's file is kept, the others' temporary copies are gone.
    assert infos[0]["save_path"] == str(tmp_path / "model.keras") and (tmp_path / "model.keras").is_file()
    for info in infos[1:]:
        assert info["saved_during"] and info["save_path"] != infos[0]["save_path"]
        assert not info["save_path_exists_after"]


def test_custom_loop_three_workers_with_batch_remainder(tmp_path, marker):
    (tmp_path / "c.yaml").write_text("hyperparameters: {global_batch_size: 16}\nresources: {slots_per_trial: 3}\n")
    result = run_cli(["launch", "--config", str(tmp_path / "c.yaml"), "--", WORKER, "--mode", "loop",
                      "--out", str(tmp_path)], marker)
    assert result.returncode == 0, result.stderr[-3000:]
    infos, weights = _results(tmp_path, 3)
    _assert_identical(weights)
    assert [i["per_replica"] for i in infos] == [5, 5, 5]
    assert infos[0]["losses"][-1] < infos[0]["losses"][0]
    assert "the remainder of 1 sample(s) per step is dropped (effective global batch size 15)" in result.stderr


def test_crash_stops_siblings_and_is_reported(tmp_path, marker):
    result = run_cli(["launch", "--slots", "3", "--", WORKER, "--mode", "loop", "--epochs", "50",
                      "--out", str(tmp_path), "--crash-rank", "1"], marker)
    assert result.returncode == 13
    assert "failed: rank 1 on node local exited with code 13; the other workers were stopped" in result.stderr
    assert "tfdist: last lines of rank 1 (node local):\n" in result.stderr and "  rank crashing on purpose" in result.stderr
    assert not (tmp_path / "rank0.json").exists()  # rank 0 was stopped, it did not run its 50 epochs


def test_fit_exception_in_one_rank_fails_the_job(tmp_path, marker):
    result = run_cli(["launch", "--slots", "2", "--", WORKER, "--mode", "fit", "--epochs", "50",
                      "--out", str(tmp_path), "--crash-rank", "0"], marker)
    assert result.returncode == 1
    assert "failed: rank 0 on node local exited with code 1" in result.stderr
    assert "RuntimeError: boom in rank 0" in result.stderr


def test_worker_that_never_joins_hits_startup_timeout(tmp_path, marker):
    result = run_cli(["launch", "--slots", "2", "--startup-timeout", "25", "--", WORKER, "--out", str(tmp_path),
                      "--hang-rank", "1"], marker)
    assert result.returncode == 1
    assert "failed: rank(s) 1 did not join within the startup timeout of 25s (never called tfdist.init() nor " \
        "listened on their port)" in result.stderr
    assert "tfdist: last lines of rank 1 (node local):" in result.stderr
    assert "  hanging before init" in result.stderr


def test_same_script_runs_with_plain_python(tmp_path, marker):
    import subprocess

    from tests.conftest import cli_env
    env = cli_env(marker)
    result = subprocess.run([sys.executable, WORKER, "--mode", "fit", "--out", str(tmp_path)], env=env,
                            capture_output=True, text=True, timeout=180, cwd=REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    info = json.load(open(tmp_path / "rank0.json"))
    assert info["size"] == 1 and info["replicas"] == 1 and info["per_replica"] == 16
    assert info["save_path"] == str(tmp_path / "model.keras")


@pytest.mark.parametrize("example,target", [("digits", 0.93), ("horovod", 0.93), ("ps", 0.90)])
def test_examples_reach_their_accuracy(marker, example, target):
    """ps trains asynchronously: its result varies more from run to run, and its target leaves room for that."""
    result = run_cli(["launch", "--config", f"examples/{example}/config.yaml"], marker, timeout=280)
    assert result.returncode == 0, result.stderr[-3000:]
    line = [l for l in result.stdout.splitlines() if "final test accuracy" in l]
    assert line and line[0].startswith("[rank=0] final test accuracy: ")
    assert float(line[0].split(": ")[1].split()[0]) >= target, line


def test_upstream_keras_still_needs_the_fix(tmp_path, marker):
    """With tfdist's Keras fix turned off, upstream Keras 3 fit fails under MWMS.
    When this test starts failing, upstream fixed the bug: narrow the version guard."""
    result = run_cli(["launch", "--slots", "2", "--", WORKER, "--mode", "fit", "--out", str(tmp_path)], marker,
                     TFDIST_KERAS_PATCH="0")
    assert result.returncode != 0
    assert "PerReplica" in result.stderr or "Invalid reduction dimension" in result.stderr
