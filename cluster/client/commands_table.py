"""The `tfdist` commands as data: each command's name, help, handler and arguments. cli.build_parser makes
every sub-parser from this table; an option several commands share is declared once here and reused."""

from __future__ import annotations

import argparse
import functools
import importlib
import os
from typing import Callable

from cluster.shared.command_args import (  # noqa: F401 (Arg, OneOf: cli.py reads them here)
    Arg, Command, OneOf, arg, bounded, cidr, integer, non_negative_float, non_negative_integer, port_range,
    positive_float)
from cluster.client.usage import COORDINATOR_ENV, CREDENTIALS_ENV
from cluster.engines import engine_flags, kinds
from cluster.shared import limits
from cluster.shared.config import DISTRIBUTION_MODES


def _handler(module: str, name: str) -> Callable[[argparse.Namespace], int]:
    """The handler `name` of cluster.client.MODULE, imported when its command runs, not when the parser is
    built: `tfdist --version` and each command load only what they use (a local launch paid for the
    doctor's, the credentials' and the daemons' imports)."""
    def run(args: argparse.Namespace) -> int:
        return getattr(importlib.import_module(f"cluster.client.{module}"), name)(args)

    run.__qualname__ = run.__name__ = f"{module}.{name}"
    return run


def _dashboard(args: argparse.Namespace) -> int:
    """`tfdist dashboard` (cluster/client/dashboard/): imported when run, its web assets with it."""
    from cluster.client.dashboard import command

    return command.run(args)


# ---------------------------------------------------------------- options several commands share

def _env(name: str, fallback: str | None = None) -> Callable[[], str | None]:
    return functools.partial(os.environ.get, name, fallback)


COORDINATOR = arg("--coordinator", metavar="HOST:PORT", default_from=_env(COORDINATOR_ENV),
                  help=f"the coordinator (default ${COORDINATOR_ENV})")
CREDENTIALS = arg("--credentials", metavar="FILE", default_from=_env(CREDENTIALS_ENV),
                  help=f"your credential file from `tfdist credentials` (default ${CREDENTIALS_ENV}; coordinators "
                       "you run on this machine need none)")
CLIENT = (COORDINATOR, CREDENTIALS)
JOB_ID = arg("job_id", metavar="ID")
JSON = arg("--json", action="store_true", help="JSON instead of the table (its schema: docs/json.md)")
SLOTS = arg("--slots", type=integer, metavar="N")
SLURM_JOBS = arg("--slurm", action="store_true", help="the Slurm jobs `tfdist launch --slurm` submitted (the "
                                                      "default without --coordinator where Slurm's commands are)")
VERBOSITY = arg("--verbosity", choices=("debug", "info", "warning", "error"), default_from=_env("TFDIST_VERBOSITY", "info"),
                help="daemon log level (default $TFDIST_VERBOSITY or info)")


VERBOSE = arg("--verbose", action="store_true", help="also show TensorFlow's start-up lines and known harmless "
                                                    "warnings (always in `tfdist logs ID`)")
ALL_RANKS = arg("--all-ranks", action="store_true", help="show every rank's progress bars (default: the chief's, "
                                                         "rank 0)")


def _seconds(flag: str, default: float, help: str | None = None) -> Arg:
    return arg(flag, type=positive_float, default=default, metavar="SECONDS", help=help)


# ---------------------------------------------------------------- the commands

