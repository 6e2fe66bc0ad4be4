"""tfdist.callbacks.Checkpoint in one process (plain `python train.py`): arguments checked like Keras's,
and a run stopped mid-epoch resumes at its checkpoint with every step trained exactly once."""

import os

import numpy as np
import pytest

from tfdist.callbacks import Checkpoint
from tfdist.checkpointing import CheckpointError


@pytest.mark.parametrize("kwargs, message", [
    ({"save_freq": 0}, "save_freq must be 'epoch' or a positive number of steps. Received: save_freq=0"),
    ({"save_freq": "batch"}, "Received: save_freq='batch'"),
    ({"max_to_keep": -1}, "max_to_keep must be an integer >= 0 (0 keeps all). Received: max_to_keep=-1"),
])
def test_bad_arguments_are_refused_like_keras_does(kwargs, message, tmp_path):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Checkpoint(directory=str(tmp_path), **kwargs)


def test_no_checkpoint_storage_is_one_clear_error(monkeypatch):
    monkeypatch.delenv("TFDIST_CHECKPOINT_DIR", raising=False)
    with pytest.raises(CheckpointError, match="set checkpoint_storage.host_path in the experiment config"):
        Checkpoint()


def test_per_batch_saves_are_refused_in_ps_mode(monkeypatch, tmp_path):
    monkeypatch.setenv("TFDIST_DISTRIBUTION", "ps")
    with pytest.raises(ValueError, match="use save_freq='epoch'"):
        Checkpoint(save_freq=5, directory=str(tmp_path))


def _train(directory, steps_log, stop_after=None):
    import keras
    import tensorflow as tf

    rng = np.random.RandomState(0)
    x = rng.rand(80, 3).astype("float32")
    y = x.sum(axis=1, keepdims=True)
    from tfdist import runtime

    runtime._current = None
    resume = Checkpoint(save_freq=3, directory=directory)
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(8).repeat().skip(resume.resume_step)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1, kernel_initializer="ones")])
    model.compile(optimizer=keras.optimizers.Adam(0.05), loss="mse")

    class Log(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            step = int(self.model.optimizer.iterations.numpy())
            steps_log.append(step)
            if stop_after and step == stop_after:
                self.model.stop_training = True  # a crash, as far as the checkpoint knows

    model.fit(data, epochs=4, steps_per_epoch=5, verbose=0, callbacks=[resume, Log()])
    return model.get_weights()


def test_a_stopped_run_resumes_at_its_checkpoint_exactly_once(tmp_path, capfd):
    whole = _train(str(tmp_path / "whole"), [])
    first, second = [], []
    _train(str(tmp_path / "ckpt"), first, stop_after=8)  # mid-epoch 2; last checkpoint at step 6
    assert sorted(os.listdir(tmp_path / "ckpt")) == ["ckpt-3.data-00000-of-00001", "ckpt-3.index",
                                                     "ckpt-6.data-00000-of-00001", "ckpt-6.index"]
    resumed = _train(str(tmp_path / "ckpt"), second)
    assert "tfdist: resumed from checkpoint" in capfd.readouterr().err
    assert second == list(range(7, 21))  # after the checkpoint of step 6, up to 4 epochs x 5 steps, none skipped
    for a, b in zip(whole, resumed):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
