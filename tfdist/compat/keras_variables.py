"""Keras 3 variables and optimizers as Horovod 0.28.1 (written for Keras 2) expects them; imports nothing of
tfdist, so every Horovod adapter can use it."""

from __future__ import annotations


def tf_variable(v):
    """The TensorFlow variable behind a Keras 3 variable (anything else passes through)."""
    import tensorflow as tf

    inner = getattr(v, "value", None)  # Keras 3 Variable -> tf.Variable; tf.Variable.value is a method
    return inner if isinstance(inner, tf.Variable) else v


class CallableList(list):
    """A list that returns itself when called: `opt.variables` and `opt.variables()` both work (Horovod's own
    Keras adapter has the same shim for the other direction)."""

    def __call__(self):
        return self
