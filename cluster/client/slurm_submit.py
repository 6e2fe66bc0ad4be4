"""`tfdist launch --slurm [sbatch options] -- COMMAND` from a login node, and `tfdist jobs/logs/cancel`
on the Slurm jobs it submitted.

The batch script it writes runs the same `tfdist launch` inside the allocation (cluster/slurm/allocation.py); the
login node only submits, follows the job's output file and exits with the job's code. Nothing runs on
the login node while the job waits or trains, so the follower can be stopped (`--detach`, or a second
Ctrl-C) and the job goes on.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from typing import Callable, Sequence, TextIO

from tfdist.errors import NotFoundError, UnavailableError, UserError

MARK = "tfdist"  # the --comment of every job tfdist submits: `tfdist jobs` lists those
# Options that size the allocation; without any, `--ntasks=<slots>` asks for the job's slots.
_SIZE_OPTIONS = ("-n", "--ntasks", "--ntasks-per-node", "-N", "--nodes", "--gres", "-G", "--gpus",
                 "--gpus-per-node", "--gpus-per-task", "--tres-per-task")
_ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY", "BOOT_FAIL",
          "DEADLINE", "SPECIAL_EXIT")
_FIELD = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_:/]*)=")
CONTROLLER_PATIENCE = 120.0  # seconds slurmctld may not answer before the follower gives up
POLL = 1.0


class SbatchError(UserError):
    """sbatch refused the job (too large a request, a bad option, an unknown partition)."""


# ---------------------------------------------------------------- pure: argv, script, records

def split_argv(argv: Sequence[str]) -> tuple[list[str], list[str] | None]:
    """`launch ... --slurm OPTS -- COMMAND` -> (argv without `--slurm OPTS`, OPTS); OPTS is None without
    --slurm. Everything between --slurm and `--` (or the end) is sbatch's."""
    argv = list(argv)
    end = argv.index("--") if "--" in argv else len(argv)
    if "--slurm" not in argv[:end]:
        return argv, None
    at = argv.index("--slurm")
    return argv[:at] + argv[end:], argv[at + 1:end]


# tfdist launch's own options, which sbatch does not have: given after --slurm, they are a misplaced word
_LAUNCH_ONLY = ("--config", "--slots", "--distribution", "--startup-timeout", "--detach", "--state-dir",
                "--coordinator", "--credentials")


def check_options(options: Sequence[str]) -> None:
    """sbatch would take a bare word among its options for the script to run, and refuse tfdist's own
    options: both are refused here, with where they belong."""
    for i, word in enumerate(options):
        if word.split("=")[0] == "--wrap":
            raise UserError("tfdist launch --slurm: --wrap would replace the batch script tfdist writes; give the "
                            "command after `--` (tfdist launch --slurm --nodes=2 -- python train.py)")
        if word.split("=")[0] in _LAUNCH_ONLY:
            raise UserError(f"tfdist launch --slurm: {word.split('=')[0]} is tfdist's option, not sbatch's: give it "
                            "before --slurm (tfdist launch --detach --slurm --nodes=2 -- python train.py)")
        if word.startswith("-"):
            continue
        previous = options[i - 1] if i else ""
        if previous.startswith("-") and "=" not in previous:
            continue  # the value of `-N 2`, `--time 10`
        raise UserError(f"tfdist launch --slurm: {word!r} is not an sbatch option; give tfdist's options before "
                        "--slurm, sbatch's after it, and the command after `--` (tfdist launch --config exp.yaml "
                        "--slurm --nodes=2 --ntasks-per-node=1 -- python train.py)")


def _given(options: Sequence[str], names: Sequence[str]) -> bool:
    return any(o == n or o.startswith(n + "=") or (len(n) == 2 and o.startswith(n) and not o.startswith("--"))
               for o in options for n in names)


def default_options(options: Sequence[str], *, name: str, slots: int | None) -> list[str]:
    """tfdist's #SBATCH lines; options given on the command line win over them (sbatch's rule)."""
    lines = [f"--job-name={name}", f"--comment={MARK}", "--output=tfdist-%j.out", "--open-mode=append", "--requeue"]
    if slots and not _given(options, _SIZE_OPTIONS):
        lines.append(f"--ntasks={slots}")
    return lines


def batch_script(sbatch_lines: Sequence[str], *, workdir: str, launch_argv: Sequence[str], python: str) -> str:
    """The batch script: the same `tfdist launch`, inside the allocation, from the submit directory."""
    quoted = " ".join(shlex.quote(a) for a in [python, "-m", "cluster.client.cli", *launch_argv])
    return ("#!/bin/bash\n" + "".join(f"#SBATCH {shlex.quote(line)}\n" for line in sbatch_lines) +
            "# written by tfdist launch --slurm: the same launch, inside the allocation\n"
            f"cd {shlex.quote(workdir)}\nexec {quoted}\n")


