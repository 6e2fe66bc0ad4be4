"""A `tfdist diagnose` variant runs on its baseline's nodes (config.diagnose.nodes, issue 47 Must 1), on a real
coordinator with three real agents on loopback (no TensorFlow: the workers sleep): a pinned job lands on its
node though another idle node fits it better, waits while its node is busy with the reason naming the node
and the job holding it, starts there once it is free, and a bigger pinned job takes exactly its nodes, in
their order. The scheduler's rules, pure: tests/unit/test_scheduler_pinned.py."""

import secrets
import sys

import pytest

from cluster.shared import jobspec
from cluster.shared.config import check_config
from cluster.shared.experiment import ExperimentConfig

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
WHY = "(a diagnose variant runs where its baseline ran)"
SLEEPER = "import time; print('up', flush=True); time.sleep(120)"


def submit(cluster, slots, nodes=()):
    """A job of sleeping workers; `nodes`: a diagnose variant's, pinned to them."""
    diagnose = {"variant": "baseline", "steps": 5, "warmup": 1, "run": "pin", **({"nodes": list(nodes)} if nodes else {})}
    config = check_config(ExperimentConfig(name="sleeper", entrypoint=(sys.executable, "-c", SLEEPER),
                                           slots_per_trial=slots, hyperparameters={"global_batch_size": 8},
                                           diagnose=diagnose))
    spec = jobspec.job_spec(config, working_dir="/", submission_id=secrets.token_hex(16))
    return cluster.client().submit(jobspec.to_pb(spec), retry_for=0)


def up(cluster, job_id):
    """Its workers run: a cancel now reaches them (one that reaches a node before its workers are spawned
    leaves them running to their end: the agent's Gang.stop before Gang.start)."""
    return any(line.text == "up" for line in cluster.client().logs(job_id, 0, -1, 100).lines)


def placed(cluster, job_id):
    job = cluster.job(job_id)
    return [p["node"] for p in sorted(job["placement"], key=lambda p: p["node_rank"])] \
        if job["state"] in ("STARTING", "RUNNING") else None


def test_a_pinned_job_runs_on_its_nodes_and_waits_for_them(local_cluster):
    cluster = local_cluster()
    for name, slots in (("a1", 2), ("a2", 4), ("a3", 2)):
        cluster.start_agent(name, "--slots", str(slots))
    cluster.wait_agents("a1", "a2", "a3")

    blocker = submit(cluster, 4)  # unpinned: the only node that holds 4 slots is a2
    cluster.wait_for(lambda: placed(cluster, blocker) == ["a2"] and up(cluster, blocker), "the blocker to run on a2")
    pinned = submit(cluster, 1, ["a2"])  # a1 and a3 are idle (and a tighter fit), but not its node
    cluster.wait_for(lambda: (cluster.job(pinned)["waiting_reason"] or "").startswith("waiting for"),
                     "the pinned job's waiting reason")
    job = cluster.job(pinned)
    assert job["state"] == "QUEUED" and job["waiting_reason"] == \
        f"waiting for 1 slot free on its node a2 {WHY}; busy: a2 (job {blocker} (sleeper))", job
    assert job["config"]["diagnose"]["nodes"] == ["a2"]

    cluster.client().cancel(blocker)
    cluster.wait_for(lambda: placed(cluster, pinned) == ["a2"], "the pinned job to start on a2 once it is free")

    # 4 slots: an unpinned job would take the one node that holds them (a2, busy now); pinned to a3 and a1, it
    # takes both whole, a3 as node_rank 0.
    wide = submit(cluster, 4, ["a3", "a1"])
    cluster.wait_for(lambda: placed(cluster, wide) == ["a3", "a1"], "the pinned 4-slot job to take a3 and a1")

    gone = submit(cluster, 1, ["a9"])  # a node not registered (an agent restarting): the job waits, naming it
    cluster.wait_for(lambda: "a9 is not registered" in (cluster.job(gone)["waiting_reason"] or ""),
                     "the reason naming the unregistered node")
    assert cluster.job(gone)["state"] == "QUEUED"
    for job_id in (pinned, wide, gone):
        cluster.client().cancel(job_id)
