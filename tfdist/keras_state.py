"""A Keras 3 model's and optimizer's variables as a checkpoint on any backend: what tf.train.Checkpoint is
for TensorFlow's, for JAX's (and PyTorch's), with the two calls tfdist's checkpointing makes
(`write(prefix) -> path`, `read(path)`). The arrays go to PREFIX.data.npz, then PREFIX.index names them:
written last, so a checkpoint cut short by a crash has no index and is not taken as the latest.

Variables in the order Keras keeps them (the model's weights, then the optimizer's), so a run restores what
the same script saved. A variable sharded over several processes (ModelParallel) is gathered whole by every
process (a collective: in the jax mode every rank takes part in a save)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from tfdist.checkpointing import write_sealed


def _host_array(variable: Any) -> np.ndarray:
    value = variable.value
    if getattr(value, "is_fully_addressable", True):
        return np.asarray(value)
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(value, tiled=True))


class KerasVariables:
    """`write`/`read` of a Keras 3 model's and optimizer's variables (see the module's docstring)."""

    def __init__(self, model: Any, optimizer: Any = None):
        self._variables = list(model.weights) + (list(optimizer.variables) if optimizer is not None else [])

    def write(self, prefix: str) -> str:
        arrays = {f"v{i}": _host_array(v) for i, v in enumerate(self._variables)}
        write_sealed(prefix, ".data.npz", lambda f: np.savez(f, **arrays),
                     {"variables": [v.path for v in self._variables]})
        return prefix

    def read(self, path: str) -> "KerasVariables":
        with open(path + ".index") as f:
            names = json.load(f)["variables"]
        if names != [v.path for v in self._variables]:
            raise ValueError(f"checkpoint {path} holds variables {names[:3]}... of another model "
                             f"({len(names)} against this model's {len(self._variables)})")
        with np.load(path + ".data.npz") as saved:
            for i, variable in enumerate(self._variables):
                variable.assign(saved[f"v{i}"])
        return self

    def expect_partial(self) -> "KerasVariables":
        return self


def checkpoint_of(model: Any, optimizer: Any) -> Any:
    """tf.train.Checkpoint under TensorFlow's Keras (its format, as before), KerasVariables elsewhere."""
    if _backend_of(model) == "tensorflow":
        import tensorflow as tf

        return tf.train.Checkpoint(model=model, optimizer=optimizer)
    return KerasVariables(model, optimizer)


def _backend_of(model: Any) -> str:
    if type(model).__module__.startswith("tf_keras"):
        return "tensorflow"
    import keras

    return keras.config.backend()
