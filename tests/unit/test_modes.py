"""Launch plans: processes per node, roles, each process's environment (exact JSON) and the success
rule, built by pure functions from a placement, a config and the node's devices."""

import json

import pytest

from cluster.shared.config import parse_config
from cluster.shared.modes import (NodePlacement, Placement, PlanError, SuccessRule, UnknownModeError, mwms,
                                  planner)
from tfdist.errors import UserError


def cpu(host, slots, ports, agent=None):
    return NodePlacement(agent or host, host, slots, tuple(ports))


def gpu(host, slots, port):
    return NodePlacement(host, host, slots, (port,), gpu_node=True)


def plan(nodes, cfg="", devices=None, job_id="j"):
    return mwms.MWMS.plan(Placement(job_id, tuple(nodes)), parse_config(cfg), devices or [()] * len(nodes))


def test_tf_config_exact_json_for_three_cpu_slots():
    p = plan([cpu("127.0.0.1", 3, (29001, 29002, 29003))])
    assert p.processes[1].env["TF_CONFIG"] == (
        '{"cluster": {"worker": ["127.0.0.1:29001", "127.0.0.1:29002", "127.0.0.1:29003"]}, '
        '"task": {"index": 1, "type": "worker"}}')
    assert p.success is SuccessRule.ALL_RANKS and p.size == 3
    assert all(proc.env["CUDA_VISIBLE_DEVICES"] == "" for proc in p.processes)  # CPU slots never take a GPU


def test_two_gpu_nodes_get_one_process_each_driving_exactly_their_gpus():
    p = plan([gpu("10.0.0.1", 4, 5000), gpu("10.0.0.2", 2, 5001)], "hyperparameters: {global_batch_size: 60}",
             devices=[(4, 5, 6, 7), (0, 1)])
    assert [(w.rank, w.local_rank, w.node_rank, w.port, w.gpus, w.replicas) for w in p.processes] == [
        (0, 0, 0, 5000, (4, 5, 6, 7), 4), (1, 0, 1, 5001, (0, 1), 2)]
    env = p.processes[0].env
    assert (env["CUDA_VISIBLE_DEVICES"], env["CUDA_DEVICE_ORDER"], env["TFDIST_GPUS"]) == ("4,5,6,7", "PCI_BUS_ID",
                                                                                           "4,5,6,7")
    assert json.loads(env["TF_CONFIG"])["cluster"]["worker"] == ["10.0.0.1:5000", "10.0.0.2:5001"]
    assert env["TFDIST_SLOTS"] == "6" and env["TFDIST_LOCAL_SLOTS"] == "4"
    assert env["TFDIST_PER_REPLICA_BATCH_SIZE"] == "10" and env["TFDIST_PER_WORKER_BATCH_SIZE"] == "40"
    assert mwms.processes_on(gpu("h", 8, 1)) == 1 and mwms.processes_on(cpu("h", 8, ())) == 8


def test_two_cpu_nodes_rank_node_by_node():
    p = plan([cpu("a", 2, (1, 2)), cpu("b", 2, (3, 4))])
    assert [(w.rank, w.local_rank, w.node_rank, w.port) for w in p.processes] == [
        (0, 0, 0, 1), (1, 1, 0, 2), (2, 0, 1, 3), (3, 1, 1, 4)]
    assert [w.rank for w in p.on_node(1)] == [2, 3]


