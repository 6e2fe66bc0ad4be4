"""tfdist inside a Slurm allocation, against a real slurmctld and one slurmd per network-namespace node
(tests/slurm/cluster.py): the same `tfdist launch` in an sbatch script trains across the allocation's
nodes. Root only (namespaces); `make test` installs Slurm's Debian packages."""

import json
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tests.conftest import REPO, processes_with_marker, wait_for
from tests.slurm.cluster import SlurmCluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]
WORKER = os.path.join(REPO, "tests", "integration", "workers", "train_worker.py")
CRASHER = os.path.join(REPO, "tests", "multihost", "crasher.py")  # no TensorFlow: Slurm's mechanics alone
SLEEPER = os.path.join(REPO, "tests", "multihost", "sleeper.py")


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    with SlurmCluster(tmp_path_factory.mktemp("slurm"), nodes=2, cpus=2) as cluster:
        yield cluster


def sbatch(slurm, tmp_path, marker, body: str, *options: str, wait: bool = True,
           env: dict | None = None) -> subprocess.CompletedProcess:
    """Submits a batch script (`body` after `cd REPO`) with the test's marker; with `wait`, returns when the
    job ended (exit code = the job's), else at once (stdout = the job id)."""
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n" + "".join(f"#SBATCH {o}\n" for o in options) +
                      f"#SBATCH --output={tmp_path}/slurm-%j.out\ncd {REPO}\n" + textwrap.dedent(body))
    env = {"PYTHONPATH": REPO, "TFDIST_TEST_MARKER": marker, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})}
    return slurm.run(["sbatch", *(["--wait"] if wait else []), "--parsable", str(script)], check=not wait,
                     timeout=300, env=env)


def job_output(tmp_path) -> str:
    return "".join(p.read_text() for p in tmp_path.glob("slurm-*.out"))


def test_launch_in_an_sbatch_script_trains_across_the_allocations_nodes(slurm, tmp_path, marker):
    result = sbatch(slurm, tmp_path, marker, f"""
        {sys.executable} -m cluster.client.cli launch -- {WORKER} --mode fit --out {tmp_path}
        """, "--nodes=2", "--ntasks-per-node=1")
    out = job_output(tmp_path)
    assert result.returncode == 0, out[-3000:]
    assert "tfdist: Slurm allocation " in out and ": 2 node(s) (node1, node2), 2 slot(s)" in out
    infos = [json.load(open(tmp_path / f"rank{r}.json")) for r in range(2)]
    assert [(i["rank"], i["size"]) for i in infos] == [(0, 2), (1, 2)]
    weights = [list(np.load(tmp_path / f"rank{r}.npz").values()) for r in range(2)]
    for a, b in zip(*weights):
        np.testing.assert_array_equal(a, b)  # MWMS across two hosts: identical weights
    assert "[rank=0]" in out and "[rank=1]" in out
    assert "Killed" not in out and "forcing job termination" not in out  # the agents' step ends cleanly
    assert not processes_with_marker(marker)


