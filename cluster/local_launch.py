"""`tfdist launch` on one machine: one worker process per slot, all on loopback."""

from __future__ import annotations

import datetime
import os
import secrets
import shutil
import signal
import sys
import tempfile
import threading
from typing import Sequence, TextIO

from cluster.config import ExperimentConfig
from cluster.gang import Gang, GangResult, WorkerLaunch
from cluster.ports import lease_ports
from cluster.worker_env import NodePlacement, job_environments
from tfdist import batching

LOOPBACK = "127.0.0.1"


def new_job_id() -> str:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return f"local-{stamp}-{secrets.token_hex(2)}"


class CommandError(ValueError):
    """The command cannot be started on this machine."""


def resolve_command(command: Sequence[str]) -> list[str]:
    """`train.py args` runs with this Python; anything else runs as given.
    A script or program that does not exist is refused before any worker starts."""
    command = list(command)
    if command and command[0].endswith(".py"):
        command = [sys.executable, *command]
    if not command:
        raise CommandError("the command to run is empty")
    if shutil.which(command[0]) is None:
        raise CommandError(f"program {command[0]!r} not found on PATH")
    if os.path.basename(command[0]).startswith("python") and len(command) > 1 \
            and command[1].endswith(".py") and not os.path.isfile(command[1]):
        raise CommandError(f"script {command[1]!r} not found (relative to the current directory {os.getcwd()})")
    return command


class PrefixedOutput:
    """Writes worker lines as `[rank=N] line`, whole lines only."""

    def __init__(self, stdout: TextIO, stderr: TextIO):
        self._streams = {"stdout": stdout, "stderr": stderr}
        self._lock = threading.Lock()

    def __call__(self, rank: int, stream: str, line: str) -> None:
        out = self._streams[stream]
        with self._lock:
            out.write(f"[rank={rank}] {line}\n")
            out.flush()


def failure_summary(job_id: str, result: GangResult) -> list[str]:
    lines = []
    if result.failure:
        f = result.failure
        lines.append(f"tfdist: job {job_id} failed: {f.describe()}; the other workers were stopped")
        if f.last_lines:
            lines.append(f"tfdist: last lines of rank {f.rank}:")
            lines.extend(f"  {line}" for line in f.last_lines)
    elif result.interrupted:
        lines.append(f"tfdist: job {job_id} stopped by {signal.Signals(result.interrupted).name}")
    return lines


def exit_code_for(result: GangResult) -> int:
    if result.ok:
        return 0
    if result.interrupted:
        return 128 + result.interrupted
    code = result.failure.exit_code if result.failure else None
    if code is None:
        return 1
    return code if 0 < code < 256 else 128 + (-code if code < 0 else 1)


def launch_local(config: ExperimentConfig, *, startup_timeout: float | None = 300.0,
                 stdout: TextIO = sys.stdout, stderr: TextIO = sys.stderr) -> int:
    """Runs the job on this machine and returns the exit code for the CLI."""
    slots = config.slots_per_trial
    job_id = new_job_id()
    if config.global_batch_size is not None:
        warning = batching.split_batch(config.global_batch_size, slots).remainder_warning()
        if warning:
            stderr.write(f"tfdist: warning: {warning}\n")
    command = resolve_command(config.entrypoint)
    ready_dir = tempfile.mkdtemp(prefix=f"tfdist-{job_id}-")
    try:
        with lease_ports(slots) as lease:
            node = NodePlacement(host=LOOPBACK, slots=slots, ports=tuple(lease.ports))
            ready = {r: os.path.join(ready_dir, f"rank{r}.ready") for r in range(slots)}
            envs = job_environments(job_id, config, [node], ready)
            workers = [WorkerLaunch(rank=r, command=command, env={**os.environ, **env},
                                    ready_file=ready[r], port=lease.ports[r]) for r, env in enumerate(envs)]
            gang = Gang(workers, PrefixedOutput(stdout, stderr), startup_timeout=startup_timeout)
            previous = {s: signal.signal(s, lambda signum, _f: gang.interrupt(signum))
                        for s in (signal.SIGINT, signal.SIGTERM)}
            try:
                gang.start()
                result = gang.run()
            finally:
                for s, handler in previous.items():
                    signal.signal(s, handler)
    finally:
        shutil.rmtree(ready_dir, ignore_errors=True)
    for line in failure_summary(job_id, result):
        stderr.write(line + "\n")
    stderr.flush()
    return exit_code_for(result)
