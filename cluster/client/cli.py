"""The `tfdist` command line. It maps argv onto validated values and hands over;
user mistakes end in one line on stderr and a non-zero exit, never a traceback."""

from __future__ import annotations

import os

# Workers are started with fork+exec while gRPC threads run; gRPC's fork handlers are not
# needed for that and log a line per fork. Must be set before grpc is imported.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

import argparse
import logging
import shutil
import signal
import socket
import sys
import threading
from typing import Sequence

from cluster.shared.auth import read_token
from cluster.shared.config import DISTRIBUTION_MODES, ExperimentConfig, load_config
from tfdist.errors import TfdistError, UserError

USAGE_ERROR = 2
COORDINATOR_ENV = "TFDIST_COORDINATOR"
TOKEN_FILE_ENV = "TFDIST_TOKEN_FILE"


class UsageError(UserError):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, not argparse's usage dump
        raise UsageError(f"{self.prog}: {message} (see `{self.prog} --help`)")


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def _port_range(text: str) -> tuple[int, int]:
    try:
        low, high = (int(x) for x in text.split("-"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected LOW-HIGH, e.g. 29500-29999, got {text!r}") from None
    if not 1024 <= low <= high <= 65535:
        raise argparse.ArgumentTypeError(f"must satisfy 1024 <= LOW <= HIGH <= 65535, got {text}")
    return low, high


def _client_flags(p: argparse.ArgumentParser, required: bool = True) -> None:
    p.add_argument("--coordinator", metavar="HOST:PORT", default=os.environ.get(COORDINATOR_ENV),
                   help=f"the coordinator (default ${COORDINATOR_ENV})" +
                        ("" if required else "; without it, an embedded coordinator runs the job on this machine"))
    p.add_argument("--token-file", metavar="FILE", default=os.environ.get(TOKEN_FILE_ENV),
                   help=f"file holding the coordinator's token (default ${TOKEN_FILE_ENV})")


def _slurm_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--slurm", action="store_true", help="the Slurm jobs `tfdist launch --slurm` submitted (the "
                                                        "default without --coordinator where Slurm's commands are)")


def _on_slurm(args) -> bool:
    """--slurm, or no coordinator given on a machine with a Slurm client configured (a login node)."""
    if not hasattr(args, "slurm") or args.coordinator:
        return bool(getattr(args, "slurm", False))
    configured = os.environ.get("SLURM_CONF") or os.path.exists("/etc/slurm/slurm.conf")
    return args.slurm or bool(configured and shutil.which("scontrol"))


def _verbosity_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--verbosity", choices=("debug", "info", "warning", "error"),
                   default=os.environ.get("TFDIST_VERBOSITY", "info"),
                   help="daemon log level (default $TFDIST_VERBOSITY or info)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tfdist", description="Distributed TensorFlow/Keras training.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    launch = sub.add_parser("launch", help="run a training job", description=(
        "Run COMMAND as a distributed job and follow it. Without --coordinator, an embedded coordinator "
        "and a local agent run it on this machine (one worker per slot). `train.py ARGS` runs with Python."))
    launch.add_argument("--config", metavar="FILE", help="experiment config (YAML)")
    launch.add_argument("--slots", type=_int, metavar="N", help="slots; overrides resources.slots_per_trial")
    launch.add_argument("--distribution", metavar="MODE",
                        help=f"distribution mode ({', '.join(DISTRIBUTION_MODES)}); overrides distribution.mode")
    launch.add_argument("--startup-timeout", type=_positive_float, default=300.0, metavar="SECONDS",
                        help="stop the job if a worker has not joined by then (default 300)")
    launch.add_argument("--priority", type=_int, default=0, help="higher runs first (default 0)")
    launch.add_argument("--detach", action="store_true",
                        help="print the job id and return (needs --coordinator or --slurm)")
    launch.add_argument("--state-dir", metavar="DIR", help="embedded coordinator's state (default: a temporary dir)")
    launch.add_argument("--slurm", metavar="SBATCH_OPTIONS", nargs="?", help=(
        "submit to Slurm from a login node: every option after --slurm up to `--` is sbatch's (tfdist launch "
        "--config exp.yaml --slurm --nodes=2 --ntasks-per-node=1 -- python train.py); follows the job's output and "
        "exits with its code"))
    _client_flags(launch, required=False)
    launch.add_argument("entry", nargs=argparse.REMAINDER, metavar="-- COMMAND",
                        help="the command each worker runs; default: the config's entrypoint")

    coord = sub.add_parser("coordinator", help="run the coordinator daemon")
    coord.add_argument("--listen", default="127.0.0.1:7470", metavar="HOST:PORT",
                       help="address to serve on (default 127.0.0.1:7470; beyond loopback needs --token-file)")
    coord.add_argument("--state-dir", required=True, metavar="DIR", help="where the SQLite state lives")
    coord.add_argument("--token-file", metavar="FILE", default=os.environ.get(TOKEN_FILE_ENV))
    coord.add_argument("--lost-after", type=_positive_float, default=6.0, metavar="SECONDS",
                       help="declare an agent lost after this long without a heartbeat (default 6)")
    coord.add_argument("--stop-grace", type=_positive_float, default=5.0, metavar="SECONDS",
                       help="a canceled job's workers get SIGTERM, then SIGKILL this much later (default 5)")
    coord.add_argument("--failure-grace", type=_positive_float, default=1.0, metavar="SECONDS",
                       help="the same for a failed job's surviving workers (default 1)")
    coord.add_argument("--heartbeat-interval", type=_positive_float, default=1.0, metavar="SECONDS")
    coord.add_argument("--port-range", type=_port_range, default=(29500, 29999), metavar="LOW-HIGH",
                       help="ports leased to workers on every node (default 29500-29999)")
    coord.add_argument("--subnet", metavar="CIDR", help="network the nodes of a job talk over (default: detected)")
    _verbosity_flag(coord)

    agent = sub.add_parser("agent", help="run a node agent")
    _client_flags(agent)
    agent.add_argument("--slots", type=_int, metavar="N", help="CPU worker slots (default: the node's GPU count)")
    agent.add_argument("--name", default=socket.gethostname(), help="node name (default: the host name)")
    agent.add_argument("--slurm", action="store_true",
                       help="started by `tfdist launch` inside a Slurm allocation: name, slots and token from the "
                            "step's environment")
    _verbosity_flag(agent)

    jobs = sub.add_parser("jobs", help="list jobs")
    _client_flags(jobs)
    jobs.add_argument("--json", action="store_true")
    _slurm_flag(jobs)
    job = sub.add_parser("job", help="show one job: state, placement, why it waits, how it ended")
    _client_flags(job)
    job.add_argument("job_id", metavar="ID")
    job.add_argument("--json", action="store_true")
    logs = sub.add_parser("logs", help="print a job's output")
    _client_flags(logs)
    logs.add_argument("job_id", metavar="ID")
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing until the job ends")
    logs.add_argument("--rank", type=_int, default=-1, help="only this rank")
    _slurm_flag(logs)
    cancel = sub.add_parser("cancel", help="cancel a job")
    _client_flags(cancel)
    cancel.add_argument("job_id", metavar="ID")
    _slurm_flag(cancel)
    preempt = sub.add_parser("preempt", help="stop a job's workers at a common step, save, and pause the job")
    _client_flags(preempt)
    preempt.add_argument("job_id", metavar="ID")
    resume = sub.add_parser("resume", help="run a paused job again from its latest checkpoint")
    _client_flags(resume)
    resume.add_argument("job_id", metavar="ID")
    metrics = sub.add_parser("metrics", help="print a job's metric history (table, --json, --csv, --plot)")
    _client_flags(metrics)
    metrics.add_argument("job_id", metavar="ID")
    metrics.add_argument("--name", default="", help="only this metric")
    shape = metrics.add_mutually_exclusive_group()
    shape.add_argument("--json", action="store_true", help="one JSON object per row")
    shape.add_argument("--csv", action="store_true", help="CSV: step, rank, then one column per metric")
    metrics.add_argument("--plot", metavar="FILE.png", help="also draw every metric against the step into a PNG "
                                                            "(needs matplotlib: pip install 'tfdist[plot]')")
    agents = sub.add_parser("agents", help="list agents")
    _client_flags(agents)
    agents.add_argument("--json", action="store_true")
    return parser


