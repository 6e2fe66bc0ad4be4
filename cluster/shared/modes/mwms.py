"""MultiWorkerMirroredStrategy: every process is a TF worker, rank 0 the chief.

CPU-slot nodes run one process per slot; GPU nodes run one process that drives
all the node's GPUs the job holds (MWMS mirrors over local devices itself).
The job succeeds when every rank exits 0.
"""

from __future__ import annotations

import json
from typing import Sequence

from cluster.shared.experiment import ExperimentConfig
from cluster.shared.modes.base import (JobPlan, Layout, NodePlacement, Placement, SuccessRule, common_env, job_services,
                                       layout, ports_per_process, process_plan)
from tfdist import envvars


def processes_on(node: NodePlacement) -> int:
    return 1 if node.gpu_node else node.slots


def tf_config(processes: Sequence[Layout], rank: int) -> dict:
    return {"cluster": {"worker": [p.address for p in processes]}, "task": {"type": "worker", "index": rank}}


class MwmsPlanner:
    """`mwms`: spans nodes, TensorFlow's own collectives, every rank must succeed."""

    name = "mwms"
    single_node = False
    success = SuccessRule.ALL_RANKS
    worker_needs: tuple[str, ...] = ()

    def ports_on(self, nodes: Sequence[NodePlacement], config: ExperimentConfig) -> list[int]:
        return ports_per_process(nodes, processes_on)

    def plan(self, placement: Placement, config: ExperimentConfig, devices: Sequence[Sequence[int]]) -> JobPlan:
        processes = layout(placement, devices, processes_on)
        gpu_job = any(n.gpu_node for n in placement.nodes)
        services = job_services(placement, processes)
        result = []
        for p in processes:
            env = common_env(placement.job_id, config, processes, p, gpu_job, self.name, services)
            env[envvars.TF_CONFIG] = json.dumps(tf_config(processes, p.rank), sort_keys=True)
            result.append(process_plan(p, env))
        return JobPlan(processes=tuple(result), success=self.success, store=services.store)


MWMS = MwmsPlanner()
plan = MWMS.plan  # the module function tests/unit/test_context.py calls
