"""`tfdist launch`: submit a job to a coordinator (or to an embedded one) and follow it. A local launch's
embedded coordinator keeps its state in a local run of the user's (cluster/client/local_runs.py), where
`tfdist jobs/job/logs/...` find it later and `tfdist resume ID` (`resume_local`) continues it."""

from __future__ import annotations

import dataclasses
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING, Mapping

from cluster.slurm import allocation as slurm
from cluster.shared.auth import publish_local, unpublish_local, user_name
from cluster.shared.credentials import Authority, Credential, derived_key, new_secret
from cluster.shared.commands import other_venv_warning, resolve_command, with_launcher_python
from cluster.shared.config import ExperimentConfig
from cluster.shared.gpus import discover_gpus, slots_on_gpus
from cluster.shared.model import Gpu
from cluster.client import experiment_launch, local_runs
from cluster.client.follow import PAUSED_EXIT, exit_code, follow_job, last_seq, summary
from cluster.client.progress_view import QUIET, ViewOptions
from cluster.shared import jobspec, modes
from tfdist import batching
from tfdist.compat import HOROVOD_INSTALL_HINT
from tfdist.errors import UserError

if TYPE_CHECKING:  # a gRPC Client, or a local launch's in-process one
    from cluster.shared.rpc import Client


def preflight(config: ExperimentConfig) -> None:
    """Mistakes we can see from here, refused before anything is submitted; the config's notes (Determined's
    keys that change nothing here), one line each, before the job starts."""
    for note in config.notes:
        sys.stderr.write(f"tfdist: config: {note}\n")
    batch = config.global_batch_size
    if isinstance(batch, Mapping):  # searched (checked: int or categorical): each trial splits its own value
        smallest = min(batch["vals"]) if batch["type"] == "categorical" else batch["minval"]
        batching.split_batch(smallest, config.slots_per_trial)  # one a trial may get is smaller than the slots
    elif batch is not None:
        warning = batching.split_batch(batch, config.slots_per_trial).remainder_warning()
        if warning:
            sys.stderr.write(f"tfdist: warning: {warning}\n")


def slots_warning(slots: int, cores: int) -> str | None:
    """A CPU-only local launch starts one worker process per slot: more than the cores it may use share
    them (each TensorFlow process also starts threads of its own) and train slower than fewer would."""
    if slots <= cores:
        return None
    return (f"--slots {slots} starts {slots} worker processes on this machine's {cores} CPU core"
            f"{'s' if cores != 1 else ''}: they share the cores and train slower than {cores} would; use --slots "
            f"{cores} or fewer here, or a cluster (--coordinator, --slurm) for more")


def local_gpus(slots: int, found: list[Gpu]) -> tuple[Gpu, ...]:
    """The GPUs behind a local launch's slots (none: CPU slots), said in one line where it has to be CPU."""
    gpus, warning = slots_on_gpus(slots, found)
    if warning:
        sys.stderr.write(f"tfdist: warning: {warning}\n")
    return gpus


def local_command(config: ExperimentConfig) -> ExperimentConfig:
    """A local launch's config with a bare `python` in its command meaning the launcher's Python (said
    when an activated venv is another one)."""
    warning = other_venv_warning(config.entrypoint, sys.executable, os.environ.get("VIRTUAL_ENV"))
    if warning:
        sys.stderr.write(f"tfdist: warning: {warning}\n")
    return dataclasses.replace(config, entrypoint=tuple(with_launcher_python(config.entrypoint, sys.executable)))


# How to install what a mode's workers need (Planner.worker_needs): (the name users know, the fix).
INSTALL_HINTS = {"horovod": ("Horovod", HOROVOD_INSTALL_HINT),
                 "jax": ("JAX", "pip install 'tfdist[jax]' into it (JAX's CPU wheels; on GPUs install JAX's CUDA build)"),
                 "torch": ("PyTorch", "pip install torch into it")}
MISSING_MODULE = "distribution mode {mode} needs {what}, which is not installed for {python}; {hint}"


