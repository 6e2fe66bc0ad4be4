"""MetricsReporter validates its arguments in __init__, with Keras's wording."""

import pytest

from tfdist.callbacks import MetricsReporter


@pytest.mark.parametrize("kwargs, message", [
    ({"every_n_batches": 0}, "`every_n_batches` must be a positive integer or None. Received: every_n_batches=0"),
    ({"every_n_batches": True}, "Received: every_n_batches=True"),
    ({"average": "yes"}, "`average` must be True, False or None. Received: average='yes'"),
    ({"tensorboard_dir": ""}, "`tensorboard_dir` must be a non-empty path or None. Received: tensorboard_dir=''"),
])
def test_bad_arguments_are_refused_like_keras_does(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        MetricsReporter(**kwargs)


def test_tensorboard_next_to_the_checkpoints(monkeypatch, tmp_path):
    monkeypatch.delenv("TFDIST_CHECKPOINT_DIR", raising=False)
    with pytest.raises(Exception, match="no place for checkpoints: set checkpoint_storage.host_path"):
        MetricsReporter(tensorboard=True)
    monkeypatch.setenv("TFDIST_CHECKPOINT_DIR", str(tmp_path / "job-1"))
    assert MetricsReporter(tensorboard=True).tensorboard_dir == str(tmp_path / "job-1" / "tensorboard")
    with pytest.raises(ValueError, match="Received: tensorboard='yes'"):
        MetricsReporter(tensorboard="yes")


def test_batch_reports_are_refused_in_ps_mode(monkeypatch):
    monkeypatch.setenv("TFDIST_DISTRIBUTION", "ps")
    with pytest.raises(ValueError, match="`every_n_batches` cannot be used in ps mode"):
        MetricsReporter(every_n_batches=10)
    assert MetricsReporter().every_n_batches is None


def test_averaging_follows_the_config_unless_given(monkeypatch):
    monkeypatch.setenv("TFDIST_AVERAGE_TRAINING_METRICS", "1")
    assert MetricsReporter().average is True and MetricsReporter(average=False).average is False
    monkeypatch.delenv("TFDIST_AVERAGE_TRAINING_METRICS")
    assert MetricsReporter().average is False


def test_step_watchdog_reports_progress_from_fit(tmp_path, monkeypatch):
    import keras
    import numpy as np

    from tfdist import progress
    from tfdist.callbacks import StepWatchdog

    path = tmp_path / "rank0.progress"
    monkeypatch.setenv("TFDIST_PROGRESS_FILE", str(path))
    monkeypatch.setattr(progress, "MIN_INTERVAL", 0.0)  # every step, for the test
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    x = np.zeros((40, 2), "float32")
    model.fit(x, x[:, :1], batch_size=8, epochs=2, verbose=0, callbacks=[StepWatchdog()])
    assert path.read_text() == "10\n"  # 2 epochs x 5 batches
