"""Fault tolerance end to end: gang restarts from the latest checkpoint (max_restarts) with every step
trained exactly once, and synchronized preemption (`tfdist preempt`, SIGTERM to a worker, SIGTERM to
`tfdist launch`) that pauses the job at one step on every rank, then `tfdist resume`.

The reference is the same training uninterrupted: a run that was killed, restarted, preempted or
resumed must end with the same weights, which it only does if no batch was trained twice or skipped."""

import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.conftest import REPO, cli_env, run_cli, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]
WORKER = os.path.join(REPO, "tests", "integration", "workers", "resumable_fit.py")
TOTAL_STEPS = 30


def write_config(tmp_path, env=None, mode="mwms", **extra) -> str:
    """The job's config; `env`: variables for its workers (a detached job's workers get the agent's
    environment, not the client's)."""
    variables = {"OUT": str(tmp_path), **(env or {})}
    lines = [f"checkpoint_storage: {{host_path: {tmp_path / 'ckpt'}}}", f"distribution: {{mode: {mode}}}",
             "resources: {slots_per_trial: 2}", f"entrypoint: [{sys.executable}, {WORKER}]",
             "environment: {variables: {" + ", ".join(f"{k}: '{v}'" for k, v in variables.items()) + "}}"]
    lines += [f"{k}: {v}" for k, v in extra.items()]
    (tmp_path / "c.yaml").write_text("\n".join(lines) + "\n")
    return str(tmp_path / "c.yaml")


def steps_by_attempt(out) -> dict[int, list[int]]:
    runs: dict[int, list[int]] = {}
    for line in (out / "steps.txt").read_text().split("\n"):
        if line:
            attempt, step = map(int, line.split())
            runs.setdefault(attempt, []).append(step)
    return runs


