"""The Keras Callback class of this process: tf.keras's (Keras 3, or tf_keras under TF_USE_LEGACY_KERAS=1,
as in tfdist's ps mode)."""

import os

import tensorflow as tf

from tfdist.modes import mode_of_env

Callback = tf.keras.callbacks.Callback


def batch_hooks_allowed() -> bool:
    """False in ps mode: tf_keras runs no batch-level callbacks under ParameterServerStrategy."""
    return mode_of_env(os.environ).batch_callbacks


def received(name: str, value) -> str:
    """Keras's way of naming a bad argument."""
    return f"Received: {name}={value!r}"


def sync_jax_state(model) -> None:
    """Keras 3 on JAX trains on a copy of the variables and puts it back only at an epoch's end or when a
    callback reads `Callback.model`; after this call the variables hold the latest step, and an assignment to
    one of them is what the next step trains with (the trainer rereads a synced state). Reading `self.model`
    already syncs in current Keras: the explicit call is for versions that do not. Nothing on other backends."""
    sync = getattr(model, "jax_state_sync", None)
    if callable(sync):
        sync()
