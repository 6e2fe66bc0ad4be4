"""Experiments in a local launch (the embedded coordinator): a grid of parameter-server trials, and real Keras
trials under adaptive ASHA that pause at a checkpoint and continue from it. (On a cluster:
tests/integration/test_experiments.py.)"""

import os

import pytest

from cluster.coordinator.store import SqliteStore
from tests.conftest import REPO, run_cli
from tests.integration.test_experiments import write_config

pytestmark = [pytest.mark.timeout(300)]


def test_a_grid_search_of_parameter_server_trials_in_a_local_launch(tmp_path, marker):
    """Determined's grid (count values a hyperparameter) in ps mode: each trial a chief, a worker task per slot
    and a ps task, on this machine."""
    searcher = {"name": "grid", "metric": "val_loss", "max_length": {"batches": 3}, "max_concurrent_trials": 1}
    config = write_config(tmp_path, searcher, slots=2, mode="ps", hyperparameters={
        "learning_rate": {"type": "log", "base": 10, "minval": -3, "maxval": -1, "count": 2}})
    result = run_cli(["launch", "--config", config, "--state-dir", str(tmp_path / "state")], marker, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "grid search of val_loss" in result.stdout and "2 of 2 trials made, 2 ended" in result.stdout
    table = result.stdout.split("\nTRIAL ")[-1]
    assert [line.split()[3] for line in table.splitlines()[1:3]] == ["learning_rate=0.001", "learning_rate=0.1"], table
    # val_loss is (log10(rate) + 2.5)^2 + 1/step: 0.5833 for 0.001, 2.583 for 0.1
    assert table.count("SUCCEEDED") == 2 and "*0.5833" in table.splitlines()[1], table


def test_asha_pauses_losing_keras_trials_and_continues_promoted_ones_from_their_checkpoints(tmp_path, marker):
    """Real Keras trials (examples/search/train.py) under a local launch: each rung's losers stop at a step and
    save; a promoted trial's next run starts after the step it saved, never from step 0."""
    searcher = {"name": "adaptive_asha", "metric": "val_loss", "max_trials": 2, "max_length": {"epochs": 6},
                "max_rungs": 2, "divisor": 2, "mode": "aggressive", "max_concurrent_trials": 1}
    # One trial at a time, seed 3: trial 1 (the larger learning rate) waits alone at rung 1, trial 2 loses to it
    # there, so trial 1 is promoted (resumed from the checkpoint it paused at) and trial 2 is stopped. Batches of 16 (89 steps an epoch)
    # leave a paused trial 3 epochs to stop in before it would have ended by itself, on a loaded machine too.
    config = write_config(tmp_path, searcher, entrypoint=os.path.join(REPO, "examples", "search", "train.py"),
                          hyperparameters={"global_batch_size": 16, "units": 16,
                                           "learning_rate": {"type": "log", "base": 10, "minval": -4, "maxval": -1.5}})
    state = tmp_path / "state"
    result = run_cli(["launch", "--config", config, "--state-dir", str(state)], marker, timeout=280)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "COMPLETED: best: trial" in result.stdout and "rungs at 3, 6 epochs" in result.stdout

    store = SqliteStore(str(state / "coordinator.sqlite"))
    try:
        experiment = store.experiment(1)
        trials = experiment.search["trials"]
        assert len(trials) == 2 and all(store.job(t["job"]).terminal for t in trials)
        resumed = 0
        for trial in trials:
            job_id = trial["job"]
            events = store.events(job_id)
            resumes = [(when, e) for when, e in events if "resumed from the checkpoint at step" in e]
            for when, event in resumes:  # the next run trains only steps after its checkpoint
                step = int(event.split("at step ")[1].split()[0])
                later = [r.step for r in store.metrics(job_id, "loss") if r.time > when]
                assert step > 0 and later and min(later) > step, (event, later)
                resumed += 1
            if any("stopped by the searcher" in e for _, e in events):
                assert store.job(job_id).state.value == "CANCELED" and trial["why"].startswith("stopped early")
        said = {t["job"]: store.events(t["job"]) for t in trials}
        assert resumed >= 1 and trials[0]["rung"] == 1, (trials, said)  # trial 1 paused, was promoted, went on
        assert any(t["why"].startswith("stopped early") for t in trials)
    finally:
        store.close()