def check_worker_needs(program: str, planner: modes.Planner, variables: Mapping[str, str] | None = None) -> None:
    """Local launches: a worker Python lacking a module the mode needs (`planner.worker_needs`, e.g.
    Horovod) is refused before anything starts (a cluster's workers say the same line themselves,
    tfdist/compat/bootstrap). Asked with the config's `environment.variables` (a PYTHONPATH there counts)."""
    if not planner.worker_needs or not os.path.basename(program).startswith("python"):
        return  # nothing to ask, or not a Python we can ask
    probe = subprocess.run([program, "-c", "import importlib.util, sys; "
                                           "print(' '.join(m for m in sys.argv[1:] "
                                           "if importlib.util.find_spec(m) is None))", *planner.worker_needs],
                           capture_output=True, text=True, timeout=60, env={**os.environ, **(variables or {})})
    if probe.returncode != 0:
        missing = list(planner.worker_needs)  # a dotted name whose parent is missing: find_spec raised
    else:  # the last line is the probe's (a site hook may print before it)
        last = (probe.stdout.splitlines() or [""])[-1].split()
        missing = [m for m in planner.worker_needs if m in last]
    if missing:
        what, hint = INSTALL_HINTS.get(missing[0], (missing[0], f"install `{missing[0]}` into that Python"))
        raise UserError(MISSING_MODULE.format(mode=planner.name, what=what, python=shutil.which(program) or program,
                                              hint=hint))


# Seconds a local launch waits before serving its other terminals over gRPC: importing gRPC and making the
# TLS authority take the interpreter for ~0.1 s, beside a real job's TensorFlow import rather than in the way
# of a short job's start and end. Other terminals wait up to local_run_calls.BUSY_WAIT for it.
SERVE_AFTER = 0.5


class EmbeddedCluster:
    """A coordinator in this process whose jobs run on this machine through the local engine
    (cluster/engines/local/: no agent, no heartbeats, no port probes): the same scheduler, waiting reasons,
    job records, restarts, preemption and resume as a cluster. The launch submits and follows in-process
    (`client`); a thread beside the job serves it on loopback over gRPC, TLS with a fresh authority in
    memory, where this user's other terminals find it (`tfdist jobs`, `logs`, `preempt`): another user of
    this machine can reach the port but holds no credential."""

    def __init__(self, slots: int, state_dir: str, first_job_seq: int = 1, gpus: tuple[Gpu, ...] = (),
                 last_job_seq: int = 0):
        from cluster.coordinator.daemon import CoordinatorProcess, InProcessClient, Settings
        from cluster.engines import create_engine
        from cluster.engines.local import LocalOptions, lease_range

        # Ports below the ephemeral range; machine-wide leases keep launches apart. The node's work is read
        # the moment it changes, so no interval costs start-up time.
        secret = new_secret()
        settings = Settings(port_range=lease_range(), first_job_seq=first_job_seq, last_job_seq=last_job_seq,
                            store_key=derived_key(secret, "job store"), counting=False)
        self.process = CoordinatorProcess(state_dir, settings,
                                          create_engine("local", LocalOptions(slots=slots, gpus=gpus))).start()
        self.client = InProcessClient(self.process.core, user_name())
        self._front = self._published = None
        self._front_lock = threading.Lock()
        self._closing = threading.Event()
        self._serving = threading.Thread(target=self._serve, args=(secret,), name="tfdist-serve", daemon=True)
        self._serving.start()

    def _serve(self, secret: bytes) -> None:
        """Serves the coordinator over gRPC (after SERVE_AFTER) and publishes where, for this user's other
        terminals."""
        if self._closing.wait(SERVE_AFTER):
            return
        try:
            from cluster.coordinator.daemon import CoordinatorServer

            authority = Authority.create(hosts=["127.0.0.1"], secret=secret)
            front = CoordinatorServer("", "127.0.0.1:0", authority=authority, process=self.process)
            with self._front_lock:
                if self._closing.is_set():
                    front.stop(0)
                    return
                self._front = front.start()
                self._published = publish_local(front.issue("admin", user_name()), front.port)
        except Exception as e:  # noqa: BLE001 - a convenience for other terminals, not needed to run
            if not self._closing.is_set():
                sys.stderr.write(f"tfdist: warning: other terminals will not find this launch's coordinator ({e})\n")

    def close(self) -> None:
        """Stops serving (not waiting for a server still starting: it stops itself) and the coordinator."""
        with self._front_lock:
            self._closing.set()
            front, published = self._front, self._published
        unpublish_local(published)
        if front is not None:
            front.stop()
        self.process.close()


