"""The Keras Callback class of this process: tf.keras's (Keras 3, or tf_keras under TF_USE_LEGACY_KERAS=1,
as in tfdist's ps mode)."""

import tensorflow as tf

Callback = tf.keras.callbacks.Callback


def received(name: str, value) -> str:
    """Keras's way of naming a bad argument."""
    return f"Received: {name}={value!r}"