def parse_record(line: str) -> dict[str, str]:
    """One `scontrol show job -o` line -> its fields."""
    found = list(_FIELD.finditer(line))
    return {m.group(1): line[m.end():found[i + 1].start() if i + 1 < len(found) else len(line)].strip()
            for i, m in enumerate(found)}


@dataclasses.dataclass(frozen=True)
class SlurmJob:
    id: str
    name: str
    state: str
    reason: str
    exit_code: str  # "N:S"
    output: str  # the job's output file, expanded by Slurm
    nodes: str
    restarts: int

    @classmethod
    def from_record(cls, record: dict[str, str]) -> "SlurmJob":
        return cls(record.get("JobId", "?"), record.get("JobName", ""), record.get("JobState", "UNKNOWN"),
                   record.get("Reason", "None"), record.get("ExitCode", "0:0"), record.get("StdOut", ""),
                   record.get("NodeList", "(null)"), int(record.get("Restarts", "0") or 0))

    @property
    def ended(self) -> bool:
        return self.state in _ENDED

    def describe(self) -> str:
        if self.state == "PENDING":
            return f"pending in Slurm's queue ({self.reason})" if self.reason != "None" else "pending in Slurm's queue"
        if self.state == "RUNNING":
            return f"running on {self.nodes}" + (f" (run {self.restarts + 1})" if self.restarts else "")
        return self.state.lower()


def exit_code(job: SlurmJob) -> int:
    """The code `tfdist launch --slurm` exits with: the batch script's (tfdist launch's, which is the failing
    worker's), 130 for a canceled job, 124 for one past its time limit, 128+N for one killed by signal N."""
    if job.state == "COMPLETED":
        return 0
    if job.state == "CANCELLED":
        return 130
    if job.state == "TIMEOUT":
        return 124
    code, _, sig = job.exit_code.partition(":")
    code, sig = int(code or 0), int(sig or 0)
    return code if code else 128 + sig if sig else 1


# ---------------------------------------------------------------- Slurm's commands

Runner = Callable[..., subprocess.CompletedProcess]  # (command, stdin=None): Slurm's client commands


def run(command: list[str], stdin: str | None = None) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        raise UserError(f"{command[0]} not found: `tfdist launch --slurm` and the Slurm job commands run where "
                        "Slurm's client commands are (a login node)") from None
    except subprocess.TimeoutExpired:
        raise UnavailableError(f"`{' '.join(command[:3])}` did not answer within 60s: is slurmctld up?") from None


def _error_line(stderr: str) -> str:
    lines = [l.strip() for l in stderr.splitlines() if l.strip() and not l.startswith("Try ")]
    errors = [l for l in lines if "error" in l.lower()] or lines or ["failed"]
    return re.sub(r"^((sbatch|scancel|scontrol|squeue): (error: )?|allocation failure: )", "", errors[-1])


def submit(script: str, options: Sequence[str], runner: Runner = run) -> str:
    """sbatch reads the script from its stdin. A request the cluster can never hold (more nodes or CPUs
    than a partition has) is refused by `sbatch --test-only` first: sbatch itself would queue it forever
    (reason PartitionNodeLimit) under Slurm's default EnforcePartLimits=NO."""
    for test in (True, False):
        result = runner(["sbatch", *(["--test-only"] if test else ["--parsable"]), *options], script)
        if result.returncode != 0:
            given = f" (sbatch options: {' '.join(options)})" if options else ""
            raise SbatchError(f"tfdist launch --slurm: sbatch refused the job: {_error_line(result.stderr)}{given}; "
                              "`sinfo -N -l` shows the nodes, CPUs and GPUs each partition has")
    return result.stdout.strip().split(";")[0]


def show(job_id: str, runner: Runner = run) -> SlurmJob | None:
    """The job as slurmctld knows it; None when it does not (never was, or finished long ago)."""
    result = runner(["scontrol", "show", "job", "-o", job_id])
    if result.returncode != 0:
        if "invalid job id" in result.stderr.lower():
            return None
        raise UnavailableError(f"scontrol show job {job_id}: {_error_line(result.stderr)}")
    return SlurmJob.from_record(parse_record(result.stdout.strip().splitlines()[0]))


def tfdist_jobs(runner: Runner = run) -> list[SlurmJob]:
    """The Slurm jobs tfdist submitted that slurmctld still knows (queued, running, recently ended)."""
    result = runner(["scontrol", "show", "job", "-o"])
    if result.returncode != 0:
        raise UnavailableError(f"scontrol show job: {_error_line(result.stderr)}")
    records = [parse_record(line) for line in result.stdout.splitlines() if line.startswith("JobId=")]
    return [SlurmJob.from_record(r) for r in records if r.get("Comment") == MARK]


