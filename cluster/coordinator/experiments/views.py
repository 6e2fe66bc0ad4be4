"""Experiments as the wire shows them (GetExperiment, ListExperiments): read from the store's reader, without the
coordinator's lock, as job listings are."""

from __future__ import annotations

from typing import Callable

from cluster.coordinator.experiments import search
from cluster.coordinator.experiments.runner import best_trial, find  # noqa: F401 (find: the servicers')
from cluster.coordinator.store.base import StateReader
from cluster.shared import jobspec, search_space, searcher as searcher_lib
from cluster.shared.model import Checkpoint, Experiment
from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb


def experiment_answer(reader: StateReader, experiment: Experiment, trials: bool = True,
                      checkpoint_of: Callable[[str], Checkpoint | None] = lambda job_id: None) -> pb.Experiment:
    config = searcher_lib.parse(experiment.spec.config.searcher)
    state = search.SearchState.from_plain(experiment.search)
    best = best_trial(config, state)
    answer = pb.Experiment(
        id=experiment.id, name=experiment.spec.name, state=experiment.state.value, searcher=config.name,
        metric=config.metric, smaller_is_better=config.smaller_is_better, created_at=experiment.created_at,
        ended_at=experiment.ended_at or 0.0, message=experiment.message, best_trial=best.number if best else 0,
        max_trials=search.max_trials(config, experiment.spec.config.hyperparameters), owner=experiment.owner,
        seed=state.seed, length_unit=config.max_length[0] if config.max_length else "batches",
        rung_lengths=[r.units for r in state.brackets[0].rungs] if state.brackets else [],
        trials_made=len(state.trials))
    if not trials:
        return answer
    for trial in state.trials:
        job = reader.job(trial.job) if trial.job else None
        values = search_space.assign(experiment.spec.config.hyperparameters, trial.values)
        message = pb.Trial(number=trial.number, job_id=trial.job, state=job.state.value if job else "GONE",
                           hparams=jobspec.map_to_pb(values), length=trial.length, rung=trial.rung,
                           waiting=trial.waiting, why=trial.why)
        checkpoint = checkpoint_of(trial.job) if trial.job else None
        if checkpoint is not None:
            message.checkpoint, message.checkpoint_step = checkpoint.path, checkpoint.step
        if trial.latest is not None:
            message.latest = trial.latest
        if trial.best is not None:
            message.best = trial.best
        answer.trials.append(message)
    return answer


def experiments_answer(reader: StateReader) -> pb.ListExperimentsResponse:
    return pb.ListExperimentsResponse(experiments=[experiment_answer(reader, e, trials=False)
                                                   for e in reader.experiments()])
