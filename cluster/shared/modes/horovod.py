"""Horovod over Gloo, started by tfdist: one process per slot (per GPU on GPU nodes, each with its own
device), no ssh, no mpirun, no horovodrun.

Every process gets the environment `horovodrun` would give it: HOROVOD_RANK/SIZE, LOCAL_RANK/SIZE,
CROSS_RANK/SIZE (its index among the processes of the same local rank, and their count), the Gloo
controller and the rendezvous address. The rendezvous is the job's store, served by the agent of the job's
first node on one extra port leased there (cluster/agent/job_store.py), its secret in the rendezvous
address's path; HOROVOD_GLOO_IFACE, the interface
carrying the job's address, is a placeholder each node's agent fills in (only it knows its names). Batch sizes are per
rank: a global batch splits over every process. The job succeeds when every rank exits 0.
"""

from __future__ import annotations

from typing import Sequence

from cluster.shared.experiment import ExperimentConfig
from cluster.shared.modes.base import (JobPlan, NodePlacement, Placement, PlanError, SuccessRule,
                                       common_env, job_services, layout, ports_per_process, process_plan)
from tfdist import envvars


def processes_on(node: NodePlacement) -> int:
    return node.slots  # one per slot; on GPU nodes a slot is a GPU


class HorovodPlanner:
    """`horovod`: spans nodes, one process per slot, every rank must succeed; the worker needs Horovod."""

    name = "horovod"
    single_node = False
    success = SuccessRule.ALL_RANKS
    worker_needs: tuple[str, ...] = ("horovod",)

    def ports_on(self, nodes: Sequence[NodePlacement], config: ExperimentConfig) -> list[int]:
        return ports_per_process(nodes, processes_on)  # the job's store is Gloo's rendezvous

    def plan(self, placement: Placement, config: ExperimentConfig, devices: Sequence[Sequence[int]]) -> JobPlan:
        processes = layout(placement, devices, processes_on)
        first = placement.nodes[0]
        services = job_services(placement, processes)
        if services.store is None:
            raise PlanError(f"horovod needs a port for its rendezvous on node 0 ({first.agent}) beyond its "
                             "processes'")
        rendezvous_port = services.store[1]
        gpu_job = any(n.gpu_node for n in placement.nodes)
        result = []
        for p in processes:
            same_local_rank = [q for q in processes if q.local_rank == p.local_rank]
            env = common_env(placement.job_id, config, processes, p, gpu_job, self.name, services)
            env.update({
                # Gloo's HTTP store asks http://<ADDR>:<PORT>/<scope>/<key> and cannot add a header: the
                # store's secret rides in the path (the agent fills the placeholder in; the store accepts
                # the "<secret>:<port>" segment this makes).
                "HOROVOD_GLOO_RENDEZVOUS_ADDR": f"{services.store_address}/{envvars.STORE_SECRET_PLACEHOLDER}",
                "HOROVOD_GLOO_RENDEZVOUS_PORT": str(rendezvous_port),
                "HOROVOD_CONTROLLER": "gloo",
                "HOROVOD_CPU_OPERATIONS": "gloo",
                "HOROVOD_GLOO_IFACE": envvars.NODE_INTERFACE_PLACEHOLDER,  # filled in by the node's agent
                "HOROVOD_HOSTNAME": p.host,
                "HOROVOD_RANK": str(p.rank),
                "HOROVOD_SIZE": str(len(processes)),
                "HOROVOD_LOCAL_RANK": str(p.local_rank),
                "HOROVOD_LOCAL_SIZE": str(p.local_size),
                "HOROVOD_CROSS_RANK": str(same_local_rank.index(p)),
                "HOROVOD_CROSS_SIZE": str(len(same_local_rank)),
                envvars.GRADIENT_COMPRESSION: config.gradient_compression,
            })
            if config.auto_tune_tensor_fusion:
                env["HOROVOD_AUTOTUNE"] = "1"  # Horovod's Bayesian tuner of fusion threshold and cycle time
            result.append(process_plan(p, env))
        return JobPlan(processes=tuple(result), success=self.success, store=services.store)


HOROVOD = HorovodPlanner()
