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


class _Unoffered(type):
    """The class of a stand-in for what is not offered: looking it up is harmless (`hasattr`, `getattr(..., None)`,
    an import), using it (calling it, subclassing it, reading its attributes) stops the script in one line."""

    def __getattr__(cls, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        unoffered(f"{cls._what}.{name}", cls._kind)

    def __call__(cls, *args, **kwargs):
        unoffered(cls._what, cls._kind)


def stand_in(what: str, kind: str) -> type:
    def refuse_subclass(sub, **kwargs):
        unoffered(what, kind)

    return _Unoffered(what.rpartition(".")[2], (), {"_what": what, "_kind": kind,
                                                    "__init_subclass__": classmethod(refuse_subclass)})


def unoffered_module(module: str, kind: str, names: tuple[str, ...] | None = None):
    """A module `__getattr__` giving a stand-in for each of Determined's `names` there (None: any public name),
    AttributeError for others."""
    def __getattr__(name: str):
        if name.startswith("_") or (names is not None and name not in names):
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        return stand_in(f"{module}.{name}", kind)
    return __getattr__
