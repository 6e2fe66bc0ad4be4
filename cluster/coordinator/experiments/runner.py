"""The executor of experiments, inside the coordinator core's events: it makes an experiment and its first
trials, hears its trials' searcher metrics and ends, asks the search (search.py) what follows, and applies it
to the trials' jobs through the same job machine as a user's action (a trial is a job: queued, placed on whole
nodes, restarted, preempted and resumed as any other).

What a trial's event decides is applied at the end of the same event (`settle`), in its store transaction:
a trial that pauses or ends frees its nodes while the next trial is already queued, and a `kill -9` at any
moment leaves the event and the search's answer to it together, or neither."""

from __future__ import annotations

import dataclasses
import logging
import math
import secrets
from typing import Any, Callable, Sequence

from cluster.coordinator import job_machine
from cluster.coordinator.experiments import search
from cluster.coordinator.intake import Intake
from cluster.coordinator.lifecycle import JobLifecycle
from cluster.coordinator.store import StateStore
from cluster.coordinator.values import BadRequest, NotFound
from cluster.shared import config_values, limits, search_space, searcher as searcher_lib
from cluster.shared.jobspec import JobSpec
from cluster.shared.model import Experiment, ExperimentState, Job, JobState, MetricRow
from tfdist.errors import UserError
from tfdist.metrics import PREEMPTIBLE_RECORD

log = logging.getLogger("tfdist.coordinator")
EPOCH = "epoch"  # MetricsReporter's epoch count, reported beside each epoch's metrics


