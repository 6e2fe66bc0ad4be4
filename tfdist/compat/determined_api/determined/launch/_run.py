"""What each launcher module does at run time: find the wrapped command after the launcher's own options and
replace this process with it."""

from __future__ import annotations

import os
import sys
from typing import Sequence

from determined._unoffered import unoffered


def command_of(launcher: str, argv: Sequence[str], valued: Sequence[str] = ()) -> list[str]:
    """The command after `--`, else after the launcher's options (`valued` ones take a value); `launcher`: its
    module's name."""
    args = list(argv)
    if "--" in args:
        options, command = args[:args.index("--")], args[args.index("--") + 1:]
    else:
        options, i = [], 0
        while i < len(args) and args[i].startswith("-"):
            takes_value = args[i] in valued and "=" not in args[i]
            options += args[i:i + 1 + takes_value]
            i += 1 + takes_value
        command = args[i:]
    if any(o == "--trial" or o.startswith("--trial=") for o in options):
        unoffered(f"python -m {launcher} --trial", "Determined's Trial class API")
    if not command:
        print(f"tfdist: python -m {launcher}: no command to run; give it after `--`, e.g. "
              f"`python -m {launcher} -- python3 train.py`", file=sys.stderr)
        raise SystemExit(2)
    return command


def exec_command(command: list[str]) -> None:
    """Replaces this process with `command`; a bare `python`/`python3` is this Python (the one tfdist started the
    launcher with), as tfdist's launch runs an entrypoint's, whatever PATH says."""
    if command and command[0] in ("python", "python3"):
        command = [sys.executable, *command[1:]]
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvp(command[0], command)
    except OSError as e:
        print(f"tfdist: cannot run {command[0]}: {e.strerror}", file=sys.stderr)
        raise SystemExit(127 if isinstance(e, FileNotFoundError) else 126) from None
