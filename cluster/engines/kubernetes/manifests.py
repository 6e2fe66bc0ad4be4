"""The objects a job's gang is on Kubernetes, as the API's JSON (pure: tested as values, created by the engine):
one pod per node of the gang, pinned to its node through node affinity (so kube-scheduler still binds it
and counts its GPUs, which `spec.nodeName` would skip: FACTS.md), a headless Service that gives each pod a
stable DNS name for TF_CONFIG, and a Secret with what the workers must not show in a pod spec. Everything
carries tfdist's labels and an ownerReference to the job's Secret, so deleting that one object lets
Kubernetes' garbage collector remove the rest.

The user's `kubernetes.pod_spec` is the base of each pod (as Determined's `environment.pod_spec`, through
the allow-list of cluster/shared/pod_spec_rules.py): its other containers, volumes, tolerations, node
selector and a container named `tfdist-worker` (image, mounts, resources beyond the GPUs) are kept; tfdist
sets what the gang needs and no user value may change: the command, the node pinning, the GPU count, the
restart policy, the ServiceAccount (one with no rights, no token), the job's secret. Every pod passes
PodSecurity "restricted": a user other than root, no privilege escalation, every capability dropped, the
runtime's default seccomp profile. It asks for its node's CPUs and memory as well as its GPUs (what other
workloads leave there), so it is never BestEffort and a namespace quota can count it; `guaranteed` sets the
limits to the requests (QoS Guaranteed). A PodDisruptionBudget per run makes the eviction API refuse to
take one pod of a running gang: a drain cordons the node, the engine stops the gang at a common step with a
checkpoint and places it again elsewhere, and the drain then finds the node empty.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import re
from typing import Any, Mapping, Sequence

from cluster.engines.kubernetes.offers import GPU, JOB, MANAGED_BY, PLACEHOLDER, TFDIST

Json = dict[str, Any]
WORKER = "tfdist-worker"  # the container that runs the node's ranks
SECRET_MOUNT = "/var/run/tfdist"
JOB_LABEL = JOB
ATTEMPT_LABEL = "tfdist.io/attempt"
RANK_LABEL = "tfdist.io/node-rank"
JOB_ID_ANNOTATION = "tfdist.io/job-id"  # the job's id as tfdist knows it (a label value is only DNS-safe)
NODE_ANNOTATION = "tfdist.io/node"  # the node a pod is pinned to (a coordinator restarted reads both back)
_NOT_DNS = re.compile(r"[^a-z0-9-]+")


@dataclasses.dataclass(frozen=True)
class GangPod:
    """One node of a placed gang."""
    job_id: str
    attempt: int
    node_rank: int
    node: str  # the Kubernetes node it is pinned to
    slots: int
    gpus: int  # 0: a CPU node (the pod asks for `slots` CPUs instead)
    cpu: str = ""  # the CPUs it asks for (a quantity; "": a GPU pod asks for none, a CPU pod for `slots`)
    memory: str = ""  # the memory it asks for ("": none)


@dataclasses.dataclass(frozen=True)
class PodPolicy:
    """What the coordinator's administrator says of every job pod (its flags)."""
    service_account: str = "tfdist-job"  # a ServiceAccount with no rights (tfdist kubernetes manifests makes it)
    tolerations: tuple[Mapping[str, Any], ...] = ()  # the taints of the offered nodes it tolerates (offers.tolerations_of)
    guaranteed: bool = False  # limits = requests for CPU and memory (QoS Guaranteed)
    user: int = 1000  # the user, group and fsGroup a pod runs as where its pod_spec names none
    working_dir: str = ""  # the workers' directory in the image ("": the image's WorkingDir)


RESTRICTED_CONTAINER = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": True,
                        "seccompProfile": {"type": "RuntimeDefault"}}


def job_name(job_id: str) -> str:
    """The DNS label tfdist names a job's objects by ("tfdist-" and the id, lowercased, DNS-safe)."""
    return ("tfdist-" + _NOT_DNS.sub("-", job_id.lower())).strip("-")[:50]


