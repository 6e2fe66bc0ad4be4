"""The worker context, built from the launcher's environment: values only (the runtime is test_runtime.py)."""

import json
import logging

import pytest

from cluster.shared.config import parse_config
from cluster.shared.modes import NodePlacement, Placement, mwms
from tfdist import context_from_env
from tfdist.context import CheckpointInfo, NodeInfo, single_process
from tfdist.errors import LaunchEnvironmentError


def job_environments(job_id, cfg, nodes, devices=None):
    plan = mwms.plan(Placement(job_id, tuple(nodes)), cfg, devices or [()] * len(nodes))
    return [dict(p.env) for p in plan.processes]


def test_plain_python_is_rank_zero_of_one():
    ctx = context_from_env({}, {"global_batch_size": 32, "lr": 0.1})
    assert (ctx.rank, ctx.size, ctx.local_rank, ctx.node_rank, ctx.num_nodes, ctx.num_slots) == (0, 1, 0, 0, 1, 1)
    assert ctx.is_chief and ctx.is_local_chief and not ctx.is_distributed
    assert ctx.per_replica_batch_size == 32 and ctx.hparams == {"global_batch_size": 32, "lr": 0.1}


def test_context_reads_what_the_launcher_writes():
    cfg = parse_config("hyperparameters: {global_batch_size: 64, lr: 0.5}")
    envs = job_environments("j1", cfg, [NodePlacement("h", "h", 2, (1, 2)), NodePlacement("g", "g", 2, (3, 4))])
    ctx = context_from_env(envs[3], {"lr": 0.1, "epochs": 2})
    assert (ctx.job_id, ctx.rank, ctx.size, ctx.local_rank, ctx.local_size, ctx.node_rank, ctx.num_nodes) == \
        ("j1", 3, 4, 1, 2, 1, 2)
    assert ctx.hparams == {"global_batch_size": 64, "lr": 0.5, "epochs": 2}  # config wins over defaults
    assert (ctx.global_batch_size, ctx.per_replica_batch_size, ctx.per_worker_batch_size) == (64, 16, 16)
    assert not ctx.is_chief and not ctx.is_local_chief


def test_the_remainder_warning_is_a_value_not_a_log(caplog):
    """Building a context has no side effects: `tfdist.init()` logs the warning, on the chief."""
    cfg = parse_config("hyperparameters: {global_batch_size: 10}")
    envs = job_environments("j", cfg, [NodePlacement("h", "h", 3, (1, 2, 3))])
    with caplog.at_level(logging.DEBUG, logger="tfdist"):
        ctx = context_from_env(envs[0])
    assert ctx.per_replica_batch_size == 3 and ctx.effective_global_batch_size == 9
    assert "remainder of 1 sample(s) per step is dropped (effective global batch size 9)" in ctx.batch_remainder_warning
    assert caplog.text == ""
    assert single_process({"global_batch_size": 8}).batch_remainder_warning is None
    assert single_process().batch_remainder_warning is None  # no global batch size


def test_the_null_context_is_one_process_whose_collectives_return_at_once():
    ctx = single_process({"lr": 0.1})
    assert ctx == context_from_env({}, {"lr": 0.1})
    assert (ctx.rank, ctx.size, ctx.num_slots, ctx.job_id, ctx.attempt, ctx.resume_step) == (0, 1, 1, "local", 0, 0)
    assert ctx.allgather({"a": 1}) == [{"a": 1}] and ctx.gather(2) == [2] and ctx.broadcast(b"x") == b"x"
    ctx.barrier()
    assert ctx.cluster_info.nodes == (NodeInfo(0, "local", "127.0.0.1", (), (0,)),)
    assert ctx.strategy is None


def test_the_cluster_layout_and_the_checkpoint_to_resume_from_are_read():
    env = {"TFDIST_RANK": "1", "TFDIST_SIZE": "2", "TFDIST_JOB_ID": "j", "TFDIST_CLUSTER": json.dumps({
        "job_id": "j", "attempt": 2, "checkpoint_dir": "/ckpt/j",
        "latest_checkpoint": {"path": "/ckpt/j/ckpt-30", "step": 30},
        "nodes": [{"node_rank": 0, "agent": "a", "address": "10.0.0.1", "gpus": [], "ranks": [0, 1]}]})}
    ctx = context_from_env(env)
    assert ctx.cluster_info.latest_checkpoint == CheckpointInfo("/ckpt/j/ckpt-30", 30)
    assert (ctx.attempt, ctx.resume_step, ctx.cluster_info.checkpoint_dir) == (2, 30, "/ckpt/j")
    assert ctx.cluster_info.node_of(1).address == "10.0.0.1"
    with pytest.raises(LaunchEnvironmentError, match="latest_checkpoint is not what tfdist writes"):
        context_from_env({**env, "TFDIST_CLUSTER": json.dumps({"nodes": [], "latest_checkpoint": {"path": "p"}})})


def test_malformed_environment_is_named():
    with pytest.raises(LaunchEnvironmentError, match="TFDIST_SIZE='two' is not an integer"):
        context_from_env({"TFDIST_RANK": "0", "TFDIST_SIZE": "two"})
    with pytest.raises(LaunchEnvironmentError, match="TFDIST_RANK=5 is outside 0..1"):
        context_from_env({"TFDIST_RANK": "5", "TFDIST_SIZE": "2"})


def test_gpus_reach_the_context():
    cfg = parse_config("")
    envs = job_environments("j", cfg, [NodePlacement("h", "h", 2, (1,), gpu_node=True)], [(3, 5)])
    ctx = context_from_env(envs[0])
    assert ctx.gpus == (3, 5) and ctx.local_slots == 2
    assert context_from_env({}).gpus == ()