LAUNCH = Command("launch", "run a training job", _handler("job_commands", "launch_job"), description=(
    "Run COMMAND as a distributed job and follow it. Without --coordinator, an embedded coordinator "
    "and a local agent run it on this machine (one worker per slot), and the job stays among your local runs "
    "(`tfdist jobs`, `tfdist resume ID`). `train.py ARGS` runs with tfdist's own Python, and so does a bare "
    "`python` or `python3` in a local launch's COMMAND."), args=(
    arg("--config", metavar="FILE", help="experiment config (YAML)"),
    SLOTS.but(help="slots; overrides resources.slots_per_trial"),
    arg("--distribution", metavar="MODE",
        help=f"distribution mode ({', '.join(DISTRIBUTION_MODES)}); overrides distribution.mode"),
    arg("--hparam", action="append", metavar="NAME=VALUE",
        help="set one hyperparameter (repeatable; VALUE read as YAML: 0.001, 32, true, [64, 32]; NAME.SUB "
             "reaches into a group); where the config has hyperparameters, NAME must be one of them"),
    _seconds("--startup-timeout", 300.0, "stop the job if a worker has not joined by then (default 300)"),
    arg("--priority", type=bounded(limits.MIN_PRIORITY, limits.MAX_PRIORITY), default=None,
        help=f"higher runs first (default 0, or 42 - the config's resources.priority; {limits.MIN_PRIORITY:,} to "
             f"{limits.MAX_PRIORITY:,})"),
    arg("--detach", action="store_true", help="print the job id and return (needs a coordinator that outlives the launch: --coordinator, $TFDIST_COORDINATOR or a --credentials file naming one; or --slurm)"),
    arg("--state-dir", metavar="DIR", help="embedded coordinator's state (default: a new local run in "
                                           "$XDG_STATE_HOME/tfdist/local, which `tfdist jobs` lists)"),
    arg("--slurm", metavar="SBATCH_OPTIONS", nargs="?", help=(
        "submit to Slurm from a login node: every option after --slurm up to `--` is sbatch's (tfdist launch "
        "--config exp.yaml --slurm --nodes=2 --ntasks-per-node=1 -- python train.py); follows the job's output and "
        "exits with its code")),
    COORDINATOR.but(help=f"the coordinator (default ${COORDINATOR_ENV}); without it, an embedded coordinator runs "
                         "the job on this machine"),
    CREDENTIALS,
    VERBOSE,
    ALL_RANKS,
    arg("entry", nargs=argparse.REMAINDER, metavar="-- COMMAND",
        help="the command each worker runs; default: the config's entrypoint"),
))

COORDINATOR_DAEMON = Command("coordinator", "run the coordinator daemon", _handler("daemon_commands", "run_coordinator"),
                             args=(
    arg("--listen", default="127.0.0.1:7470", metavar="HOST:PORT",
        help="address to serve on (default 127.0.0.1:7470); TLS, and every call needs a credential"),
    arg("--http", metavar="HOST:PORT|off",
        help="Prometheus /metrics over HTTPS, with the same credentials (a monitor credential is enough); "
             "default: --listen's host, its port + 10 (7480); off: none"),
    arg("--state-dir", required=True, metavar="DIR", help="where the SQLite state lives"),
    arg("--engine", default="agents", metavar="NAME", help="where jobs run: " + "; ".join(
        f"{k.name}: {k.summary}" for k in kinds()) + " (default agents)"),
    *engine_flags(),  # each engine's own (cluster/engines/*/: its EngineKind)
    arg("--credentials-dir", metavar="DIR", help="the cluster's CA, certificate and secret from `tfdist credentials` "
                                                 "(default: STATE_DIR/credentials, made on first start)"),
    arg("--insecure-plaintext", action="store_true",
        help="serve without TLS (credentials still required): only on a network you trust completely"),
    _seconds("--lost-after", 6.0, "declare an agent lost after this long without a heartbeat (default 6)"),
    _seconds("--stop-grace", 5.0, "a canceled job's workers get SIGTERM, then SIGKILL this much later (default 5)"),
    _seconds("--failure-grace", 1.0, "the same for a failed job's surviving workers (default 1)"),
    _seconds("--heartbeat-interval", 1.0),
    arg("--port-range", type=port_range, default=(29500, 29999), metavar="LOW-HIGH",
        help="ports leased to workers on every node (default 29500-29999)"),
    arg("--subnet", type=cidr, metavar="CIDR", help="network the nodes of a job talk over (default: detected)"),
    arg("--keep-finished-jobs", type=non_negative_integer, default=10_000, metavar="N",
        help="retention: keep the newest N finished jobs with their logs and metrics (default 10000; 0: no limit)"),
    arg("--keep-days", type=non_negative_float, default=30.0, metavar="DAYS",
        help="retention: and only those that ended within DAYS (default 30; 0: no limit)"),
    arg("--max-log-lines", type=non_negative_integer, default=500_000, metavar="N",
        help="lines one job's log keeps; later output is dropped and the log says so (default 500000; 0: no limit)"),
    VERBOSITY,
))