def test_launch_in_an_salloc_shell_on_the_login_node(slurm, tmp_path, marker):
    """salloc runs its command on the login node (the controller's host here): the embedded coordinator
    listens there, on the address the nodes route to, and the agents' step runs on the nodes."""
    result = tfdist(slurm, tmp_path, marker, "launch", "--", sys.executable, SLEEPER, "2", salloc=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert ": 2 node(s) (node1, node2), 2 slot(s)" in result.stderr
    assert f"submitted to {slurm.addresses['ctl']}:" in result.stderr  # the login node's cluster address
    assert "[rank=0] rank 0 tick 1" in result.stdout and "[rank=1] rank 1 tick 1" in result.stdout
    assert not processes_with_marker(marker)


def test_slots_that_disagree_with_the_allocation_are_one_line(slurm, tmp_path, marker):
    result = sbatch(slurm, tmp_path, marker, f"""
        {sys.executable} -m cluster.client.cli launch --slots 3 -- {WORKER} --mode fit --out {tmp_path}
        """, "--nodes=2", "--ntasks-per-node=1")
    out = job_output(tmp_path)
    assert result.returncode != 0
    assert ("slots_per_trial=3, but Slurm allocation " in out and "has 2 task(s) (node1: 1, node2: 1); ask sbatch "
            "for --ntasks=3" in out), out[-2000:]
    assert "Traceback" not in out


def test_a_worker_death_fails_the_slurm_job_with_its_code_and_stops_the_other_node(slurm, tmp_path, marker):
    result = sbatch(slurm, tmp_path, marker, f"""
        {sys.executable} -m cluster.client.cli launch -- {sys.executable} {CRASHER} 1
        """, "--nodes=2", "--ntasks-per-node=1")
    out = job_output(tmp_path)
    assert result.returncode != 0, out[-3000:]
    assert "failed: rank 1 on node node2 exited with code 5; the other workers were stopped" in out, out[-3000:]
    assert "  rank 1 giving up" in out
    state = slurm.run(["scontrol", "show", "job", result.stdout.strip()]).stdout
    assert "JobState=FAILED" in state and "ExitCode=5:0" in state
    assert not processes_with_marker(marker)


def test_scancel_stops_every_node_and_leaves_nothing_behind(slurm, tmp_path, marker):
    job = sbatch(slurm, tmp_path, marker, f"{sys.executable} -m cluster.client.cli launch -- {sys.executable} {SLEEPER} 600\n",
                 "--nodes=2", "--ntasks-per-node=1", wait=False).stdout.strip()
    wait_for(lambda: "[rank=1] rank 1 tick" in job_output(tmp_path), "rank 1's first output")
    slurm.run(["scancel", job])
    wait_for(lambda: not processes_with_marker(marker), "every process of the job to end")
    # slurmctld may record the state a moment after the processes are gone (seen under load)
    seen = [None]

    def job_state():
        found = re.search(r"JobState=(\S+)", slurm.run(["scontrol", "show", "job", job]).stdout)
        seen[0] = found and found.group(1)
        return seen[0]

    wait_for(lambda: job_state() == "CANCELLED", "Slurm to record the job CANCELLED", timeout=60,
             logs=lambda: f"JobState={seen[0]}")


def tfdist(slurm, tmp_path, marker, *args: str, timeout: float = 300, salloc: bool = False):
    """The tfdist CLI on the login node (the controller's host), from `tmp_path`; with `salloc`, in an
    allocation of both nodes (one task each)."""
    env = {"PYTHONPATH": REPO, "TFDIST_TEST_MARKER": marker, "TF_CPP_MIN_LOG_LEVEL": "2"}
    allocation = ["salloc", "--nodes=2", "--ntasks-per-node=1"] if salloc else []
    return slurm.run([*allocation, sys.executable, "-m", "cluster.client.cli", *args], check=False, timeout=timeout,
                     env=env, cwd=tmp_path)


def test_launch_slurm_from_a_login_node_follows_the_job_and_exits_with_its_code(slurm, tmp_path, marker):
    result = tfdist(slurm, tmp_path, marker, "launch", "--slurm", "--nodes=2", "--ntasks-per-node=1", "--",
                    sys.executable, CRASHER, "1")
    assert result.returncode == 5, result.stdout[-3000:] + result.stderr
    job = re.search(r"tfdist: submitted Slurm job (\d+);", result.stderr).group(1)
    assert f"tfdist: Slurm job {job} running on node[1-2]" in result.stderr
    assert f"tfdist: Slurm job {job} ended FAILED (ExitCode=5:0); tfdist launch exits 5" in result.stderr
    # the batch script's output, copied as it was written: the in-allocation launch's lines and summary
    assert "[rank=1] rank 1 tick 0" in result.stdout and "[rank=1] rank 1 giving up" in result.stdout
    assert "failed: rank 1 on node node2 exited with code 5; the other workers were stopped" in result.stdout
    assert result.stdout == (tmp_path / f"tfdist-{job}.out").read_text()
    assert not processes_with_marker(marker)


def test_jobs_logs_and_cancel_work_on_a_job_submitted_with_launch_slurm(slurm, tmp_path, marker):
    submitted = tfdist(slurm, tmp_path, marker, "launch", "--detach", "--slurm", "--nodes=2", "--ntasks-per-node=1",
                       "--job-name=sleepy", "--", sys.executable, SLEEPER, "600")
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip()
    env = {**slurm.env, "PYTHONPATH": REPO, "TFDIST_TEST_MARKER": marker}
    with open(tmp_path / "follower.out", "w") as out, open(tmp_path / "follower.err", "w") as err:
        follower = subprocess.Popen(slurm.command([sys.executable, "-m", "cluster.client.cli", "logs", "-f", job]),
                                    env=env, cwd=tmp_path, stdout=out, stderr=err)
    try:
        wait_for(lambda: all(f"[rank={r}] rank {r} tick" in (tmp_path / "follower.out").read_text() for r in (0, 1)),
                 "both ranks' output", alive=lambda: follower.poll() is None)
        assert "[rank=0] rank 0 tick" in tfdist(slurm, tmp_path, marker, "logs", job).stdout
        listed = tfdist(slurm, tmp_path, marker, "jobs")
        row = next(line for line in listed.stdout.splitlines() if line.startswith(job))
        assert row.split()[1:4] == ["sleepy", "RUNNING", "node[1-2]"], listed.stdout
        assert json.loads(tfdist(slurm, tmp_path, marker, "jobs", "--slurm", "--json").stdout)["jobs"][-1]["id"] == job
        canceled = tfdist(slurm, tmp_path, marker, "cancel", job)
        assert canceled.stdout == f"Slurm job {job}: cancel requested (scancel)\n", canceled.stderr
        assert follower.wait(timeout=120) == 130  # the follower saw the job end CANCELLED
    finally:
        slurm.run(["scancel", job], check=False)
        follower.kill()
        follower.wait()
    assert "JobState=CANCELLED" in slurm.run(["scontrol", "show", "job", job]).stdout
    assert f"Slurm job {job} ended CANCELLED" in (tmp_path / "follower.err").read_text()
    wait_for(lambda: not processes_with_marker(marker), "every process of the job to end")
    missing = tfdist(slurm, tmp_path, marker, "cancel", "999999")
    assert missing.returncode == 1 and missing.stderr.startswith("tfdist: error: Slurm job 999999 not found")


@pytest.mark.parametrize("request_", [["--nodes=3"], ["--slots", "8"]], ids=["nodes", "slots"])
def test_a_too_large_request_is_one_line_and_queues_nothing(slurm, tmp_path, marker, request_):
    slurm_opts = request_ if request_[0].startswith("--nodes") else []
    tfdist_opts = [] if slurm_opts else request_
    result = tfdist(slurm, tmp_path, marker, "launch", *tfdist_opts, "--slurm", *slurm_opts, "--", sys.executable,
                    SLEEPER)
    assert result.returncode == 125 and result.stdout == ""  # tfdist (sbatch) refused: nothing ran
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith("tfdist launch --slurm: sbatch refused the job: Requested node configuration is "
                                    "not available"), result.stderr
    assert "(sbatch options: --nodes=3);" in result.stderr if slurm_opts else "(sbatch options" not in result.stderr
    assert slurm.run(["squeue", "-h"]).stdout == ""


@pytest.fixture(scope="module")
def gpu_slurm(tmp_path_factory):
    with SlurmCluster(tmp_path_factory.mktemp("gpu-slurm"), nodes=2, cpus=2, gpus=2) as cluster:
        yield cluster


def test_gpu_nodes_get_their_devices_from_slurms_gres(gpu_slurm, tmp_path, marker):
    """Stand-in GPUs (character devices in gres.conf, a stand-in nvidia-smi): slots are the GPUs Slurm
    assigned, and each node's process sees exactly those."""
    show = os.path.join(REPO, "tests", "integration", "workers", "show_devices.py")
    fakes = os.path.join(REPO, "tests", "fakes")
    job = sbatch(gpu_slurm, tmp_path, marker, f"export PATH={fakes}:$PATH\n"
                 f"{sys.executable} -m cluster.client.cli launch -- {sys.executable} {show}\n",
                 "--nodes=2", "--ntasks-per-node=1", "--gres=gpu:2", wait=False,
                 env={"TFDIST_FAKE_GPUS": "2"}).stdout.strip()
    try:
        wait_for(lambda: all(f"[rank={r}] cuda_visible_devices=" in job_output(tmp_path) for r in (0, 1)),
                 "both ranks' devices")  # in whichever order their lines arrive
        out = job_output(tmp_path)
        assert ": 2 node(s) (node1, node2), 4 slot(s)" in out, out[-3000:]
        for rank in (0, 1):  # one process per GPU node, driving the node's two GPUs
            assert f"[rank={rank}] cuda_visible_devices=0,1 tfdist_gpus=0,1 order=PCI_BUS_ID" in out, out[-3000:]
    finally:
        gpu_slurm.run(["scancel", job])
        wait_for(lambda: not processes_with_marker(marker), "every process of the job to end")


@pytest.mark.parametrize("mode", ["horovod", "ps"])
def test_horovod_and_parameter_servers_inside_an_allocation(slurm, tmp_path, marker, mode):
    workers = os.path.join(REPO, "tests", "integration", "workers")
    script = {"horovod": "horovod_fit.py", "ps": "ps_fit.py"}[mode]
    result = sbatch(slurm, tmp_path, marker, f"""
        {sys.executable} -m cluster.client.cli launch --distribution {mode} -- {os.path.join(workers, script)}
        """, "--nodes=2", "--ntasks-per-node=2")
    out = job_output(tmp_path)
    assert result.returncode == 0, out[-3000:]
    assert ": 2 node(s) (node1, node2), 4 slot(s)" in out
    if mode == "horovod":  # four ranks on two hosts, one set of weights
        digests = {line.split("weights=")[1].split()[0] for line in out.splitlines() if "weights=" in line}
        assert len(digests) == 1 and out.count("loss_fell=True") == 4, out[-3000:]
    else:  # a chief, a worker task per slot and a ps task; the job ends with the chief
        assert "[rank=0] keras=tf_keras strategy=ParameterServerStrategyV2 iterations=40 expected=40" in out, \
            out[-3000:]
    assert not processes_with_marker(marker)


PREEMPTIBLE = ("PartitionName=low Nodes=ALL Default=YES PriorityTier=1 PreemptMode=REQUEUE GraceTime=60 "
               "MaxTime=INFINITE State=UP\nPartitionName=high Nodes=ALL PriorityTier=2 PreemptMode=OFF "
               "MaxTime=INFINITE State=UP")


@pytest.fixture(scope="module")
def preempting_slurm(tmp_path_factory):
    with SlurmCluster(tmp_path_factory.mktemp("preempt-slurm"), nodes=2, cpus=2,
                      extra_conf="PreemptType=preempt/partition_prio\nPreemptMode=REQUEUE",
                      partitions=PREEMPTIBLE) as cluster:
        yield cluster


@pytest.mark.parametrize("signal_from", ["preemption", "scancel"])
def test_preemption_stops_every_worker_at_one_step_and_the_requeued_job_resumes(preempting_slurm, tmp_path, marker,
                                                                                signal_from):
    """A higher-priority job preempts the training job (or `scancel --signal=TERM` signals its steps): Slurm's
    SIGTERM reaches every worker, all stop after the same step with a checkpoint, the job is requeued, and its
    second run resumes the same tfdist job from that step: every step trained exactly once."""
    from tests.integration.test_restarts import steps_by_attempt, write_config

    config = write_config(tmp_path, {"SLOW": 0.5, "SLOW_RUNS": 1})  # the requeued run trains at full speed
    job = sbatch(preempting_slurm, tmp_path, marker, f"{sys.executable} -m cluster.client.cli launch --config {config}\n",
                 "--nodes=2", "--ntasks-per-node=1", "--requeue", "--open-mode=append", wait=False).stdout.strip()
    try:
        wait_for(lambda: (tmp_path / "steps.txt").exists() and len((tmp_path / "steps.txt").read_text().split("\n"))
                 > 4, "the first run's step 4")
        if signal_from == "preemption":
            preempting_slurm.run(["sbatch", "-p", "high", "--nodes=2", "--exclusive",
                                  f"--output={tmp_path}/high-%j.out", "--wrap", "sleep 2"])
        else:  # the job's steps (not the batch script) get SIGTERM, as with --signal=TERM@60 at the time limit
            preempting_slurm.run(["scancel", "--signal=TERM", job])
        wait_for(lambda: "JobState=COMPLETED" in preempting_slurm.run(["scontrol", "show", "job", job]).stdout,
                 "the requeued job to finish", timeout=300)
    finally:
        preempting_slurm.run(["scancel", job], check=False)
    out = job_output(tmp_path)
    assert "Restarts=1" in preempting_slurm.run(["scontrol", "show", "job", job]).stdout
    stops = {int(r): int(s) for r, s in re.findall(r"\[rank=(\d+)\] tfdist: preempted: saved at step (\d+)", out)}
    assert set(stops) == {0, 1} and len(set(stops.values())) == 1, out[-4000:]
    assert out.count("[rank=0] tfdist: preempted: saved at step") == 1  # the second run prints only its own lines
    step = stops[0]
    assert "tfdist: resuming job " in out and "resumed from checkpoint" in out and f"at step {step} " in out
    runs = steps_by_attempt(tmp_path)
    assert min(runs[1]) == step + 1 and sorted(s for a in runs for s in runs[a]) == list(range(1, 31)), runs
    wait_for(lambda: not processes_with_marker(marker), "every process of the job to end")
