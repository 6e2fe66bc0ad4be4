"""Experiments: Determined's searcher config, ASHA's rungs (Determined's semantics), values drawn by Optuna at a
fixed seed, and the runner on a real core and SQLite store with scripted nodes: trials are gang jobs, the loser
of a rung pauses at its checkpoint while the next trial is queued in the same event, a promoted trial resumes
(never from step 0), and a coordinator restart at any event makes the same decisions."""

import dataclasses

import pytest

from cluster.coordinator.core import Settings
from cluster.coordinator.experiments import halving, search
from cluster.coordinator.experiments.runner import reports, trial_spec
from cluster.coordinator.store import SqliteStore
from cluster.shared import search_space, searcher as searcher_lib
from cluster.shared.config import ConfigError, config_from_dict
from cluster.shared.model import ExperimentState, JobState, MetricRow
from tests.agent_core import AgentCore
from tests.core_nodes import Node, drive, spec
from tfdist.metrics import CHECKPOINT_RECORD, PREEMPTED_RECORD, PREEMPTIBLE_RECORD

LR = {"type": "log", "base": 10, "minval": -4, "maxval": -1}


# ---------------------------------------------------------------- the config, as Determined's users write it

def test_determined_random_search_with_a_log_hyperparameter_is_an_experiment():
    # Measured 1: this config was refused ("searcher: not supported yet", and `log` without a searcher).
    config = config_from_dict({"entrypoint": "python train.py", "hyperparameters": {"learning_rate": LR},
                               "searcher": {"name": "random", "metric": "val_loss", "max_trials": 8}})
    assert config.searcher["name"] == "random" and config.searcher["max_trials"] == 8
    assert config.hyperparameters == {"learning_rate": LR}  # the space, kept for the trials


@pytest.mark.parametrize("searcher, message", [
    ({"name": "pbt", "metric": "l"}, "searcher.name: pbt is Determined's; tfdist runs single, grid, random, "
                                     "adaptive_asha, tpe"),
    ({"name": "random", "metric": "l"}, "searcher.max_trials: searcher random needs how many trials"),
    ({"name": "random", "max_trials": 4}, "searcher.metric: searcher random needs the metric it optimises"),
    ({"name": "adaptive_asha", "metric": "l", "max_trials": 4}, "searcher.max_length: adaptive_asha needs"),
    ({"name": "adaptive_asha", "metric": "l", "max_trials": 4, "max_length": {"epochs": 4}, "divisor": 1},
     "searcher.divisor: expected a number greater than 1"),
    ({"name": "adaptive_asha", "metric": "l", "max_trials": 4, "max_length": {"epochs": 4}, "mode": "wild"},
     "searcher.mode: expected one of aggressive, standard, conservative"),
    ({"name": "random", "metric": "l", "max_trials": 4, "max_rungs": 3},
     "searcher.max_rungs: not a key of searcher random"),
    ({"name": "grid", "metric": "l"}, "hyperparameters.learning_rate: a grid search needs `count` for type log"),
])
def test_what_tfdist_does_not_run_is_one_line_naming_the_key(searcher, message):
    with pytest.raises(ConfigError) as e:
        config_from_dict({"entrypoint": "x", "hyperparameters": {"learning_rate": LR}, "searcher": searcher})
    assert message in str(e.value) and "\n" not in str(e.value)


def test_a_search_type_without_a_searcher_says_how_to_search_or_fix_a_value():
    with pytest.raises(ConfigError, match="needs a searcher that searches .*name: random.*val: 0.01"):
        config_from_dict({"entrypoint": "x", "hyperparameters": {"lr": LR}})


def test_grid_points_follow_determined_counts_and_nested_groups():
    space = {"opt": {"units": {"type": "int", "minval": 8, "maxval": 64, "count": 3},
                     "act": {"type": "categorical", "vals": ["relu", "tanh"]}},
             "lr": {"type": "log", "base": 10, "minval": -3, "maxval": -1, "count": 3}, "gbs": 32}
    points = search_space.grid(space)
    assert len(points) == 18 and points[0] == {"opt.units": 8, "opt.act": "relu", "lr": 0.001}
    assert sorted({p["opt.units"] for p in points}) == [8, 36, 64]
    assert search_space.assign(space, points[-1]) == {"opt": {"units": 64, "act": "tanh"}, "lr": 0.1, "gbs": 32}