AGENT = Command("agent", "run a node agent", _handler("daemon_commands", "run_agent"), args=(
    *CLIENT,
    SLOTS.but(help="CPU worker slots (default: the node's GPU count)"),
    arg("--name", help="node name (default: the name in its node credential, else the host name)"),
    arg("--slurm", action="store_true", help="started by `tfdist launch` inside a Slurm allocation: name, slots and "
                                             "credential from the step's environment"),
    arg("--metrics-listen", metavar="HOST:PORT",
        help="serve this node's Prometheus /metrics here (GPUs, slots, each job's CPU and memory): HTTPS with a "
             "certificate the coordinator signs, and the coordinator's credentials (default: none)"),
    arg("--only-run", metavar="JOB/ATTEMPT", help="carry out only this run's work (what the Kubernetes engine's "
                                                   "pods run: the node is the pod's for its gang's run)"),
    arg("--working-dir", metavar="DIR", help="run every job's workers in DIR, not in the directory the job was "
                                              "launched from (a Kubernetes pod's agent: the config's or the image's)"),
    arg("--no-beacons", dest="beacons", action="store_false",
        help="prove this node alive with heartbeats alone, not UDP beacons to the coordinator's port (for a network "
             "that blocks UDP between them; costs the coordinator more at thousands of nodes)"),
    VERBOSITY,
))

CREDENTIALS_COMMAND = Command(
    "credentials", "issue, list and revoke credentials for nodes and users (or make a cluster's CA and certificate)",
    _handler("credentials_commands", "make_credentials"), description=(
        "Without DIR, asks a running coordinator with an admin credential (--coordinator, --credentials): one "
        "credential file per --node/--user/--admin/--monitor, written here as KIND-NAME.json (or -o FILE for "
        "one); --list what it issued and revoked; --revoke KIND:NAME refuses every credential of that name issued "
        "so far, and nothing else. With DIR, on the coordinator's host: makes DIR the cluster's credentials "
        "directory if it is not one yet (a CA, the coordinator's TLS certificate, a secret; or your site's "
        "certificates with --site-cert/--site-key/--site-ca), then writes the credential files into DIR/issued. "
        "Every credential expires (--days; by default 90 days for users and admins, 365 for nodes and monitors). "
        "Give each node its file (`tfdist agent --credentials FILE`) and each user theirs (`--credentials FILE`)."),
    args=(
        arg("dir", metavar="DIR", nargs="?", help="the credentials directory (`tfdist coordinator --credentials-dir "
                                                  "DIR`); without it, a running coordinator issues them"),
        arg("--node", action="append", default=[], metavar="NAME", help="a node credential for NAME (repeatable)"),
        arg("--user", action="append", default=[], metavar="NAME", help="a user credential (repeatable)"),
        arg("--admin", action="append", default=[], metavar="NAME", help="an admin credential: acts on every job"),
        arg("--monitor", action="append", default=[], metavar="NAME", help="a read-only credential for monitoring"),
        arg("--prometheus", metavar="DIR", help="also write each --monitor credential's token (NAME.token) and the "
                                                "cluster CA (ca.pem) into DIR, the files a Prometheus scrape job reads"),
        arg("--host", action="append", default=[], metavar="NAME_OR_IP",
            help="a name or address the coordinator is reached at (into a new certificate; repeatable)"),
        arg("--coordinator", metavar="HOST:PORT", help="without DIR: the coordinator to ask (default "
                                                       f"${COORDINATOR_ENV}); with DIR: written into the files, so "
                                                       "their holders need no --coordinator"),
        arg("--credentials", metavar="FILE", default_from=_env(CREDENTIALS_ENV),
            help=f"without DIR: your admin credential (default ${CREDENTIALS_ENV}; a coordinator you run on this "
                 "machine needs none)"),
        arg("--days", type=float, metavar="N", help="how long the credentials hold (default 90 for users and admins, "
                                                    "365 for nodes and monitors)"),
        arg("--list", action="store_true", help="without DIR: the credentials the coordinator issued, and the names "
                                                "revoked"),
        arg("--revoke", action="append", default=[], metavar="KIND:NAME",
            help="without DIR: refuse every credential of KIND (user, admin, monitor, node) NAME issued until now "
                 "(repeatable); one issued afterwards holds"),
        JSON,
        arg("-o", "--output", metavar="FILE", help="the file for the one credential asked for"),
        arg("--site-cert", metavar="PEM", help="your site's certificate for the coordinator (with --site-key, --site-ca)"),
        arg("--site-key", metavar="PEM"),
        arg("--site-ca", metavar="PEM", help="the CA clients verify --site-cert with"),
        arg("--insecure-plaintext", action="store_true", help="credentials for a coordinator run with "
                                                               "--insecure-plaintext"),
    ))

