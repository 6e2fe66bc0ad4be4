"""Whether this process is on its way out because of a failure, for the exit barriers of the modes whose
chief hosts what the others still use (TensorFlow's coordination service: strategy.py; PyTorch's store:
compat/torch_exit.py): a rank leaving because it failed does not wait for the others."""

from __future__ import annotations

import sys


def watch_for_failure() -> list:
    """A list that becomes non-empty when the process is on its way out because of a failure (an uncaught
    exception, sys.exit with a non-zero code)."""
    failed: list = []
    previous_hook, previous_exit = sys.excepthook, sys.exit

    def excepthook(kind, value, traceback):
        failed.append(kind)
        previous_hook(kind, value, traceback)

    def exit_(code=None):
        if code not in (None, 0):
            failed.append(code)
        previous_exit(code)

    sys.excepthook, sys.exit = excepthook, exit_
    return failed