# ---------------------------------------------------------------- values drawn at a fixed seed

def _searcher(**keys):
    return searcher_lib.parse({"metric": "val_loss", **keys})


def test_random_values_are_in_range_and_the_same_for_the_same_seed():
    config = _searcher(name="random", max_trials=6, max_concurrent_trials=6)
    space = {"lr": LR, "units": {"type": "int", "minval": 8, "maxval": 64},
             "act": {"type": "categorical", "vals": [["a"], {"b": 1}]}}
    first = [op.values for op in search.begin(config, space, seed=11)[1]]
    again = [op.values for op in search.begin(config, space, seed=11)[1]]
    other = [op.values for op in search.begin(config, space, seed=12)[1]]
    assert first == again and first != other and len(first) == 6
    assert all(1e-4 <= v["lr"] <= 0.1 and 8 <= v["units"] <= 64 and v["act"] in (["a"], {"b": 1}) for v in first)


def test_tpe_learns_from_ended_trials():
    config = _searcher(name="tpe", max_trials=12, max_concurrent_trials=1)
    space = {"x": {"type": "double", "minval": 0.0, "maxval": 1.0}}
    state, _ = search.begin(config, space, seed=3)
    for number in range(1, 12):
        x = state.trial(number).values["x"]
        search.observed(config, space, state, number, (x - 0.2) ** 2, 1)
        search.ended(config, space, state, number)
    late = [t.values["x"] for t in state.trials[8:]]
    assert len(state.trials) == 12 and sum(abs(x - 0.2) < 0.3 for x in late) >= 3  # it goes where the loss is low


# ---------------------------------------------------------------- ASHA, Determined's semantics

def test_rung_lengths_and_brackets_by_mode():
    assert [r.units for r in halving.Bracket.make(3, 8, 2.0, 8, 2).rungs] == [2, 4, 8]
    assert [len(b.rungs) for b in halving.brackets(16, 4, 5, 8, 2.0, "aggressive")] == [4]
    assert [len(b.rungs) for b in halving.brackets(16, 4, 5, 8, 2.0, "standard")] == [4, 3, 2]
    conservative = halving.brackets(16, 4, 5, 8, 2.0, "conservative")
    assert [len(b.rungs) for b in conservative] == [4, 3, 2, 1] and sum(b.max_trials for b in conservative) == 16


def test_the_best_half_of_a_rung_goes_on_and_a_waiting_trial_is_promoted_later():
    bracket = halving.Bracket.make(2, 4, 2.0, 4, 2)
    for trial in (1, 2):
        halving.add_trial(bracket, trial)
    first = halving.reached(bracket, 1, 0.5, 2.0)
    assert first == halving.Decisions(wait=(1,), create=1)  # alone in the rung: it waits, a new trial starts
    halving.add_trial(bracket, 3)
    second = halving.reached(bracket, 2, 0.9, 2.0)  # worse than trial 1: the top half is trial 1, promoted now
    assert second == halving.Decisions(continue_=(1,), wait=(2,))
    third = halving.reached(bracket, 3, 0.1, 2.0)  # the best so far: it goes on at once
    assert third.continue_ == (3,) and third.wait == ()


def test_a_trial_that_ended_early_counts_last_and_is_never_continued():
    bracket = halving.Bracket.make(2, 4, 2.0, 2, 2)
    for trial in (1, 2):
        halving.add_trial(bracket, trial)
    assert halving.ended(bracket, 1, 2.0, waiting=False) == halving.Decisions(wait=())
    decided = halving.reached(bracket, 2, 0.3, 2.0)
    assert decided.continue_ == (2,) and 1 not in decided.continue_


# ---------------------------------------------------------------- the runner on a real core

