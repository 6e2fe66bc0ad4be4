"""The handlers of `tfdist coordinator` and `tfdist agent`: start the daemon, serve until SIGINT/SIGTERM,
then stop within a deadline whatever the other side does."""

from __future__ import annotations

import logging
import os
import re
import signal
import socket
import sys
import threading

from cluster.client.usage import COORDINATOR_ENV, CREDENTIALS_ENV, UsageError
from cluster.shared.auth import publish_local, unpublish_local, user_name
from cluster.shared.credentials import Authority, Credential
from cluster.shared.limits import MAX_SLOTS
from cluster.shared.listen import check_listen
from tfdist.errors import UserError
from tfdist.private_files import daemon_umask, private_dir

STOP_DEADLINE = 10.0  # seconds a daemon may take to stop after SIGTERM, whatever the other side does
LOCAL_ADMIN_DAYS = 365  # the coordinator daemon's own user's credential (published on this machine, 0600)


def _setup_daemon_logging(verbosity: str) -> None:
    """absl's log format, the one TensorFlow's own lines use (`I1122 10:58:35.140213 PID file.py:6] ...`),
    so a node's daemon and worker logs read alike."""
    from absl import flags as absl_flags
    from absl import logging as absl_logging

    absl_flags.FLAGS.mark_as_parsed()  # tfdist parses its own flags; absl's defaults are fine
    absl_logging.use_absl_handler()
    absl_logging.set_verbosity(verbosity)


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


def _serve(stop: threading.Event, shutdown, what: str, failure=lambda: "") -> int:
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
    why = failure()
    if why:
        sys.stderr.write(f"tfdist {what}: error: {why}\n")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1 if why else 0)  # nothing left worth waiting for: no interpreter teardown behind gRPC's threads


def http_address(listen: str, http: str | None) -> str | None:
    """Where the coordinator serves /metrics: `http` as given, none for "off", by default --listen's host
    at its port + 10 (7470 -> 7480; an ephemeral port 0 stays 0)."""
    if http is not None:
        if http.strip().lower() == "off":
            return None
        host, _, port = http.rpartition(":")
        if not host or not port.isdigit() or int(port) > 65535:
            raise UsageError(f"tfdist coordinator: --http {http!r} is not HOST:PORT (or off)")
        return http
    host, _, port = listen.rpartition(":")
    if not port.isdigit():
        return None
    return f"{host}:{int(port) + 10 if 0 < int(port) <= 65525 else 0}"


def run_coordinator(args) -> int:
    from cluster.coordinator.daemon import CoordinatorServer, Settings, freeze_after_full_collections
    from cluster.engines import kind, kinds

    engine_kind = kind(args.engine)  # an unknown name: one line, nothing started
    if args.advertise:  # where pods reach it: a Service's name need not resolve in its own pod (yet)
        check_listen("--advertise", args.advertise, resolve=False)
    for other in kinds():  # every flag given is checked, whichever engine runs (a wrong --slots is wrong)
        other.options_of(args)
    engine = engine_kind.create(engine_kind.options_of(args))
    check_listen("--listen", args.listen)  # before anything starts: one line for `:7474`, `127.1:7475`
    if os.path.lexists(args.state_dir) and not os.path.isdir(args.state_dir):
        raise UsageError(f"tfdist coordinator: --state-dir {args.state_dir} is not a directory: give a directory "
                         "(made if missing, mode 0700), e.g. ~/.tfdist/coordinator")
    daemon_umask()  # what it creates is the user's alone; workers get the user's umask back (gang.py)
    freeze_after_full_collections()  # thousands of agents: a full collection walks only what is new
    stop = _stop_on_signal()
    _setup_daemon_logging(args.verbosity)
    private_dir(args.state_dir)
    credentials_dir = args.credentials_dir or os.path.join(args.state_dir, "credentials")
    host = args.listen.rsplit(":", 1)[0].strip("[]")
    advertised = [args.advertise.rsplit(":", 1)[0].strip("[]")] if args.advertise else []  # pods verify this name
    authority, made = Authority.load_or_create(credentials_dir, hosts=[host, *advertised, socket.gethostname(),
                                                                       socket.getfqdn()])
    if args.insecure_plaintext:
        sys.stderr.write("tfdist: warning: --insecure-plaintext: no TLS. Credentials and job data cross the network "
                         "in the clear, and clients cannot tell this coordinator from an impostor\n")
    settings = Settings(lost_after=args.lost_after, heartbeat_interval=args.heartbeat_interval,
                        stop_grace=args.stop_grace, failure_grace=args.failure_grace,
                        port_range=args.port_range, subnet=args.subnet,
                        retention_jobs=args.keep_finished_jobs, retention_days=args.keep_days,
                        max_log_lines=args.max_log_lines)
    server = CoordinatorServer(args.state_dir, args.listen, authority, settings, engine=engine,
                               plaintext=args.insecure_plaintext, http_listen=http_address(args.listen, args.http)).start()
    # Its own user's, for tfdist commands on this machine: as long as a daemon may run without a restart.
    published = publish_local(server.issue("admin", user_name(), days=LOCAL_ADMIN_DAYS), server.port)
    transport = "plaintext" if args.insecure_plaintext else "TLS"
    print(f"tfdist coordinator listening on {server.address} ({transport}; state in {args.state_dir})", flush=True)
    if server.metrics_endpoint is not None:
        print(f"tfdist: Prometheus metrics on {server.metrics_endpoint.url} (bearer token of a monitor credential; "
              "docs/observability.md)", flush=True)
    print(f"tfdist: credentials in {credentials_dir}{' (made now)' if made else ''}; yours is {published} (tfdist "
          f"commands on this machine find it); for a node: tfdist credentials {credentials_dir} --node NAME", flush=True)

    def shutdown():
        unpublish_local(published)
        server.stop(grace=1.0)

    return _serve(stop, shutdown, "coordinator")