class Experiments:
    def __init__(self, store: StateStore, lifecycle: JobLifecycle, intake: Intake):
        self.store, self.lifecycle, self.intake = store, lifecycle, intake
        self.pending: list[tuple[str, Job, Any, float]] = []  # trials' events, settled at the event's end
        lifecycle.subscribe(self._transition)

    def _transition(self, job: Job, state: JobState, now: float) -> None:
        """A job changed state: a trial's is settled at the event's end (its searcher may start the next)."""
        if job.spec.experiment_id:
            self.pending.append(("state", job, state, now))

    # ---------------------------------------------------------------- a user's actions
    def submit(self, spec: JobSpec, now: float, owner: str) -> tuple[str, str]:
        """(experiment id, its state); a retried submission answers the experiment it made."""
        if spec.submission_id:
            known = next((e for e in self.store.experiments() if e.spec.submission_id == spec.submission_id), None)
            if known is not None:
                return known.id, known.state.value
        refusal = self.intake.admissions.refusal(spec, self.lifecycle.sizes())
        if refusal:
            raise BadRequest(refusal)
        config = searcher_lib.parse(spec.config.searcher)
        seed = spec.config.seed or secrets.randbelow(2 ** 31 - 2) + 1
        seq = max(self.store.next_experiment_seq(), self.intake.settings.first_job_seq)  # a local run N's: eN
        experiment = Experiment(f"e{seq}-{secrets.token_hex(2)}", seq, spec, ExperimentState.ACTIVE, now, owner)
        try:
            state, ops = search.begin(config, spec.config.hyperparameters, seed)
        except UserError as e:  # Optuna missing here, a grid's values: this submission's own refusal
            raise BadRequest(str(e)) from None
        log.info("experiment %s: %s search of %s, seed %d", experiment.id, config.name, spec.name, seed)
        experiment = self._apply(experiment, config, state, ops, now)
        self.store.put_experiment(experiment)
        return experiment.id, experiment.state.value

    def resolve(self, ref: str) -> Experiment | None:
        """An experiment by id or by `eN` (its number); None when `ref` does not name one (a job's)."""
        return find(self.store, ref) if ref.startswith("e") else None

    def act(self, experiment: Experiment, action: str, now: float) -> str:
        """cancel, preempt or resume the experiment (all its trials); its state after."""
        if experiment.terminal:
            raise BadRequest(f"experiment {experiment.id} already ended ({experiment.state.value})")
        config = searcher_lib.parse(experiment.spec.config.searcher)
        state = search.SearchState.from_plain(experiment.search)
        jobs = [(t, self.store.job(t.job)) for t in state.trials if t.job]
        live = [(t, j) for t, j in jobs if j is not None and not j.terminal]
        if action == "cancel":
            for _, job in live:
                self.lifecycle.handle(job.id, job_machine.Canceled(f"experiment {experiment.id} canceled"), now)
            experiment = dataclasses.replace(experiment, state=ExperimentState.CANCELED, ended_at=now,
                                             message="canceled by the user", held=())
        elif action == "preempt":
            if experiment.state == ExperimentState.PAUSED:
                raise BadRequest(f"experiment {experiment.id} is already PAUSED; `tfdist resume {experiment.id}`")
            for _, job in live:
                pause_if_it_can(self.lifecycle, job, now)  # one that cannot yet is paused once it can (settle)
            experiment = dataclasses.replace(experiment, state=ExperimentState.PAUSED,
                                             message="paused by the user: its trials stop and save")
        elif action == "resume":
            if experiment.state != ExperimentState.PAUSED:
                raise BadRequest(f"experiment {experiment.id} is {experiment.state.value}, not PAUSED")
            experiment = dataclasses.replace(experiment, state=ExperimentState.ACTIVE, message="")
            for trial, job in live:
                if trial.waiting:
                    continue
                if job.state == JobState.PAUSED:
                    self.lifecycle.handle(job.id, job_machine.Resumed(), now)
                elif job.preempt_requested:  # still stopping: resumed once it has paused (settle)
                    trial.asked_pause = True
            held = [_op_from_plain(op) for op in experiment.held]
            experiment = self._apply(dataclasses.replace(experiment, held=()), config, state, held, now)
        self.store.put_experiment(experiment)
        return experiment.state.value

    # ---------------------------------------------------------------- trials' events
    def metrics(self, job: Job, rows: Sequence[MetricRow]) -> None:
        """A trial's metric rows arrived (inside the core's event): settled at its end when they hold what the
        search reads (its metric; the record that the trial can now pause, for a paused experiment). Others,
        MetricsReporter's frequent batch reports, cost no read or write of the experiment."""
        if not job.spec.experiment_id:
            return
        wanted = (job.spec.config.searcher.get("metric"), PREEMPTIBLE_RECORD)
        if any(r.name in wanted for r in rows):
            self.pending.append(("metrics", job, list(rows), max(r.time for r in rows)))

    def settle(self) -> None:
        """Applies what the trials' events of this core event decide (called before it commits)."""
        while self.pending:
            kind, job, payload, now = self.pending.pop(0)
            experiment = self.store.experiment(job.spec.experiment_id)
            if experiment is None or experiment.terminal:
                continue
            config = searcher_lib.parse(experiment.spec.config.searcher)
            space = experiment.spec.config.hyperparameters
            state = search.SearchState.from_plain(experiment.search)
            if job.spec.trial > len(state.trials):
                continue
            trial = state.trial(job.spec.trial)
            ops: list[search.Op] = []
            if kind == "metrics":
                measure = length_metric(config)
                for metric, length in reports(config, payload, job, lambda: self.store.metrics(job.id, measure)):
                    ops += search.observed(config, space, state, trial.number, metric, length)
            elif payload.terminal:
                ops += search.ended(config, space, state, trial.number)
            elif payload == JobState.PAUSED and trial.asked_pause and not trial.waiting:
                trial.asked_pause = False  # promoted while it was stopping: on it goes
                ops.append(search.Continue(trial.number))
            current = self.store.job(job.id)
            if experiment.state == ExperimentState.PAUSED and current is not None and current.state.active:
                pause_if_it_can(self.lifecycle, current, now)  # it could not stop at a step when paused
            experiment = self._apply(experiment, config, state, ops, now)
            self.store.put_experiment(self._maybe_done(experiment, config, state, now))

    # ---------------------------------------------------------------- applying the search's answers
    def _apply(self, experiment: Experiment, config: searcher_lib.SearcherConfig, state: search.SearchState,
               ops: Sequence[search.Op], now: float) -> Experiment:
        held = list(experiment.held)
        for op in ops:
            if experiment.state == ExperimentState.PAUSED and isinstance(op, (search.Create, search.Continue)):
                held.append(_op_to_plain(op))  # applied on resume
                continue
            try:
                self._apply_one(experiment, state, op, now)
            except UserError as e:  # a trial's values break a rule of the config: nothing more can be searched
                return self._fail(experiment, state, f"trial {op.number}: {e}", now)
        return dataclasses.replace(experiment, search=state.to_plain(), held=tuple(held))

    def _fail(self, experiment: Experiment, state: search.SearchState, message: str, now: float) -> Experiment:
        """The experiment ends FAILED; its trials still queued or running are canceled with it."""
        log.warning("experiment %s failed: %s", experiment.id, message)
        for trial in state.trials:
            job = self.store.job(trial.job) if trial.job else None
            if job is not None and not job.terminal:
                self.lifecycle.handle(job.id, job_machine.Canceled(f"experiment {experiment.id} failed"), now)
        return dataclasses.replace(experiment, state=ExperimentState.FAILED, ended_at=now, message=message,
                                   search=state.to_plain(), held=())

    def _apply_one(self, experiment: Experiment, state: search.SearchState, op: search.Op, now: float) -> None:
        trial = state.trial(op.number)
        job = self.store.job(trial.job) if trial.job else None
        match op:
            case search.Create(number, values):
                spec = trial_spec(experiment, number, values)  # admitted with its experiment: it waits for nodes
                trial.job, _ = self.intake.submit(spec, now, experiment.owner, admit=False)
            case search.Continue():
                trial.asked_pause = bool(job and job.state.active and job.preempt_requested)
                if job is not None and job.state == JobState.PAUSED:
                    self.lifecycle.handle(job.id, job_machine.Resumed(), now)
            case search.Pause(_, why):
                if job is None or job.terminal:
                    return
                if job.state == JobState.QUEUED or job.preemptible:
                    trial.asked_pause = True
                    self.lifecycle.store.update_job(job.id, now, f"the searcher pauses it: {why}")
                    self.lifecycle.handle(job.id, job_machine.PreemptRequested(), now)
                else:  # it cannot stop at a checkpoint: it ends (it can never be promoted)
                    self.lifecycle.handle(job.id, job_machine.Canceled(
                        f"stopped by the searcher: {why} (it does not check for preemption, so it cannot pause)"), now)
            case search.Stop(_, why):
                if job is not None and not job.terminal:
                    self.lifecycle.handle(job.id, job_machine.Canceled(f"stopped by the searcher: {why}"), now)

    def _maybe_done(self, experiment: Experiment, config: searcher_lib.SearcherConfig, state: search.SearchState,
                    now: float) -> Experiment:
        if experiment.terminal or not search.finished(config, experiment.spec.config.hyperparameters, state):
            return experiment
        if any((j := self.store.job(t.job)) is not None and not j.terminal for t in state.trials if t.job):
            return experiment  # the search is decided; its last trials still train to their end
        best = best_trial(config, state)
        jobs = [self.store.job(t.job) for t in state.trials if t.job]
        failed = [j for j in jobs if j is not None and j.state == JobState.FAILED]
        if best is None and failed and len(failed) == len(jobs):  # nothing was learned: say why
            said = f"every trial failed; trial {failed[0].spec.trial} (job {failed[0].id}): {failed[0].message}"
            return dataclasses.replace(experiment, state=ExperimentState.FAILED, ended_at=now, message=said)
        said = f"best: trial {best.number} ({config.metric} {best.best:g})" if best else "no trial reported " \
            f"{config.metric}"
        log.info("experiment %s completed: %s", experiment.id, said)
        return dataclasses.replace(experiment, state=ExperimentState.COMPLETED, ended_at=now, message=said)