def hostname(node: str) -> str:
    """A job's pod on `node` is named after the node (a DNS label): one pod per node and job at any time, so
    the name is known when the gang is placed, before its attempt's pods exist."""
    label = _NOT_DNS.sub("-", node.lower()).strip("-")
    if label == node and len(label) <= 63:
        return label
    return f"{label[:54].strip('-')}-{hashlib.sha256(node.encode()).hexdigest()[:8]}"


def gang_name(job_id: str, attempt: int) -> str:
    """The name of one run's Secret and headless Service (the pods' subdomain): a run's objects are its own, so
    the next run's never meet the last's being deleted."""
    return f"{job_name(job_id)}-a{attempt}"


def pod_name(pod: GangPod) -> str:
    return f"{gang_name(pod.job_id, pod.attempt)}-n{pod.node_rank}"


def dns_name(job_id: str, attempt: int, node: str, namespace: str) -> str:
    """The stable name the gang's other pods reach the run's pod on `node` at (the headless Service's record):
    known when the gang is placed, before its pods exist."""
    return f"{hostname(node)}.{gang_name(job_id, attempt)}.{namespace}.svc"


def credential_key(node_rank: int) -> str:
    """The job Secret's key holding the run credential of the gang's pod of `node_rank` (mounted in that pod
    alone)."""
    return f"node-{node_rank}.json"


def labels(job_id: str, attempt: int, **more: str) -> dict[str, str]:
    return {MANAGED_BY: TFDIST, JOB_LABEL: job_name(job_id), ATTEMPT_LABEL: str(attempt), **more}


def _meta(name: str, namespace: str, job_id: str, attempt: int, **more: str) -> Json:
    return {"name": name, "namespace": namespace, "labels": labels(job_id, attempt, **more),
            "annotations": {JOB_ID_ANNOTATION: job_id}}


def secret(job_id: str, attempt: int, namespace: str, files: Mapping[str, bytes | str]) -> Json:
    """The run's Secret (each pod's run credential, under credential_key); the owner of everything else the
    run creates."""
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": _meta(gang_name(job_id, attempt), namespace, job_id, attempt),
            "stringData": {k: v.decode() if isinstance(v, bytes) else v for k, v in files.items()}}


def owner(secret_object: Mapping[str, Any]) -> Json:
    """An ownerReference to the created Secret (its uid is the API's)."""
    meta = secret_object["metadata"]
    return {"apiVersion": "v1", "kind": "Secret", "name": meta["name"], "uid": meta["uid"],
            "blockOwnerDeletion": True}


def service(job_id: str, attempt: int, namespace: str, ports: Sequence[int], owner_ref: Json) -> Json:
    """Headless, publishing pods before they are ready (ranks must find each other while they start)."""
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {**_meta(gang_name(job_id, attempt), namespace, job_id, attempt), "ownerReferences": [owner_ref]},
            "spec": {"clusterIP": "None", "publishNotReadyAddresses": True, "selector": labels(job_id, attempt),
                     "ports": [{"name": f"p{p}", "port": p, "targetPort": p} for p in ports]}}


