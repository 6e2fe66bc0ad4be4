"""What each launcher module does at run time: parse its command line as Determined's does
(tfdist/compat/determined_args.py, which the config reads entrypoints with too) and replace this process with the
command it wraps."""

from __future__ import annotations

import os
import sys
from typing import Sequence

from determined import _tfdist  # noqa: F401  (tfdist importable)
from determined._unoffered import unoffered
from tfdist.compat.determined_args import LauncherArgs, LauncherArgsError, parse


def parsed(module: str, argv: Sequence[str]) -> LauncherArgs:
    """The launcher `module`'s (`determined.launch.NAME`) command line; a usage error is one line, exit 2."""
    try:
        args = parse(module, list(argv))
    except LauncherArgsError as e:
        print(f"tfdist: python -m {e}" if str(e).startswith(module) else f"tfdist: python -m {module}: {e}",
              file=sys.stderr)
        raise SystemExit(2) from None
    if args.trial:
        unoffered(f"python -m {module} --trial {args.trial}", "Determined's Trial class API")
    return args


def command_of(module: str, argv: Sequence[str]) -> list[str]:
    return list(parsed(module, argv).script)


def this_python(command: list[str]) -> list[str]:
    """A bare `python`/`python3` is this Python (the one tfdist started the launcher with), as tfdist's launch runs
    an entrypoint's, whatever PATH says."""
    return [sys.executable, *command[1:]] if command and command[0] in ("python", "python3") else command


def exec_command(command: list[str]) -> None:
    """Replaces this process with `command` (this_python's)."""
    command = this_python(command)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvp(command[0], command)
    except OSError as e:
        print(f"tfdist: cannot run {command[0]}: {e.strerror}", file=sys.stderr)
        raise SystemExit(127 if isinstance(e, FileNotFoundError) else 126) from None
