"""The process-wide runtime: `tfdist.init()` joins once, `tfdist.current()` returns what it made, and
`current_or_env()` reads the environment without starting TensorFlow."""

import logging
import os
import subprocess
import sys

import pytest

import tfdist
from tfdist import runtime
from tfdist.errors import LaunchEnvironmentError


@pytest.fixture
def plain_process(monkeypatch, tmp_path):
    """No launcher environment and no context yet; the ready file the launcher would watch."""
    for name in list(os.environ):
        if name.startswith("TFDIST_") or name == "TF_CONFIG":
            monkeypatch.delenv(name)
    monkeypatch.setattr(runtime, "_current", None)
    ready = tmp_path / "ready"
    monkeypatch.setenv("TFDIST_READY_FILE", str(ready))
    return ready


def test_the_public_names_are_the_runtimes():
    assert (tfdist.init, tfdist.current) == (runtime.init, runtime.current)


def test_init_joins_once_and_current_returns_its_context(plain_process):
    ctx = tfdist.init(default_hparams={"global_batch_size": 8, "lr": 0.1})
    assert (ctx.rank, ctx.size, ctx.per_replica_batch_size, ctx.hparams["lr"]) == (0, 1, 8, 0.1)
    assert ctx.strategy is not None and ctx.strategy.num_replicas_in_sync == 1
    assert plain_process.read_text() == str(os.getpid())  # the launcher's startup timeout stops
    assert tfdist.init({"global_batch_size": 99}) is ctx  # once per process: later calls return the first
    assert tfdist.current() is ctx and runtime.current_or_env() is ctx


def test_current_joins_when_init_has_not_run(plain_process):
    ctx = tfdist.current()
    assert ctx.strategy is not None and runtime._current is ctx and plain_process.exists()


def test_a_failed_init_leaves_no_context_and_tells_the_launcher_nothing(plain_process, monkeypatch, caplog):
    """The chief logs the batch remainder before the strategy exists; a strategy that does not match the
    launched slots is an error, and the process has not joined."""
    monkeypatch.setenv("TFDIST_SLOTS", "3")
    with caplog.at_level(logging.WARNING, logger="tfdist"), \
            pytest.raises(LaunchEnvironmentError, match="1 replicas in sync but the job was launched with 3 slots"):
        tfdist.init({"global_batch_size": 10})
    assert "the remainder of 1 sample(s) per step is dropped (effective global batch size 9)" in caplog.text
    assert runtime._current is None and not plain_process.exists()


def test_current_or_env_reads_the_environment_and_starts_nothing():
    """Helpers that only need ranks and paths (downloads, checkpoint paths) must not load TensorFlow."""
    script = ("import sys; from tfdist import runtime; ctx = runtime.current_or_env(); "
              "print(ctx.rank, ctx.size, ctx.job_id, ctx.strategy, runtime._current, 'tensorflow' in sys.modules)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TFDIST_")}
    env.update(TFDIST_RANK="1", TFDIST_SIZE="2", TFDIST_JOB_ID="j7")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["1", "2", "j7", "None", "None", "False"]
