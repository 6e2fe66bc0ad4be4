"""The worker side of every distribution mode, one module each, behind `WorkerMode` (tfdist/modes/base.py).

The rest of tfdist asks the job's mode, `worker_mode(ctx.distribution)`, what it needs to know (who saves a
checkpoint, whether every rank runs the script, how to join and which strategy) and never compares mode
names, so a mode's knowledge stays in its module. A new mode is a module here and one line in WORKER_MODES
under the name its control-plane planner (cluster/shared/modes/) sets in TFDIST_DISTRIBUTION; the annotation
makes mypy check it against the protocol (tests/unit/test_worker_modes.py). What a mode adds to a worker's
Python start-up, before tfdist is imported, is its entry in tfdist/modes/startup.py. Importing this package
imports no framework: each mode imports TensorFlow (or its own) when tfdist.init() joins the job.
"""

from __future__ import annotations

from typing import Mapping

from tfdist import envvars
from tfdist.modes import horovod, jax, mwms, per_node, ps, single, torch
from tfdist.modes.base import Process, WorkerMode
from tfdist.modes.unsupported import Unsupported

WORKER_MODES: dict[str, WorkerMode] = {
    "mwms": mwms.MWMS,
    "ps": ps.PS,
    "horovod": horovod.HOROVOD,
    "jax": jax.JAX,
    "torch": torch.TORCH,
    "mirrored": single.MIRRORED,
    "central_storage": single.CENTRAL_STORAGE,
    "one_device": single.ONE_DEVICE,
    "per_node": per_node.PER_NODE,
}

DEFAULT = mwms.MWMS.name  # without TFDIST_DISTRIBUTION (plain `python train.py`)


def worker_mode(name: str) -> WorkerMode:
    """The mode of that name; a name no mode has runs as one process and refuses more at tfdist.init()."""
    return WORKER_MODES.get(name) or Unsupported(name)


def mode_of_env(env: Mapping[str, str]) -> WorkerMode:
    """The mode the launcher set in `env` (the default without one)."""
    return worker_mode(env.get(envvars.DISTRIBUTION, DEFAULT))


__all__ = ["DEFAULT", "Process", "Unsupported", "WORKER_MODES", "WorkerMode", "mode_of_env", "worker_mode"]
