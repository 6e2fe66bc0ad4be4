"""A reader that goes away (`tfdist metrics 3 | head -5`) ends tfdist's output quietly.

Python ignores SIGPIPE, so a write to a pipe whose reader exited raises BrokenPipeError. The standard recipe
(Python's signal docs): point the stream's descriptor at /dev/null so nothing more fails, and exit as if
the output had been read. `tfdist` installs `QuietPipe` over its stdout and stderr (cli.entry_point); for a
command that follows a job (exit_codes.follows_job) a closed pipe does not end it: the job is followed to
its end with its output discarded (an embedded job would otherwise be torn down with the launcher, a
remote one left without its follower) and the exit code is still the job's. Any other command stops at
the first failed write and exits as if it had completed (cli.main).
"""

from __future__ import annotations

import os
import sys
from typing import TextIO

_keep_going = False


def keep_going(on: bool = True) -> None:
    """Whether a closed pipe is absorbed (the command goes on, output discarded) or ends the command."""
    global _keep_going
    _keep_going = on


def discard(stream: TextIO) -> None:
    """Points the stream's file descriptor at /dev/null: what is still buffered and whatever follows is
    dropped without another error (also when Python flushes it at exit)."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):  # not a file (a test's capture): nothing to redirect
        return
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, fd)
    finally:
        os.close(null)


class QuietPipe:
    """sys.stdout or sys.stderr of the tfdist process, a closed pipe handled as the module says. Anything
    else is the wrapped stream's (isatty, fileno, encoding...)."""

    def __init__(self, stream: TextIO):
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._closed()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._closed()

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def _closed(self) -> None:
        discard(self._stream)
        if not _keep_going:
            raise BrokenPipeError(32, "the reader of tfdist's output went away")

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def install() -> None:
    """Wraps this process's stdout and stderr (once): before the commands' modules are imported, so even a
    stream bound as a default argument at import time is the wrapped one."""
    if not isinstance(sys.stdout, QuietPipe) and sys.stdout is not None:
        sys.stdout = QuietPipe(sys.stdout)
    if not isinstance(sys.stderr, QuietPipe) and sys.stderr is not None:
        sys.stderr = QuietPipe(sys.stderr)
