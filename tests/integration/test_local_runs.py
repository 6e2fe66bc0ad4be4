"""Local runs are jobs like any other (issue 18, Measured 3 and 4): after a local `tfdist launch` has ended,
`tfdist jobs/job/logs/metrics` without --coordinator find its job in the user's state ($XDG_STATE_HOME);
a local launch preempted by SIGTERM (exit 75) is continued by `tfdist resume ID` from its checkpoint to
the end (exit 0, the same job id); a bare `python` in the command is the launcher's Python, with a PATH
that does not lead to it; and a launch killed outright leaves its job as stored, said so, until canceled."""

import json
import os
import re
import signal
import subprocess
import sys

import pytest

from tests.conftest import REPO, WITH_PLOT, cli_env, run_cli, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]
WORKER = os.path.join(REPO, "tests", "integration", "workers", "resumable_fit.py")
TOTAL_STEPS = 30
PATH_WITHOUT_THE_VENV = "/usr/sbin:/usr/bin:/sbin:/bin"  # no `python` here has tfdist (nor TensorFlow)


def config(tmp_path, name, slow=0.0, storage=True) -> str:
    """storage=False: no checkpoint_storage (a local job then checkpoints into its run)."""
    out = tmp_path / name
    out.mkdir()
    (tmp_path / f"{name}.yaml").write_text(json.dumps({
        **({"checkpoint_storage": {"host_path": str(tmp_path / "ckpt")}} if storage else {}),
        "resources": {"slots_per_trial": 2}, "distribution": {"mode": "mwms"}, "entrypoint": ["python", WORKER],
        "environment": {"variables": {"OUT": str(out), "SLOW": str(slow), "SLOW_RUNS": "1"}}}))
    return str(tmp_path / f"{name}.yaml")


def steps(out) -> dict[int, list[int]]:
    runs: dict[int, list[int]] = {}
    text = (out / "steps.txt").read_text() if (out / "steps.txt").exists() else ""
    for attempt, step in (map(int, line.split()) for line in text.splitlines() if line):
        runs.setdefault(attempt, []).append(step)
    return runs


