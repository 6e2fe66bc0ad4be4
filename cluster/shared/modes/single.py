"""Single-node strategies: one process on one node drives every slot the job holds there.

`mirrored` (MirroredStrategy), `central_storage` (CentralStorageStrategy: variables on the CPU,
compute on each device) and `one_device` (OneDeviceStrategy, one slot). The worker builds the
strategy over the GPUs it was given, or over as many logical CPU devices as it has slots. No
TF_CONFIG: there is no cluster to join. The job succeeds when its process exits 0.
"""

from __future__ import annotations

from typing import Sequence

from cluster.shared.config import ExperimentConfig
from cluster.shared.modes.base import (JobPlan, NodePlacement, Placement, ProcessPlan, SuccessRule, common_env,
                                job_services, layout, ports_per_process)

single_node = True  # the coordinator refuses a job larger than the largest node


def processes_on(node: NodePlacement) -> int:
    return 1


def ports_on(nodes: Sequence[NodePlacement], config: ExperimentConfig) -> list[int]:
    return ports_per_process(nodes, processes_on)


def plan(placement: Placement, config: ExperimentConfig, devices: Sequence[Sequence[int]]) -> JobPlan:
    if len(placement.nodes) != 1:
        raise ValueError(f"mode {config.distribution_mode} runs on one node, got {len(placement.nodes)}")
    processes = layout(placement, devices, processes_on)
    p = processes[0]
    services = job_services(placement, processes)
    env = common_env(placement.job_id, config, processes, p, placement.nodes[0].gpu_node, config.distribution_mode,
                     services)
    return JobPlan(processes=(ProcessPlan(rank=0, node_rank=0, local_rank=0, local_size=1, port=p.port, gpus=p.gpus,
                                          replicas=p.replicas, env=env),), success=SuccessRule.ALL_RANKS,
                   store=services.store)
