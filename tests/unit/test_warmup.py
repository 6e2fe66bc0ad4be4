"""LearningRateWarmup in a real Keras 3 fit: a linear ramp from lr to lr x multiplier over the warmup,
then the target; bad arguments refused with Keras's wording."""

import numpy as np
import pytest

from tfdist.callbacks import LearningRateWarmup


def fit_and_record(warmup, epochs=3, steps=4, optimizer_rate=0.1):
    import keras

    seen = []

    class Record(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            seen.append(round(float(self.model.optimizer.learning_rate.numpy()), 6))

    x = np.random.RandomState(0).rand(64, 4).astype("float32")
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(optimizer_rate), loss="mse")
    model.fit(x, x[:, :1], batch_size=16, epochs=epochs, callbacks=[warmup, Record()], verbose=0)
    assert len(seen) == epochs * steps
    return seen


def test_ramps_linearly_over_the_warmup_steps_then_holds():
    seen = fit_and_record(LearningRateWarmup(warmup_steps=4, multiplier=4))
    assert seen[:6] == pytest.approx([0.1, 0.175, 0.25, 0.325, 0.4, 0.4])
    assert seen[-1] == pytest.approx(0.4)


def test_warmup_epochs_use_the_epochs_step_count():
    seen = fit_and_record(LearningRateWarmup(warmup_epochs=2, multiplier=3))  # 2 epochs x 4 steps
    assert seen[0] == pytest.approx(0.1) and seen[4] == pytest.approx(0.2) and seen[8:] == pytest.approx([0.3] * 4)


def test_the_default_target_is_lr_times_the_jobs_slots(monkeypatch):
    import tfdist.context

    monkeypatch.setattr(tfdist.runtime, "_current", tfdist.context.context_from_env({
        "TFDIST_RANK": "0", "TFDIST_SIZE": "2", "TFDIST_SLOTS": "2"}))
    seen = fit_and_record(LearningRateWarmup(warmup_steps=2))
    assert seen[2:] == pytest.approx([0.2] * 10)


@pytest.mark.parametrize("kwargs, message", [
    ({}, "Give exactly one of `warmup_epochs` and `warmup_steps`. Received: warmup_epochs=None, warmup_steps=None"),
    ({"warmup_epochs": 1, "warmup_steps": 1}, "Give exactly one of"),
    ({"warmup_steps": 0}, "`warmup_steps` must be a positive integer. Received: warmup_steps=0"),
    ({"warmup_epochs": 2.5}, "`warmup_epochs` must be a positive integer. Received: warmup_epochs=2.5"),
    ({"warmup_steps": 5, "multiplier": -1}, "`multiplier` must be a positive number. Received: multiplier=-1"),
])
def test_bad_arguments_are_refused_like_keras_does(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        LearningRateWarmup(**kwargs)


def test_a_schedule_is_refused_with_the_fix():
    import keras

    schedule = keras.optimizers.schedules.ExponentialDecay(0.1, 10, 0.9)
    with pytest.raises(ValueError, match="it is a schedule \\(ExponentialDecay\\); give the optimizer a number"):
        fit_and_record(LearningRateWarmup(warmup_steps=2), optimizer_rate=schedule)


def test_long_warmups_rise_in_at_most_a_hundred_stairs():
    seen = fit_and_record(LearningRateWarmup(warmup_steps=400, multiplier=2), epochs=101, steps=4)
    ramp = seen[:401]
    assert len(set(ramp)) <= 101 and ramp == sorted(ramp)  # rising, in stairs
    assert ramp[0] == pytest.approx(0.1) and seen[400] == pytest.approx(0.2) and seen[-1] == pytest.approx(0.2)
    assert max(b - a for a, b in zip(ramp, ramp[1:])) <= 2 * 0.1 / 100  # stairs of about a hundredth