def test_local_jobs_stay_and_a_preempted_one_resumes_from_its_checkpoint(tmp_path, marker):
    env = {"XDG_STATE_HOME": str(tmp_path / "state"), "PATH": PATH_WITHOUT_THE_VENV, "TFDIST_COORDINATOR": ""}
    cli = lambda *args, timeout=120, **more: run_cli(list(args), marker, timeout=timeout, **{**env, **more})  # noqa: E731

    # 1. A local launch to the end, `python` meaning the launcher's; then found without --coordinator.
    done = cli("launch", "--config", config(tmp_path, "first"), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    first = re.search(r"tfdist: job (\S+) submitted", done.stderr).group(1)
    listed = json.loads(cli("jobs", "--json").stdout)["jobs"]
    assert [(j["id"], j["state"], j["exit_code"]) for j in listed] == [(first, "SUCCEEDED", 0)]
    assert listed[0]["command"] == [sys.executable, WORKER]  # the bare `python`, as the launcher's
    assert cli("jobs").stdout.splitlines()[1].split()[:3] == [first, "resumable_fit", "SUCCEEDED"]
    shown = json.loads(cli("job", first.split("-")[0], "--json").stdout)
    assert shown["id"] == first and shown["placement"][0]["node"] == "local"
    logs = cli("logs", first, "-f")  # a finished job: -f prints what there is and ends
    assert logs.returncode == 0 and "[rank=0] rank 0 done at step 30" in logs.stdout, logs.stderr
    lines = [json.loads(line) for line in cli("logs", first, "--json").stdout.splitlines()]
    assert {"job_id": first, "rank": 1, "stream": "stdout", "text": "rank 1 done at step 30"}.items() <= \
        next(line for line in lines if line["text"].startswith("rank 1 done")).items()
    rows = [json.loads(line) for line in cli("metrics", first, "--json").stdout.splitlines()]
    assert rows and rows[-1]["step"] == TOTAL_STEPS, rows[-3:]
    plotted = cli("metrics", first, "--plot", str(tmp_path / "m.png"), **WITH_PLOT)
    assert plotted.returncode == 0 and (tmp_path / "m.png").stat().st_size > 0, plotted.stderr

    # 2. A second local launch, preempted by SIGTERM: exit 75, paused at a checkpoint; its id is a new one.
    # Its config names no checkpoint_storage: the checkpoints go into its run.
    out = tmp_path / "second"
    proc = subprocess.Popen([sys.executable, "-m", "cluster.client.cli", "launch", "--config",
                             config(tmp_path, "second", slow=0.3, storage=False)], cwd=REPO, env=cli_env(marker, **env),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: max(steps(out).get(0, [0])) >= 3, "the second job's step 3", alive=lambda: proc.poll() is None)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 75, err[-3000:]
    second = re.search(r"tfdist: job (\S+) submitted", err).group(1)
    paused_at = int(re.search(rf"`tfdist resume {second}` continues from the checkpoint at step (\d+)", err).group(1))
    assert second != first and second.split("-")[0] == str(int(first.split("-")[0]) + 1)
    run_checkpoints = tmp_path / "state" / "tfdist" / "local" / second.split("-")[0] / "checkpoints" / second
    assert any(p.name.startswith("ckpt-") for p in run_checkpoints.iterdir())
    assert [j["state"] for j in json.loads(cli("jobs", "--json").stdout)["jobs"]] == ["SUCCEEDED", "PAUSED"]

    # 3. `tfdist resume ID` continues it from that checkpoint to the end, followed as launch does.
    resumed = cli("resume", second, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"tfdist: job {second}: resumed from the checkpoint at step {paused_at}" in resumed.stderr
    assert "[rank=0] rank 0 done at step 30" in resumed.stdout
    runs = steps(out)
    assert max(runs[0]) == paused_at and min(runs[1]) == paused_at + 1 and max(runs[1]) == TOTAL_STEPS
    final = json.loads(cli("job", second, "--json").stdout)
    assert (final["id"], final["state"], final["attempt"]) == (second, "SUCCEEDED", 1)
    again = cli("resume", second)
    assert again.returncode == 2 and again.stderr == \
        f"tfdist: error: job {second} is SUCCEEDED, not PAUSED; only a paused job can be resumed\n"

    # 4. A launch killed outright leaves its job as stored: reading it marks nothing lost; cancel ends it.
    killed = subprocess.Popen([sys.executable, "-m", "cluster.client.cli", "launch", "--", "python", "-c",
                               "import time\nfor i in range(600): print('tick', i, flush=True); time.sleep(0.2)"],
                              cwd=REPO, env=cli_env(marker, **env), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              text=True)
    try:
        assert killed.stdout.readline().startswith("[rank=0] tick 0")  # bounded by the test's timeout
    finally:
        killed.kill()
        killed.communicate(timeout=30)
    third = json.loads(cli("jobs", "--json").stdout)["jobs"][-1]
    assert third["state"] == "RUNNING" and "launch ended without recording how the job ended" in third["outcome"]
    stored = cli("logs", third["id"], "-f")  # nothing runs it: -f prints what is stored and ends
    assert stored.returncode == 0 and "[rank=0] tick 0" in stored.stdout and "nothing runs it" in stored.stderr
    assert json.loads(cli("job", third["id"], "--json").stdout)["state"] == "RUNNING"  # not marked lost
    assert cli("cancel", third["id"]).stdout == f"job {third['id']}: CANCELED\n"
    assert [j["state"] for j in json.loads(cli("jobs", "--json").stdout)["jobs"]] == ["SUCCEEDED", "SUCCEEDED",
                                                                                       "CANCELED"]
