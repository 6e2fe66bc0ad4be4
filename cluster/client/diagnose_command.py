"""`tfdist diagnose`: the distributed-training recipe run for the user (docs/diagnose.md). What to run comes
from --config and/or `-- COMMAND` (as `tfdist launch` reads them) or from an existing JOB's spec; where, from
--coordinator (its nodes) or this machine (an embedded coordinator, as a local launch). The variants run
one after another (cluster/client/diagnose_run.py), the verdict is cluster/shared/diagnosis.py's."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import secrets
import signal
from typing import Iterator

from cluster.client import local_run_calls, local_runs
from cluster.client.diagnose_run import Settings, VariantRunner, run_all, stderr_say
from cluster.client.usage import UsageError
from cluster.shared import diagnose_variant, diagnosis, jobspec
from cluster.shared.auth import find_credential
from cluster.shared.config import ExperimentConfig, config_from_dict, load_config, with_overrides
from cluster.shared.modes import SuccessRule, auto, planner
from tfdist import diagnose as worker_side


def settings_from(args) -> Settings:
    if args.warmup + args.steps > worker_side.MAX_STEPS:
        raise UsageError(f"tfdist diagnose: --warmup {args.warmup} + --steps {args.steps} must stay below "
                         f"{worker_side.MAX_STEPS + 1} (the no_communication variant all-reduces every "
                         f"{worker_side.CUT_AGGREGATION} steps)")
    chosen = tuple(v.strip() for v in (args.variants or ",".join(diagnosis.VARIANTS)).split(",") if v.strip())
    unknown = [v for v in chosen if v not in diagnosis.VARIANTS]
    if unknown:
        raise UsageError(f"tfdist diagnose: --variants {unknown[0]!r} is not a variant; choose from "
                         f"{', '.join(diagnosis.VARIANTS)}")
    ordered = tuple(v for v in diagnosis.VARIANTS if v in chosen or v == diagnosis.BASELINE)
    return Settings(steps=args.steps, warmup=args.warmup, timeout=args.variant_timeout, variants=ordered,
                    run=secrets.token_hex(6))


JOB_REF = re.compile(r"[0-9]+(-[0-9a-f]+)?")  # a job's number, or its full id


def split_entry(args) -> None:
    """JOB or `-- COMMAND` from the one trailing argument list: a lone job reference is a job."""
    words = list(args.entry or ())
    if len(words) > 1 and JOB_REF.fullmatch(words[0]) and not os.path.exists(words[0]):
        raise UsageError(f"tfdist diagnose: give a JOB ({words[0]}) or a command after `--`, not both")
    args.job_id = words[0] if len(words) == 1 and JOB_REF.fullmatch(words[0]) else None
    args.entry = [] if args.job_id else (words[1:] if words[:1] == ["--"] else words)


def diagnose_job(args) -> int:
    settings = settings_from(args)
    split_entry(args)
    entry = args.entry
    if args.job_id and (args.config or args.hparam):
        raise UsageError("tfdist diagnose: a JOB runs as it was submitted: give a JOB, or a --config / `-- COMMAND` "
                         "with --hparam, not both")
    with _cluster(args) as (client, where, local):
        if args.job_id:
            config, working_dir, job_id = _config_of_job(args, client)
            if not local:  # its coordinator fills in the environment's values it hands no one
                settings = dataclasses.replace(settings, of=job_id)
        else:
            config, working_dir = _config_of_args(args, entry), os.getcwd()
        if config.searcher:
            raise UsageError(f"tfdist diagnose: the config searches hyperparameters (searcher "
                             f"{config.searcher.get('name')}); diagnose one trial's values: give each with "
                             "--hparam NAME=VALUE over a config without a searcher")
        if local:
            config = _local_config(config)
        mode = auto.decide(config).mode
        if planner(mode).success is SuccessRule.CHIEF:
            raise UsageError(f"tfdist diagnose: mode {mode}: the chief schedules steps on the workers asynchronously, "
                             "so its callbacks see a step scheduled, not done; tfdist diagnose cannot time its steps")
        count = len(settings.variants)
        stderr_say(f"{config.name or 'the job'}: {count} variant{'s' if count != 1 else ''} on {where}, one after "
                   f"another, each until every rank timed {settings.steps} steps after {settings.warmup}")
        with _signals_cancel():
            runs = run_all(VariantRunner(client, settings, stderr_say, working_dir), config)
    if not runs[0].measured:
        stderr_say(f"baseline: {runs[0].skipped}")
        return 1
    found = diagnosis.diagnose(mode, runs)
    if args.json:
        print(json.dumps(diagnosis.to_json(found), indent=2))
    else:
        from cluster.client.diagnose_view import render

        print(render(found))
    return 0


@contextlib.contextmanager
def _signals_cancel() -> Iterator[None]:
    """SIGTERM and SIGHUP end a diagnose as Ctrl-C does: the variant running is canceled, not left behind."""
    def interrupt(signum, frame):
        raise KeyboardInterrupt(signal.Signals(signum).name)

    previous = {s: signal.signal(s, interrupt) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _config_of_args(args, entry: list[str]) -> ExperimentConfig:
    hparams = args.hparam or ()
    config = load_config(args.config, hparams) if args.config else config_from_dict({}, hparams)
    config = with_overrides(config, slots=args.slots, distribution=args.distribution, entrypoint=entry)
    if not config.entrypoint:
        raise UsageError("tfdist diagnose: nothing to run; give a JOB, a command after `--` (tfdist diagnose "
                         "--slots 2 -- python train.py), or `entrypoint` in --config")
    return config


def _config_of_job(args, client) -> tuple[ExperimentConfig, str, str]:
    """An existing job's config as it was submitted (its mode as decided then), its working directory and id."""
    spec, job_id = getattr(args, "job_spec", None), args.job_id
    if spec is None:
        job = client.job(args.job_id)
        spec, job_id = jobspec.from_pb(job.spec, validate=False), job.id
    # Named after the job; a trial's hyperparameters are already its own values, its searcher is not rerun.
    named = dataclasses.replace(spec.config, name_given=True, searcher={})
    config = with_overrides(named, slots=args.slots, distribution=args.distribution)
    return config, spec.working_dir or os.getcwd(), job_id


