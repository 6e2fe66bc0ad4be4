"""Per-worker environment and TF_CONFIG: exact JSON, built by pure functions."""

import json

import pytest

from cluster.config import parse_config
from cluster.worker_env import NodePlacement, job_environments, plan_workers, tf_config


def test_tf_config_exact_json_for_three_cpu_slots():
    workers = plan_workers([NodePlacement("127.0.0.1", 3, (29001, 29002, 29003))])
    assert json.dumps(tf_config(workers, 1), sort_keys=True) == (
        '{"cluster": {"worker": ["127.0.0.1:29001", "127.0.0.1:29002", "127.0.0.1:29003"]}, '
        '"task": {"index": 1, "type": "worker"}}')


def test_two_gpu_nodes_get_one_process_each_driving_all_slots():
    nodes = [NodePlacement("10.0.0.1", 4, (5000,), process_per_slot=False),
             NodePlacement("10.0.0.2", 4, (5001,), process_per_slot=False)]
    workers = plan_workers(nodes)
    assert [(w.rank, w.local_rank, w.node_rank, w.address, w.local_slots) for w in workers] == [
        (0, 0, 0, "10.0.0.1:5000", 4), (1, 0, 1, "10.0.0.2:5001", 4)]
    cfg = parse_config("hyperparameters: {global_batch_size: 64}")
    envs = job_environments("j", cfg, nodes)
    assert envs[1]["TFDIST_SLOTS"] == "8" and envs[1]["TFDIST_LOCAL_SLOTS"] == "4"
    assert envs[1]["TFDIST_PER_REPLICA_BATCH_SIZE"] == "8" and envs[1]["TFDIST_PER_WORKER_BATCH_SIZE"] == "32"


def test_two_cpu_nodes_rank_node_by_node():
    nodes = [NodePlacement("a", 2, (1, 2)), NodePlacement("b", 2, (3, 4))]
    assert [(w.rank, w.local_rank, w.node_rank, w.host) for w in plan_workers(nodes)] == [
        (0, 0, 0, "a"), (1, 1, 0, "a"), (2, 0, 1, "b"), (3, 1, 1, "b")]


def test_full_environment_of_one_worker():
    cfg = parse_config("""
distribution: {mode: mwms}
hyperparameters: {global_batch_size: 10, lr: 0.5}
environment: {variables: {FOO: bar}}
""")
    env = job_environments("job-7", cfg, [NodePlacement("127.0.0.1", 3, (1, 2, 3))], {2: "/tmp/r2"})[2]
    assert env == {
        "FOO": "bar",
        "TFDIST_JOB_ID": "job-7",
        "TFDIST_RANK": "2",
        "TFDIST_SIZE": "3",
        "TFDIST_LOCAL_RANK": "2",
        "TFDIST_LOCAL_SIZE": "3",
        "TFDIST_NODE_RANK": "0",
        "TFDIST_NUM_NODES": "1",
        "TFDIST_SLOTS": "3",
        "TFDIST_LOCAL_SLOTS": "1",
        "TFDIST_DISTRIBUTION": "mwms",
        "TFDIST_HPARAMS": '{"global_batch_size": 10, "lr": 0.5}',
        "TF_CONFIG": '{"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"]}, '
                     '"task": {"index": 2, "type": "worker"}}',
        "PYTHONUNBUFFERED": "1",
        "TFDIST_GLOBAL_BATCH_SIZE": "10",
        "TFDIST_PER_REPLICA_BATCH_SIZE": "3",
        "TFDIST_PER_WORKER_BATCH_SIZE": "3",
        "TFDIST_READY_FILE": "/tmp/r2",
    }


def test_no_batch_variables_without_global_batch_size():
    env = job_environments("j", parse_config(""), [NodePlacement("h", 1, (9,))])[0]
    assert not any(k.endswith("BATCH_SIZE") for k in env)


def test_port_count_must_match_processes():
    with pytest.raises(ValueError, match="node 0 \\(h\\) runs 2 processes but got 1 ports"):
        plan_workers([NodePlacement("h", 2, (1,))])
