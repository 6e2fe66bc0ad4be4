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


def test_tensorboard_goes_where_tfdist_tensorboard_looks(monkeypatch, tmp_path):
    """The worker's directory and the client's (event_files.job_event_dir over the job's record) agree."""
    from tfdist.event_files import job_event_dir

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TFDIST_JOB_ID", "7-ab12")
    monkeypatch.setenv("TFDIST_CHECKPOINT_DIR", str(tmp_path / "ckpt" / "7-ab12"))  # <checkpoint_storage>/<job id>
    assert MetricsReporter(tensorboard=True).tensorboard_dir == str(tmp_path / "ckpt" / "7-ab12" / "tensorboard") \
        == job_event_dir("7-ab12", str(tmp_path / "ckpt") + "/", str(tmp_path))
    monkeypatch.delenv("TFDIST_CHECKPOINT_DIR")  # no checkpoint_storage: under the job's working directory
    assert MetricsReporter(tensorboard=True).tensorboard_dir == str(tmp_path / "tfdist-tensorboard" / "7-ab12") \
        == job_event_dir("7-ab12", "", str(tmp_path))
    monkeypatch.delenv("TFDIST_JOB_ID")  # plain `python train.py`: a folder of its own
    assert MetricsReporter(tensorboard=True).tensorboard_dir.startswith(str(tmp_path / "tfdist-tensorboard" / "local-"))
    assert job_event_dir("7-ab12") == ""  # neither recorded: nothing to look in
    assert MetricsReporter(tensorboard_dir="tb").tensorboard_dir == "tb"
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
    monkeypatch.setattr(progress, "_trained", 0)  # this process's batches so far
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    x = np.zeros((40, 2), "float32")
    seen = []
    at_epoch_end = keras.callbacks.LambdaCallback(on_epoch_end=lambda epoch, logs: seen.append(path.read_text()))
    model.fit(x, x[:, :1], batch_size=8, epochs=2, verbose=0, callbacks=[StepWatchdog(), at_epoch_end])
    assert seen[-1] == "10\n"  # 2 epochs x 5 batches
    assert not path.exists()  # fit ended: the rank left training, the watchdog no longer watches it


def test_batch_reports_come_every_n_batches_at_a_bounded_rate(tmp_path, monkeypatch):
    import json
    import time

    import keras
    import numpy as np

    from tfdist.callbacks import metrics_reporter

    path = tmp_path / "metrics.jsonl"
    monkeypatch.setenv("TFDIST_METRICS_FILE", str(path))
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    x = np.zeros((80, 2), "float32")

    def steps(**kwargs) -> list:
        path.write_text("")
        started = time.monotonic()
        model.fit(x, x[:, :1], batch_size=8, epochs=2, verbose=0, callbacks=[MetricsReporter(**kwargs)])
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        return [(r["step"] - first, "epoch" in r["values"]) for r in rows], time.monotonic() - started

    first = 0
    monkeypatch.setattr(metrics_reporter, "MAX_BATCH_REPORTS_PER_SECOND", 10 ** 9)
    found, _ = steps(every_n_batches=3)
    assert found == [(3, False), (6, False), (9, False), (10, True), (12, False), (15, False), (18, False),
                     (20, True)]  # 10 batches an epoch; the count runs on across epochs
    first = 20
    monkeypatch.setattr(metrics_reporter, "MAX_BATCH_REPORTS_PER_SECOND", 2)
    found, took = steps(every_n_batches=1)
    assert [s for s, epoch in found if epoch] == [10, 20]
    assert 1 <= sum(not epoch for _, epoch in found) <= took * 2 + 1  # not 20: at most 2 a second