def test_full_environment_of_one_worker():
    p = plan([cpu("127.0.0.1", 3, (1, 2, 3))], """
distribution: {mode: mwms}
hyperparameters: {global_batch_size: 10, lr: 0.5}
environment: {variables: {FOO: bar}}
""", job_id="job-7")
    env = dict(p.processes[2].env)
    view = json.loads(env.pop("TFDIST_EXPERIMENT_CONFIG"))  # Determined's view of the config (test_determined_config)
    assert view["hyperparameters"] == {"global_batch_size": 10, "lr": 0.5} and view["searcher"]["name"] == "single"
    assert env == {
        "FOO": "bar",
        "TFDIST_JOB_ID": "job-7",
        "TFDIST_RANK": "2",
        "TFDIST_SIZE": "3",
        "TFDIST_LOCAL_RANK": "2",
        "TFDIST_LOCAL_SIZE": "3",
        "TFDIST_NODE_RANK": "0",
        "TFDIST_NODE_ADDRESS": "127.0.0.1",
        "TFDIST_CLUSTER": '{"attempt":0,"checkpoint_dir":"","job_id":"job-7","latest_checkpoint":null,"nodes":['
                          '{"address":"127.0.0.1","agent":"127.0.0.1","gpus":[],"node_rank":0,"ranks":[0,1,2]}]}',
        "TFDIST_ATTEMPT": "0",  # no TFDIST_STORE: no spare port was leased
        "TFDIST_NUM_NODES": "1",
        "TFDIST_SLOTS": "3",
        "TFDIST_LOCAL_SLOTS": "1",
        "TFDIST_DISTRIBUTION": "mwms",
        "TFDIST_ROLE": "worker",
        "TFDIST_HPARAMS": '{"global_batch_size": 10, "lr": 0.5}',
        "TFDIST_USER_DATA": "{}",
        "TF_CONFIG": '{"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"]}, '
                     '"task": {"index": 2, "type": "worker"}}',
        "PYTHONUNBUFFERED": "1",
        "CUDA_VISIBLE_DEVICES": "",
        "TFDIST_GLOBAL_BATCH_SIZE": "10",
        "TFDIST_PER_REPLICA_BATCH_SIZE": "3",
        "TFDIST_PER_WORKER_BATCH_SIZE": "3",
    }


def test_a_restarted_run_is_told_its_attempt_and_checkpoint():
    placement = Placement("job-7", (cpu("h", 2, (1, 2, 3)),), attempt=2, checkpoint_dir="/shared/ckpt/job-7",
                          latest_checkpoint=("/shared/ckpt/job-7/ckpt-40", 40))
    env = mwms.MWMS.plan(placement, parse_config(""), [()]).processes[1].env
    assert env["TFDIST_ATTEMPT"] == "2" and env["TFDIST_CHECKPOINT_DIR"] == "/shared/ckpt/job-7"
    info = json.loads(env["TFDIST_CLUSTER"])
    assert info["latest_checkpoint"] == {"path": "/shared/ckpt/job-7/ckpt-40", "step": 40} and info["attempt"] == 2


def test_no_batch_variables_without_global_batch_size():
    env = plan([cpu("h", 1, (9,))]).processes[0].env
    assert not any(k.endswith("BATCH_SIZE") for k in env)


def test_inconsistent_placements_are_refused():
    with pytest.raises(PlanError, match=r"node 0 \(h\) runs 2 processes but got 1 ports"):
        plan([cpu("h", 2, (1,))])
    with pytest.raises(PlanError, match=r"node 0 \(h\) holds 4 GPU slots but got 2 GPUs"):
        plan([gpu("h", 4, 1)], devices=[(0, 1)])


def test_every_mode_is_planned_by_its_planner_and_an_unknown_mode_is_the_users_error():
    assert planner("mwms") is mwms.MWMS and planner("mwms").name == "mwms"
    with pytest.raises(UnknownModeError) as raised:
        planner("nope")
    assert isinstance(raised.value, UserError) and str(raised.value) == (
        "no launch plan for distribution mode 'nope'; known modes: central_storage, horovod, jax, mirrored, mwms, "
        "one_device, per_node, ps, torch")


def test_a_plan_can_run_one_process_per_gpu():
    from cluster.shared.modes.base import layout

    placement = Placement("j", (NodePlacement("n", "10.0.0.1", 4, (1, 2, 3, 4), gpu_node=True),))
    processes = layout(placement, [(4, 5, 6, 7)], lambda node: node.slots)  # e.g. Horovod: one per GPU
    assert [(p.rank, p.local_rank, p.gpus, p.replicas) for p in processes] == [
        (0, 0, (4,), 1), (1, 1, (5,), 1), (2, 2, (6,), 1), (3, 3, (7,), 1)]


