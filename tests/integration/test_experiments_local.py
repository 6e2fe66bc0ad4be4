"""Experiments in a local launch (the embedded coordinator): a grid of parameter-server trials, real Keras
trials under adaptive ASHA that pause at a checkpoint and continue from it, and local launches' experiments seen
and acted on from other terminals, running and ended. (On a cluster: tests/integration/test_experiments.py.)"""

import json
import os
import re
import subprocess
import sys

import pytest

from cluster.coordinator.store import SqliteStore
from tests.conftest import REPO, cli_env, run_cli, wait_for
from tests.integration.test_experiments import trained_steps, write_config
from tests.unit.test_json_output import valid

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


def test_local_launches_experiments_are_listed_shown_and_acted_on_without_a_coordinator(tmp_path, marker):
    """Issue 46, measured 3: after a local search ended, `tfdist experiments` and `tfdist experiment eN` (and
    --json) said "no coordinator given", and `tfdist cancel/preempt/resume eN` named no local run. Now they answer
    from the local runs, as `tfdist jobs` does: a running launch's experiment through that launch, an ended one
    from its run; run N's experiment is eN."""
    env = {"XDG_STATE_HOME": str(tmp_path / "state"), "TFDIST_RUNTIME_DIR": str(tmp_path / "runtime"),
           "TFDIST_COORDINATOR": ""}  # this test's local runs only, and no coordinator of the user's
    cli = lambda *args, timeout=60: run_cli(list(args), marker, timeout=timeout, **env)  # noqa: E731

    def answer(*args) -> str:
        result = cli(*args)
        assert result.returncode == 0, f"tfdist {' '.join(args)}: {result.stderr}"
        return result.stdout

    def experiment(ref) -> dict:
        return valid(json.loads(answer("experiment", ref, "--json")), "tfdist experiment ID --json")

    grid = {"name": "grid", "metric": "val_loss", "max_length": {"batches": 2}, "max_concurrent_trials": 1}
    rates = {"learning_rate": {"type": "log", "base": 10, "minval": -3, "maxval": -1, "count": 2},
             "global_batch_size": 8}
    quick, slow = tmp_path / "quick", tmp_path / "slow"
    quick.mkdir()
    slow.mkdir()

    # 1. A grid of 2 trials to the end.
    done = cli("launch", "--config", write_config(quick, grid, slow=0.05, hyperparameters=rates), timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    first = re.search(r"experiment (e1-\w+) submitted", done.stderr).group(1)

    # 2. Another, seen while it runs, preempted, resumed and canceled from here: run 3 (run 1 holds its 2 trials).
    config = write_config(slow, {**grid, "max_length": {"batches": 100}}, slow=0.2, hyperparameters=rates)
    proc = subprocess.Popen([sys.executable, "-m", "cluster.client.cli", "launch", "--config", config], cwd=REPO,
                            env=cli_env(marker, **env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        running = lambda: proc.poll() is None  # noqa: E731
        wait_for(lambda: list(slow.glob("steps-*")), "the second search's first step", timeout=120, alive=running)
        listed = json.loads(answer("experiments", "--json"))["experiments"]
        assert [(e["id"][:3], e["state"]) for e in listed] == [("e1-", "COMPLETED"), ("e3-", "ACTIVE")], listed
        second, job = listed[1]["id"], experiment("e3")["trials"][0]["job_id"]
        assert answer("preempt", "e3").startswith("experiment e3: PAUSED")
        wait_for(lambda: experiment("e3")["trials"][0]["state"] == "PAUSED", "its trial paused", alive=running)
        assert answer("resume", "e3") == "experiment e3: ACTIVE\n"
        wait_for(lambda: trained_steps(slow, job)[-1][0] == 1, "its trial trained again", alive=running)
        assert answer("cancel", second) == f"experiment {second}: CANCELED\n"
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130 and f"experiment {second} (search) CANCELED" in out, err[-3000:]
    steps = trained_steps(slow, job)
    resumed = steps.index(next(s for s in steps if s[0] == 1))
    assert steps[resumed][1] == steps[resumed - 1][1] + 1, steps  # from the checkpoint it paused at

    # 3. Both ended: listed, shown with their trials, by eN or id; an id no run holds is one line.
    table = answer("experiments").splitlines()
    assert [line.split()[:5] for line in table[1:]] == [[first, "search", "COMPLETED", "grid", "2/2"],
                                                         [second, "search", "CANCELED", "grid", "1/2"]], table
    listed = valid(json.loads(answer("experiments", "--json")), "tfdist experiments --json")["experiments"]
    assert [(e["id"], e["state"], e["trials_made"], e["trials"]) for e in listed] == \
        [(first, "COMPLETED", 2, []), (second, "CANCELED", 1, [])]
    shown = answer("experiment", "e1")
    assert shown.startswith(f"experiment {first} (search) COMPLETED") and shown.count(" SUCCEEDED ") == 2, shown
    trials = experiment(second)["trials"]
    assert [(t["trial"], t["job_id"], t["state"]) for t in trials] == [(1, job, "CANCELED")]
    unknown = cli("experiment", "e9")
    assert unknown.returncode == 2 and unknown.stderr.count("\n") == 1, unknown.stderr
    assert unknown.stderr.startswith("tfdist: error: experiment e9 is not one of your local runs (`tfdist experiments` "
                                     "lists them)")
    ended = cli("cancel", "e1")
    assert ended.returncode != 0 and f"experiment {first} already ended (COMPLETED)" in ended.stderr


def test_a_local_searchs_trials_are_each_listed_and_found_and_no_later_launch_takes_their_ids(tmp_path, marker):
    """A local search's run N numbered its trials N, N+1, ..., numbers the next local runs took too: `tfdist
    job/logs/metrics` did not find a trial after the first ("job 2-563f not found", though `tfdist jobs` listed
    it), and `tfdist jobs` listed only each run's newest job. Now a run reserves a number for every trial it may
    make: each trial is listed and found by its id and by its number, and the next launch numbers after them."""
    env = {"XDG_STATE_HOME": str(tmp_path / "state"), "TFDIST_RUNTIME_DIR": str(tmp_path / "runtime"),
           "TFDIST_COORDINATOR": ""}  # this test's local runs only, and no coordinator of the user's

    def answer(*args) -> str:
        result = run_cli(list(args), marker, timeout=120, **env)
        assert result.returncode == 0, f"tfdist {' '.join(args)}: {result.stderr}"
        return result.stdout

    grid = {"name": "grid", "metric": "val_loss", "max_length": {"batches": 2}, "max_concurrent_trials": 1}
    rates = {"learning_rate": {"type": "categorical", "vals": [0.0001, 0.01, 1.0]}, "global_batch_size": 8}
    done = run_cli(["launch", "--config", write_config(tmp_path, grid, slow=0.01, hyperparameters=rates)], marker,
                   timeout=120, **env)
    assert done.returncode == 0 and "3 of 3 trials made, 3 ended" in done.stdout, done.stderr[-3000:]
    latest = {t["job_id"]: t["latest"] for t in json.loads(answer("experiment", "e1", "--json"))["trials"]}
    trials = list(latest)
    assert len(trials) == 3 and len(set(latest.values())) == 3, latest  # val_loss tells the trials apart

    listed = valid(json.loads(answer("jobs", "--json")), "tfdist jobs --json")["jobs"]
    assert [(j["id"], j["state"]) for j in listed] == [(t, "SUCCEEDED") for t in trials]
    for trial in trials:
        for ref in (trial, trial.split("-")[0]):
            assert json.loads(answer("job", ref, "--json"))["id"] == trial
        assert answer("logs", trial) == ""  # found: the trial prints nothing
        rows = [json.loads(line) for line in answer("metrics", trial, "--json").splitlines()]
        assert (rows[-1]["step"], rows[-1]["metrics"]) == (2, {"val_loss": latest[trial]}), rows

    later = run_cli(["launch", "--", sys.executable, "-c", "print('later')"], marker, timeout=120, **env)
    assert later.returncode == 0, later.stderr[-3000:]
    job = re.search(r"tfdist: job (\S+) submitted", later.stderr).group(1)
    numbers = [int(t.split("-")[0]) for t in trials]
    assert int(job.split("-")[0]) > max(numbers), (job, trials)
    assert [j["id"] for j in json.loads(answer("jobs", "--json"))["jobs"]] == [*trials, job]
    assert "[rank=0] later" in answer("logs", job)