ASHA = {"name": "adaptive_asha", "metric": "val_loss", "max_trials": 4, "max_length": {"batches": 4},
        "max_rungs": 2, "divisor": 2, "mode": "aggressive", "max_concurrent_trials": 2}


def _experiment_spec(searcher=ASHA, **extra):
    base = spec(2)
    config = dataclasses.replace(base.config, searcher=searcher_lib.parse(searcher).to_mapping(), seed=5,
                                 hyperparameters={"lr": LR, "global_batch_size": 8}, **extra)
    return dataclasses.replace(base, config=config)


@pytest.fixture
def cluster(tmp_path):
    core = AgentCore(SqliteStore(str(tmp_path / "c.sqlite")), Settings(lost_after=10, port_range=(30000, 30099),
                                                                       startup_timeout=60))
    nodes = [Node(core, "a1"), Node(core, "a2")]  # 2 slots each: two trials of 2 slots at once
    for n in nodes:
        n.register()
    return core, nodes


def _trials(core, experiment_id):
    return search.SearchState.from_plain(core.store.experiment(experiment_id).search).trials


def _node_of(nodes, job_id):
    return next(n for n in nodes if job_id in n.started)


def _report(core, nodes, job, step, value, now):
    """The chief's searcher metric at `step` (and the records a Checkpoint callback ships beside it)."""
    node = _node_of(nodes, job)
    attempt = core.store.job(job).attempt
    core.push_metrics(node.name, job, [MetricRow(0, step, PREEMPTIBLE_RECORD, attempt, now),
                                       MetricRow(0, step, CHECKPOINT_RECORD, attempt, now, note=f"/ck/{job}-{step}"),
                                       MetricRow(0, step, "val_loss", value, now)])


def _stop_at_preemption(core, nodes, job, step, now):
    """The workers stop at a common step, save and exit 0, as the Checkpoint callback does."""
    node = _node_of(nodes, job)
    attempt = core.store.job(job).attempt
    core.push_metrics(node.name, job, [MetricRow(0, step, PREEMPTED_RECORD, attempt, now)])
    node.finish(job, now)


def test_asha_pauses_the_loser_queues_the_next_trial_and_resumes_a_promoted_one(cluster):
    core, nodes = cluster
    experiment_id, state = core.submit(_experiment_spec(), now=1)
    assert experiment_id.startswith("e1-") and state == "ACTIVE"
    drive(nodes, 2)
    t1, t2 = (t.job for t in _trials(core, experiment_id))
    assert [core.store.job(j).state for j in (t1, t2)] == [JobState.RUNNING] * 2
    assert core.store.job(t1).spec.config.hyperparameters["lr"] == _trials(core, experiment_id)[0].values["lr"]

    _report(core, nodes, t1, 2, 0.9, now=3)  # rung 1 (2 batches): alone there, it waits
    job1 = core.store.job(t1)
    trials = _trials(core, experiment_id)
    assert job1.preempt_requested and trials[0].waiting and len(trials) == 3  # trial 3 queued in the same event
    assert core.store.job(trials[2].job).state == JobState.QUEUED

    _stop_at_preemption(core, nodes, t1, 3, now=4)
    assert core.store.job(t1).state == JobState.PAUSED
    drive(nodes, 5)  # its nodes went to trial 3
    assert core.store.job(_trials(core, experiment_id)[2].job).state == JobState.RUNNING

    _report(core, nodes, t2, 2, 1.5, now=6)  # worse than trial 1: trial 1 is promoted, trial 2 waits
    trials = _trials(core, experiment_id)
    job1 = core.store.job(t1)
    assert not trials[0].waiting and trials[1].waiting and job1.state == JobState.QUEUED and job1.attempt == 1
    assert "resumed from the checkpoint at step 2" in job1.message  # it continues; it never retrains from 0
    assert core.store.experiment(experiment_id).state == ExperimentState.ACTIVE


