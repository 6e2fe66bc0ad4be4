"""A worker counts as joined (its startup timeout stops) when tfdist.init() returns, or when its port listens
(TensorFlow's server). A JAX or PyTorch script written for its own launcher never calls tfdist.init() and its
ranks other than 0 listen on nothing: for them, returning from the framework's rendezvous
(`jax.distributed.initialize`, `torch.distributed.init_process_group`) is the join, reported the same way."""

from __future__ import annotations

import functools
import os
from typing import Any, Callable

from tfdist import envvars


def signal_ready() -> None:
    """Tells the launcher this worker joined (the file its agent watches)."""
    path = os.environ.get(envvars.READY_FILE)
    if path:
        with open(path, "w") as f:
            f.write(str(os.getpid()))


def ready_after(module: Any, name: str, then: Callable[[Any], None] | None = None) -> None:
    """Wraps `module.name` so that its return signals the worker ready; `then(module)` runs after it (the
    mode's own step: torch_exit.after_init)."""
    rendezvous = getattr(module, name)
    if getattr(rendezvous, "_tfdist_ready_after", False):
        return

    @functools.wraps(rendezvous)
    def joined(*args, **kwargs):
        result = rendezvous(*args, **kwargs)
        signal_ready()
        if then is not None:
            then(module)
        return result

    joined._tfdist_ready_after = True  # type: ignore[attr-defined]
    setattr(module, name, joined)