def print_kubernetes_manifests(args) -> int:
    import yaml

    from cluster.engines.kubernetes.deploy import coordinator_objects

    if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", args.namespace):
        raise UsageError(f"tfdist kubernetes manifests: --namespace {args.namespace!r} is not a Kubernetes namespace "
                         "name (lowercase letters, digits and '-', at most 63); e.g. --namespace tfdist")
    if not args.image.strip() or any(c.isspace() for c in args.image):
        raise UsageError(f"tfdist kubernetes manifests: --image {args.image!r}: give an image reference such as "
                         "registry.example.com/tfdist:1.0")
    sys.stdout.write(yaml.safe_dump_all(coordinator_objects(args.namespace, args.image, args.storage,
                                                            args.storage_class), sort_keys=False))
    return 0


def run_agent(args) -> int:
    from cluster.agent.daemon import Agent

    daemon_umask()  # what it creates is the user's alone; workers get the user's umask back (gang.py)
    stop = _stop_on_signal()
    if args.slots is not None and args.slots < 1:
        raise UsageError(f"tfdist agent: --slots must be at least 1, got {args.slots}")
    if args.slots is not None and args.slots > MAX_SLOTS:
        raise UsageError(f"tfdist agent: --slots must be at most {MAX_SLOTS:,}, got {args.slots}")
    if args.name is not None and not args.name.strip():
        raise UsageError("tfdist agent: --name is empty; give this node's name, or leave --name out to use the name "
                         "in its node credential")
    credential = Credential.load(args.credentials) if args.credentials else None
    name = args.name or (credential.name if credential else socket.gethostname())
    if args.slurm:
        from cluster.slurm import allocation as slurm

        name, args.slots, credential = slurm.agent_identity(os.environ, name, args.slots, credential)
    if credential is None:
        raise UsageError(f"tfdist agent: --credentials FILE is required: this node's credential, made on the "
                         f"coordinator's host with `tfdist credentials DIR --node {name}` (or set {CREDENTIALS_ENV})")
    coordinator = args.coordinator or credential.coordinator
    if not coordinator:
        raise UsageError(f"tfdist agent: no coordinator: {args.credentials or 'the credential'} names none; pass "
                         f"--coordinator HOST:PORT (or set {COORDINATOR_ENV})")
    only_run = _only_run(args.only_run) if getattr(args, "only_run", None) else None
    try:
        agent = Agent(coordinator, name=name, slots=args.slots, credential=credential,
                      metrics_listen=getattr(args, "metrics_listen", None), beacons=getattr(args, "beacons", True),
                      only_run=only_run, working_dir=getattr(args, "working_dir", None))
    except UserError as e:  # no GPUs and no --slots (NoSlotsError), a credential for another node
        raise UsageError(f"tfdist agent: {e}") from None
    _setup_daemon_logging(args.verbosity)
    if args.slurm:
        _slurm_sigterm(stop, agent)

    died: list[str] = []

    def run():
        try:
            agent.run()
        except BaseException as e:  # logged by the thread's hook; the process must not stay up doing nothing
            died.append(f"the agent's loop died: {type(e).__name__}: {e}")
            raise
        finally:  # refused, died, or stopped
            stop.set()

    threading.Thread(target=run, daemon=True).start()
    return _serve(stop, lambda: agent.shutdown(timeout=STOP_DEADLINE - 2), "agent",
                  lambda: agent.refused or (died[0] if died else ""))


def _only_run(text: str) -> tuple[str, int]:
    job_id, _, attempt = text.rpartition("/")
    if not job_id or not attempt.isdigit():
        raise UsageError(f"tfdist agent: --only-run {text!r}: expected JOB/ATTEMPT, such as 3f2a9c/0")
    return job_id, int(attempt)


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
