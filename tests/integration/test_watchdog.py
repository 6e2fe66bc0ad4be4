"""The step watchdog: a rank that stops making progress is named, every rank's Python stacks land in the
job's logs, and the gang is stopped, instead of a silent hang; the stacks then say which rank the others wait
for and in what."""

import json
import os
import re
import sys

import pytest

from cluster.client import local_runs
from cluster.coordinator.store.sqlite import SqliteStore
from tests.conftest import REPO, WITH_JAX, run_cli

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
WORKER = os.path.join(REPO, "tests", "integration", "workers", "stalls.py")
HANG_IN_FIT = os.path.join(REPO, "tests", "integration", "workers", "hang_in_fit.py")
STOPS = os.path.join(REPO, "tests", "integration", "workers", "stops_before_collective.py")


def test_a_stalled_rank_is_named_with_every_ranks_stacks(tmp_path, marker):
    (tmp_path / "c.yaml").write_text("watchdog: {step_timeout: 4}\n")
    result = run_cli(["launch", "--config", str(tmp_path / "c.yaml"), "--slots", "2", "--", WORKER], marker,
                     timeout=150)
    assert result.returncode == 1, result.stderr[-3000:]
    assert re.search(r"tfdist: job \d+-\w+ submitted", result.stderr)  # local runs number after earlier ones
    assert " failed: rank 1 on node local made no progress for " in result.stderr
    assert "(after step 5; the step watchdog allows 4s); every rank's Python stacks are in the job's logs" in \
        result.stderr
    everything = (result.stdout + result.stderr).splitlines()
    stack_lines = {rank: [l for l in everything if l.startswith(f"[rank={rank}]") and "stalls.py\", line" in l]
                   for rank in (0, 1)}
    assert any("in stuck_in_allreduce" in l for l in stack_lines[1])  # faulthandler, printed by the worker
    assert stack_lines[0]  # the rank that still ran printed its stack too


def test_no_watchdog_when_turned_off(tmp_path, marker):
    """step_timeout 0: a job that only reports a little and then finishes normally is left alone."""
    script = tmp_path / "slow.py"
    script.write_text("import time, tfdist\ntfdist.report_progress(1)\ntime.sleep(3)\nprint('done', flush=True)\n")
    (tmp_path / "c.yaml").write_text("watchdog: {step_timeout: 0}\n")
    result = run_cli(["launch", "--config", str(tmp_path / "c.yaml"), "--slots", "2", "--", str(script)], marker,
                     timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.mark.parametrize("mode", ["mwms", "jax"])
def test_a_rank_stuck_inside_keras_fit_is_named_with_no_change_to_the_script(tmp_path, marker, mode):
    """Measured (issue 18): a rank hung inside `fit` showed nothing at all; the watchdog needed the script to
    report progress. Now `fit` reports by itself: the rank behind is named with its node and last step. Under
    Keras 3 on JAX too (jax#38503: an alive but stuck process fires no timeout of JAX's)."""
    (tmp_path / "c.yaml").write_text("watchdog: {step_timeout: 4}\n")
    result = run_cli(["launch", "--config", str(tmp_path / "c.yaml"), "--slots", "2", "--distribution", mode, "--",
                      HANG_IN_FIT], marker, timeout=150, **(WITH_JAX if mode == "jax" else {}))
    assert result.returncode == 1, result.stderr[-3000:]
    assert re.search(r" failed: rank 1 on node local made no progress for \d+s \(after step 3; the step watchdog "
                     r"allows 4s\); every rank's Python stacks are in the job's logs", result.stderr), result.stderr[-3000:]
    assert "[rank=1] rank 1 hangs inside fit" in result.stdout


def line_of(text: str, path: str = STOPS) -> int:
    with open(path) as f:
        return next(n for n, line in enumerate(f, 1) if text in line)


# What rank 0 waits in, per mode: each mode's usual step (stops_before_collective.py)
WAITS = {
    "mwms": ("in the collective inside the training step (TensorFlow runs it, from stops_before_collective.py:{})",
             "model.fit(train"),
    "horovod": ("in the collective (Horovod allreduce, from stops_before_collective.py:{})", "hvd.allreduce(tf.constant"),
    "jax": ("in the collective (JAX multihost_utils process_allgather, from stops_before_collective.py:{})",
            "multihost_utils.process_allgather(jnp"),
    "torch": ("in the collective (torch.distributed all_reduce, from stops_before_collective.py:{})",
              "dist.all_reduce(torch.ones"),
}


@pytest.mark.parametrize("mode", list(WAITS))
def test_a_hang_names_the_rank_behind_and_what_the_others_wait_in(tmp_path, marker, mode):
    """Issue 47: rank 1 stops in the script's own code before step 4's collective, rank 0 goes on into it. Both
    finished step 3, so the watchdog's clock alone cannot tell them apart (under Horovod and torch it named
    rank 0); their stacks do: the failure says rank 1 is behind, at the line it stopped on, and what rank 0
    waits in, in the launch's summary, `tfdist job` (and --json) and the job's events."""
    (tmp_path / "c.yaml").write_text("watchdog: {step_timeout: 4}\n")
    result = run_cli(["launch", "--config", str(tmp_path / "c.yaml"), "--slots", "2", "--distribution", mode, "--",
                      sys.executable, STOPS, mode], marker, timeout=150, **(WITH_JAX if mode == "jax" else {}))
    assert result.returncode == 1, result.stderr[-3000:]
    waits, call = WAITS[mode]
    said = (f"from the stacks, rank 1 (node local) is behind at step 3 (the others at step 3 too), in the user's "
            f"code at stops_before_collective.py:{line_of('time.sleep(3600)')} in stop_before_the_collective; "
            f"rank 0 waits {waits.format(line_of(call))}")
    assert f"; the other workers were stopped; {said}\n" in result.stderr, result.stderr[-3000:]
    assert "failed: rank 0 on node local made no progress" not in result.stderr  # the clock's pick does not contradict it
    assert "  rank 1 stops before step 4" in result.stderr.split("tfdist: last lines of rank 1 (node local):")[1]
    job_id = re.search(r"tfdist: job (\S+) submitted", result.stderr)[1]
    shown = json.loads(run_cli(["job", job_id, "--json"], marker, timeout=60).stdout)
    assert shown["outcome"].endswith(f"; {said}") and shown["failed_rank"] == 1, shown["outcome"]
    assert f"; {said} (exit code 1)" in run_cli(["job", job_id], marker, timeout=60).stdout
    store = SqliteStore(os.path.join(local_runs.find(job_id).path, "coordinator.sqlite"))
    try:
        assert f"step watchdog: {said}" in [event for _, event in store.events(job_id)]
    finally:
        store.close()