def pod(gang_pod: GangPod, namespace: str, *, image: str, command: Sequence[str], env: Mapping[str, str],
        owner_ref: Json, pod_spec: Mapping[str, Any] | None = None, grace: float = 30.0,
        policy: PodPolicy = PodPolicy()) -> Json:
    """The pod of one node of the gang: the user's pod_spec with tfdist's part laid over it."""
    spec: Json = copy.deepcopy(dict(pod_spec or {}))
    containers = [c for c in spec.get("containers") or () if c.get("name") != WORKER]
    worker: Json = next((copy.deepcopy(c) for c in spec.get("containers") or () if c.get("name") == WORKER), {})
    worker["resources"] = _resources(worker.get("resources") or {}, gang_pod, policy.guaranteed)
    mounts = [m for m in worker.get("volumeMounts") or () if m.get("name") != "tfdist-job"]
    worker.update(name=WORKER, image=worker.get("image") or image, command=list(command),
                  env=[*(e for e in worker.get("env") or () if e.get("name") not in env),
                       *({"name": k, "value": v} for k, v in sorted(env.items()))],
                  volumeMounts=[*mounts, {"name": "tfdist-job", "mountPath": SECRET_MOUNT, "readOnly": True}])
    if policy.working_dir:
        worker["workingDir"] = policy.working_dir
    for container in (worker, *containers, *(spec.get("initContainers") or ())):
        container["securityContext"] = {**copy.deepcopy(RESTRICTED_CONTAINER), **(container.get("securityContext") or {})}
    spec["containers"] = [worker, *containers]
    spec["securityContext"] = {"runAsNonRoot": True, "runAsUser": policy.user, "runAsGroup": policy.user,
                               "fsGroup": policy.user, "seccompProfile": {"type": "RuntimeDefault"},
                               **(spec.get("securityContext") or {})}
    spec["tolerations"] = [*(spec.get("tolerations") or ()),
                           *(t for t in policy.tolerations if t not in (spec.get("tolerations") or ()))]
    spec["serviceAccountName"] = policy.service_account
    spec["volumes"] = [*(v for v in spec.get("volumes") or () if v.get("name") != "tfdist-job"),
                       {"name": "tfdist-job", "secret": {
                           "secretName": gang_name(gang_pod.job_id, gang_pod.attempt), "defaultMode": 0o400,
                           "items": [{"key": credential_key(gang_pod.node_rank), "path": "credential.json"}]}}]
    spec.update(restartPolicy="Never", automountServiceAccountToken=False, hostname=hostname(gang_pod.node),
                terminationGracePeriodSeconds=max(1, round(grace)),
                subdomain=gang_name(gang_pod.job_id, gang_pod.attempt), affinity=_pinned(spec.get("affinity"), gang_pod.node))
    spec.pop("nodeName", None)  # bound by the scheduler, which counts its GPUs, not around it
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {**_meta(pod_name(gang_pod), namespace, gang_pod.job_id, gang_pod.attempt,
                                 **{RANK_LABEL: str(gang_pod.node_rank)}),
                         "annotations": {JOB_ID_ANNOTATION: gang_pod.job_id, NODE_ANNOTATION: gang_pod.node},
                         "ownerReferences": [owner_ref]},
            "spec": spec}


def _resources(given: Mapping[str, Any], gang_pod: GangPod, guaranteed: bool) -> Json:
    """The worker's resources: its node's GPUs (or its slots in CPUs), and the CPUs and memory it asks for,
    where the user's pod_spec asks for none."""
    resources: Json = {kind: dict(given.get(kind) or {}) for kind in ("limits", "requests")}
    resources.update({k: v for k, v in given.items() if k not in ("limits", "requests")})
    requests, limits = resources["requests"], resources["limits"]
    if gang_pod.gpus:
        limits[GPU] = requests[GPU] = str(gang_pod.gpus)
    for name, amount in (("cpu", gang_pod.cpu or ("" if gang_pod.gpus else str(gang_pod.slots))),
                         ("memory", gang_pod.memory)):
        if amount and name not in requests:
            requests[name] = limits[name] if name in limits else amount
        if guaranteed and name in requests:
            limits[name] = requests[name]
    return {k: v for k, v in resources.items() if v}


def disruption_budget(job_id: str, attempt: int, namespace: str, pods: int, owner_ref: Json) -> Json:
    """The run's PodDisruptionBudget: none of its pods may be evicted (a gang has no spare rank); a drain waits
    for the engine to move the gang, which it does at a common step with a checkpoint."""
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {**_meta(gang_name(job_id, attempt), namespace, job_id, attempt), "ownerReferences": [owner_ref]},
            "spec": {"minAvailable": pods, "selector": {"matchLabels": labels(job_id, attempt)}}}


def network_policy(job_id: str, attempt: int, namespace: str, owner_ref: Json) -> Json:
    """The run's ingress: its own pods reach each other (TensorFlow's, Horovod's and the job store's ports, which
    trust whoever connects), nothing else does: no other job's pod, nothing outside the namespace. With the
    namespace's default deny (deploy.py), every other pod of the namespace is closed as well. Egress stays
    open: a job reads its data wherever it is, and its agent reaches the coordinator."""
    own = {"podSelector": {"matchLabels": labels(job_id, attempt)}}
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {**_meta(gang_name(job_id, attempt), namespace, job_id, attempt), "ownerReferences": [owner_ref]},
            "spec": {**own, "policyTypes": ["Ingress"], "ingress": [{"from": [own]}]}}