def find(source, ref: str) -> Experiment:
    """The experiment `ref` names, by id or `eN`, in a store or a store's reader; NotFound otherwise."""
    found = source.experiment(ref)
    if found is None and ref[:1] == "e" and ref[1:].isdigit():
        found = source.experiment(int(ref[1:]))
    if found is None:
        raise NotFound(f"experiment {ref} not found; `tfdist experiments` lists them")
    return found


def pause_if_it_can(lifecycle: JobLifecycle, job: Job, now: float) -> None:
    """Asks a trial's job to stop at a step and save (a queued one pauses at once); one that cannot yet (it is
    starting, or its workers have not shown that they check) is left: the caller asks again later."""
    if job.state == JobState.QUEUED or (job.state.active and job.preemptible and not job.preempt_requested):
        lifecycle.handle(job.id, job_machine.PreemptRequested(), now)


def best_trial(config: searcher_lib.SearcherConfig, state: search.SearchState) -> search.Trial | None:
    scored = [t for t in state.trials if t.best is not None]
    if not scored:
        return None
    return min(scored, key=lambda t: (t.best if config.smaller_is_better else -t.best, t.number))


def length_metric(config: searcher_lib.SearcherConfig) -> str:
    """The metric a trial's length is read from: the epoch count, or Determined's time_metric when it names a
    metric (batches and records are read from the step)."""
    unit = config.max_length[0] if config.max_length else "batches"
    return EPOCH if unit == "epochs" else "" if unit in searcher_lib.LENGTH_UNITS else unit


