"""Single-node strategies: one process on one node drives every slot the job holds there.

`mirrored` (MirroredStrategy), `central_storage` (CentralStorageStrategy: variables on the CPU,
compute on each device) and `one_device` (OneDeviceStrategy, one slot). The worker builds the
strategy over the GPUs it was given, or over as many logical CPU devices as it has slots. No
TF_CONFIG: there is no cluster to join. The job succeeds when its process exits 0.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Sequence

from cluster.shared.experiment import ExperimentConfig
from cluster.shared.modes.base import (JobPlan, NodePlacement, Placement, PlanError, ProcessPlan, SuccessRule,
                                       common_env, job_services, layout, ports_per_process)


def processes_on(node: NodePlacement) -> int:
    return 1


@dataclasses.dataclass(frozen=True)
class SingleNodePlanner:
    """One of the single-node strategies, named by its mode (`name`); the plan is the same for all three,
    the worker builds the strategy its TFDIST_DISTRIBUTION names."""

    name: str  # the one field; the class variables below are the same for all three
    single_node: ClassVar[bool] = True  # the coordinator refuses a job larger than the largest node
    success: ClassVar[SuccessRule] = SuccessRule.ALL_RANKS
    worker_needs: ClassVar[tuple[str, ...]] = ()

    def ports_on(self, nodes: Sequence[NodePlacement], config: ExperimentConfig) -> list[int]:
        return ports_per_process(nodes, processes_on)

    def plan(self, placement: Placement, config: ExperimentConfig, devices: Sequence[Sequence[int]]) -> JobPlan:
        if len(placement.nodes) != 1:
            raise PlanError(f"mode {self.name} runs on one node, got {len(placement.nodes)}")
        processes = layout(placement, devices, processes_on)
        p = processes[0]
        services = job_services(placement, processes)
        env = common_env(placement.job_id, config, processes, p, placement.nodes[0].gpu_node, self.name, services)
        return JobPlan(processes=(ProcessPlan(rank=0, node_rank=0, local_rank=0, local_size=1, port=p.port,
                                              gpus=p.gpus, replicas=p.replicas, env=env),),
                       success=self.success, store=services.store)


MIRRORED = SingleNodePlanner("mirrored")
CENTRAL_STORAGE = SingleNodePlanner("central_storage")
ONE_DEVICE = SingleNodePlanner("one_device")