# ---------------------------------------------------------------- commands

def _launch(args) -> int:
    from cluster.client.launch import launch

    if args.sbatch_options is not None:
        from cluster.client.slurm_submit import check_options

        check_options(args.sbatch_options)
    config = load_config(args.config) if args.config else ExperimentConfig()
    entry = args.entry[1:] if args.entry[:1] == ["--"] else args.entry
    config = config.with_overrides(slots=args.slots, distribution=args.distribution, entrypoint=entry)
    if not config.entrypoint:
        raise UsageError("tfdist launch: no command to run; give one after `--` "
                         "(tfdist launch --slots 2 -- python train.py) or set `entrypoint` in --config")
    if args.sbatch_options is not None:
        return _launch_on_slurm(args, config)
    if args.detach and not args.coordinator:
        raise UsageError("tfdist launch: --detach needs --coordinator or --slurm (an embedded coordinator ends "
                         "with launch)")
    return launch(config, coordinator=args.coordinator, token=read_token(args.token_file), detach=args.detach,
                  startup_timeout=args.startup_timeout, state_dir=args.state_dir, priority=args.priority)


def _launch_on_slurm(args, config: ExperimentConfig) -> int:
    """`--slurm`: the batch script runs this same launch (less --slurm and --detach) inside the allocation."""
    from cluster.client import slurm_submit
    from cluster.shared.commands import resolve_command

    if args.coordinator:
        raise UsageError("tfdist launch: --slurm submits to Slurm, --coordinator to a tfdist coordinator; give one")
    resolve_command(config.entrypoint)  # a missing script is refused before anything is queued
    inner = ["launch", *(["--config", os.path.abspath(args.config)] if args.config else []),
             *(["--slots", str(args.slots)] if args.slots is not None else []),
             *(["--distribution", args.distribution] if args.distribution else []),
             *(["--state-dir", os.path.abspath(args.state_dir)] if args.state_dir else []),
             "--startup-timeout", f"{args.startup_timeout:g}", "--", *config.entrypoint]
    return slurm_submit.launch(args.sbatch_options, inner, name=config.name,
                               slots=config.slots_per_trial if config.slots_given else None, detach=args.detach)


