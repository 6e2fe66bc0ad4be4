"""The job commands answered by this user's local runs (cluster/client/local_runs.py): without
--coordinator and --credentials (nor their environment variables), a job ID a local run holds is asked
there, and `tfdist jobs` lists the local runs' jobs; `tfdist cancel/preempt/resume eN` ask the local run that
holds experiment eN (cluster/client/local_experiments.py). Anything else goes on to a coordinator as before."""

from __future__ import annotations

import argparse
import sys
from typing import Callable, Sequence

from cluster.client import exit_codes, job_selection, local_experiments, local_run_calls, local_runs
from tfdist.errors import NotFoundError, UserError

NOT_LOCAL = object()  # what a handler here returns when no local run answers: ask a coordinator


def applies(args: argparse.Namespace) -> bool:
    """No coordinator and no credential named: this user's local runs are asked first."""
    return not getattr(args, "coordinator", None) and not getattr(args, "credentials", None)


def list_jobs(ask: Callable, args) -> object:
    """`tfdist jobs`: the local runs' jobs (a search's run: every trial), merged; NOT_LOCAL when there is no run
    (a coordinator answers)."""
    from cluster.client import tables

    runs = local_runs.all_runs()
    if not runs:
        return NOT_LOCAL
    states = job_selection.selected_states(getattr(args, "state", None))
    limit = job_selection.checked_limit(getattr(args, "limit", None))
    jobs = [job for run in runs for job in local_run_calls.jobs_of(run, summary=not args.json)]
    shown, left_out = job_selection.select(jobs, states, limit, getattr(args, "all", False))
    code = tables.print_jobs(shown, args.json, left_out)
    if left_out and not args.json:
        sys.stderr.write(f"tfdist: {left_out} older local jobs not shown; --all lists every one, --limit N the newest "
                         f"N, --state STATE those in a state\n")
    say_other_coordinators(runs)
    return code


def say_other_coordinators(runs: Sequence[local_runs.LocalRun], listing: str = "jobs") -> None:
    """The user's other coordinators on this machine (`tfdist coordinator`) are not local runs: say where
    (`tfdist LISTING --coordinator ...`)."""
    from cluster.shared.auth import published

    holders = {run.holder() for run in runs}
    for pid, credential in published():
        if pid not in holders:
            sys.stderr.write(f"tfdist: your coordinator at {credential.coordinator} runs on this machine too: "
                             f"`tfdist {listing} --coordinator {credential.coordinator}` lists its {listing}\n")


def ask_run(ask: Callable, args) -> object:
    """A command about one job (`job`, `logs`, `metrics`, `cancel`, `preempt`...) of a local run:
    `ask(client, args)` with its coordinator; NOT_LOCAL when no local run holds that job number (or experiment)."""
    if getattr(args, "job_id", None) and local_experiments.is_reference(args.job_id):
        return _ask_experiment_run(ask, args)
    run = local_runs.find(args.job_id) if getattr(args, "job_id", None) else None
    if run is None:
        return NOT_LOCAL
    with local_run_calls.connect(run) as connection:
        if not connection.live:
            _note_if_orphaned(connection.client, args.job_id)
            if getattr(args, "follow", False):  # nothing runs it: what is stored is all there will be
                args.follow = False
        return ask(connection.client, args)


def _ask_experiment_run(ask: Callable, args) -> object:
    """`tfdist cancel/preempt/resume eN`: asked of the local run holding the experiment, its running launch's
    coordinator (whose launch follows what it does) or, once the launch ended, its stored state."""
    found = local_experiments.find(args.job_id)
    if found is None:
        return NOT_LOCAL
    run, experiment = found
    with local_run_calls.connect(run) as connection:
        local_experiments.check_action(experiment, getattr(args, "command", ""), connection.live)
        return ask(connection.client, args)


def _note_if_orphaned(client, job_ref: str) -> None:
    try:
        job = client.job(job_ref)
    except Exception:  # noqa: BLE001 - the command itself says what is wrong with the job
        return
    if job.state not in local_runs.SETTLED:
        sys.stderr.write(f"tfdist: job {job.id} is {job.state} in its stored state, but its launch ended without "
                         f"recording how it ended (killed?): nothing runs it. `tfdist cancel {job.id}` marks it "
                         "canceled\n")


def resume(ask: Callable, args) -> object:
    """`tfdist resume ID` of a local job: while its launch runs, that launch's coordinator resumes it (the
    launch follows it); once the launch ended, an embedded cluster on the run's state resumes it and this
    command follows it to its end, exiting as `tfdist launch` does."""
    if local_experiments.is_reference(args.job_id):  # an experiment resumes only while its launch runs
        return ask_run(ask, args)
    run = local_runs.find(args.job_id)
    if run is None:
        return NOT_LOCAL
    if run.holder() is not None:
        return ask_run(ask, args)
    job = local_run_calls.job_in(run, args.job_id)
    if job is None:
        raise NotFoundError(f"job {args.job_id} not found; `tfdist jobs` lists the jobs")
    if job.spec.experiment_id:
        raise UserError(f"job {job.id} is trial {job.spec.trial} of experiment {job.spec.experiment_id}, whose launch "
                        "ended: its trials ran only inside that launch (`tfdist experiment "
                        f"{job.spec.experiment_id}` shows them)")
    if job.state != "PAUSED":
        raise UserError(f"job {job.id} is {job.state}, not PAUSED; only a paused job can be resumed")
    from cluster.client.launch import resume_local
    from cluster.client.progress_view import ViewOptions

    exit_codes.follows_job(args)
    view = ViewOptions(verbose=getattr(args, "verbose", False), all_ranks=getattr(args, "all_ranks", False))
    return resume_local(run, job.id, job.spec.config.slots_per_trial, view)