def launch(config: ExperimentConfig, *, coordinator: str | None, credential: Credential | None, detach: bool,
           startup_timeout: float, state_dir: str | None = None, priority: int | None = None,
           view: ViewOptions = QUIET) -> int:
    """`priority`: --priority (None: the config's resources.priority, else 0)."""
    preflight(config)
    priority = priority if priority is not None else config.priority or 0
    if coordinator is None:
        config = local_command(config)
    spec = jobspec.job_spec(config, startup_timeout=startup_timeout, priority=priority, working_dir=os.getcwd(),
                            submission_id=secrets.token_hex(16))  # `auto` decided here, once
    embedded = run = job_id = None
    paused = None  # a job this Slurm batch script paused in a previous run (requeued): resumed, not resubmitted
    if coordinator is None:
        command = resolve_command(config.entrypoint)  # local: a missing script is refused before anything starts
        check_worker_needs(command[0], modes.planner(spec.distribution_mode), dict(config.environment_variables))
        if detach:
            raise UserError("--detach needs --coordinator: an embedded coordinator ends with `tfdist launch`")
        if slurm.in_allocation(os.environ):  # an sbatch script or salloc shell: the allocation's nodes
            allocation = slurm.allocation_from_env(os.environ)
            # An experiment's trials share the allocation's nodes: each trial has its own slots_per_trial.
            slots = config.slots_per_trial if spec.config.searcher else \
                slurm.check_slots(config.slots_per_trial if config.slots_given else None, allocation)
            embedded = slurm.SlurmCluster(allocation, state_dir=state_dir or slurm.state_dir(config, allocation))
            credential = embedded.credential
            paused = embedded.paused_job()
            slots = slots or embedded.slots()  # a GPU allocation: the GPUs the agents found
            spec = dataclasses.replace(spec, config=dataclasses.replace(spec.config, slots_per_trial=slots))
            sys.stderr.write(f"tfdist: Slurm allocation {allocation.job_id}: {len(allocation.nodes)} node(s) "
                             f"({', '.join(allocation.nodes)}), {slots} slot(s)"
                             f"{' per trial' if spec.config.searcher else ''}\n")
        else:
            found = discover_gpus()  # the launcher's CUDA_VISIBLE_DEVICES="" hides them: CPU slots
            cores = len(os.sched_getaffinity(0))
            room = len(found) if config.slots_per_trial <= len(found) else cores  # what a slot stands for here
            slots = config.slots_per_trial if not spec.config.searcher else experiment_launch.cores_for_trials(
                config.slots_per_trial, spec.config.searcher["max_concurrent_trials"], room)
            gpus = local_gpus(slots, found)
            warning = None if gpus else slots_warning(config.slots_per_trial, cores)
            if warning:
                sys.stderr.write(f"tfdist: warning: {warning}\n")
            run = None if state_dir else local_runs.new_run(jobs=experiment_launch.jobs_made(spec.config))
            try:
                embedded = EmbeddedCluster(slots, state_dir or run.path, first_job_seq=run.number if run else 1,
                                           gpus=gpus, last_job_seq=run.last if run else 0)
            except BaseException:
                if run:
                    local_runs.remove(run)
                raise
            if run and not spec.checkpoint_storage:
                spec = dataclasses.replace(spec, config=dataclasses.replace(
                    spec.config, checkpoint_storage=local_runs.checkpoint_storage(run)))
    elif credential is None:
        raise UserError(f"no credential for the coordinator at {coordinator}: pass --credentials FILE")
    if isinstance(embedded, EmbeddedCluster):
        client, coordinator = embedded.client, "this machine"
    else:
        from cluster.shared.rpc import Client

        coordinator = embedded.address if embedded else coordinator
        client = Client(coordinator, credential)
    code = None
    try:
        if paused:  # this batch script ran before and its job was preempted: Slurm requeued it
            printed = last_seq(client, paused)  # by the previous run, into the same output file
            client.resume(paused)
            sys.stderr.write(f"tfdist: resuming job {paused}, paused by this Slurm job's previous run\n")
            code = _follow_with_cancel(client, paused, True, after_seq=printed, view=view)
            return code
        job_id = client.submit(jobspec.to_pb(spec))
        if detach:
            print(job_id)
            return 0
        if spec.config.searcher:  # an experiment: its trials as a table
            code = experiment_launch.follow(client, job_id, coordinator)
            return code
        sys.stderr.write(f"tfdist: job {job_id} submitted to {coordinator}; distribution {spec.distribution_mode} "
                         f"({spec.mode_reason})\n")
        code = _follow_with_cancel(client, job_id, embedded is not None, view=view)
        return code
    finally:
        if run and job_id:  # a search's run: its last trial and its experiment
            run.record_from(client)
        client.close()
        if embedded:
            embedded.close()
        if run and not job_id:  # refused before it was a job: nothing to keep
            local_runs.remove(run)
        if code == PAUSED_EXIT and isinstance(embedded, slurm.SlurmCluster):
            slurm.requeue(embedded.allocation)  # the next run of this batch script resumes the paused job


