"""The handlers of `tfdist coordinator` and `tfdist agent`: start the daemon, serve until SIGINT/SIGTERM,
then stop within a deadline whatever the other side does."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading

from cluster.client.usage import COORDINATOR_ENV, UsageError
from cluster.shared.auth import read_token
from tfdist.errors import UserError

STOP_DEADLINE = 10.0  # seconds a daemon may take to stop after SIGTERM, whatever the other side does


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


def run_coordinator(args) -> int:
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


def run_agent(args) -> int:
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
    except UserError as e:  # no GPUs and no --slots (NoSlotsError)
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