def test_the_experiment_completes_only_when_every_trial_job_ended(cluster):
    core, nodes = cluster
    experiment_id, _ = core.submit(_experiment_spec(dict(ASHA, max_trials=2, max_rungs=1)), now=1)
    drive(nodes, 2)
    t1, t2 = (t.job for t in _trials(core, experiment_id))
    _report(core, nodes, t1, 4, 0.5, now=3)
    _report(core, nodes, t2, 4, 0.2, now=3)  # both at the top rung: the search is decided, the jobs still run
    assert core.store.experiment(experiment_id).state == ExperimentState.ACTIVE
    _node_of(nodes, t1).finish(t1, now=4)
    assert core.store.experiment(experiment_id).state == ExperimentState.ACTIVE
    _node_of(nodes, t2).finish(t2, now=5)
    done = core.store.experiment(experiment_id)
    assert done.state == ExperimentState.COMPLETED and done.message == "best: trial 2 (val_loss 0.2)"


def test_cancel_preempt_and_resume_of_an_experiment_act_on_its_trials(cluster):
    core, nodes = cluster
    experiment_id, _ = core.submit(_experiment_spec(), now=1)
    drive(nodes, 2)
    t1, t2 = (t.job for t in _trials(core, experiment_id))
    _report(core, nodes, t1, 1, 0.9, now=3)
    _report(core, nodes, t2, 1, 0.9, now=3)
    assert core.preempt("e1", now=4) == "PAUSED"
    assert all(core.store.job(j).preempt_requested for j in (t1, t2))
    for job in (t1, t2):
        _stop_at_preemption(core, nodes, job, 2, now=5)
    assert [core.store.job(j).state for j in (t1, t2)] == [JobState.PAUSED] * 2
    assert core.resume(experiment_id, now=6) == "ACTIVE"
    assert [core.store.job(j).state for j in (t1, t2)] == [JobState.QUEUED] * 2
    assert core.cancel("e1", now=7) == "CANCELED"
    assert all(core.store.job(t.job).state == JobState.CANCELED for t in _trials(core, experiment_id))


def test_a_local_runs_experiment_is_numbered_as_its_run(tmp_path):
    """A local launch's coordinator numbers from its run's N (first_job_seq): run N's experiment is eN and its
    first trial job N-XXXX, whatever other runs' stores hold (cluster/client/local_runs.py)."""
    core = AgentCore(SqliteStore(str(tmp_path / "c.sqlite")), Settings(port_range=(30000, 30099), first_job_seq=7))
    Node(core, "a1").register()
    experiment_id, _ = core.submit(_experiment_spec(), now=1)
    assert experiment_id.startswith("e7-") and _trials(core, experiment_id)[0].job.startswith("7-")


def test_a_local_run_reserves_a_number_per_trial_and_its_coordinator_gives_none_past_them(tmp_path):
    """A local run reserves the most trials its search can make (each a job; adaptive_asha's brackets share
    max_trials out: test_adaptive_asha_makes_no_more_trials_than_max_trials); were a trial to need a number past
    them (last_job_seq), the experiment fails saying so rather than take a number the next run holds."""
    grid = {"lr": {"type": "categorical", "vals": [1, 2, 3]}, "units": {"type": "int", "minval": 1, "maxval": 2,
                                                                          "count": 2}}
    assert searcher_lib.most_trials(_searcher(name="grid"), grid) == 6
    assert searcher_lib.most_trials(_searcher(name="random", max_trials=5), {"lr": LR}) == 5
    asha = searcher_lib.parse(ASHA)
    brackets = search.begin(asha, {"lr": LR}, 1)[0].brackets
    assert searcher_lib.most_trials(asha, {"lr": LR}) == sum(b.max_trials for b in brackets) == 4
    core = AgentCore(SqliteStore(str(tmp_path / "c.sqlite")), Settings(port_range=(30000, 30099), first_job_seq=7,
                                                                       last_job_seq=8))
    Node(core, "a1", slots=8).register()
    random = {"name": "random", "metric": "val_loss", "max_trials": 3, "max_concurrent_trials": 3}
    experiment_id, state = core.submit(_experiment_spec(random), now=1)
    assert state == "FAILED" and core.store.experiment(experiment_id).message == \
        "trial 3: this local run's job numbers 7..8 are all taken; launch again for another job"
    assert [t.job.split("-")[0] for t in _trials(core, experiment_id)] == ["7", "8", ""]


