"""Local runs' experiments (issue 46, measured 3; cluster/client/local_experiments.py): what names an experiment
where a job id is taken, a stored experiment its launch left unended, a search's run's record, and which run
holds eN. Pure rules on values; the runs on real (temporary) directories, answered from their records (no
coordinator is started: an ended run's record says it all)."""

import pytest

from cluster.client import local_experiments, local_runs
from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb
from tfdist.errors import UserError


def _experiment(experiment_id, state="COMPLETED", trials=2):
    made = [pb.Trial(number=n, job_id=f"{n}-abcd", state="SUCCEEDED") for n in range(1, trials + 1)]
    return pb.Experiment(id=experiment_id, name="search", state=state, trials_made=trials, trials=made)


def test_an_experiment_is_named_by_en_or_its_id_and_a_job_id_never_is():
    assert all(local_experiments.is_reference(r) for r in ("e7", "e7-1a2b", "e12"))
    assert not any(local_experiments.is_reference(r) for r in ("7", "7-1a2b", "e", "e0", "E7", "e7-", "ex", "e7-XY"))
    assert local_experiments.names("e7-1a2b", "e7") and local_experiments.names("e7-1a2b", "e7-1a2b")
    assert not any(local_experiments.names("e7-1a2b", r) for r in ("e71", "e7-1a2c", "7", "e1"))


def test_a_stored_experiment_its_launch_left_unended_says_so_and_can_only_be_canceled():
    active = _experiment("e4-ab12", state="ACTIVE")
    shown = local_experiments.orphaned(active)
    assert shown.state == "ACTIVE" and "launch ended without recording" in shown.message
    assert "`tfdist cancel e4-ab12`" in shown.message and active.message == ""  # a copy
    done = _experiment("e5-ab12")
    assert local_experiments.orphaned(done) is done
    for command, said in (("preempt", "cannot be preempted"), ("resume", "cannot be resumed")):
        with pytest.raises(UserError, match=f"experiment e4-ab12 is ACTIVE in its stored state.*{said}"):
            local_experiments.check_action(active, command, live=False)
        local_experiments.check_action(active, command, live=True)  # its launch runs it: the coordinator answers
        local_experiments.check_action(done, command, live=False)  # the coordinator says "already ended"
    local_experiments.check_action(active, "cancel", live=False)  # marks it canceled


def test_a_listing_leaves_the_trials_out_as_a_coordinators_does():
    full = _experiment("e3-ab12")
    shown = local_experiments.listed(full)
    assert list(shown.trials) == [] and shown.trials_made == 2 and len(full.trials) == 2


class RecordingClient:
    """What record_from asks of a coordinator, answered from values."""

    def __init__(self, jobs, experiments=()):
        self._jobs, self._experiments = jobs, list(experiments)

    def jobs(self, states, limit, summary):
        return self._jobs

    def experiments(self):
        return [local_experiments.listed(e) for e in self._experiments]

    def experiment(self, ref):
        return next(e for e in self._experiments if e.id == ref)


def _trial_job(job_id, experiment_id):
    return pb.Job(id=job_id, state="SUCCEEDED", spec=pb.JobSpec(experiment_id=experiment_id, trial=1))


@pytest.fixture
def runs(tmp_path, monkeypatch):
    """Run 1: a job of its own; run 2: a search (e2, numbered as its run); runs 3 and 4: searches from before
    experiments were numbered after their run (both e1). Each ended, recorded as its launch left it."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    made = [local_runs.new_run() for _ in range(4)]
    made[0].record_from(RecordingClient([pb.Job(id="1-abcd", state="SUCCEEDED")]))
    for run, experiment_id in zip(made[1:], ("e2-abcd", "e1-ffff", "e1-eeee")):
        trial = _trial_job(f"{run.number}-abcd", experiment_id)
        run.record_from(RecordingClient([trial], [_experiment(experiment_id)]))
    return made


def test_a_search_runs_record_holds_its_experiment_with_its_trials_and_a_jobs_run_none(runs):
    assert runs[0].recorded_experiments() is None and local_experiments.experiments_of(runs[0]) == []
    recorded = local_experiments.experiments_of(runs[1])
    assert [(e.id, len(e.trials)) for e in recorded] == [("e2-abcd", 2)]
    listed = local_experiments.all_experiments(local_runs.all_runs())
    assert [(e.id, e.trials_made, len(e.trials)) for e in listed] == [("e2-abcd", 2, 0), ("e1-ffff", 2, 0),
                                                                     ("e1-eeee", 2, 0)]


def test_en_is_found_in_run_n_an_older_runs_by_its_id_and_two_alike_are_refused(runs):
    run, found = local_experiments.find("e2")
    assert run.number == 2 and found.id == "e2-abcd" and len(found.trials) == 2
    assert local_experiments.find("e2-abcd")[0].number == 2
    assert local_experiments.find("e1-eeee")[0].number == 4  # run 1 holds a job of its own
    assert local_experiments.find("e9") is None and local_experiments.find("2") is None
    with pytest.raises(UserError, match=r"e1 names 2 experiments of your local runs \(e1-ffff in run 3, e1-eeee in "
                                        r"run 4\): give its full id"):
        local_experiments.find("e1")