def _setup_daemon_logging(verbosity: str) -> None:
    """absl's log format, the one TensorFlow's own lines use (`I1122 10:58:35.140213 PID file.py:6] ...`),
    so a node's daemon and worker logs read alike."""
    from absl import flags as absl_flags
    from absl import logging as absl_logging

    absl_flags.FLAGS.mark_as_parsed()  # tfdist parses its own flags; absl's defaults are fine
    absl_logging.use_absl_handler()
    absl_logging.set_verbosity(verbosity)


STOP_DEADLINE = 10.0  # seconds a daemon may take to stop after SIGTERM, whatever the other side does


def _stop_on_signal() -> threading.Event:
    """Set by the first SIGINT/SIGTERM. Installed before anything slow starts, so a signal is never
    missed; a second signal exits at once."""
    stop = threading.Event()

    def handler(signum, _frame):
        if stop.is_set():
            os._exit(128 + signum)
        stop.set()

    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, handler)
    return stop


def _serve(stop: threading.Event, shutdown, what: str) -> int:
    """Waits for the stop signal, then runs `shutdown` under a deadline: a daemon stops within
    STOP_DEADLINE seconds even if a peer hangs, a call blocks or a thread does not end."""
    while not stop.wait(1.0):
        pass
    log = logging.getLogger(f"tfdist.{what}")
    log.info("stopping")

    def overdue():
        log.error("did not stop within %gs; exiting anyway", STOP_DEADLINE)
        sys.stderr.flush()
        os._exit(1)

    watchdog = threading.Timer(STOP_DEADLINE, overdue)
    watchdog.daemon = True
    watchdog.start()
    shutdown()
    log.info("stopped")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # nothing left worth waiting for: no interpreter teardown behind gRPC's threads


def _coordinator(args) -> int:
    from cluster.coordinator.daemon import CoordinatorServer, Settings

    stop = _stop_on_signal()
    token = read_token(args.token_file)
    _setup_daemon_logging(args.verbosity)
    settings = Settings(lost_after=args.lost_after, heartbeat_interval=args.heartbeat_interval,
                        stop_grace=args.stop_grace, failure_grace=args.failure_grace,
                        port_range=args.port_range, subnet=args.subnet)
    server = CoordinatorServer(args.state_dir, args.listen, token, settings).start()
    print(f"tfdist coordinator listening on {server.address} (state in {args.state_dir})", flush=True)
    return _serve(stop, lambda: server.stop(grace=1.0), "coordinator")


def _agent(args) -> int:
    from cluster.agent.daemon import Agent

    stop = _stop_on_signal()
    if not args.coordinator:
        raise UsageError(f"tfdist agent: --coordinator HOST:PORT is required (or set {COORDINATOR_ENV})")
    if args.slots is not None and args.slots < 1:
        raise UsageError(f"tfdist agent: --slots must be at least 1, got {args.slots}")
    token = read_token(args.token_file)
    if args.slurm:
        from cluster.slurm import allocation as slurm

        args.name, args.slots, token = slurm.agent_identity(os.environ, args.name, args.slots, token)
    try:
        agent = Agent(args.coordinator, name=args.name, slots=args.slots, token=token)
    except ValueError as e:  # no GPUs and no --slots
        raise UsageError(f"tfdist agent: {e}") from None
    _setup_daemon_logging(args.verbosity)
    if args.slurm:
        _slurm_sigterm(stop, agent)
    threading.Thread(target=agent.run, daemon=True).start()
    return _serve(stop, lambda: agent.shutdown(timeout=STOP_DEADLINE - 2), "agent")


