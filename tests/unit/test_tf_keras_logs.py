"""tfdist/compat/tf_keras_logs.py: under a mirrored strategy, tf_keras's per-batch logs (what its progress bar
shows) are the mean over replicas, as its epoch logs are, not their sum over workers."""

import json
import os
import subprocess
import sys

SCRIPT = r"""
import json
import tensorflow as tf
from tfdist.compat import tf_keras_logs
applied = tf_keras_logs.apply()
import tf_keras as keras

class OwnStep(keras.Sequential):
    def train_step(self, data):  # e.g. a loss divided by the global batch: tf_keras's sum is right for it
        return super().train_step(data)

def model(cls=keras.Sequential, reduction=None):
    m = cls([keras.layers.Dense(2, input_shape=(4,))])
    if reduction:
        m.distribute_reduction_method = reduction
    return m.distribute_reduction_method

found = {"applied": applied, "default strategy": model()}
with tf.distribute.MirroredStrategy(["/cpu:0"]).scope():
    found.update(mirrored=model(), own_step=model(OwnStep), user_set=model(reduction="sum"))
print(json.dumps(found))
"""


def test_the_mean_is_the_default_reduction_of_stock_steps_under_a_mirrored_strategy_only():
    """What reduces the per-batch logs; that the mean is what 2 MWMS workers' bars then show is measured by
    tests/integration/test_output_view.py."""
    env = {**os.environ, "TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""}
    result = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.splitlines()[-1]) == {
        "applied": True, "default strategy": "auto", "mirrored": "tfdist_mean", "own_step": "auto", "user_set": "sum"}


def test_nothing_is_imported_or_patched_for_keras_3():
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    probe = ("import sys; from tfdist.compat import tf_keras_logs; "
             "print(tf_keras_logs.apply(), 'tf_keras' in sys.modules, 'tensorflow' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60)
    assert result.stdout.split() == ["False", "False", "False"], result.stderr[-2000:]