def _pinned(affinity: Mapping[str, Any] | None, node: str) -> Json:
    """The user's affinity with a required `metadata.name == node` added to each of its node selector terms
    (terms are ORed, expressions within one ANDed), as the DaemonSet controller pins its pods."""
    result: Json = copy.deepcopy(dict(affinity or {}))
    node_affinity = result.setdefault("nodeAffinity", {})
    required = node_affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    pin = {"key": "metadata.name", "operator": "In", "values": [node]}
    terms = required.get("nodeSelectorTerms") or [{}]
    required["nodeSelectorTerms"] = [{**term, "matchFields": [*(f for f in term.get("matchFields") or ()
                                                                if f.get("key") != "metadata.name"), pin]}
                                     for term in terms]
    return result


PLACEHOLDER_LABEL = PLACEHOLDER
PAUSE = "registry.k8s.io/pause:3.10"  # a placeholder's image: it runs nothing


def placeholder(name: str, namespace: str, *, slots: int, gpus: bool, selector: Mapping[str, str],
                existing: Sequence[str], policy: PodPolicy = PodPolicy()) -> Json:
    """A pod that asks for one whole new node of an autoscaled pool (`selector`'s labels, its taints tolerated,
    never one of the pool's `existing` nodes: an idle one must not take it) and runs nothing: pending, it is
    the demand a cluster autoscaler answers with a node; tfdist deletes it as soon as it is bound (the node is
    there). A GPU node's GPUs, or nine tenths of a CPU node's CPUs (some are the system's). Restricted as
    every tfdist pod."""
    asked = {"nvidia.com/gpu": str(slots)} if gpus else {"cpu": f"{slots * 900}m"}
    # One requirement per node: the API takes a single value for a metadata.name field (the requirements of a
    # term all hold at once).
    avoid = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "NotIn", "values": [name]} for name in sorted(existing)]}]}} \
        if existing else None
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {MANAGED_BY: TFDIST, JOB_LABEL: "tfdist-placeholder", PLACEHOLDER_LABEL: "true"}},
            "spec": {"nodeSelector": dict(selector), "tolerations": [dict(t) for t in policy.tolerations],
                     **({"affinity": {"nodeAffinity": avoid}} if avoid else {}),
                     "serviceAccountName": policy.service_account, "automountServiceAccountToken": False,
                     "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                     "securityContext": {"runAsNonRoot": True, "runAsUser": policy.user, "runAsGroup": policy.user,
                                         "seccompProfile": {"type": "RuntimeDefault"}},
                     "containers": [{"name": "placeholder", "image": PAUSE,
                                     "resources": {"requests": dict(asked), "limits": dict(asked)},
                                     "securityContext": copy.deepcopy(RESTRICTED_CONTAINER)}]}}


KUEUE_QUEUE = "kueue.x-k8s.io/queue-name"
KUEUE_GROUP = "kueue.x-k8s.io/pod-group-name"
KUEUE_COUNT = "kueue.x-k8s.io/pod-group-total-count"
KUEUE_RETRIABLE = "kueue.x-k8s.io/retriable-in-group"  # "false": a pod that fails ends the group (quota freed)
KUEUE_GATE = "kueue.x-k8s.io/admission"  # the scheduling gate Kueue's webhook puts on the pods it admits


def in_kueue(pods: Sequence[Json], queue: str, group: str) -> list[Json]:
    """The run's pods as one Kueue pod group of the LocalQueue `queue`: Kueue admits the whole group under its
    ClusterQueue's quota (it gates them until then), or none of it. A pod of it that fails (or is deleted: its
    kubelet ends it) ends the group, and Kueue frees its quota: tfdist makes the next run a group of its own,
    where Kueue would otherwise wait for a replacement pod and keep the quota."""
    grouped = copy.deepcopy(list(pods))
    for pod in grouped:
        meta = pod["metadata"]
        meta["labels"] = {**meta.get("labels", {}), KUEUE_QUEUE: queue, KUEUE_GROUP: group}
        meta["annotations"] = {**meta.get("annotations", {}), KUEUE_COUNT: str(len(grouped)),
                               KUEUE_RETRIABLE: "false"}
    return grouped