def cancel(job_id: str, runner: Runner = run) -> str:
    if show(job_id, runner) is None:
        raise NotFoundError(f"Slurm job {job_id} not found (squeue lists the jobs Slurm knows)")
    result = runner(["scancel", job_id])
    if result.returncode != 0:
        raise UnavailableError(f"scancel {job_id}: {_error_line(result.stderr)}")
    return f"Slurm job {job_id}: cancel requested (scancel)"


# ---------------------------------------------------------------- following

class _Output:
    """The job's output file, read as it grows (a requeued job appends to it: --open-mode=append)."""

    def __init__(self, out: TextIO, path: str = ""):
        self.out, self.path, self.offset = out, path, 0

    def copy(self, path: str = "", final: bool = False) -> None:
        """Writes what was added since the last call: whole lines only, unless `final` (the job ended)."""
        if path and path != self.path:
            self.path, self.offset = path, 0
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return  # not created yet
        end = len(data) if final else data.rfind(b"\n") + 1
        if end:
            text = data[:end].decode(errors="replace")
            self.out.write(text if text.endswith("\n") else text + "\n")
            self.out.flush()
            self.offset += end


def follow(job_id: str, *, out: TextIO = sys.stdout, err: TextIO = sys.stderr, runner: Runner = run,
           poll: float = POLL, patience: float = CONTROLLER_PATIENCE) -> int:
    """Copies the job's output as it is written and returns the job's exit code. Ctrl-C (or SIGTERM)
    cancels the job and follows it to its end; a second one leaves it to Slurm."""
    signals: list[int] = []
    previous = {s: signal.signal(s, lambda signum, _f: signals.append(signum)) for s in (signal.SIGINT,
                                                                                         signal.SIGTERM)}
    output, said, canceled, unanswered_since = _Output(out), "", False, None
    try:
        while True:
            if len(signals) > 1:
                err.write(f"tfdist: {signal.Signals(signals[-1]).name} again: leaving Slurm job {job_id} to Slurm; "
                          f"`tfdist logs -f {job_id}` follows it again\n")
                return 128 + signals[0]
            if signals and not canceled:
                err.write(f"tfdist: {signal.Signals(signals[0]).name}: canceling Slurm job {job_id} (scancel; again "
                          "to stop waiting)\n")
                err.flush()
                runner(["scancel", job_id])
                canceled = True
            try:
                job = show(job_id, runner)
                unanswered_since = None
            except UnavailableError as e:
                unanswered_since = unanswered_since or time.monotonic()
                if time.monotonic() - unanswered_since > patience:
                    raise UnavailableError(f"slurmctld did not answer for {patience:g}s ({e}); Slurm job {job_id} "
                                           f"may go on: `tfdist logs -f {job_id}` follows it again") from None
                time.sleep(poll)
                continue
            if job is None:
                output.copy(final=True)
                err.write(f"tfdist: Slurm no longer knows job {job_id} (it ended long enough ago to be purged); its "
                          f"output is in {output.path or 'its output file'}\n")
                return 1
            if job.output:
                output.copy(job.output)
            if job.describe() != said:
                said = job.describe()
                err.write(f"tfdist: Slurm job {job_id} {said}\n")
                err.flush()
            if job.ended:
                output.copy(final=True)
                code = exit_code(job)
                if code:
                    err.write(f"tfdist: Slurm job {job_id} ended {job.state} (ExitCode={job.exit_code}); "
                              f"tfdist launch exits {code}\n")
                return 128 + signals[0] if signals and job.state == "CANCELLED" else code
            time.sleep(poll)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def print_logs(job_id: str, *, follow_it: bool, out: TextIO = sys.stdout, runner: Runner = run) -> int:
    """`tfdist logs [-f] ID` for a Slurm job tfdist submitted."""
    job = show(job_id, runner)
    if job is None:
        raise NotFoundError(f"Slurm job {job_id} not found (slurmctld forgets jobs some minutes after they end; "
                            "their output stays in the file given by --output)")
    if follow_it:
        return follow(job_id, out=out, runner=runner)
    _Output(out, job.output).copy(final=True)
    return 0


def launch(options: Sequence[str], launch_argv: Sequence[str], *, name: str, slots: int | None, detach: bool,
           runner: Runner = run) -> int:
    """Submits the batch script for `tfdist launch LAUNCH_ARGV` and follows the job (or prints its id)."""
    check_options(options)
    script = batch_script(default_options(options, name=name, slots=slots), workdir=os.getcwd(),
                          launch_argv=launch_argv, python=sys.executable)
    job_id = submit(script, options, runner)
    if detach:
        print(job_id)
        return 0
    sys.stderr.write(f"tfdist: submitted Slurm job {job_id}; following its output (Ctrl-C cancels it; "
                     f"`tfdist launch --slurm ... --detach` submits and returns)\n")
    sys.stderr.flush()
    return follow(job_id)
