"""The command a worker runs: `train.py` means this Python (and, in a local launch, a bare `python` too);
missing programs are refused early."""

from __future__ import annotations

import os
import shutil
import sys
from typing import Sequence

from tfdist.errors import CommandNotExecutableError, CommandNotFoundError, UserError


class CommandError(UserError, ValueError):
    """The command cannot be started on this machine."""


class CommandMissingError(CommandNotFoundError, CommandError):
    """The program or script does not exist: 127, the same locally as through a coordinator (its agent's code)."""


class CommandNotRunnableError(CommandNotExecutableError, CommandError):
    """The program exists but may not be executed: 126, as a shell says."""


PYTHON_NAMES = ("python", "python3")  # what a bare `python` in a local launch's command may be spelled


def with_launcher_python(command: Sequence[str], python: str) -> list[str]:
    """A local launch's command with a bare `python`/`python3` as `python` (the launcher's own,
    sys.executable): the workers then import the tfdist and TensorFlow the launcher runs with, venv activated
    or not. Through a coordinator the command is left as given (the node's PATH decides)."""
    command = list(command)
    if command and command[0] in PYTHON_NAMES:
        command[0] = python
    return command


def other_venv_warning(command: Sequence[str], python: str, virtual_env: str | None) -> str | None:
    """One line when the command said `python` in an activated venv that is not the launcher's: that
    `python` now means the launcher's, not the venv's (give the path to run the venv's)."""
    if not command or command[0] not in PYTHON_NAMES or not virtual_env:
        return None
    venv_python = os.path.join(virtual_env, "bin", command[0])
    if os.path.realpath(os.path.dirname(os.path.dirname(python))) == os.path.realpath(virtual_env):
        return None
    return (f"`{command[0]}` runs {python} (the Python tfdist runs with), not the activated venv's {venv_python}; "
            f"give its path (`-- {venv_python} ...`) to run that one")


def resolve_command(command: Sequence[str], cwd: str | None = None) -> list[str]:
    """`train.py args` runs with this Python; anything else runs as given.
    A script or program that does not exist is refused before any worker starts."""
    command = list(command)
    if command and command[0].endswith(".py"):
        command = [sys.executable, *command]
    if not command:
        raise CommandError("the command to run is empty")
    if shutil.which(command[0]) is None:
        if os.sep in command[0] and os.path.isfile(command[0]) and not os.access(command[0], os.X_OK):
            raise CommandNotRunnableError(f"program {command[0]!r} is not executable: chmod +x it, or run it with "
                                          "its interpreter")
        raise CommandMissingError(f"program {command[0]!r} not found on PATH")
    if os.path.basename(command[0]).startswith("python") and len(command) > 1 \
            and command[1].endswith(".py") and not os.path.isfile(os.path.join(cwd or os.getcwd(), command[1])):
        raise CommandMissingError(f"script {command[1]!r} not found (relative to the current directory {cwd or os.getcwd()})")
    return command