def test_single_node_modes_run_one_process_over_the_nodes_slots():
    from cluster.shared.modes import single

    cfg = parse_config("distribution: {mode: central_storage}\nhyperparameters: {global_batch_size: 64}")
    p = single.CENTRAL_STORAGE.plan(Placement("j", (gpu("h", 4, 7),)), cfg, [(2, 3, 4, 5)])
    (proc,) = p.processes
    assert (proc.rank, proc.replicas, proc.gpus, proc.port) == (0, 4, (2, 3, 4, 5), 7)
    assert proc.env["CUDA_VISIBLE_DEVICES"] == "2,3,4,5" and "TF_CONFIG" not in proc.env
    assert proc.env["TFDIST_PER_REPLICA_BATCH_SIZE"] == "16" and proc.env["TFDIST_SIZE"] == "1"
    assert proc.env["TFDIST_DISTRIBUTION"] == "central_storage"
    assert (planner("mirrored"), planner("one_device")) == (single.MIRRORED, single.ONE_DEVICE)
    assert all(planner(m).single_node for m in ("mirrored", "central_storage", "one_device"))
    with pytest.raises(PlanError, match="mode central_storage runs on one node, got 2"):
        single.CENTRAL_STORAGE.plan(Placement("j", (cpu("a", 1, (1,)), cpu("b", 1, (2,)))), cfg, [(), ()])


# ---------------------------------------------------------------- parameter servers

def test_ps_plan_places_chief_workers_ps_and_evaluator_with_their_roles():
    from cluster.shared.modes import ps

    cfg = parse_config("distribution: {mode: ps, num_ps: 2, evaluator: true}\nhyperparameters: {global_batch_size: 40}")
    nodes = [cpu("10.0.0.1", 2, ()), cpu("10.0.0.2", 2, ())]
    # workers + chief + ps0 + the job store | workers + ps1 + evaluator
    assert ps.PS.ports_on(nodes, cfg) == [2 + 1 + 1 + 1, 2 + 1 + 1]
    placed = Placement("j", (cpu("10.0.0.1", 2, (1, 2, 3, 4, 99)), cpu("10.0.0.2", 2, (5, 6, 7, 8))))
    p = ps.PS.plan(placed, cfg, [(), ()])
    assert [(w.rank, w.role, w.node_rank, w.port, w.expendable) for w in p.processes] == [
        (0, "chief", 0, 1, False),
        (1, "worker", 0, 2, True), (2, "worker", 0, 3, True), (3, "worker", 1, 5, True), (4, "worker", 1, 6, True),
        (5, "ps", 0, 4, False), (6, "ps", 1, 7, False),
        (7, "evaluator", 1, 8, True)]
    assert p.success is SuccessRule.CHIEF and p.expendable == {1, 2, 3, 4, 7} and p.store == (0, 99)
    assert all(w.env["TFDIST_STORE"] == "10.0.0.1:99" for w in p.processes)
    training = {"chief": ["10.0.0.1:1"], "worker": ["10.0.0.1:2", "10.0.0.1:3", "10.0.0.2:5", "10.0.0.2:6"],
                "ps": ["10.0.0.1:4", "10.0.0.2:7"]}
    # The chief connects to every task its TF_CONFIG names: the evaluator is not one of them.
    assert json.loads(p.processes[6].env["TF_CONFIG"]) == {"cluster": training, "task": {"type": "ps", "index": 1}}
    assert json.loads(p.processes[7].env["TF_CONFIG"]) == {"cluster": {**training, "evaluator": ["10.0.0.2:8"]},
                                                           "task": {"type": "evaluator", "index": 0}}
    chief = p.processes[0].env
    # tf_keras runs the job (Keras 3 has no parameter-server support); batches are per worker task.
    assert chief["TF_USE_LEGACY_KERAS"] == "1" and chief["TFDIST_ROLE"] == "chief"
    assert (chief["TFDIST_SLOTS"], chief["TFDIST_PER_WORKER_BATCH_SIZE"], chief["TFDIST_SIZE"]) == ("4", "10", "8")
    assert [w.local_rank for w in p.on_node(1)] == [0, 1, 2, 3]


def test_ps_workers_on_gpu_nodes_get_one_gpu_each_and_the_others_none():
    from cluster.shared.modes import ps

    cfg = parse_config("distribution: {mode: ps}")
    placed = Placement("j", (NodePlacement("g", "10.0.0.1", 2, (1, 2, 3, 4), gpu_node=True),))
    p = ps.PS.plan(placed, cfg, [(3, 5)])
    assert [(w.role, w.gpus, w.env["CUDA_VISIBLE_DEVICES"]) for w in p.processes] == [
        ("chief", (), ""), ("worker", (3,), "3"), ("worker", (5,), "5"), ("ps", (), "")]


# ---------------------------------------------------------------- horovod