def weights(out) -> list[np.ndarray]:
    with np.load(out / "weights.npz") as f:
        return [f[k] for k in sorted(f.files, key=lambda k: int(k.split("_")[1]))]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The same training, never interrupted."""
    from tests.conftest import processes_with_marker
    import uuid

    marker = uuid.uuid4().hex
    tmp = tmp_path_factory.mktemp("reference")
    result = run_cli(["launch", "--config", write_config(tmp)], marker, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    assert steps_by_attempt(tmp) == {0: list(range(1, TOTAL_STEPS + 1))}
    assert not processes_with_marker(marker)
    return weights(tmp)


@pytest.mark.parametrize("mode", ["mwms", "horovod"])
def test_a_killed_worker_restarts_the_gang_from_the_last_checkpoint_exactly_once(tmp_path, marker, reference, mode):
    result = run_cli(["launch", "--config", write_config(tmp_path, {"KILL_AT": 13}, mode, max_restarts=1)], marker,
                     timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "rank 1 on node local was killed by signal SIGKILL" in result.stderr
    assert "restarting the job (restart 1 of 1)" in result.stderr
    assert re.search(r"\[rank=0\] tfdist: resumed from checkpoint \S+/ckpt-10 at step 10 \(run 2 of the job\)",
                     result.stderr), result.stderr[-3000:]
    (job_dir,) = (tmp_path / "ckpt").iterdir()
    assert list((job_dir / "tensorboard").glob("events.out.tfevents.*"))  # TensorBoard next to the checkpoints
    runs = steps_by_attempt(tmp_path)
    assert runs[0][:10] == list(range(1, 11)) and 10 < max(runs[0]) <= 14  # killed after step 13 (rank 1)
    assert runs[1] == list(range(11, TOTAL_STEPS + 1))  # resumed after the checkpoint of step 10, none skipped
    for mine, theirs in zip(weights(tmp_path), reference):
        np.testing.assert_allclose(mine, theirs, rtol=0, atol=1e-5)


def test_restarts_are_bounded_by_max_restarts(tmp_path, marker):
    """The worker dies in every run (KILL_AT applies to run 0 only, so use a script that always fails)."""
    script = tmp_path / "fails.py"
    script.write_text("import os, sys\nprint('run', os.environ['TFDIST_ATTEMPT'], flush=True)\nsys.exit(3)\n")
    result = run_cli(["launch", "--slots", "2", "--config", write_config(tmp_path, max_restarts=2), "--",
                      sys.executable, str(script)], marker, timeout=120)
    assert result.returncode == 3, result.stderr[-3000:]
    # Every run has a rank that printed before exiting; the other may be stopped before it prints (the
    # first exit tears its sibling down): so count runs over both ranks.
    runs = re.findall(r"^\[rank=\d\] run (\d+)$", result.stdout, re.M)
    assert set(runs) == {"0", "1", "2"} and len(runs) <= 6, result.stdout  # three runs, no fourth
    assert "restarting the job (restart 2 of 2)" in result.stderr
    assert "exited with code 3; the other workers were stopped (after 2 restarts, max_restarts=2)" in result.stderr


def trained(out, attempt) -> int:
    try:
        return max(steps_by_attempt(out).get(attempt, [0]))
    except FileNotFoundError:
        return 0


def stopped_steps(text: str) -> dict[int, int]:
    return {int(r): int(s) for r, s in re.findall(r"\[rank=(\d+)(?: stderr)?\] tfdist: preempted: saved at step (\d+)",
                                                  text)}  # `tfdist logs` marks a worker's stderr


def test_preempt_and_sigterm_to_a_worker_pause_every_rank_at_one_step_and_resume(tmp_path, local_cluster, reference):
    cluster = local_cluster()
    cluster.start_agent("n1", "--slots", "2")
    cluster.wait_agents("n1")
    # 0.6 s a step in the two runs it interrupts: under load a pause asked at step 4 landed at step 21 of 30 with
    # 0.3 s steps, and the second run's 9 steps then ended before the SIGTERM's pause could land.
    job = cluster.cli("launch", "--detach", "--config", write_config(tmp_path, {"SLOW": 0.6, "SLOW_RUNS": 2}))
    assert job.returncode == 0, job.stderr
    job_id = job.stdout.strip()
    running = lambda: cluster.job(job_id)["state"] in ("QUEUED", "STARTING", "RUNNING")  # noqa: E731

    # 1. `tfdist preempt` while it trains.
    wait_for(lambda: trained(tmp_path, 0) >= 4, "the first run's step 4", alive=running)
    asked = cluster.cli("preempt", job_id)
    assert asked.returncode == 0 and asked.stdout.startswith(f"job {job_id}: RUNNING (preemption requested"), \
        asked.stdout + asked.stderr
    cluster.wait_for(lambda: cluster.job(job_id)["state"] == "PAUSED", "the job to pause")
    logs = cluster.cli("logs", job_id).stdout
    first = stopped_steps(logs)
    assert set(first) == {0, 1} and len(set(first.values())) == 1, logs[-3000:]  # both ranks, one step
    step = first[0]
    assert 4 < step < TOTAL_STEPS and max(steps_by_attempt(tmp_path)[0]) == step
    shown = cluster.job(job_id)
    assert shown["latest_checkpoint"]["step"] == step and shown["outcome"] == f"paused at step {step}"
    paused = cluster.cli("job", job_id).stdout
    assert f"checkpoint: step {step} at " in paused

    # 2. Resume; then a cluster manager's SIGTERM to one worker preempts the whole job.
    assert cluster.cli("resume", job_id).stdout in (f"job {job_id}: QUEUED\n", f"job {job_id}: STARTING\n")
    # Step +2 on the chief: rank 1 then finished the step before (its all-reduce of step +2 waits for it), where its
    # Checkpoint took SIGTERM over.
    wait_for(lambda: trained(tmp_path, 1) >= step + 2, "the second run's second step", alive=running)
    assert min(steps_by_attempt(tmp_path)[1]) == step + 1  # resumed right after the preempted step
    os.kill(int((tmp_path / "pid-rank1").read_text()), signal.SIGTERM)
    cluster.wait_for(lambda: cluster.job(job_id)["state"] == "PAUSED", "the job to pause again")
    logs = cluster.cli("logs", job_id).stdout
    assert "[rank=1 stderr] tfdist: rank 1 got SIGTERM: every rank stops at a common step" in logs
    second = {r: s for r, s in re.findall(r"\[rank=(\d+) stderr\] tfdist: preempted: saved at step (\d+)", logs)
              if int(s) != step}
    assert set(second) == {"0", "1"} and len(set(second.values())) == 1, logs[-3000:]

    # 3. Resume to the end: the same weights as the run that was never interrupted.
    cluster.cli("resume", job_id)
    cluster.wait_for(lambda: cluster.job(job_id)["state"] == "SUCCEEDED", "the job to finish", timeout=180)
    runs = steps_by_attempt(tmp_path)
    assert sorted(s for attempt in runs for s in runs[attempt]) == list(range(1, TOTAL_STEPS + 1))  # exactly once
    for mine, theirs in zip(weights(tmp_path), reference):
        np.testing.assert_allclose(mine, theirs, rtol=0, atol=1e-5)
    refused = cluster.cli("preempt", job_id)
    assert refused.returncode != 0 and "already ended (SUCCEEDED); nothing to preempt" in refused.stderr


@pytest.mark.parametrize("mode", ["mwms", "horovod"])
def test_sigterm_to_launch_preempts_and_the_launcher_exits_75(tmp_path, marker, mode):
    proc = subprocess.Popen([sys.executable, "-m", "cluster.client.cli", "launch", "--config",
                             write_config(tmp_path, {"SLOW": 0.3}, mode)], cwd=REPO, env=cli_env(marker),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: trained(tmp_path, 0) >= 3, "step 3", alive=lambda: proc.poll() is None)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 75, err[-3000:]
    assert "tfdist: SIGTERM: preempting job" in err
    stops = stopped_steps(err)
    assert set(stops) == {0, 1} and len(set(stops.values())) == 1, err[-3000:]
    assert re.search(rf"paused: paused at step {stops[0]}; `tfdist resume \S+` continues from the checkpoint at "
                     rf"step {stops[0]}", err), err[-2000:]


def test_a_custom_loop_stops_every_rank_at_one_step_on_sigterm_to_a_worker(tmp_path, marker):
    """ctx.should_preempt() in a strategy.run loop: a cluster manager's SIGTERM to rank 1 stops both ranks
    after the same step, the chief's checkpoint of that step is recorded, and the job pauses."""
    loop = os.path.join(REPO, "tests", "integration", "workers", "preempt_loop.py")
    proc = subprocess.Popen([sys.executable, "-m", "cluster.client.cli", "launch", "--config", write_config(tmp_path),
                             "--", sys.executable, loop], cwd=REPO, env=cli_env(marker), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        pid_file = tmp_path / "pid-rank1"
        deadline = time.monotonic() + 120
        out_lines = []
        while time.monotonic() < deadline:  # read until rank 1 reports step 3 (it checks from step 1 on)
            line = proc.stdout.readline()
            assert line, proc.stderr.read()[-3000:]
            out_lines.append(line)
            if line.startswith("[rank=1] step 3"):
                break
        os.kill(int(pid_file.read_text()), signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    out = "".join(out_lines) + out
    assert proc.returncode == 75, err[-3000:]
    stops = dict(re.findall(r"\[rank=(\d)\] stopping at step (\d+)", out))
    assert set(stops) == {"0", "1"} and stops["0"] == stops["1"], out[-3000:]
    assert re.search(rf"\[rank=0\] stopping at step {stops['0']}, saved \S+/ckpt-{stops['0']}", out)
    assert f"continues from the checkpoint at step {stops['0']}" in err


def test_the_custom_loop_example_checkpoints_every_epoch(tmp_path, marker):
    (tmp_path / "c.yaml").write_text(f"checkpoint_storage: {tmp_path / 'ckpt'}\nresources: {{slots_per_trial: 2}}\n"
                                     "hyperparameters: {epochs: 3, global_batch_size: 64, learning_rate: 0.003}\n")
    result = run_cli(["launch", "--config", str(tmp_path / "c.yaml"), "--", sys.executable,
                      os.path.join(REPO, "examples", "custom_loop", "train.py")], marker, timeout=200)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "[rank=0] epoch 3: loss " in result.stdout
    (job_dir,) = (tmp_path / "ckpt").iterdir()
    assert sorted(p.name for p in job_dir.glob("*.index")) == ["ckpt-28.index", "ckpt-56.index", "ckpt-84.index"]