KUBERNETES_COMMAND = Command(
    "kubernetes", "print the manifests that run a coordinator on Kubernetes, or build its image",
    _handler("image.command", "kubernetes"), description=(
        "manifests: prints as YAML what a kubernetes-engine coordinator needs in NAMESPACE: its least rights, a volume "
        "for its state, a Deployment and a Service. image: builds an OCI image with tfdist, no Docker daemon needed; "
        "prints OUTPUT@DIGEST (docs/kubernetes.md)."),
    args=(
        arg("what", choices=["manifests", "image"], help="manifests: the coordinator's objects; image: build an image"),
        arg("--namespace", default="tfdist", metavar="NS", help="its namespace and its jobs' (default tfdist)"),
        arg("--image", metavar="IMAGE", help="manifests (required): an image with tfdist, the coordinator's and pods'"),
        arg("--storage", default="10Gi", metavar="SIZE", help="the state volume's size (default 10Gi)"),
        arg("--storage-class", default="", metavar="NAME", help="its StorageClass (default: the cluster's)"),
        arg("--base", metavar="BASE", help="image: default (TensorFlow 2.21 CPU), lean (none: a coordinator's), or "
                                           "your image: docker://NAME@sha256:..., oci:DIR:TAG, oci-archive:FILE"),
        arg("--add", action="append", metavar="SRC:DEST", help="image: your file or directory SRC at DEST (repeatable)"),
        arg("--output", metavar="OUT", help="image: oci-archive:FILE.tar or oci:DIR[:TAG] (default: in the cache)"),
        arg("--tag", metavar="TAG", help="image: its tag (default worker, lean or custom)"),
        arg("--cache-dir", metavar="DIR", help="image: the build cache (default ~/.cache/tfdist/images)"),
        arg("--load-into", metavar="SOCKET", help="image: import it into this containerd (k8s.io, localhost/tfdist:TAG)"),
    ))

