"""The handlers of `tfdist launch` and of the commands that ask about jobs (jobs, job, logs, cancel, preempt,
resume, metrics, agents). Each maps parsed arguments onto one call and prints its answer; errors are raised,
and cli.main turns them into one line and an exit code."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from typing import Callable

from cluster.client import local_commands, local_experiments
from cluster.client.job_selection import ACTIVE, FINISHED, SHOWN_FINISHED, checked_limit, number, selected_states
from cluster.client.usage import UsageError
from cluster.shared.auth import find_credential
from cluster.shared.credentials import CredentialError
from cluster.shared.config import ExperimentConfig, config_from_dict, load_config, with_overrides
from cluster.shared.modes import auto

Handler = Callable[[argparse.Namespace], int]


# ---------------------------------------------------------------- launch

def launch_job(args) -> int:
    from cluster.client.launch import launch
    from cluster.client.progress_view import ViewOptions

    if args.sbatch_options is not None:
        from cluster.client.slurm_submit import check_options

        check_options(args.sbatch_options)
    hparams = args.hparam or ()  # --hparam NAME=VALUE: over the file's hyperparameters, before they are resolved
    config = load_config(args.config, hparams) if args.config else config_from_dict({}, hparams)
    entry = args.entry[1:] if args.entry[:1] == ["--"] else args.entry
    config = with_overrides(config, slots=args.slots, distribution=args.distribution, entrypoint=entry)
    if not config.entrypoint:
        raise UsageError("tfdist launch: no command to run; give one after `--` "
                         "(tfdist launch --slots 2 -- python train.py) or set `entrypoint` in --config")
    if args.sbatch_options is not None:
        return _launch_on_slurm(args, config)
    # The coordinator, in the one order every client command uses (cluster/shared/auth.py find_credential):
    # --coordinator, $TFDIST_COORDINATOR, the credential's own (--credentials, $TFDIST_CREDENTIALS). Not the
    # runtime directory: without any of them a launch runs its own embedded coordinator.
    coordinator, credential = args.coordinator or None, None  # TFDIST_COORDINATOR="": none
    if coordinator or args.credentials:
        coordinator, credential = find_credential(coordinator, args.credentials)
    if args.detach and not coordinator:
        raise UsageError("tfdist launch: --detach needs a coordinator that outlives the launch: --coordinator "
                         "HOST:PORT, $TFDIST_COORDINATOR, or a --credentials file that names one; or --slurm")
    return launch(config, coordinator=coordinator, credential=credential, detach=args.detach,
                  startup_timeout=args.startup_timeout, state_dir=args.state_dir, priority=args.priority,
                  view=ViewOptions(verbose=args.verbose, all_ranks=args.all_ranks))


def _launch_on_slurm(args, config: ExperimentConfig) -> int:
    """`--slurm`: the batch script runs this same launch (less --slurm and --detach) inside the allocation."""
    from cluster.client import slurm_submit
    from cluster.shared.commands import resolve_command

    if args.coordinator:
        raise UsageError("tfdist launch: --slurm submits to Slurm, --coordinator to a tfdist coordinator; give one")
    resolve_command(config.entrypoint)  # a missing script is refused before anything is queued
    for note in config.notes:  # said here too: the launch inside the allocation says them in the job's output
        sys.stderr.write(f"tfdist: config: {note}\n")
    inner = ["launch", *(["--config", os.path.abspath(args.config)] if args.config else []),
             *(["--slots", str(args.slots)] if args.slots is not None else []),
             *(["--distribution", mode] if (mode := slurm_mode(args, config)) else []),
             *[word for hparam in args.hparam or () for word in ("--hparam", hparam)],
             *(["--state-dir", os.path.abspath(args.state_dir)] if args.state_dir else []),
             *(["--verbose"] if args.verbose else []), *(["--all-ranks"] if args.all_ranks else []),
             "--startup-timeout", f"{args.startup_timeout:g}", "--", *config.entrypoint]
    return slurm_submit.launch(args.sbatch_options, inner, name=config.name,
                               slots=config.slots_per_trial if config.slots_given else None, detach=args.detach)


def slurm_mode(args, config: ExperimentConfig) -> str | None:
    """The --distribution the launch inside the allocation gets: the one given, or the mode a Determined launcher in
    the entrypoint stands for (the inner launch gets the command it wraps, after `--`, not the launcher)."""
    if args.distribution:
        return args.distribution
    if config.distribution_mode == "auto" and (config.launcher or config.own_launcher):
        return auto.decide(config).mode
    return None


# ---------------------------------------------------------------- asking the coordinator (or Slurm)

def on_slurm(args) -> bool:
    """--slurm, or no coordinator given (nor a credential, which names one) on a machine with a Slurm client
    configured (a login node)."""
    if args.coordinator or getattr(args, "credentials", None):
        return bool(args.slurm)
    configured = os.environ.get("SLURM_CONF") or os.path.exists("/etc/slurm/slurm.conf")
    return args.slurm or bool(configured and shutil.which("scontrol"))


def _client(args):
    from cluster.shared.rpc import Client

    try:
        address, credential = find_credential(args.coordinator, args.credentials)
    except CredentialError as e:
        ref = getattr(args, "job_id", None) or getattr(args, "experiment_id", None)
        if ref and local_commands.applies(args):  # and no local run had it
            what = "job" if getattr(args, "job_id", None) and not local_experiments.is_reference(ref) else "experiment"
            raise CredentialError(f"{what} {ref} is not one of your local runs (`tfdist {what}s` lists them); "
                                  f"{e}") from None
        raise
    return Client(address, credential)


def asks_coordinator(ask: Callable, slurm: Handler | None = None, local: Callable | None = None) -> Handler:
    """The handler of a command the coordinator answers: `ask(client, args)` with a client it closes after.
    Given `slurm`, the command (which has --slurm) is answered by Slurm instead where `on_slurm` says so.
    Without --coordinator, a local run of the job answers first (`local(ask, args)`, by default
    local_commands.ask_run: cluster/client/local_commands.py)."""
    def handler(args) -> int:
        if slurm is not None and on_slurm(args):
            return slurm(args)
        if local_commands.applies(args):
            answer = (local or local_commands.ask_run)(ask, args)
            if answer is not local_commands.NOT_LOCAL:
                return answer
        client = _client(args)
        try:
            return ask(client, args)
        finally:
            client.close()

    return handler


def _jobs(client, args) -> int:
    """Without --all, --state or --limit: every active job and the newest SHOWN_FINISHED finished ones, saying
    on stderr how many older ones it left out. --state: only those states; --limit N: the newest N (of those)."""
    from cluster.client import tables

    states = selected_states(getattr(args, "state", None))
    limit = checked_limit(getattr(args, "limit", None))
    summary = not args.json  # a table shows no exits, metrics or placement: the coordinator leaves them out
    if getattr(args, "all", False) or states or limit:
        jobs = client.jobs(states, limit or 0, summary)
        left_out, what = jobs.total - len(jobs), "older jobs" + (f" in {', '.join(states)}" if states else "")
    else:
        finished = client.jobs(FINISHED, SHOWN_FINISHED, summary)
        jobs = sorted([*client.jobs(ACTIVE, 0, summary), *finished], key=number)
        left_out, what = finished.total - len(finished), "older finished jobs"
    code = tables.print_jobs(jobs, args.json, max(left_out, 0))
    if left_out > 0 and not args.json:  # --json says it as `left_out`
        sys.stderr.write(f"tfdist: {left_out} {what} not shown; --all lists every job, --limit N the newest N, "
                         "--state STATE those in a state\n")
    return code


def _slurm_jobs(args) -> int:
    from cluster.client import slurm_submit, tables

    return tables.print_slurm_jobs(slurm_submit.tfdist_jobs(), args.json)


def _job(client, args) -> int:
    from cluster.client import tables

    return tables.print_job(client.job(args.job_id), args.json)


def _agents(client, args) -> int:
    from cluster.client import tables

    return tables.print_agents(client.list_agents(), args.json)


def _logs(client, args) -> int:
    from cluster.client.follow import stream_logs
    from cluster.client.progress_view import FULL, QUIET

    job_id = client.job(args.job_id).id
    stream_logs(client, job_id, follow=args.follow, rank=args.rank, view=QUIET if args.quiet else FULL, json=args.json)
    return 0


def _slurm_logs(args) -> int:
    from cluster.client import slurm_submit

    given = [flag for flag, value in (("--json", args.json), ("--quiet", args.quiet),
                                      ("--rank", args.rank != -1)) if value]
    if given:  # the Slurm job's output file holds its launch's view as printed, not a job's lines
        raise UsageError(f"tfdist logs: --slurm prints the Slurm job's output file as written, which has no "
                         f"ranks or streams for {', '.join(given)}: drop {'it' if len(given) == 1 else 'them'}")
    return slurm_submit.print_logs(args.job_id, follow_it=args.follow)


def _named(ref: str) -> str:
    return f"{'experiment' if local_experiments.is_reference(ref) else 'job'} {ref}"


def _cancel(client, args) -> int:
    print(f"{_named(args.job_id)}: {client.cancel(args.job_id)}")
    return 0


def _slurm_cancel(args) -> int:
    """Cancel is scancel."""
    from cluster.client import slurm_submit

    print(slurm_submit.cancel(args.job_id))
    return 0


def _preempt(client, args) -> int:
    state = client.preempt(args.job_id)
    if local_experiments.is_reference(args.job_id):  # PAUSED at once: its searcher holds its next decisions
        note = " (its trials stop at a common step, save and exit; `tfdist resume` runs them on)"
    else:
        note = (" (preemption requested: the workers stop at a common step, save and exit; the job then pauses)"
                if state != "PAUSED" else "")
    print(f"{_named(args.job_id)}: {state}{note}")
    return 0


def _resume(client, args) -> int:
    print(f"{_named(args.job_id)}: {client.resume(args.job_id)}")
    return 0


def _metrics(client, args) -> int:
    from cluster.client import metrics_report

    if args.plot:
        metrics_report.check_plot_path(args.plot)
    history = client.metrics(args.job_id, args.name)
    metrics_report.print_history(history, "json" if args.json else "csv" if args.csv else "table")
    if args.plot:
        metrics_report.plot(history, args.plot)
        sys.stderr.write(f"tfdist: plot written to {args.plot}\n")
    return 0


list_jobs = asks_coordinator(_jobs, slurm=_slurm_jobs, local=local_commands.list_jobs)
show_job = asks_coordinator(_job)
print_logs = asks_coordinator(_logs, slurm=_slurm_logs)
cancel_job = asks_coordinator(_cancel, slurm=_slurm_cancel)
preempt_job = asks_coordinator(_preempt)
resume_job = asks_coordinator(_resume, local=local_commands.resume)
print_metrics = asks_coordinator(_metrics)
list_agents = asks_coordinator(_agents)