def resume_local(run: local_runs.LocalRun, job_id: str, slots: int, view: ViewOptions = QUIET) -> int:
    """`tfdist resume ID` of a paused local job whose launch ended: an embedded cluster on the run's state
    (the job's slots on this machine) resumes it from its latest checkpoint and follows it as launch does
    (the same signals and exit codes)."""
    embedded = EmbeddedCluster(slots, run.path, first_job_seq=run.number, gpus=local_gpus(slots, discover_gpus()),
                               last_job_seq=run.last)
    client = embedded.client
    try:
        printed = last_seq(client, job_id)  # the launch that ran it printed those
        client.resume(job_id)
        sys.stderr.write(f"tfdist: job {job_id} resumed on this machine ({slots} slot{'s' if slots != 1 else ''})\n")
        return _follow_with_cancel(client, job_id, True, after_seq=printed, view=view)
    finally:
        run.record_from(client)
        client.close()
        embedded.close()


CANCEL_WAIT = 5.0  # seconds a second signal waits for the cancel to reach the coordinator
PREEMPT_WAIT = 120.0  # seconds SIGTERM's preemption may take before the job is canceled instead


def _follow_with_cancel(client: Client, job_id: str, embedded: bool, after_seq: int = 0,
                        view: ViewOptions = QUIET) -> int:
    """Ctrl-C cancels the job and keeps following until it has ended. SIGTERM (a cluster manager
    preempting the launcher) preempts it: every worker stops at one step, saves and exits, and the
    job is PAUSED; if that does not happen within PREEMPT_WAIT (the script checks no preemption),
    it is canceled. A second signal exits at once (the job's end is then the coordinator's business)."""
    signals: list[int] = []
    first, second, canceled = threading.Event(), threading.Event(), threading.Event()

    def on_signal(signum, frame):  # only records: the work is done by `react`, outside the handler
        signals.append(signum)
        (second if first.is_set() else first).set()

    def react():
        first.wait()
        name = signal.Signals(signals[0]).name
        refused = _preempt(client, job_id) if signals[0] == signal.SIGTERM else None
        if signals[0] == signal.SIGTERM and refused is None:
            sys.stderr.write(f"tfdist: SIGTERM: preempting job {job_id}: its workers stop at a common step, save "
                             "and exit (again to stop waiting)\n")
            sys.stderr.flush()
            _cancel_unless_stopped(client, job_id)
        else:
            if refused:
                sys.stderr.write(f"tfdist: {refused}\n")
            sys.stderr.write(f"tfdist: {name}: canceling job {job_id} (again to stop waiting)\n")
            sys.stderr.flush()
            _cancel_quietly(client, job_id)
        canceled.set()

    def leave():
        second.wait()
        name = signal.Signals(signals[-1]).name
        if not canceled.wait(CANCEL_WAIT):  # the cancel must have reached the coordinator first
            sys.stderr.write(f"tfdist: {name} again: the coordinator has not confirmed the cancel of job {job_id} "
                             f"within {CANCEL_WAIT:g}s; leaving. Check with `tfdist job {job_id}`\n")
        elif embedded:
            sys.stderr.write(f"tfdist: {name} again: cancel requested; leaving now (this machine's workers are "
                             "stopped with this process)\n")
        else:
            sys.stderr.write(f"tfdist: {name} again: cancel requested; not waiting for job {job_id} to end. "
                             f"Follow it with `tfdist job {job_id}` or `tfdist logs -f {job_id}`\n")
        sys.stderr.flush()
        os._exit(128 + signals[0])

    for target in (react, leave):
        threading.Thread(target=target, daemon=True).start()
    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        job = follow_job(client, job_id, after_seq=after_seq, view=view)
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
    for line in summary(job):
        sys.stderr.write(line + "\n")
    sys.stderr.flush()
    if signals and job.state != "PAUSED":
        return 128 + signals[0]
    return exit_code(job)


def _preempt(client: Client, job_id: str) -> str | None:
    """Asks for a preemption; None when asked, else why not (the job is then canceled)."""
    try:
        client.preempt(job_id)
        return None
    except Exception as e:  # noqa: BLE001 - any refusal means: cancel instead
        return str(e)


def _cancel_unless_stopped(client: Client, job_id: str) -> None:
    deadline = time.monotonic() + PREEMPT_WAIT
    while time.monotonic() < deadline:
        try:
            if client.job(job_id).state not in ("QUEUED", "STARTING", "RUNNING"):
                return
        except Exception:  # noqa: BLE001 - the coordinator may be restarting; keep to the deadline
            pass
        time.sleep(0.5)
    sys.stderr.write(f"tfdist: job {job_id} did not stop for the preemption within {PREEMPT_WAIT:g}s (its script "
                     "checks none: use tfdist.callbacks.Checkpoint or ctx.should_preempt()); canceling it\n")
    _cancel_quietly(client, job_id)


def _cancel_quietly(client: Client, job_id: str) -> None:
    try:
        client.cancel(job_id)
    except Exception as e:  # the follower reports what happens next
        sys.stderr.write(f"tfdist: could not cancel job {job_id}: {e}\n")
