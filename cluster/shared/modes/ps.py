"""Parameter-server training (ParameterServerStrategy): a chief, workers, parameter servers, an evaluator.

Tasks and where they run:
- one **worker** task per slot (per GPU on GPU nodes, each with its own device), on every node;
- the **chief** (it runs the user's training loop and dispatches steps) on the first node;
- `distribution.num_ps` **ps** tasks (they hold the variables) spread over the nodes, first node first;
- with `distribution.evaluator: true`, one **evaluator** (side-car evaluation) on the last node.
Chief, ps and evaluator are light next to the workers and hold no slot. Ranks: 0 is the chief, then
the workers in node order, then the ps tasks, then the evaluator; every task gets its TF_CONFIG role.

The job is the chief's: it succeeds when the chief exits 0, and the others are then stopped (their
servers never exit by themselves). A worker or the evaluator may die without ending the job: the
chief's ClusterCoordinator re-runs the lost steps on the other workers. A ps task's death loses
variables, so it fails the job.

Keras: tasks run with TF_USE_LEGACY_KERAS=1, so `tf.keras` is tf_keras, whose `fit` supports parameter
servers; Keras 3 has no parameter-server support and its variables lose updates here (refused by the
worker library, see tfdist/compat/keras_ps.py).
"""

from __future__ import annotations

import json
from typing import Sequence

from cluster.shared.experiment import ExperimentConfig
from cluster.shared.modes.base import (JobPlan, Layout, NodePlacement, Placement, PlanError, ProcessPlan,
                                       SuccessRule, common_env, job_services, with_store)
from tfdist import envvars


def _workers_on(node: NodePlacement) -> int:
    return node.slots  # one per slot; on GPU nodes a slot is a GPU


def _task_nodes(num_nodes: int, config: ExperimentConfig) -> list[tuple[str, int]]:
    """(role, node_rank) of every task but the workers, in rank order after them."""
    tasks = [("ps", i % num_nodes) for i in range(config.num_ps)]
    if config.evaluator:
        tasks.append(("evaluator", num_nodes - 1))
    return tasks


def _layout(placement: Placement, devices: Sequence[Sequence[int]],
            config: ExperimentConfig) -> list[tuple[str, int, Layout]]:
    """(role, index within the role, layout) in rank order."""
    nodes = placement.nodes
    roles: list[tuple[str, int, int, tuple[int, ...]]] = [("chief", 0, 0, ())]  # role, index, node, gpus
    for node_rank, (node, gpus) in enumerate(zip(nodes, devices)):
        for i in range(_workers_on(node)):
            mine = (gpus[i],) if node.gpu_node else ()
            roles.append(("worker", sum(r == "worker" for r, *_ in roles), node_rank, mine))
    for role, node_rank in _task_nodes(len(nodes), config):
        roles.append((role, sum(r == role for r, *_ in roles), node_rank, ()))
    used = [0] * len(nodes)
    local_size = [sum(n == node_rank for _, _, n, _ in roles) for node_rank in range(len(nodes))]
    result = []
    for rank, (role, index, node_rank, gpus) in enumerate(roles):
        node = nodes[node_rank]
        if used[node_rank] >= len(node.ports):
            raise PlanError(f"node {node_rank} ({node.agent}) runs {local_size[node_rank]} tasks but got "
                             f"{len(node.ports)} ports")
        result.append((role, index, Layout(rank=rank, node_rank=node_rank, local_rank=used[node_rank],
                                           local_size=local_size[node_rank], host=node.host,
                                           port=node.ports[used[node_rank]], gpus=gpus, replicas=1)))
        used[node_rank] += 1
    return result


class PsPlanner:
    """`ps`: spans nodes; the job is the chief's (workers and the evaluator are expendable)."""

    name = "ps"
    single_node = False
    success = SuccessRule.CHIEF
    worker_needs: tuple[str, ...] = ()

    def ports_on(self, nodes: Sequence[NodePlacement], config: ExperimentConfig) -> list[int]:
        counts = [_workers_on(n) for n in nodes]
        counts[0] += 1  # the chief
        for _, node_rank in _task_nodes(len(nodes), config):
            counts[node_rank] += 1
        return with_store(counts)

    def plan(self, placement: Placement, config: ExperimentConfig, devices: Sequence[Sequence[int]]) -> JobPlan:
        tasks = _layout(placement, devices, config)
        cluster: dict[str, list[str]] = {}
        for role, _, p in tasks:
            cluster.setdefault(role, []).append(p.address)
        workers = len(cluster["worker"])
        gpu_job = any(n.gpu_node for n in placement.nodes)
        layouts = [p for _, _, p in tasks]
        services = job_services(placement, layouts)
        result = []
        for role, index, p in tasks:
            # Batch sizes count workers: each worker task takes global // workers examples per step.
            env = common_env(placement.job_id, config, layouts, p, gpu_job, self.name, services, slots=workers)
            env.setdefault("TF_USE_LEGACY_KERAS", "1")
            env[envvars.ROLE] = role
            # The evaluator is no member of the training cluster: the chief connects to every task in its
            # TF_CONFIG and would wait for it. Only the evaluator's own TF_CONFIG names it.
            members = cluster if role == "evaluator" else {k: v for k, v in cluster.items() if k != "evaluator"}
            env[envvars.TF_CONFIG] = json.dumps({"cluster": members, "task": {"type": role, "index": index}},
                                                sort_keys=True)
            result.append(ProcessPlan(rank=p.rank, node_rank=p.node_rank, local_rank=p.local_rank,
                                      local_size=p.local_size, port=p.port, gpus=p.gpus, replicas=1, env=env,
                                      role=role, expendable=role in ("worker", "evaluator")))
        return JobPlan(processes=tuple(result), success=self.success, store=services.store)


PS = PsPlanner()
