"""`tfdist diagnose` on this machine (issue 47, Must 1 and 2): real TensorFlow workers under an embedded
coordinator. Each variant is a job of its own that every rank times with no change to the script, stopped
once timed; the answer has a verdict and the numbers; a variant the script cannot take says why; an ended job
is diagnosed by its number. The verdicts on injected bottlenecks across two hosts: tests/multihost/test_diagnose.py."""

import json
import os

import pytest

from tests.conftest import REPO, WITH_JAX, run_cli

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]
WORKERS = os.path.join(REPO, "tests", "integration", "workers", "diagnose")
FIT = os.path.join(WORKERS, "fit.py")
LOOP = os.path.join(WORKERS, "loop.py")


def _jobs(marker):
    listed = run_cli(["jobs", "--all", "--json"], marker, timeout=60)
    assert listed.returncode == 0, listed.stderr
    return json.loads(listed.stdout)["jobs"]


def test_a_keras_script_is_diagnosed_with_every_variant_applied_and_stopped_once_timed(marker, tmp_path):
    result = run_cli(["diagnose", "--json", "--slots", "2", "--steps", "6", "--warmup", "2",
                      "--variants", "no_communication,synthetic_input", "--", "python", FIT], marker, timeout=360,
                     cwd=str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout)
    assert found["schema"] == "tfdist.diagnose/1" and found["mode"] == "mwms" and found["ranks"] == 2
    variants = {v["name"]: v for v in found["variants"]}
    assert list(variants) == ["baseline", "no_communication", "synthetic_input"]
    for v in variants.values():
        assert v["skipped"] == "" and v["steps"] == 6 and v["ranks"] == 2, v
        assert v["step_time_s"] > 0 and set(v["rank_step_time_s"]) == {"0", "1"}
        assert v["samples_per_s"] == pytest.approx(64 / v["step_time_s"])  # the batch, seen in the input
    assert found["verdict"] in ("communication", "input", "straggler", "compute")
    assert all(0 <= share <= 1 for share in found["shares"].values()) and found["fixes"]
    assert found["bandwidth"]["allreduce_bytes_per_step"] == (32 * 64 + 64 + 64 + 1) * 4  # 2(n-1)/n = 1
    assert "tfdist: diagnose: baseline: job" in result.stderr  # progress, variant by variant
    jobs = {job["name"]: job for job in _jobs(marker)}
    for name in variants:  # each variant a job of its own, canceled once timed: none ran its whole fit
        job = jobs[f"fit (diagnose: {name})"]
        assert job["state"] == "CANCELED", job
    logs = run_cli(["logs", jobs["fit (diagnose: baseline)"]["id"]], marker, timeout=60)
    assert "rank 0 timed its steps and waits to be stopped" in logs.stdout  # held: nothing after it runs
    assert "fit returned" not in logs.stdout


def test_a_loop_without_fit_is_timed_and_told_what_it_cannot_take_and_an_ended_job_is_diagnosed_by_number(
        marker, tmp_path):
    """The job's environment values, which no coordinator hands out, come from the run's own state."""
    (tmp_path / "loop.yaml").write_text(json.dumps({"environment": {"variables": {"LOOP_TOKEN": "s3cret"}}}))
    launched = run_cli(["launch", "--config", str(tmp_path / "loop.yaml"), "--slots", "1", "--", "python", LOOP, "40"],
                       marker, timeout=120, cwd=str(tmp_path))
    assert launched.returncode == 0, launched.stderr[-2000:]
    [job] = [j for j in _jobs(marker) if j["name"] == "loop"]

    result = run_cli(["diagnose", job["id"].split("-")[0], "--json", "--steps", "5", "--warmup", "1",
                      "--variants", "synthetic_input,one_node"], marker, timeout=240, cwd=str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout)
    variants = {v["name"]: v for v in found["variants"]}
    assert variants["baseline"]["skipped"] == "" and variants["baseline"]["step_time_s"] >= 0.01
    assert variants["one_node"]["skipped"] == "the job runs on one node"
    assert variants["synthetic_input"]["skipped"] == \
        "the script does not train with Keras fit, which this variant changes (its baseline showed no fit)"
    assert variants["synthetic_input"]["job"] == ""  # known from the baseline: not run
    assert found["shares"]["input"] is None and found["verdict"] == "undetermined"
    assert found["summary"].startswith("undetermined: a step takes ")


@pytest.mark.parametrize("args, expected", [
    (["--variants", "sideways", "--", "python", "x.py"],
     "tfdist diagnose: --variants 'sideways' is not a variant; choose from baseline, one_node, "
     "no_communication, synthetic_input"),
    (["--warmup", "900", "--steps", "100", "--", "python", "x.py"],
     "tfdist diagnose: --warmup 900 + --steps 100 must stay below 1000 (the no_communication variant "
     "all-reduces every 1000 steps)"),
    (["--steps", "0", "--", "python", "x.py"],
     "tfdist diagnose: argument --steps: must be between 1 and 900, got 0 (see `tfdist diagnose --help`)"),
    ([], "tfdist diagnose: nothing to run; give a JOB, a command after `--` (tfdist diagnose --slots 2 "
         "-- python train.py), or `entrypoint` in --config"),
])
def test_bad_input_is_one_line(marker, tmp_path, args, expected):
    result = run_cli(["diagnose", *args], marker, timeout=60, cwd=str(tmp_path))
    assert result.returncode == 2 and result.stderr == expected + "\n", result.stderr


def test_horovod_with_numpy_input_takes_both_variants(marker, tmp_path):
    """tfdist.horovod's optimizer under Keras's gradient accumulation (no all-reduce in the measured steps),
    and fit's numpy arrays replaced by their first batch."""
    script = os.path.join(REPO, "tests", "integration", "workers", "horovod_fit.py")
    result = run_cli(["diagnose", "--json", "--slots", "2", "--distribution", "horovod", "--steps", "5", "--warmup",
                      "2", "--variants", "no_communication,synthetic_input", "--", "python", script], marker,
                     timeout=300, cwd=str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout)
    assert found["mode"] == "horovod"
    for v in found["variants"]:
        assert v["skipped"] == "" and v["steps"] == 5 and set(v["rank_step_time_s"]) == {"0", "1"}, v
    assert found["shares"]["communication"] is not None and found["shares"]["input"] is not None


def test_keras_on_jax_takes_synthetic_input_and_is_told_why_not_the_all_reduce_cut(marker, tmp_path):
    """Keras 3 on JAX (jax mode): fit's tf.data input is replaced as under TensorFlow; a data-parallel JAX step
    all-reduces inside its gradient computation, which aggregation cannot remove: said, and not run."""
    result = run_cli(["diagnose", "--json", "--config", os.path.join(REPO, "examples", "keras_jax", "config.yaml"),
                      "--steps", "4", "--warmup", "2", "--variants", "no_communication,synthetic_input"], marker,
                     timeout=300, cwd=REPO, **WITH_JAX)
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout)
    variants = {v["name"]: v for v in found["variants"]}
    assert found["mode"] == "jax" and variants["synthetic_input"]["skipped"] == "", found
    assert variants["no_communication"]["skipped"].startswith("mode jax: a data-parallel JAX step all-reduces")
    assert variants["no_communication"]["job"] == ""  # known before: no job was run for it
    assert found["shares"]["input"] is not None and found["shares"]["communication"] is None
