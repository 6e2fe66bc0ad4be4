"""What a Kubernetes cluster offers tfdist, decided from the API's Node and Pod objects (their JSON, as the
API serves them): pure, so it is tested as a table and the engine only reads and applies it.

A node is offered when it is Ready, not cordoned, not a control-plane (system) node, and every
NoSchedule/NoExecute taint is tolerated by the tolerations tfdist's pods carry (`nvidia.com/gpu` by default:
GKE taints every GPU pool so). Its slots (its size) are its allocatable `nvidia.com/gpu`, or, on a node
without GPUs, its allocatable whole CPUs (at most `cpu_slots` when that is set); `taken` is what other
workloads' pods on it hold of those now. This coordinator's own pods (tfdist's label, in its namespace) are
its own allocations and not counted; another coordinator's, in another namespace, are other workloads. So a
node busy with others is still known at its size (a job that fits it waits for it) but is free only when they
leave: a gang goes onto whole free nodes only. A node not offered says why, as a job's waiting reason does.
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction
from typing import Any, Iterable, Mapping, Sequence

GPU = "nvidia.com/gpu"
MANAGED_BY = "app.kubernetes.io/managed-by"  # the label on everything tfdist creates
JOB = "tfdist.io/job"  # and on a job's objects, the job's name
PLACEHOLDER = "tfdist.io/placeholder"  # on an autoscaled pool's placeholder pods (pool.py)
TFDIST = "tfdist"
_SUFFIXES = {"m": Fraction(1, 1000), "k": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9),
             "T": Fraction(10**12), "P": Fraction(10**15), "E": Fraction(10**18), "Ki": Fraction(2**10),
             "Mi": Fraction(2**20), "Gi": Fraction(2**30), "Ti": Fraction(2**40), "Pi": Fraction(2**50),
             "Ei": Fraction(2**60)}
_LONGEST_FIRST = sorted(_SUFFIXES, key=len, reverse=True)  # "Mi" before "M"
_ENDED = ("Succeeded", "Failed")
# The labels a cluster's own control-plane nodes carry (kubeadm and most distributions; "master" before 1.24).
SYSTEM_ROLES = ("node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master")

Json = Mapping[str, Any]


@dataclasses.dataclass(frozen=True)
class NodeOffer:
    name: str
    slots: int
    gpus: int  # GPUs behind the slots (0: a CPU node, one worker process per slot)
    why_not: str = ""  # "": offered; else why no job can go there now
    taken: int = 0  # of its slots, those other workloads hold now
    # What other workloads leave of its CPUs and memory (what a job's pod there requests: it is the node's).
    free_cpu: Fraction = dataclasses.field(default=Fraction(0), compare=False)
    free_memory: Fraction = dataclasses.field(default=Fraction(0), compare=False)

    @property
    def offered(self) -> bool:
        return not self.why_not and self.slots > 0

    @property
    def free(self) -> int:
        return max(0, self.slots - self.taken)


def quantity(text: Any) -> Fraction:
    """A Kubernetes resource quantity ("500m", "2", "1Gi", "1e3") as an exact number."""
    value = str(text).strip()
    for suffix in _LONGEST_FIRST:
        if value.endswith(suffix) and value[:-len(suffix)]:
            return Fraction(value[:-len(suffix)]) * _SUFFIXES[suffix]
    return Fraction(value)


def pod_requests(pod: Json) -> dict[str, Fraction]:
    """What a pod asks of its node: the sum over its containers, or an init container's if larger (the
    scheduler's rule), per resource."""
    spec = pod.get("spec") or {}

    def requested(container: Json) -> dict[str, Fraction]:
        resources = container.get("resources") or {}
        asked = {k: quantity(v) for k, v in (resources.get("limits") or {}).items()}  # a limit alone is the request
        asked.update({k: quantity(v) for k, v in (resources.get("requests") or {}).items()})
        return asked

    total: dict[str, Fraction] = {}
    for container in spec.get("containers") or ():
        for name, amount in requested(container).items():
            total[name] = total.get(name, Fraction(0)) + amount
    for container in spec.get("initContainers") or ():
        for name, amount in requested(container).items():
            total[name] = max(total.get(name, Fraction(0)), amount)
    return total


def _tolerated(taint: Json, tolerations: Sequence[Json]) -> bool:
    for toleration in tolerations:
        effect = toleration.get("effect") or ""
        if effect and effect != taint.get("effect"):
            continue
        operator = toleration.get("operator") or "Equal"
        key = toleration.get("key") or ""
        if operator == "Exists" and (not key or key == taint.get("key")):
            return True
        if operator == "Equal" and key == taint.get("key") and (toleration.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def tolerations_of(keys: Sequence[str]) -> list[Json]:
    """Tolerations of every taint with one of these keys, whatever its value and effect (what the
    coordinator's --tolerate gives its offers and its pods alike)."""
    return [{"key": key, "operator": "Exists"} for key in keys]


def ready(node: Json) -> bool:
    """Whether the node's Ready condition is True."""
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (node.get("status") or {}).get("conditions") or ())


def why_not(node: Json, tolerations: Sequence[Json] = (), system: bool = False) -> str:
    """"" when tfdist may place on `node`, else why not. `system`: control-plane nodes may be offered too."""
    spec = node.get("spec") or {}
    if spec.get("unschedulable"):
        return "cordoned"
    labels = (node.get("metadata") or {}).get("labels") or {}
    role = next((r for r in SYSTEM_ROLES if r in labels), "")
    if role and not system:
        return f"a control-plane node ({role}): not offered to jobs"
    if not ready(node):
        return "not Ready"
    for taint in spec.get("taints") or ():
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not _tolerated(taint, tolerations):
            value = f"={taint['value']}" if taint.get("value") else ""
            return f"tainted {taint.get('key')}{value}:{taint.get('effect')} (not tolerated)"
    return ""