def test_a_restarted_coordinator_makes_the_same_decisions(tmp_path):
    """Every event's decisions are stored with it: a core reopened on the store after each event goes on
    exactly as one that never stopped."""
    def run(restart_each_event: bool, where):
        path = str(where / "c.sqlite")
        settings = Settings(lost_after=1000, port_range=(30000, 30099), startup_timeout=600)
        box = {"core": AgentCore(SqliteStore(path), settings)}
        nodes = [Node(box["core"], "a1"), Node(box["core"], "a2")]

        def again():
            if restart_each_event:
                box["core"].store.close()
                box["core"] = AgentCore(SqliteStore(path), settings)
                for n in nodes:
                    n.core = box["core"]
                    n.register()

        for n in nodes:
            n.register()
        experiment_id, _ = box["core"].submit(_experiment_spec(dict(ASHA, max_trials=6)), now=1)
        for now in range(2, 60):
            again()
            drive(nodes, now, rounds=3)
            core = box["core"]
            trials = _trials(core, experiment_id)
            for trial in trials:
                job = core.store.job(trial.job)
                node = next((n for n in nodes if trial.job in n.running), None)
                if node is None or job.state != JobState.RUNNING:
                    continue
                if job.preempt_requested:
                    _stop_at_preemption(core, nodes, trial.job, trial.length + 1, now)
                elif trial.length < 4:
                    _report(core, nodes, trial.job, trial.length + 1, 1.0 / (trial.number + trial.length), now)
                else:
                    node.finish(trial.job, now)
            if core.store.experiment(experiment_id).terminal:
                break
        core = box["core"]
        experiment = core.store.experiment(experiment_id)
        return experiment.state, experiment.message, [(t.values, t.best, t.why) for t in _trials(core, experiment_id)]

    (tmp_path / "a").mkdir(mode=0o700)
    (tmp_path / "b").mkdir(mode=0o700)
    steady = run(False, tmp_path / "a")
    assert steady[0] == ExperimentState.COMPLETED and len(steady[2]) == 6
    assert run(True, tmp_path / "b") == steady


def test_searcher_reports_read_the_length_in_max_lengths_unit():
    job = type("J", (), {"spec": _experiment_spec()})
    rows = [MetricRow(0, 40, "epoch", 2, 1), MetricRow(0, 40, "val_loss", 0.5, 1), MetricRow(0, 41, "loss", 1, 1)]
    assert reports(_searcher(name="random", max_trials=1, max_length={"epochs": 4}), rows, job) == [(0.5, 2)]
    assert reports(_searcher(name="random", max_trials=1, max_length={"batches": 4}), rows, job) == [(0.5, 40)]
    assert reports(_searcher(name="random", max_trials=1, max_length={"records": 4}), rows, job) == [(0.5, 320)]


def test_a_trial_is_a_job_with_its_values_and_the_experiment_named():
    from cluster.shared.model import Experiment

    experiment = Experiment("e4-aa", 4, _experiment_spec(), ExperimentState.ACTIVE, 1.0)
    trial = trial_spec(experiment, 3, {"lr": 0.01})
    assert trial.experiment_id == "e4-aa" and trial.trial == 3 and trial.name == "t.t3"
    assert trial.config.hyperparameters == {"lr": 0.01, "global_batch_size": 8}
    assert trial.submission_id == "e4-aa/3"  # a retried creation is the same job


# ---------------------------------------------------------------- what a review found

