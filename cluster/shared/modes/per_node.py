"""`per_node`: the script is its own launcher. One process on each node, holding every slot the job has there
(its GPUs pinned, or its count of CPU slots), and no framework's variables: the script starts its own workers.
This is how Determined runs an entrypoint that names no launcher (its Core API tutorial's stage 4 starts a worker
per slot itself), so `auto` runs a script that imports `determined` and names no launcher in it (the config reads the
script when it is parsed: cluster/shared/config.py, cluster/shared/modes/auto.py). The job succeeds when every node's process exits 0.
"""

from __future__ import annotations

from typing import Sequence

from cluster.shared.experiment import ExperimentConfig
from cluster.shared.modes.base import (JobPlan, NodePlacement, Placement, SuccessRule, common_env, job_services,
                                       layout, ports_per_process, process_plan)


def processes_on(node: NodePlacement) -> int:
    return 1


class PerNodePlanner:
    """`per_node`: one process per node, every slot of the node its own to share among the workers it starts."""

    name = "per_node"
    single_node = False
    success = SuccessRule.ALL_RANKS
    worker_needs: tuple[str, ...] = ()

    def ports_on(self, nodes: Sequence[NodePlacement], config: ExperimentConfig) -> list[int]:
        return ports_per_process(nodes, processes_on)

    def plan(self, placement: Placement, config: ExperimentConfig, devices: Sequence[Sequence[int]]) -> JobPlan:
        processes = layout(placement, devices, processes_on)
        gpu_job = any(n.gpu_node for n in placement.nodes)
        services = job_services(placement, processes)
        plans = tuple(process_plan(p, common_env(placement.job_id, config, processes, p, gpu_job, self.name, services))
                      for p in processes)
        return JobPlan(processes=plans, success=self.success, store=services.store)


PER_NODE = PerNodePlanner()
