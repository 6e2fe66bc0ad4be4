"""The client commands against a real coordinator and agent (loopback daemons, no TensorFlow)."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO, cli_env, run_cli

pytestmark = [pytest.mark.timeout(180)]
SLEEPER = os.path.join(REPO, "tests", "multihost", "sleeper.py")


@pytest.fixture
def daemons(tmp_path, marker):
    procs = [subprocess.Popen([sys.executable, "-m", "cluster.client.cli", "coordinator", "--listen", "127.0.0.1:0",
                               "--state-dir", str(tmp_path / "state"), "--subnet", "127.0.0.0/8"],
                              env=cli_env(marker), stdout=subprocess.PIPE, text=True,
                              stderr=open(tmp_path / "c.log", "w"))]
    banner = procs[0].stdout.readline()  # "tfdist coordinator listening on 127.0.0.1:PORT (...)"
    address = banner.split(" listening on ")[1].split()[0]
    made = run_cli(["credentials", str(tmp_path / "state" / "credentials"), "--node", "n1", "-o",
                    str(tmp_path / "n1.json")], marker, timeout=60)
    assert made.returncode == 0, made.stderr
    procs.append(subprocess.Popen([sys.executable, "-m", "cluster.client.cli", "agent", "--coordinator", address,
                                   "--slots", "2", "--credentials", str(tmp_path / "n1.json")], env=cli_env(marker), stdout=subprocess.DEVNULL,
                                  stderr=open(tmp_path / "a.log", "w")))
    env = {"TFDIST_COORDINATOR": address}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        r = run_cli(["agents", "--json"], marker, timeout=30, **env)
        if r.returncode == 0 and json.loads(r.stdout)["agents"]:
            break
        time.sleep(0.3)
    yield env
    for p in procs:
        p.terminate()
    for p in procs:
        p.wait(timeout=20)


def test_jobs_job_logs_cancel_agents(daemons, marker):
    job_id = run_cli(["launch", "--detach", "--slots", "2", "--", SLEEPER, "4"], marker, **daemons).stdout.strip()
    follow = run_cli(["logs", job_id, "-f"], marker, **daemons)
    assert follow.returncode == 0
    assert "[rank=0] rank 0 tick 3" in follow.stdout and "[rank=1] rank 1 tick 3" in follow.stdout
    only_1 = run_cli(["logs", job_id, "--rank", "1"], marker, **daemons).stdout
    assert "[rank=1] rank 1 tick 0" in only_1 and "[rank=0]" not in only_1
    table = run_cli(["jobs"], marker, **daemons).stdout.splitlines()
    assert table[0].split() == ["ID", "NAME", "STATE", "SLOTS", "SUBMITTED", "INFO"]
    assert table[1].split()[:3] == [job_id, "sleeper", "SUCCEEDED"]  # named after its script
    job = json.loads(run_cli(["job", job_id.split("-")[0], "--json"], marker, **daemons).stdout)
    assert job["state"] == "SUCCEEDED" and job["placement"][0]["node"] == "n1"
    agents = run_cli(["agents"], marker, **daemons).stdout
    assert agents.splitlines()[1].split()[:5] == ["n1", "ALIVE", "2", "2", "CPU"]

    long_job = run_cli(["launch", "--detach", "--slots", "1", "--", SLEEPER, "600"], marker, **daemons).stdout.strip()
    canceled = run_cli(["cancel", long_job], marker, **daemons)
    assert canceled.returncode == 0 and canceled.stdout == f"job {long_job}: CANCELED\n"


def test_launch_follows_and_ctrl_c_cancels(daemons, marker):
    proc = subprocess.Popen([sys.executable, "-m", "cluster.client.cli", "launch", "--slots", "1", "--", SLEEPER, "600"],
                            env=cli_env(marker, **daemons), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    assert "tick 0" in proc.stdout.readline()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert "SIGINT: canceling job" in err and "canceled: canceled by the user" in err
    jobs = json.loads(run_cli(["jobs", "--json"], marker, **daemons).stdout)
    assert jobs["jobs"][-1]["state"] == "CANCELED" and jobs["jobs"][-1]["exit_code"] == 130


@pytest.mark.parametrize("args,expected", [
    (["jobs", "--coordinator", "127.0.0.1:1", "--credentials", "n1.json"],
     "tfdist: error: cannot reach the coordinator at 127.0.0.1:1: is `tfdist coordinator` running there? "
     "(set --coordinator or TFDIST_COORDINATOR)\n"),
    (["jobs", "--coordinator", "127.0.0.1:1"],
     "tfdist: error: no credential for the coordinator at 127.0.0.1:1: pass --credentials FILE (or set "
     "TFDIST_CREDENTIALS); an administrator issues one (`tfdist credentials --user NAME`). (Coordinators "
     "you run on this machine are found by themselves in {runtime}.)\n"),
    (["job", "999"], "tfdist: error: job 999 not found; `tfdist jobs` lists the jobs\n"),
    (["cancel", "nope"], "tfdist: error: job nope not found; `tfdist jobs` lists the jobs\n"),
    (["jobs", "--credentials", "/nonexistent/cred.json"],
     "tfdist: error: credential file /nonexistent/cred.json does not exist; an administrator issues one with "
     "`tfdist credentials --user NAME` (or --node NAME)\n"),
])
def test_client_errors_are_one_line(daemons, marker, args, expected, tmp_path):
    result = run_cli(args, marker, timeout=60, cwd=str(tmp_path), **daemons)
    assert result.returncode != 0
    assert result.stderr == expected.format(runtime=os.environ["TFDIST_RUNTIME_DIR"])


def test_client_needs_a_coordinator(marker, tmp_path):
    result = run_cli(["jobs"], marker, timeout=30, TFDIST_COORDINATOR="", TFDIST_RUNTIME_DIR=str(tmp_path / "rt"),
                     XDG_STATE_HOME=str(tmp_path / "state"))  # no local runs either
    assert result.returncode == 2
    assert result.stderr == ("tfdist: error: no coordinator given and none of yours runs on this machine: pass "
                             "--coordinator HOST:PORT and --credentials FILE (or set TFDIST_COORDINATOR and "
                             "TFDIST_CREDENTIALS)\n")


def test_metrics_reach_the_coordinator(daemons, marker, tmp_path):
    script = tmp_path / "m.py"
    script.write_text("import tfdist\n"
                      "for step in range(5):\n"
                      "    tfdist.report_metrics(step, loss=1.0 / (step + 1))\n"
                      "tfdist.report_metrics(5, accuracy=0.75)\n")
    result = run_cli(["launch", "--slots", "2", "--", str(script)], marker, **daemons)
    assert result.returncode == 0, result.stderr
    job = json.loads(run_cli(["jobs", "--json"], marker, **daemons).stdout)["jobs"][-1]
    shown = json.loads(run_cli(["job", job["id"], "--json"], marker, **daemons).stdout)
    latest = {m["name"]: m for m in shown["latest_metrics"]}
    assert latest["loss"]["step"] == 4 and latest["loss"]["value"] == 0.2  # a number (the proto dump said "4")
    assert latest["accuracy"]["value"] == 0.75
    assert "metrics:   accuracy=0.75 (step 5" in run_cli(["job", job["id"]], marker, **daemons).stdout