def reports(config: searcher_lib.SearcherConfig, rows: Sequence[MetricRow], job: Job,
            stored: Callable[[], Sequence[MetricRow]] = tuple) -> list[tuple[float, int]]:
    """(metric, length) of each report of the searcher metric among `rows`, the length in max_length's unit:
    batches are steps, records steps x global_batch_size, epochs the epoch count reported at that step (else,
    with Determined's records_per_epoch, steps x global_batch_size / it), and a time_metric that names a metric
    that metric's value at that step. A count is read from this batch, else from the rows stored before
    (`stored`: an agent may ship them apart)."""
    unit = config.max_length[0] if config.max_length else "batches"
    measure = length_metric(config)
    counts = _counts(rows, measure)
    if measure and any(r.name == config.metric and r.step not in counts for r in rows):
        counts = {**_counts(stored(), measure), **counts}
    batch = int(job.spec.config.global_batch_size or 1)
    per_epoch = job.spec.config.determined.get("records_per_epoch") or 0
    found = []
    for row in rows:
        if row.name != config.metric:
            continue
        if measure:
            if row.step in counts:
                length = counts[row.step]
            elif unit == "epochs" and per_epoch:
                length = row.step * batch // per_epoch
            else:
                continue
        elif unit == "records":
            length = row.step * batch
        else:
            length = row.step
        found.append((row.value, length))
    return found


def _counts(rows: Sequence[MetricRow], name: str) -> dict[int, int]:
    """{step: count} of metric `name` (a user's time metric may report NaN: not a count)."""
    return {r.step: int(r.value) for r in rows if name and r.name == name and math.isfinite(r.value)}


def trial_spec(experiment: Experiment, number: int, values: dict[str, Any]) -> JobSpec:
    """The trial's job: the experiment's config with the trial's values (checked as a job's are)."""
    spec = experiment.spec
    hparams = search_space.assign(spec.config.hyperparameters, values)
    if "global_batch_size" in hparams:
        config_values.check_int(hparams["global_batch_size"], "hyperparameters.global_batch_size", minimum=1,
                                maximum=limits.MAX_GLOBAL_BATCH_SIZE)
    name = f"{spec.name[:limits.MAX_NAME_CHARS - 8]}.t{number}"
    config = dataclasses.replace(spec.config, name=name, hyperparameters=hparams)
    return dataclasses.replace(spec, config=config, submission_id=f"{experiment.id}/{number}",
                               experiment_id=experiment.id, trial=number)


def _op_to_plain(op: search.Op) -> dict[str, Any]:
    return {"op": type(op).__name__, **dataclasses.asdict(op)}


def _op_from_plain(data: dict[str, Any]) -> search.Op:
    kinds = {"Create": search.Create, "Continue": search.Continue, "Pause": search.Pause, "Stop": search.Stop}
    return kinds[data["op"]](**{k: v for k, v in data.items() if k != "op"})