def _slurm_sigterm(stop: threading.Event, agent) -> None:
    """Slurm signals every process of a job at once (preemption, `scancel`, the time limit): the workers
    get the same SIGTERM and decide (a preempted job's workers stop at a common step and save). The agent
    keeps serving them, and shipping their output and exits, until they are gone; a SIGTERM that finds
    no workers running (the launcher ending the step) stops it, as does a second one."""
    deferred = threading.Event()

    def handler(signum, _frame):
        if signum == signal.SIGTERM and agent.running_jobs() and not deferred.is_set():
            deferred.set()
            logging.getLogger("tfdist.agent").warning(
                "SIGTERM with workers running: they decide (preemption); this agent serves them until they end")
            return
        if stop.is_set():
            os._exit(128 + signum)
        stop.set()

    signal.signal(signal.SIGTERM, handler)


def _client(args):
    from cluster.shared.rpc import Client

    if not args.coordinator:
        raise UsageError(f"tfdist {args.command}: --coordinator HOST:PORT is required (or set {COORDINATOR_ENV})")
    return Client(args.coordinator, read_token(args.token_file))


def _slurm_commands(args) -> int:
    """jobs, logs and cancel on the Slurm jobs tfdist submitted (cancel is scancel)."""
    from cluster.client import slurm_submit, tables

    if args.command == "jobs":
        return tables.print_slurm_jobs(slurm_submit.tfdist_jobs(), args.json)
    if args.command == "logs":
        return slurm_submit.print_logs(args.job_id, follow_it=args.follow)
    print(slurm_submit.cancel(args.job_id))
    return 0


def _jobs_commands(args) -> int:
    from cluster.client import tables

    if _on_slurm(args):
        return _slurm_commands(args)
    client = _client(args)
    try:
        if args.command == "jobs":
            return tables.print_jobs(client.jobs(), args.json)
        if args.command == "job":
            return tables.print_job(client.job(args.job_id), args.json)
        if args.command == "agents":
            return tables.print_agents(client.list_agents(), args.json)
        if args.command == "metrics":
            from cluster.client import metrics_report

            if args.plot:
                metrics_report.check_plot_path(args.plot)
            history = client.metrics(args.job_id, args.name)
            metrics_report.print_history(history, "json" if args.json else "csv" if args.csv else "table")
            if args.plot:
                metrics_report.plot(history, args.plot)
                sys.stderr.write(f"tfdist: plot written to {args.plot}\n")
            return 0
        if args.command == "cancel":
            state = client.cancel(args.job_id)
            print(f"job {args.job_id}: {state}")
            return 0
        if args.command == "preempt":
            state = client.preempt(args.job_id)
            print(f"job {args.job_id}: {state}" + (" (preemption requested: the workers stop at a common step, "
                                                    "save and exit; the job then pauses)" if state != "PAUSED" else ""))
            return 0
        if args.command == "resume":
            print(f"job {args.job_id}: {client.resume(args.job_id)}")
            return 0
        if args.command == "logs":
            from cluster.client.follow import stream_logs

            job_id = client.job(args.job_id).id
            stream_logs(client, job_id, follow=args.follow, rank=args.rank)
            return 0
    finally:
        client.close()
    return USAGE_ERROR


COMMANDS = {"launch": _launch, "coordinator": _coordinator, "agent": _agent}


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        argv = list(sys.argv[1:] if argv is None else argv)
        sbatch_options = None
        if argv[:1] == ["launch"]:  # `--slurm OPTIONS`: sbatch's options, up to `--`
            from cluster.client.slurm_submit import split_argv

            argv, sbatch_options = split_argv(argv)
        args = parser.parse_args(argv)
        if args.command == "launch":
            args.sbatch_options = sbatch_options
        if args.command is None:
            parser.print_help()
            return USAGE_ERROR
        return COMMANDS.get(args.command, _jobs_commands)(args)
    except (TfdistError, OSError) as e:  # each error carries its exit code; OSError: a file or socket
        message = str(e)
        sys.stderr.write(f"{message}\n" if message.startswith("tfdist") else f"tfdist: error: {message}\n")
        return getattr(e, "exit_code", 1)


def entry_point() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry_point()