def test_a_trial_made_while_a_node_is_lost_queues_rather_than_rolling_the_loss_back(cluster):
    """Trials were admitted with their experiment: a trial the search makes while a node is lost (the cluster
    too small for it right now) waits for nodes; the loss that ended its predecessor is kept."""
    core, nodes = cluster
    experiment_id, _ = core.submit(_experiment_spec(dict(ASHA, max_concurrent_trials=1, max_trials=3),
                                                    slots_per_trial=4), now=1)
    drive(nodes, 2)
    first = _trials(core, experiment_id)[0].job
    assert core.store.job(first).state == JobState.RUNNING  # 4 slots: both nodes
    nodes[0].beat(20)  # a2 says nothing past lost_after (10 s)
    core.check_agents(now=20)
    assert core.store.job(first).state == JobState.FAILED
    trials = _trials(core, experiment_id)
    assert len(trials) == 2 and core.store.job(trials[1].job).state == JobState.QUEUED


def test_preempt_then_resume_of_an_experiment_resumes_a_trial_that_was_still_stopping(cluster):
    core, nodes = cluster
    experiment_id, _ = core.submit(_experiment_spec(), now=1)
    drive(nodes, 2)
    t1, t2 = (t.job for t in _trials(core, experiment_id))
    _report(core, nodes, t1, 1, 0.9, now=3)  # t1 can stop at a step; t2 has not shown it yet
    assert core.preempt(experiment_id, now=4) == "PAUSED"  # not refused for t2
    assert core.store.job(t1).preempt_requested and not core.store.job(t2).preempt_requested
    _report(core, nodes, t2, 1, 0.8, now=5)  # now t2 can: it is asked too
    assert core.store.job(t2).preempt_requested
    _stop_at_preemption(core, nodes, t1, 2, now=6)
    assert core.resume(experiment_id, now=7) == "ACTIVE"  # t2 is still stopping
    assert core.store.job(t1).state == JobState.QUEUED
    _stop_at_preemption(core, nodes, t2, 2, now=8)
    assert core.store.job(t2).state == JobState.QUEUED and core.store.job(t2).attempt == 1  # resumed on pausing


def test_a_trial_whose_values_break_the_config_fails_the_experiment_and_cancels_its_other_trials(cluster):
    core, nodes = cluster
    space = {"global_batch_size": {"type": "categorical", "vals": [8, 0]}}
    spec = _experiment_spec({"name": "grid", "metric": "val_loss", "max_concurrent_trials": 2})
    spec = dataclasses.replace(spec, config=dataclasses.replace(spec.config, hyperparameters=space))
    experiment_id, state = core.submit(spec, now=1)
    experiment = core.store.experiment(experiment_id)
    assert state == "FAILED" and experiment.message.startswith(
        "trial 2: hyperparameters.global_batch_size: must be at least 1, got 0")
    assert core.store.job(_trials(core, experiment_id)[0].job).state == JobState.CANCELED


def test_adaptive_asha_makes_no_more_trials_than_max_trials():
    for brackets in (halving.brackets(2, 4, 5, 100, 1.2, "standard"),
                     halving.brackets(2, 4, 5, 100, 2.0, "conservative", bracket_rungs=(3, 3, 3, 3))):
        assert sum(b.max_trials for b in brackets) == 2


def test_an_epoch_count_shipped_apart_from_its_metric_is_found():
    job = type("J", (), {"spec": _experiment_spec()})
    config = _searcher(name="random", max_trials=1, max_length={"epochs": 4})
    stored = [MetricRow(0, 40, "epoch", 3, 1)]
    assert reports(config, [MetricRow(0, 40, "val_loss", 0.5, 1)], job, lambda: stored) == [(0.5, 3)]


@pytest.mark.parametrize("batch, message", [
    ({"type": "categorical", "vals": [8, 0]}, "hyperparameters.global_batch_size: must be at least 1, got 0"),
    ({"type": "log", "base": 2, "minval": 3, "maxval": 6}, "hyperparameters.global_batch_size: a batch size is an "
                                                           "integer: search it with type int or categorical, not log"),
])
def test_every_global_batch_size_a_trial_may_get_is_checked_at_submission(batch, message):
    with pytest.raises(ConfigError, match=f"^{message}$"):
        config_from_dict({"entrypoint": "x", "hyperparameters": {"global_batch_size": batch},
                          "searcher": {"name": "random", "metric": "loss", "max_trials": 2}})
