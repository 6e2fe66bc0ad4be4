"""What `tfdist` exits with (docs/launch.md, "Exit codes").

A command that follows a job to its end (`tfdist launch`; `tfdist resume` when it follows the job) exits
docker-style, so a script can tell the job's own code from tfdist's: 0 the job succeeded; a failed job's
root-cause worker's own code (1-124, or 128+N for a worker killed by signal N); 125 tfdist itself failed
or refused (a bad flag or config, an unreachable coordinator: its one line says which); 126 the command
cannot be executed; 127 the command was not found; 75 the job paused (preempted: `tfdist resume ID`);
130 the job was canceled. Every other command exits 0, 2 for a usage mistake and 1 for a failure (each
error's own `exit_code`, tfdist/errors.py).
"""

from __future__ import annotations

from cluster.client import pipes

SUCCEEDED = 0
FAILED = 1  # other commands: something failed; a failed job with no worker's code to give (a node lost)
USAGE = 2  # other commands: a wrong command line or config
PAUSED = 75  # EX_TEMPFAIL: nothing failed and nothing finished; `tfdist resume ID` continues
TFDIST_FAILED = 125  # docker's "the daemon or the command line failed"
NOT_EXECUTABLE = 126  # as a shell says
NOT_FOUND = 127  # as a shell says
CANCELED = 130  # as Ctrl-C in a shell (128 + SIGINT)

COMMAND_CODES = (NOT_EXECUTABLE, NOT_FOUND)  # a TfdistError carrying one keeps it under docker-style codes


def of_job(state: str, recorded: int) -> int | None:
    """What a follower of the job exits with: None while the job may still end otherwise (queued, starting,
    running). `recorded` is the coordinator's exit code of a failed job: its root-cause worker's own code
    (128+N for signal N), 127 for a command not found, 1 where no worker decided it (a node lost, a rank that
    never joined or stalled) and -1 for none."""
    if state == "SUCCEEDED":
        return SUCCEEDED
    if state == "CANCELED":
        return CANCELED
    if state == "PAUSED":
        return PAUSED
    if state == "FAILED":
        return recorded if 0 < recorded < 256 else FAILED
    return None


def of_error(error: BaseException, follows_job: bool) -> int:
    """The exit code for an error that ended a command: its own `exit_code` (an OSError: 1), or, for a
    command that follows a job, 125 unless the error is the command's own 126 or 127."""
    code = getattr(error, "exit_code", FAILED)
    if follows_job:
        return code if code in COMMAND_CODES else TFDIST_FAILED
    return code


def follows_job(args) -> None:
    """Marks the running command as one that follows a job to its end: `tfdist launch`, and `tfdist resume`
    once it follows the job. Its errors then exit docker-style (cli.main reads the mark), and a reader of
    its output that goes away (`| head -3`) no longer ends it: the job is followed to its end, its output
    discarded, and the exit code is the job's."""
    args.follows_job = True
    pipes.keep_going()
