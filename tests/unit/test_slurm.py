"""Reading a Slurm allocation from its environment (pure): tasks per node, slots, the agents' identity."""

import pytest

from cluster.slurm import allocation as slurm
from cluster.slurm.allocation import SlurmError


def env(**extra):
    return {"SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "node[1-3]", "SLURM_TASKS_PER_NODE": "2(x2),1", **extra}


def hostnames(nodelist):
    assert nodelist == "node[1-3]"
    return ["node1", "node2", "node3"]


def test_tasks_per_node_in_slurms_compressed_form():
    assert slurm.parse_tasks_per_node("2(x3),1") == [2, 2, 2, 1]
    assert slurm.parse_tasks_per_node("4") == [4]
    with pytest.raises(SlurmError, match=r"SLURM_TASKS_PER_NODE='2\(3\)' is not Slurm's format"):
        slurm.parse_tasks_per_node("2(3)")


def test_the_allocation_and_where_launch_runs():
    allocation = slurm.allocation_from_env(env(), hostnames)
    assert allocation.slots == {"node1": 2, "node2": 2, "node3": 1} and not allocation.gpus
    assert slurm.in_allocation(env()) and not slurm.in_allocation(env(SLURM_STEP_ID="0")) and not slurm.in_allocation({})
    assert slurm.allocation_from_env(env(SLURM_JOB_GPUS="0,1"), hostnames).gpus


def test_slots_come_from_the_allocation_and_must_agree_with_a_given_count():
    allocation = slurm.allocation_from_env(env(), hostnames)
    assert slurm.check_slots(None, allocation) == 5 and slurm.check_slots(5, allocation) == 5
    with pytest.raises(SlurmError) as e:
        slurm.check_slots(4, allocation)
    assert str(e.value) == ("slots_per_trial=4, but Slurm allocation 42 has 5 task(s) (node1: 2, node2: 2, node3: 1); "
                            "ask sbatch for --ntasks=4 (or --ntasks-per-node), or leave slots_per_trial out to use the "
                            "allocation's")


def test_an_agent_of_the_step_takes_its_name_slots_and_credential_from_the_environment():
    import json

    from cluster.shared.credentials import Authority

    authority = Authority.create()
    issued = {n: json.loads(authority.issue("node", n, "10.0.0.1:1").to_json()) for n in ("node1", "node2")}
    step = {"SLURMD_NODENAME": "node2", "TFDIST_SLURM_SLOTS": "node1=2,node2=3",
            "TFDIST_NODE_CREDENTIALS": json.dumps(issued)}
    name, slots, credential = slurm.agent_identity(step, "host", None, None)
    assert (name, slots, credential.principal.name, credential.kind) == ("node2", 3, "node2", "node")
    assert authority.verify(credential.token).name == "node2"  # its own, not node1's
    gpu_step = {**step, "CUDA_VISIBLE_DEVICES": "0,1"}
    assert slurm.agent_identity(gpu_step, "host", None, None)[:2] == ("node2", None)  # its GPUs are its slots
    with pytest.raises(SlurmError, match="node node9 is not in TFDIST_SLURM_SLOTS"):
        slurm.agent_identity({**step, "SLURMD_NODENAME": "node9"}, "host", None, None)
    with pytest.raises(SlurmError, match="no node credential for node2 in .TFDIST_NODE_CREDENTIALS"):
        slurm.agent_identity({**step, "TFDIST_NODE_CREDENTIALS": "{}"}, "host", None, None)