def _local_config(config: ExperimentConfig) -> ExperimentConfig:
    from cluster.client.launch import check_worker_needs, local_command, preflight
    from cluster.shared import modes
    from cluster.shared.commands import resolve_command

    preflight(config)
    config = local_command(config)
    command = resolve_command(config.entrypoint)
    check_worker_needs(command[0], modes.planner(auto.decide(config).mode), dict(config.environment_variables))
    return config


@contextlib.contextmanager
def _cluster(args) -> Iterator[tuple[object, str, bool]]:
    """(client, where it runs, local?): the coordinator given, or an embedded one on this machine whose
    jobs stay among the user's local runs."""
    coordinator = args.coordinator or None
    if coordinator or args.credentials:
        from cluster.shared.rpc import Client

        address, credential = find_credential(coordinator, args.credentials)
        client = Client(address, credential)
        try:
            yield client, f"the coordinator at {address}", False
        finally:
            client.close()
        return
    slots = _local_slots(args)
    run = local_runs.new_run(jobs=len(diagnosis.VARIANTS))
    from cluster.client.launch import EmbeddedCluster

    try:
        embedded = EmbeddedCluster(slots, run.path, first_job_seq=run.number, last_job_seq=run.last)
    except BaseException:
        local_runs.remove(run)
        raise
    try:
        yield embedded.client, "this machine", True
    finally:
        run.record_from(embedded.client)
        embedded.client.close()
        embedded.close()


def _stored_spec(run, job_ref: str):
    """A local job's spec as its run stored it, its environment's values too (the user's own files; the run's
    coordinator hands them to no one). A run still held by its launch is asked instead, and a job whose values
    it hides is refused: they are not to be guessed."""
    if run.holder() is None:
        from cluster.coordinator.daemon import stored_spec

        spec = stored_spec(run.path, job_ref)
        if spec is None:
            raise UsageError(f"tfdist diagnose: job {job_ref} is not in local run {run.number}")
        return spec
    with local_run_calls.connect(run) as connection:
        spec = jobspec.from_pb(connection.client.job(job_ref).spec, validate=False)
    if diagnose_variant.HIDDEN in spec.config.environment_variables.values():
        raise UsageError(f"tfdist diagnose: job {job_ref}'s launch is still running and hands out no environment "
                         "values: diagnose it once that launch ended, or from its config (--config FILE)")
    return spec


def _local_slots(args) -> int:
    """This machine's slots for a local diagnose: the job's own (an existing job's are read from its run)."""
    if args.job_id:
        run = local_runs.find(args.job_id)
        if run is None:
            raise UsageError(f"tfdist diagnose: job {args.job_id} is not one of your local runs (`tfdist jobs` lists "
                             "them); for a cluster's job give --coordinator")
        args.job_spec = spec = _stored_spec(run, args.job_id)
        return args.slots or spec.slots
    return _config_of_args(args, args.entry).slots_per_trial
