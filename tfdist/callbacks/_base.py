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
