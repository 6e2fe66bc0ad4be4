"""The experiments of this user's local runs (cluster/client/local_runs.py). A local `tfdist launch` of a config
whose searcher searches keeps its experiment in its run: eN in run N, its trials the run's jobs. Without
--coordinator and --credentials, `tfdist experiments` lists every local run's experiments, running or ended,
`tfdist experiment ID` shows one from the run that holds it (cluster/client/experiment_commands.py), and
`tfdist cancel/preempt/resume eN` act on it there (cluster/client/local_commands.py). As for a run's job, a
run's record answers once its launch ended and its experiment ended; otherwise its coordinator does: the running
launch's, or one started here on the stored state.

An experiment runs only inside its launch: a stored one that had not ended when its launch did (the launch was
killed) says so, can be canceled, and is neither preempted nor resumed (nothing would run its trials)."""

from __future__ import annotations

import re

from cluster.client import local_run_calls, local_runs
from cluster.client.experiment_view import TERMINAL
from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb
from tfdist.errors import UserError

REFERENCE = re.compile(r"e([1-9][0-9]*)(-[0-9a-f]+)?")  # eN, or an experiment's id eN-XXXX
STORED_ONLY = {"preempt": "preempted", "resume": "resumed"}  # what a stored experiment cannot be


# ---------------------------------------------------------------- pure

def is_reference(ref: str) -> bool:
    """Whether `ref`, where a job id is taken, names an experiment (`eN` or its id) instead."""
    return REFERENCE.fullmatch(ref) is not None


def names(experiment_id: str, ref: str) -> bool:
    """Whether `ref` (the id itself, or eN) names the experiment `experiment_id`."""
    return ref in (experiment_id, experiment_id.split("-", 1)[0])


def orphaned(experiment: pb.Experiment) -> pb.Experiment:
    """A stored experiment its launch left unended (the launch was killed: nothing runs its trials), said so
    in its message; an ended one as it is."""
    return local_run_calls.left_behind(experiment, TERMINAL, "experiment", "its trials")


def listed(experiment: pb.Experiment) -> pb.Experiment:
    """The experiment as a coordinator's listing answers it: its trials left out (trials_made counts them)."""
    shown = pb.Experiment()
    shown.CopyFrom(experiment)
    del shown.trials[:]
    return shown


def check_action(experiment: pb.Experiment, command: str, live: bool) -> None:
    """Refuses to preempt or resume a stored experiment that had not ended (its launch was killed): only its
    launch ran its trials. Anything else is the coordinator's to answer (an ended one: "already ended")."""
    if not live and command in STORED_ONLY and experiment.state not in TERMINAL:
        raise UserError(f"experiment {experiment.id} is {experiment.state} in its stored state, but its launch ended "
                        f"without recording how it ended (killed?): nothing runs its trials, so it cannot be "
                        f"{STORED_ONLY[command]}; `tfdist cancel {experiment.id}` marks it canceled")


# ---------------------------------------------------------------- the runs' experiments

def experiments_of(run: local_runs.LocalRun) -> list[pb.Experiment]:
    """The run's experiments, trials and all (none for a run of one job of its own): its record when every one
    ended and no launch runs them now, else its coordinator's answer (a running launch's, or one started here,
    which then records them; a stored one that had not ended says so)."""
    job = run.recorded()
    if job is not None and not job.spec.experiment_id:
        return []  # its job is no trial: a run of one job of its own
    recorded = run.recorded_experiments()
    holder = run.holder()
    if recorded is not None and all(e.state in TERMINAL for e in recorded) and \
            (holder is None or local_run_calls.published_by(holder) is None):
        return recorded  # (a holder that publishes no coordinator is another command reading the run)
    with local_run_calls.connect(run) as connection:
        client = connection.client
        found = [client.experiment(e.id) for e in client.experiments()]
    return found if connection.live else [orphaned(e) for e in found]


def all_experiments(runs: list[local_runs.LocalRun]) -> list[pb.Experiment]:
    """Every run's experiments as a listing shows them, oldest run first."""
    return [listed(e) for run in runs for e in experiments_of(run)]


def find(ref: str) -> tuple[local_runs.LocalRun, pb.Experiment] | None:
    """The local run holding experiment `ref` (eN or its id) and the experiment, trials and all; None when no
    local run holds it. Run N holds eN; the other runs are looked through too (a run made before local
    experiments were numbered after their run numbered its experiment e1)."""
    matched = REFERENCE.fullmatch(ref)
    if matched is None:
        return None
    runs = local_runs.all_runs()
    number = int(matched.group(1))
    for run in (r for r in runs if r.number == number):
        found = next((e for e in experiments_of(run) if names(e.id, ref)), None)
        if found is not None:
            return run, found
    held = [(run, e) for run in runs if run.number != number for e in experiments_of(run) if names(e.id, ref)]
    if len(held) > 1:
        raise UserError(f"{ref} names {len(held)} experiments of your local runs "
                        f"({', '.join(f'{e.id} in run {run.number}' for run, e in held)}): give its full id")
    return held[0] if held else None
