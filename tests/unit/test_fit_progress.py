"""Keras `fit` under tfdist reports its step progress by itself (issue 18, Must 5): the worker start-up
(bootstrap/sitecustomize.py) adds a callback to every `fit` of Keras 3 and tf_keras, so the step watchdog
names a rank stuck inside training with no change to the script; the last step a rank reached is written
even when it then hangs; the end of `fit` takes the rank out of the watch."""

import os
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO
from tfdist import progress
from tfdist.compat.keras_progress import FitProgressHooks, with_progress

BOOTSTRAP = os.path.join(REPO, "tfdist", "compat", "bootstrap")
SCRIPT = """
import os, numpy as np, tensorflow as tf
keras, path, seen = tf.keras, os.environ["TFDIST_PROGRESS_FILE"], []
class Spy(keras.callbacks.Callback):  # the script's own callback; it never heard of tfdist
    def on_epoch_end(self, epoch, logs=None):
        import time; time.sleep(0.6)  # past report_progress's write interval
        seen.append(open(path).read().strip())
model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
x = np.zeros((40, 2), "float32")
model.fit(x, x[:, :1], batch_size=8, epochs=2, verbose=0, validation_data=(x, x[:, :1]), callbacks=[Spy()])
print(type(model).__module__.split(".")[0], seen, os.path.exists(path))
"""


@pytest.mark.parametrize("legacy", ["0", "1"])
def test_fit_reports_its_steps_by_itself_under_tfdist(tmp_path, marker, legacy):
    env = dict(os.environ, TFDIST_PROGRESS_FILE=str(tmp_path / "rank0.progress"), TF_USE_LEGACY_KERAS=legacy,
               TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=os.pathsep.join([BOOTSTRAP, REPO]), TFDIST_TEST_MARKER=marker)
    result = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    keras = "tf_keras" if legacy == "1" else "keras"
    assert result.stdout.splitlines()[-1] == f"{keras} ['5', '10'] False"  # batches at each epoch's end; gone after


def test_the_last_step_reached_is_written_even_if_the_rank_then_hangs(tmp_path, monkeypatch):
    path = tmp_path / "rank1.progress"
    monkeypatch.setenv("TFDIST_PROGRESS_FILE", str(path))
    monkeypatch.setattr(progress, "MIN_INTERVAL", 0.3)
    monkeypatch.setattr(progress, "_last_write", 0.0)
    for step in range(1, 6):  # five steps in a few milliseconds: one write now, the last one by the flusher
        progress.report_progress(step)
    reached = time.time()
    assert path.read_text() == "1\n"
    deadline = time.monotonic() + 10
    while path.read_text() != "5\n" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert path.read_text() == "5\n"
    assert path.stat().st_mtime <= reached  # dated when step 5 was reached, not when the flusher wrote it
    progress.left_training()
    assert not path.exists()
    progress.left_training()  # twice: nothing to remove


def test_a_script_that_already_reports_gets_no_second_callback():
    class Own(FitProgressHooks):
        pass

    class Added(FitProgressHooks):
        pass

    mine = Own()
    assert with_progress([mine], Added) == [mine]
    assert [type(c) for c in with_progress(None, Added)] == [Added]
    other = object()
    assert [type(c) for c in with_progress((other,), Added)] == [object, Added]  # after the script's own
    built = object()  # a CallbackList the script made itself: left alone
    assert with_progress(built, Added) is built


def test_fit_is_wrapped_once_and_finds_callbacks_given_by_position_or_keyword():
    from tfdist.compat.keras_progress import apply

    class Model:
        def fit(self, x=None, y=None, batch_size=None, epochs=1, verbose="auto", callbacks=None, **rest):
            return callbacks

    class Callback:
        pass

    assert apply(Model, Callback) and apply(Model, Callback)  # twice: one wrapper
    spy = Callback()
    by_position = Model().fit(1, 2, 8, 1, 0, [spy])
    by_keyword = Model().fit(1, callbacks=[spy])
    assert [type(c).__name__ for c in by_position] == [type(c).__name__ for c in by_keyword] == \
        ["Callback", "FitProgress"]
    assert [type(c).__name__ for c in Model().fit()] == ["FitProgress"]
