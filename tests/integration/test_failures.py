"""Failure is the normal case: ranks that never join, agents that come back empty, repeated signals,
daemons stopped while their peer hangs, and output that must never stall a node. Real daemons on
loopback, no TensorFlow."""

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO, cli_env, run_cli, wait_for

pytestmark = [pytest.mark.timeout(180)]
WORKERS = os.path.join(REPO, "tests", "integration", "workers")
HANG = os.path.join(WORKERS, "hang_before_init.py")
STUBBORN = os.path.join(WORKERS, "stubborn.py")
SLEEPER = os.path.join(REPO, "tests", "multihost", "sleeper.py")


def test_a_rank_that_never_joins_fails_a_job_of_one_process_nodes(local_cluster):
    """Rank 0 listens on rank 1's port meanwhile (`--squat`), as a concurrent job's worker did in CI: a
    listener that is not rank 1's own process is not rank 1 joining (the job waited forever)."""
    cluster = local_cluster()
    for name in ("n1", "n2"):
        cluster.start_agent(name, "--slots", "1")
    cluster.wait_agents("n1", "n2")
    result = cluster.cli("launch", "--slots", "2", "--startup-timeout", "12", "--", HANG, "1", "--squat")
    assert result.returncode == 1, result.stderr
    assert "failed: rank(s) 1 did not join within the startup timeout of 12s" in result.stderr
    # While it waited, the launcher said who had not joined (issue 18: nothing until the timeout).
    assert re.search(r"tfdist: job \S+ running: 1 of 2 ranks joined; waiting for rank 1 \(node n2\)( for 10 s)? "
                     r"\(startup timeout 12 s\)\n", result.stderr), result.stderr
    assert "tfdist: last lines of rank 1 (node n2):\n  rank 1 up" in result.stderr
    assert "[rank=0] rank 0 listens on rank 1's port" in result.stdout
    assert "[rank=0] rank 0 up" in result.stdout and "[rank=1] rank 1 up" in result.stdout


def test_an_agent_restarted_under_its_name_fails_its_job_at_once_and_kills_leftovers(local_cluster):
    cluster = local_cluster(["--lost-after", "120"])  # not the loss detector: re-registration decides
    for name in ("n1", "n2"):
        cluster.start_agent(name, "--slots", "1")
    cluster.wait_agents("n1", "n2")
    job_id = cluster.cli("launch", "--detach", "--slots", "2", "--", STUBBORN).stdout.strip()
    cluster.wait_for(lambda: "rank 1 child" in cluster.cli("logs", job_id).stdout, "rank 1 to start its child")
    cluster.wait_for(lambda: cluster.job(job_id)["state"] == "RUNNING", "the job to run")
    child = int(next(l for l in cluster.cli("logs", job_id).stdout.splitlines() if "rank 1 child" in l).split()[-1])
    cluster.agents["n2"].kill()  # kill -9: its worker dies with it (PDEATHSIG); the worker's child does not
    cluster.agents["n2"].wait(timeout=30)
    assert os.path.exists(f"/proc/{child}")
    cluster.start_agent("n2", "--slots", "1")
    cluster.wait_for(lambda: cluster.job(job_id)["state"] == "FAILED", "the job to fail")
    job = cluster.job(job_id)
    assert job["outcome"] == ("node n2 restarted (its agent registered again without the job's workers): rank(s) 1 "
                              "are gone; the other workers were stopped")
    cluster.wait_for(lambda: not os.path.exists(f"/proc/{child}") or
                     open(f"/proc/{child}/stat").read().split()[2] == "Z", "the leftover child to be killed")
    cluster.wait_for(lambda: all(a.get("free_slots", 0) == 1 for a in cluster.listed_agents()), "both slots to be free")
    assert "killed 1 leftover worker process(es)" in (cluster.tmp / "agent-n2.log").read_text()


