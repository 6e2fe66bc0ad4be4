"""What tfdist's `determined` does not offer ends the script in one line, not a traceback deep inside it."""

from __future__ import annotations

import sys
from typing import NoReturn

DOCS = "docs/determined.md"
_WHY = {
    "Determined's Trial class API": "tfdist runs your script, not a Trial class: train in a script with det.core.init() and "
                           "det.keras.DeterminedCallback (or plain Keras/PyTorch)",
    "the API of a Determined master": "there is no Determined master under tfdist: use the `tfdist` CLI (jobs, experiments, "
                           "checkpoints) instead",
}


class InvalidHP(Exception):
    """Raised by a trial whose hyperparameters cannot train (Determined's); tfdist fails the trial."""


def unoffered(what: str, kind: str) -> NoReturn:
    """Stops the script: `what` belongs to `kind`, which tfdist does not offer."""
    message = f"tfdist: {what} is part of {kind}, which tfdist does not offer: {_WHY.get(kind, kind)} ({DOCS})"
    print(message, file=sys.stderr, flush=True)
    raise SystemExit(2)


def unoffered_module(module: str, kind: str, offered: dict | None = None):
    """A module `__getattr__` that stops the script on any name but those `offered`."""
    def __getattr__(name: str):
        if offered and name in offered:
            return offered[name]
        if name.startswith("__"):
            raise AttributeError(name)
        unoffered(f"{module}.{name}", kind)
    return __getattr__
