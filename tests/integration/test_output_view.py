"""What a user sees of a real 2-worker Keras fit (issue 18, Measured 1, 2 and 7): every epoch's final line with
its val_* values reaches them intact, the chief's bar shows while an epoch runs, rank 1's bar and TensorFlow's
start-up lines are hidden by default and shown with --all-ranks / --verbose, `tfdist logs` has everything on
stdout (stderr marked) and --json lines, and tf_keras's bar shows averages, not sums over the workers."""

import ast
import json
import os
import re

import pytest

from tests.conftest import LocalCluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]
WORKER = os.path.join(os.path.dirname(__file__), "workers", "progress_fit.py")
KERAS3_FINAL = re.compile(r"^\[rank=0\] 32/32 ━{20} \d+s \d+ms/step - accuracy: \d\.\d{4} - loss: \d\.\d{4} - "
                          r"val_accuracy: \d\.\d{4} - val_loss: \d\.\d{4}$", re.M)
TF_KERAS_FINAL = re.compile(r"^\[rank=(\d)\] 32/32 \[={30}\] - \d+s \d+ms/step - loss: \d\.\d{4} - accuracy: \d\.\d{4} "
                            r"- val_loss: \d\.\d{4} - val_accuracy: \d\.\d{4}$", re.M)
NOISE = ("WARNING: All log messages before absl::InitializeLog() is called", "cpu_feature_guard.cc")


def launch(cluster, tmp_path, *flags, legacy=False):
    config = tmp_path / f"fit{'-tf_keras' if legacy else ''}.yaml"
    variables = {"TF_CPP_MIN_LOG_LEVEL": "0", **({"TF_USE_LEGACY_KERAS": "1"} if legacy else {})}
    config.write_text(json.dumps({"distribution": {"mode": "mwms"}, "environment": {"variables": variables}}))
    result = cluster.cli("launch", "--config", str(config), "--slots", "2", *flags, "--", WORKER, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    job_id = re.search(r"tfdist: job (\S+) submitted", result.stderr).group(1)
    return result.stdout, result.stderr, job_id


def averaged(out: str) -> None:
    """Rank 0's bar at the epoch's last step shows what the epoch's logs say (not twice that: the sum)."""
    for epoch in (1, 2):
        # printed before Keras ends the bar's line, the print ends that line (as on a terminal): not at ^
        last, whole = re.search(rf"^\[rank=0\] .*epoch {epoch}: last batch (.*) epoch (.*)$", out, re.M).groups()
        last, whole = ast.literal_eval(last), ast.literal_eval(whole)
        assert all(abs(last[k] - whole[k]) < 2e-4 for k in ("loss", "accuracy")), (last, whole)


def test_the_quiet_view_the_full_log_and_their_flags(tmp_path, marker):
    cluster = LocalCluster(tmp_path, marker)
    try:
        cluster.start_agent("n1", "--slots", "2")
        cluster.wait_agents("n1")

        # Keras 3, the quiet view on a pipe.
        out, err, job_id = launch(cluster, tmp_path)
        assert len(KERAS3_FINAL.findall(out)) == 2, out  # each epoch's final line, val_* included, intact
        assert re.search(r"^\[rank=0\] Epoch 1/2 · +\d+/32 [━─]{10} ", out, re.M), out  # shown while the epoch ran
        assert "[rank=1] Epoch" not in out and not re.search(r"^\[rank=1\] +\d+/32", out, re.M), out
        assert "[rank=1] rank 1 done" in out and "[rank=0] rank 0 done" in out
        assert not any(noise in out + err for noise in NOISE), err
        averaged(out)

        # The full log: every line on stdout, stderr marked, the noise and rank 1's bar in it; --json lines.
        logs = cluster.cli("logs", job_id)
        assert logs.returncode == 0 and logs.stderr == "", logs.stderr
        assert all(f"[rank={r} stderr] {NOISE[0]}" in logs.stdout for r in (0, 1)), logs.stdout[:3000]
        assert re.search(r"^\[rank=1\] 32/32 ━{20} .* - val_loss: \d\.\d{4}$", logs.stdout, re.M)
        assert " · " not in logs.stdout  # the view's progress lines are not the log's
        lines = [json.loads(line) for line in cluster.cli("logs", job_id, "--json").stdout.splitlines()]
        assert {tuple(sorted(line)) for line in lines} == {("job_id", "rank", "seq", "stream", "text", "time")}
        assert [line["seq"] for line in lines] == sorted(line["seq"] for line in lines)
        assert {line["stream"] for line in lines} == {"stdout", "stderr", "progress"}
        assert len([line for line in lines if line["stream"] == "stdout"]) == logs.stdout.count("\n") - len(
            [line for line in lines if line["stream"] == "stderr"])

        # tf_keras, with --verbose and --all-ranks: every rank's bar and the noise; true averages.
        out, err, _ = launch(cluster, tmp_path, "--verbose", "--all-ranks", legacy=True)
        assert sorted(TF_KERAS_FINAL.findall(out)) == ["0", "0", "1", "1"], out
        assert "[rank=1] Epoch 1/2" in out and all(f"[rank={r}] {NOISE[0]}" in err for r in (0, 1)), err
        averaged(out)
    finally:
        cluster.close()