def test_a_killed_launch_leaves_nothing_the_next_launch_does_not_kill(marker, tmp_path):
    """The local engine records its workers' process groups as the embedded agent did: `kill -9` of a launch
    takes its workers (PDEATHSIG), not their children; the next launch on this machine kills those."""
    env = dict(XDG_STATE_HOME=str(tmp_path / "state"))
    proc = subprocess.Popen([sys.executable, "-m", "cluster.client.cli", "launch", "--slots", "1", "--", STUBBORN],
                            env=cli_env(marker, **env), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    line = proc.stdout.readline()
    assert "child" in line, proc.stderr.read() if proc.poll() is not None else line
    child = int(line.split()[-1])
    proc.kill()
    proc.communicate(timeout=30)
    assert os.path.exists(f"/proc/{child}") and open(f"/proc/{child}/stat").read().split()[2] != "Z"
    again = run_cli(["launch", "--slots", "1", "--", sys.executable, "-c", "pass"], marker, timeout=120, **env)
    assert again.returncode == 0, again.stderr
    wait_for(lambda: not os.path.exists(f"/proc/{child}") or open(f"/proc/{child}/stat").read().split()[2] == "Z",
             "the killed launch's leftover child to be killed by the next launch", timeout=30)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_second_ctrl_c_or_sigterm_leaves_at_once_and_says_how_to_follow(local_cluster, marker, sig):
    cluster = local_cluster()
    cluster.start_agent("n1", "--slots", "1")
    cluster.wait_agents("n1")
    proc = subprocess.Popen([sys.executable, "-m", "cluster.client.cli", "launch", "--slots", "1", "--", STUBBORN],
                            env=cli_env(marker, **cluster.env), cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert "child" in proc.stdout.readline()
    proc.send_signal(sig)  # cancel: the worker ignores SIGTERM, so the job takes its grace to end
    seen = []
    while not any("canceling job" in line for line in seen):  # the first one was handled
        seen.append(proc.stderr.readline())
        assert seen[-1], seen
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=30)
    err = "".join(seen) + err
    name = sig.name
    assert proc.returncode == 128 + sig, err
    job_id = cluster.json("jobs")["jobs"][0]["id"]
    assert f"tfdist: {name}: canceling job {job_id} (again to stop waiting)" in err
    assert (f"tfdist: {name} again: cancel requested; not waiting for job {job_id} to end. Follow it with "
            f"`tfdist job {job_id}` or `tfdist logs -f {job_id}`") in err
    assert cluster.job(job_id)["state"] == "CANCELED"
    cluster.wait_for(lambda: cluster.listed_agents()[0].get("free_slots", 0) == 1, "the worker to be killed after its grace")


def test_daemons_stop_on_sigterm_while_the_other_side_hangs(local_cluster):
    cluster = local_cluster()
    agent = cluster.start_agent("n1", "--slots", "1")
    cluster.wait_agents("n1")
    job_id = cluster.cli("launch", "--detach", "--slots", "1", "--", SLEEPER, "600").stdout.strip()
    cluster.wait_for(lambda: cluster.job(job_id)["state"] == "RUNNING", "the job to run")
    cluster.coordinator.send_signal(signal.SIGSTOP)  # the coordinator hangs: every call to it blocks
    try:
        time.sleep(1)
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=15)  # within its 10 s stop deadline, whatever the coordinator does
    finally:
        cluster.coordinator.send_signal(signal.SIGCONT)
    follower = subprocess.Popen([sys.executable, "-m", "cluster.client.cli", "logs", "-f", job_id],
                                env=cli_env(cluster.marker, **cluster.env), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
    time.sleep(1)  # the follower long-polls the coordinator
    cluster.coordinator.send_signal(signal.SIGTERM)
    cluster.coordinator.wait(timeout=15)
    assert cluster.coordinator.returncode == 0
    follower.kill()
    follower.wait(timeout=10)
    assert "stopped" in (cluster.tmp / "agent-n1.log").read_text()


def test_bad_output_never_stalls_a_node_and_the_last_rows_arrive(local_cluster, tmp_path):
    cluster = local_cluster()
    cluster.start_agent("n1", "--slots", "1")
    cluster.wait_agents("n1")
    script = tmp_path / "noisy.py"
    script.write_text(
        "import json, os, time\n"
        "path = os.environ['TFDIST_METRICS_FILE']\n"
        "with open(path, 'a') as f:  # written as an older or foreign writer would: no checks\n"
        "    f.write(json.dumps({'rank': 0, 'step': 1, 'values': {'x' * 300: 1.0, 'loss': 0.5}, 'time': 1.0}) + '\\n')\n"
        "print('y' * 20000, flush=True)\n"
        "print('done', flush=True)\n"
        "with open(path, 'a') as f:  # the very last thing it does, without a newline\n"
        "    f.write(json.dumps({'rank': 0, 'step': 2, 'values': {'accuracy': 0.9}, 'time': time.time()}))\n")
    result = cluster.cli("launch", "--slots", "1", "--", str(script), timeout=60)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    long_line = next(l for l in lines if l.startswith("[rank=0] [tfdist:"))  # a long line keeps its end
    assert long_line == "[rank=0] [tfdist: 11856 characters cut] ..." + "y" * 8144 and "[rank=0] done" in lines
    assert "tfdist: dropped metric 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'... of step 1: a metric name has 1-200 " \
           "characters (300 given)" in result.stderr
    job = cluster.json("jobs")["jobs"][0]
    latest = {m["name"]: m["value"] for m in cluster.job(job["id"])["latest_metrics"]}
    assert latest == {"loss": 0.5, "accuracy": 0.9}


def test_a_refused_item_is_dropped_alone_and_said_so(tmp_path):
    """The agent's outbox against a real coordinator: a batch holding one item the coordinator
    refuses is narrowed down to it; the rest is stored; the job's log says what was dropped."""
    from cluster.agent.outbox import Outbox
    from cluster.shared.rpc import Client
    from tests.agent_core import AgentsServer
    from cluster.shared import jobspec
    from cluster.shared.config import ExperimentConfig
    from cluster.shared.model import Address, AgentRecord, MetricRow

    server = AgentsServer(str(tmp_path), "127.0.0.1:0").start()
    try:
        server.core.nodes.register(AgentRecord("n1", 1, (Address("127.0.0.1", 8),)), (), (), time.time())
        job_id, _ = server.core.submit(jobspec.job_spec(ExperimentConfig(entrypoint=("x",))), time.time())
        client = Client(server.address, server.issue("node", "n1"))
        outbox = Outbox(client, "n1", "n1/test")
        for step in range(40):
            name = "z" * 300 if step == 17 else "loss"  # bypasses the agent's own check
            outbox.metric(job_id, MetricRow(rank=0, step=step, name=name, value=step, time=1.0))
        outbox.ship_once()
        rows = server.store.metrics(job_id)
        assert [r.step for r in rows] == [s for s in range(40) if s != 17] and outbox.dropped == 1
        logs = [l.text for l in server.store.logs(job_id)]
        assert len(logs) == 1 and logs[0].startswith(
            "tfdist: agent n1 dropped a metric row of rank 0 that the coordinator refused: metrics[0].name: is 300 "
            "characters long; the limit is 200"), logs
        client.close()
    finally:
        server.stop(grace=0)


def test_concurrent_local_launches_leave_each_other_alone(marker, tmp_path):
    """Every `tfdist launch` embeds an agent named "local": one starting must not take another's
    running workers for a dead agent's leftovers (a fresh-clone `make test` beside other suites lost a
    worker to SIGKILL this way)."""
    script = tmp_path / "tick.py"
    script.write_text("import sys, time\nfor i in range(int(sys.argv[1])):\n    print('tick', i, flush=True)\n"
                      "    time.sleep(0.5)\n")
    first = subprocess.Popen([sys.executable, "-m", "cluster.client.cli", "launch", "--slots", "1", "--", str(script), "12"],
                             env=cli_env(marker), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert "tick 0" in first.stdout.readline()  # its workers are running and recorded
    second = run_cli(["launch", "--slots", "1", "--", str(script), "1"], marker, timeout=120)
    assert second.returncode == 0, second.stderr
    out, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    assert "tick 11" in out