COMMANDS: tuple[Command, ...] = (
    LAUNCH,
    COORDINATOR_DAEMON,
    AGENT,
    CREDENTIALS_COMMAND,
    KUBERNETES_COMMAND,
    Command("jobs", "list jobs (without --coordinator: your local runs; without a selection: every active job and "
                    "the newest 20 finished)",
            _handler("job_commands", "list_jobs"), (
                *CLIENT, JSON, SLURM_JOBS,
                arg("--all", action="store_true", help="every job the coordinator keeps"),
                arg("--state", action="append", metavar="STATE",
                    help="only jobs in STATE (repeatable, or comma-separated: --state running,queued)"),
                arg("--limit", type=integer, metavar="N", help="the newest N jobs (of the selection)"))),
    Command("job", "show one job: state, placement, why it waits, how it ended", _handler("job_commands", "show_job"),
            (*CLIENT, JOB_ID, JSON)),
    Command("logs", "print a job's output: every line on stdout, a worker's stderr marked `[rank=N stderr]`",
            _handler("job_commands", "print_logs"), (
        *CLIENT, JOB_ID, arg("-f", "--follow", action="store_true", help="keep printing until the job ends"),
        arg("--rank", type=bounded(-1, limits.MAX_RANK), default=-1, help="only this rank"), SLURM_JOBS,
        OneOf((JSON.but(help="JSON Lines: one object per line, progress updates included (docs/json.md)"),
               arg("--quiet", action="store_true", help="what `tfdist launch` shows: TensorFlow's start-up lines, "
                                                        "harmless warnings and other ranks' progress bars hidden"))))),
    Command("experiments", "list experiments", _handler("experiment_commands", "list_experiments"), (*CLIENT, JSON)),
    Command("experiment", "show an experiment: its trials, values, metrics, best trial", _handler(
        "experiment_commands", "show_experiment"), (*CLIENT, arg("experiment_id", metavar="ID", help="eN or its id"), JSON)),
    Command("cancel", "cancel a job", _handler("job_commands", "cancel_job"), (*CLIENT, JOB_ID, SLURM_JOBS)),
    Command("preempt", "stop a job's workers at a common step, save, and pause the job",
            _handler("job_commands", "preempt_job"), (*CLIENT, JOB_ID)),
    Command("resume", "run a paused job again from its latest checkpoint", _handler("job_commands", "resume_job"),
            (*CLIENT, JOB_ID, VERBOSE.but(help="a local job: as launch's --verbose"),
             ALL_RANKS.but(help="a local job: as launch's --all-ranks")),
            description="Runs paused job ID again from its latest checkpoint. A local job (your local runs, "
                        "without --coordinator) whose launch has ended runs again on this machine with its slots, "
                        "followed as `tfdist launch` follows it, with its exit codes."),
    Command("metrics", "print a job's metric history (table, --json, --csv, --plot)",
            _handler("job_commands", "print_metrics"), (
        *CLIENT, JOB_ID, arg("--name", default="", help="only this metric"),
        OneOf((JSON.but(help="JSON Lines: one object per step and rank (docs/json.md)"),
               arg("--csv", action="store_true", help="CSV: step, rank, then one column per metric"))),
        arg("--plot", metavar="FILE.png", help="also draw every metric against the step into a PNG "
                                               "(needs matplotlib: pip install 'tfdist[plot]')"))),
    Command("tensorboard", "serve a job's TensorBoard event files (pip install 'tfdist[tensorboard]')",
            _handler("tensorboard_command", "serve"), (
                *CLIENT, JOB_ID,
                arg("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only; "
                                                        "every page needs the login link's token)"),
                arg("--port", type=bounded(0, 65535), metavar="PORT",
                    help="port (default 6006, or the next free one; 0: any free port)")),
            description="Serves TensorBoard on the event files MetricsReporter(tensorboard=True) wrote for job ID "
                        "(<checkpoint_storage>/ID/tensorboard, else <working dir>/tfdist-tensorboard/ID; this "
                        "machine must see that directory) behind a login, as `tfdist dashboard` does, and prints "
                        "its URL and login link; Ctrl-C or SIGTERM stops it."),
    Command("dashboard", "the cluster and its jobs in your browser (read-only, with actions on your own jobs)",
            _dashboard, (
                *CLIENT,
                arg("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only; "
                                                        "every page needs the login link's token)"),
                arg("--port", type=bounded(0, 65535), metavar="PORT",
                    help="port (default 7490, or the next free one; 0: any free port)"),
                arg("--open", action="store_true", help="open it in this machine's browser")),
            description="Serves a web dashboard of the coordinator your credential reaches: nodes, slots and GPUs "
                        "with their utilisation, the queue with waiting reasons, each job's placement, live logs, "
                        "metric curves, checkpoints and failures, and cancel/preempt/resume for your own jobs. It "
                        "asks the coordinator with your credential, as `tfdist jobs` does, and prints a login link "
                        "(its token is the only way in); Ctrl-C or SIGTERM stops it."),
    Command("diagnose", "run short variants of a job and say what bounds it: communication, input, a slow rank or "
                        "compute (docs/diagnose.md)", _handler("diagnose_command", "diagnose_job"), (
        *CLIENT,
        arg("--config", metavar="FILE", help="experiment config (YAML), as `tfdist launch` reads it"),
        SLOTS.but(help="slots; overrides resources.slots_per_trial"),
        arg("--distribution", metavar="MODE", help="distribution mode; overrides distribution.mode"),
        arg("--hparam", action="append", metavar="NAME=VALUE", help="set one hyperparameter (as `tfdist launch`)"),
        arg("--steps", type=bounded(1, 900), default=20, help="steps each rank times in each variant (default 20)"),
        arg("--warmup", type=bounded(0, 900), default=5, help="steps before those, not timed (default 5)"),
        arg("--variants", metavar="LIST", help="comma-separated: baseline, one_node, no_communication, "
                                               "synthetic_input (default: all; baseline always runs)"),
        _seconds("--variant-timeout", 240.0, "stop waiting for one variant's timings after this (default 240)"),
        JSON,
        arg("entry", nargs="*", metavar="JOB | -- COMMAND",
            help="an existing job to diagnose, or the command each worker runs (default: the config's entrypoint)"))),
    Command("agents", "list agents", _handler("job_commands", "list_agents"), (*CLIENT, JSON)),
    Command("doctor", "check this node before a long run: TensorFlow, Keras, GPUs, Horovod, ports, the coordinator",
            _handler("doctor", "run_doctor"), (
                *CLIENT,  # with either, the coordinator is checked: it answers and accepts the credential
                arg("--python", metavar="PYTHON", help="the Python your workers run (default: tfdist's own, the one "
                                                       "`python` means in `tfdist launch`)"),
                arg("--distribution", choices=DISTRIBUTION_MODES, metavar="MODE",
                    help="the mode you will run: ps needs tf_keras, horovod needs Horovod (default: neither)"),
                arg("--port-range", type=port_range, metavar="LOW-HIGH",
                    help="the ports to check (default: what a local launch leases; with --coordinator, 29500-29999 "
                         "as `tfdist coordinator --port-range`)"),
                _seconds("--timeout", 90.0, "the most each probe may take (default 90; importing TensorFlow is one)")),
            description="Checks this node as a user would before a long run, one line each: TensorFlow and Keras "
                        "versions against what tfdist is tested with, tf_keras (ps mode), the GPUs nvidia-smi lists "
                        "against those TensorFlow sees, Horovod built with Gloo, the port range free, the coordinator "
                        "reachable with your credential (with --coordinator or --credentials), and tfdist's "
                        "directories private. Each problem says its fix; exit 0 when there is none, 1 otherwise."),
    Command("build-horovod", "build horovod 0.28.1 for a Python's TensorFlow (Gloo only; about 2 minutes, once)",
            _handler("horovod_build", "build_horovod"), (
                arg("--python", metavar="PYTHON", help="the Python to build for and install into (default: tfdist's "
                                                       "own, the one `python` means in `tfdist launch`)"),
                arg("--check", action="store_true", help="only say whether this build is installed (exit 0) or not "
                                                         "(exit 1)"),
                arg("--sdist", metavar="FILE", help="build from this horovod-0.28.1.tar.gz instead of downloading it"),
                _seconds("--timeout", 3600.0, "stop the build after this long (default 3600)")),
            description="Builds horovod 0.28.1 (its last release) from its source for the TensorFlow of --python, "
                        "with Gloo only (no MPI, no ssh: tfdist starts the ranks itself), leaving out one XLA file "
                        "TensorFlow >= 2.20 cannot build and letting process sets honour HOROVOD_GLOO_IFACE. Needs "
                        "cmake and g++; does nothing when the build is already there."),
)