NODE_KINDS = ("auto", "gpu", "cpu")


def node_offers(nodes: Iterable[Json], pods: Iterable[Json], *, tolerations: Sequence[Json] = (),
                cpu_slots: int = 0, namespace: str = "", system: bool = False, kind: str = "auto") -> list[NodeOffer]:
    """Each node's offer, by name. `pods`: every pod of the cluster (others' on a node take its GPUs or
    CPUs); `namespace`: this coordinator's (its own pods are there); `cpu_slots`: at most this many worker
    processes on a node without GPUs (0: one per free CPU); `system`: offer control-plane nodes too.

    `kind`: which nodes are offered, GPU nodes or CPU nodes, never both, so a gang never mixes a GPU pod with
    a CPU one (its ranks would differ in what they run on). "auto": GPU nodes when any node could be offered
    with GPUs, else CPU nodes."""
    used: dict[str, dict[str, Fraction]] = {}
    for pod in pods:
        node_name = (pod.get("spec") or {}).get("nodeName")
        phase = (pod.get("status") or {}).get("phase")
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}  # a job's pod of this coordinator's (not its own Deployment's pod)
        ours = labels.get(MANAGED_BY) == TFDIST and bool(labels.get(JOB)) and meta.get("namespace", "") == namespace \
            and not labels.get(PLACEHOLDER)  # a placeholder bound to a node holds it until it is deleted
        if not node_name or phase in _ENDED or ours:
            continue
        on_node = used.setdefault(node_name, {})
        for name, amount in pod_requests(pod).items():
            on_node[name] = on_node.get(name, Fraction(0)) + amount
    offers = []
    for node in sorted(nodes, key=lambda n: n["metadata"]["name"]):
        name = node["metadata"]["name"]
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        taken = used.get(name, {})
        gpus = int(quantity(allocatable.get(GPU, 0)))
        if gpus > 0:
            slots, behind, free = gpus, gpus, max(0, gpus - math.ceil(taken.get(GPU, 0)))
        else:
            cpus = math.floor(quantity(allocatable.get("cpu", 0)))
            slots, behind = max(0, cpus if not cpu_slots else min(cpu_slots, cpus)), 0
            free = min(slots, max(0, math.floor(quantity(allocatable.get("cpu", 0)) - taken.get("cpu", Fraction(0)))))
        reason = why_not(node, tolerations, system)
        if not reason and slots == 0:
            reason = "no allocatable GPU or whole CPU"
        free_cpu = max(Fraction(0), quantity(allocatable.get("cpu", 0)) - taken.get("cpu", Fraction(0)))
        free_memory = max(Fraction(0), quantity(allocatable.get("memory", 0)) - taken.get("memory", Fraction(0)))
        offers.append(NodeOffer(name, slots, behind, reason, slots - free, free_cpu, free_memory))
    if kind == "auto":  # by the cluster's nodes, not their state now: a cordoned GPU pool stays a GPU pool
        kind = "gpu" if any(o.gpus for o in offers) else "cpu"
    return [o if not o.offered or bool(o.gpus) == (kind == "gpu") else dataclasses.replace(
        o, why_not=f"a {'CPU' if kind == 'gpu' else 'GPU'} node: this coordinator offers {kind.upper()} nodes, never "
                   "both in one gang (--node-kind; --node-selector for a pool)") for o in offers]


def slim_node(node: Json) -> dict[str, Any]:
    """What node_offers reads of a Node, nothing else: a node's heartbeat (its conditions' times) leaves it as
    it was, so the engine is not woken for it."""
    meta, spec, status = node.get("metadata") or {}, node.get("spec") or {}, node.get("status") or {}
    return {"metadata": {"name": meta.get("name", ""), "labels": dict(meta.get("labels") or {})},
            "spec": {"unschedulable": bool(spec.get("unschedulable")),
                     "taints": [{k: t.get(k) for k in ("key", "value", "effect")} for t in spec.get("taints") or ()]},
            "status": {"allocatable": dict(status.get("allocatable") or {}),
                       "conditions": [{"type": c.get("type"), "status": c.get("status")}
                                      for c in status.get("conditions") or () if c.get("type") == "Ready"]}}


def slim_pod(pod: Json) -> dict[str, Any] | None:
    """What node_offers reads of a pod that holds its node's resources (None: it holds none: not bound, or
    ended): its node, what it requests, whose it is. Its status is not kept (the watch's field selector sends
    a pod that ends as deleted): another workload's status changes leave it as it was."""
    spec, meta = pod.get("spec") or {}, pod.get("metadata") or {}
    phase = (pod.get("status") or {}).get("phase")
    if not spec.get("nodeName") or phase in _ENDED:
        return None
    labels = meta.get("labels") or {}

    def resources(containers: Any) -> list[dict[str, Any]]:
        return [{"resources": {k: dict(v) for k, v in (c.get("resources") or {}).items()
                              if k in ("limits", "requests") and v}} for c in containers or ()]

    return {"metadata": {"name": meta.get("name", ""), "namespace": meta.get("namespace", ""),
                         "labels": {k: labels[k] for k in (MANAGED_BY, JOB, PLACEHOLDER) if k in labels}},
            "spec": {"nodeName": spec["nodeName"], "containers": resources(spec.get("containers")),
                     "initContainers": resources(spec.get("initContainers"))}}
