"""`jax`: Keras 3 on the JAX backend (`keras.distribution`) or plain JAX, across nodes.

One process per slot on CPU nodes; on GPU nodes one process per node driving every GPU the job holds there
(JAX's usual layout: a process sees its node's devices, XLA's collectives span the processes). Each process
gets what `jax.distributed.initialize` and `keras.distribution.initialize` read, so neither needs arguments:
- `JAX_COORDINATOR_ADDRESS`: rank 0's leased port, where its JAX coordination service listens (bound to that
  address alone where it is an IP address: `JAX_COORDINATOR_BIND_ADDRESS`); JAX reads it itself;
- `KERAS_DISTRIBUTION_JOB_ADDRESSES` (the coordinator), `KERAS_DISTRIBUTION_NUM_PROCESSES`,
  `KERAS_DISTRIBUTION_PROCESS_ID`: what `keras.distribution.initialize()` reads;
- `JAX_NUM_PROCESSES`, `JAX_PROCESS_ID`: the same, for scripts that pass them to JAX by hand; a
  `jax.distributed.initialize()` with no arguments finds them through tfdist's cluster plugin for JAX
  (tfdist/compat/jax_cluster.py, registered at the worker's start-up ahead of JAX's Slurm and Kubernetes
  detection, which would otherwise take a tfdist job inside an allocation or a pod for theirs);
- `KERAS_BACKEND=jax` unless the config's environment says otherwise.
The job succeeds when every rank exits 0.
"""

from __future__ import annotations

import ipaddress
from typing import Sequence

from cluster.shared.experiment import ExperimentConfig
from cluster.shared.modes.base import (JobPlan, NodePlacement, Placement, SuccessRule, common_env, job_services,
                                       layout, ports_per_process, process_plan, rendezvous_host)

COORDINATOR_ADDRESS = "JAX_COORDINATOR_ADDRESS"


def processes_on(node: NodePlacement) -> int:
    return 1 if node.gpu_node else node.slots


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


class JaxPlanner:
    """`jax`: spans nodes, XLA's collectives, every rank must succeed; the worker needs JAX."""

    name = "jax"
    single_node = False
    success = SuccessRule.ALL_RANKS
    worker_needs: tuple[str, ...] = ("jax",)

    def ports_on(self, nodes: Sequence[NodePlacement], config: ExperimentConfig) -> list[int]:
        return ports_per_process(nodes, processes_on)  # rank 0's is the coordination service's

    def plan(self, placement: Placement, config: ExperimentConfig, devices: Sequence[Sequence[int]]) -> JobPlan:
        processes = layout(placement, devices, processes_on)
        gpu_job = any(n.gpu_node for n in placement.nodes)
        services = job_services(placement, processes)
        host = rendezvous_host(placement)
        coordinator = f"{host}:{processes[0].port}"
        result = []
        for p in processes:
            env = common_env(placement.job_id, config, processes, p, gpu_job, self.name, services)
            env.setdefault("KERAS_BACKEND", "jax")
            env.update({
                COORDINATOR_ADDRESS: coordinator,
                "JAX_NUM_PROCESSES": str(len(processes)),
                "JAX_PROCESS_ID": str(p.rank),
                "KERAS_DISTRIBUTION_JOB_ADDRESSES": coordinator,
                "KERAS_DISTRIBUTION_NUM_PROCESSES": str(len(processes)),
                "KERAS_DISTRIBUTION_PROCESS_ID": str(p.rank),
            })
            if _is_ip(host):  # JAX's default binds every interface ([::]:port)
                env["JAX_COORDINATOR_BIND_ADDRESS"] = coordinator
            result.append(process_plan(p, env))
        return JobPlan(processes=tuple(result), success=self.success, store=services.store)


JAX = JaxPlanner()