def test_horovod_plan_sets_every_rank_like_horovodrun_with_the_job_store_as_rendezvous():
    from cluster.shared.modes import horovod

    cfg = parse_config("distribution: {mode: horovod}\noptimizations: {gradient_compression: fp16, "
                       "auto_tune_tensor_fusion: true}\nhyperparameters: {global_batch_size: 64}")
    nodes = [cpu("10.0.0.1", 2, ()), cpu("10.0.0.2", 2, ())]
    assert horovod.HOROVOD.ports_on(nodes, cfg) == [3, 2]
    p = horovod.HOROVOD.plan(Placement("j", (cpu("10.0.0.1", 2, (1, 2, 9)), cpu("10.0.0.2", 2, (3, 4)))), cfg, [(), ()])
    assert p.store == (0, 9) and p.success is SuccessRule.ALL_RANKS
    assert json.loads(p.processes[0].env["TFDIST_CLUSTER"])["nodes"][1] == {
        "node_rank": 1, "agent": "10.0.0.2", "address": "10.0.0.2", "gpus": [], "ranks": [2, 3]}
    keys = ("HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE", "HOROVOD_CROSS_RANK",
            "HOROVOD_CROSS_SIZE", "HOROVOD_HOSTNAME")
    assert [tuple(w.env[k] for k in keys) for w in p.processes] == [
        ("0", "4", "0", "2", "0", "2", "10.0.0.1"), ("1", "4", "1", "2", "0", "2", "10.0.0.1"),
        ("2", "4", "0", "2", "1", "2", "10.0.0.2"), ("3", "4", "1", "2", "1", "2", "10.0.0.2")]
    env = p.processes[3].env
    # Gloo's URL is http://<ADDR>:<PORT>/<scope>/<key>: the store's secret (filled in by the agent) rides in its path
    assert (env["HOROVOD_GLOO_RENDEZVOUS_ADDR"], env["HOROVOD_GLOO_RENDEZVOUS_PORT"]) == (
        "10.0.0.1:9/@tfdist:store-secret@", "9")
    assert (env["HOROVOD_CONTROLLER"], env["HOROVOD_CPU_OPERATIONS"]) == ("gloo", "gloo")
    assert env["HOROVOD_GLOO_IFACE"] == "@tfdist:node-interface@" and env["TFDIST_NODE_ADDRESS"] == "10.0.0.2"
    assert env["TFDIST_GRADIENT_COMPRESSION"] == "fp16" and env["HOROVOD_AUTOTUNE"] == "1"
    assert env["TFDIST_PER_WORKER_BATCH_SIZE"] == "16"  # a batch per rank


def test_horovod_on_gpu_nodes_runs_one_process_per_gpu():
    from cluster.shared.modes import horovod

    p = horovod.HOROVOD.plan(Placement("j", (NodePlacement("g", "h", 2, (1, 2, 3), gpu_node=True),)),
                     parse_config("distribution: {mode: horovod}"), [(6, 7)])
    assert [(w.rank, w.gpus, w.env["CUDA_VISIBLE_DEVICES"]) for w in p.processes] == [(0, (6,), "6"), (1, (7,), "7")]


# ---------------------------------------------------------------- auto

@pytest.mark.parametrize("config, mode, reason", [
    ("", "mwms", "auto: MultiWorkerMirroredStrategy"),
    ("optimizations: {gradient_compression: fp16}", "horovod",
     "auto: optimizations.gradient_compression=fp16 is only provided by Horovod"),
    ("optimizations: {auto_tune_tensor_fusion: true}", "horovod",
     "auto: optimizations.auto_tune_tensor_fusion=true is only provided by Horovod"),
    ("optimizations: {aggregation_frequency: 8}", "mwms", "auto: MultiWorkerMirroredStrategy"),
    ("optimizations: {aggregation_frequency: 1}", "mwms", "auto: MultiWorkerMirroredStrategy"),
    ("distribution: {mode: horovod}", "horovod", "distribution.mode is horovod"),
    ("distribution: {mode: ps}", "ps", "distribution.mode is ps"),
    ("distribution: {mode: mirrored}", "mirrored", "distribution.mode is mirrored"),
])
def test_auto_decision_table(config, mode, reason):
    from cluster.shared.modes import auto

    decision = auto.decide(parse_config(config))
    assert decision.mode == mode and decision.reason.startswith(reason)
