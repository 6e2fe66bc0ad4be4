"""The step watchdog: a rank that stops making progress is named, every rank's Python stacks land in the
job's logs, and the gang is stopped, instead of a silent hang."""

import os
import re

import pytest

from tests.conftest import REPO, WITH_JAX, run_cli

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
WORKER = os.path.join(REPO, "tests", "integration", "workers", "stalls.py")
HANG_IN_FIT = os.path.join(REPO, "tests", "integration", "workers", "hang_in_fit.py")


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
