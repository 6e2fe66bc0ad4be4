"""The objects a job's gang is on Kubernetes, as the API's JSON (pure: tested as values, created by the engine):
one pod per node of the gang, pinned to its node through node affinity (so kube-scheduler still binds it
and counts its GPUs, which `spec.nodeName` would skip: FACTS.md), a headless Service that gives each pod a
stable DNS name for TF_CONFIG, and a Secret with what the workers must not show in a pod spec. Everything
carries tfdist's labels and an ownerReference to the job's Secret, so deleting that one object lets
Kubernetes' garbage collector remove the rest.

The user's `kubernetes.pod_spec` is the base of each pod (as Determined's `environment.pod_spec`): its
other containers, volumes, tolerations, node selector and a container named `tfdist-worker` (image, mounts,
resources beyond the GPUs) are kept; tfdist sets what the gang needs and no user value may change: the
command, the node pinning, the GPU count, the restart policy, no ServiceAccount token, the job's secret.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from typing import Any, Mapping, Sequence

from cluster.engines.kubernetes.offers import GPU, MANAGED_BY, TFDIST

Json = dict[str, Any]
WORKER = "tfdist-worker"  # the container that runs the node's ranks
SECRET_MOUNT = "/var/run/tfdist"
JOB_LABEL = "tfdist.io/job"
ATTEMPT_LABEL = "tfdist.io/attempt"
RANK_LABEL = "tfdist.io/node-rank"
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


def job_name(job_id: str) -> str:
    """The DNS label tfdist names a job's objects by ("tfdist-" and the id, lowercased, DNS-safe)."""
    return ("tfdist-" + _NOT_DNS.sub("-", job_id.lower())).strip("-")[:50]


def hostname(pod: GangPod) -> str:
    return f"a{pod.attempt}-n{pod.node_rank}"


def pod_name(pod: GangPod) -> str:
    return f"{job_name(pod.job_id)}-{hostname(pod)}"


def dns_name(job_id: str, attempt: int, node_rank: int, namespace: str) -> str:
    """The stable name the gang's other pods reach this one at (the headless Service's record)."""
    return f"a{attempt}-n{node_rank}.{job_name(job_id)}.{namespace}.svc"


def labels(job_id: str, **more: str) -> dict[str, str]:
    return {MANAGED_BY: TFDIST, JOB_LABEL: job_name(job_id), **more}


def secret(job_id: str, namespace: str, files: Mapping[str, bytes | str]) -> Json:
    """The job's Secret (its per-node start files: ranks' environments with the run's secrets); the owner of
    everything else the job creates."""
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": job_name(job_id), "namespace": namespace, "labels": labels(job_id)},
            "stringData": {k: v.decode() if isinstance(v, bytes) else v for k, v in files.items()}}


def owner(secret_object: Mapping[str, Any]) -> Json:
    """An ownerReference to the created Secret (its uid is the API's)."""
    meta = secret_object["metadata"]
    return {"apiVersion": "v1", "kind": "Secret", "name": meta["name"], "uid": meta["uid"],
            "blockOwnerDeletion": True}


def service(job_id: str, namespace: str, ports: Sequence[int], owner_ref: Json) -> Json:
    """Headless, publishing pods before they are ready (ranks must find each other while they start)."""
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": job_name(job_id), "namespace": namespace, "labels": labels(job_id),
                         "ownerReferences": [owner_ref]},
            "spec": {"clusterIP": "None", "publishNotReadyAddresses": True, "selector": labels(job_id),
                     "ports": [{"name": f"p{p}", "port": p, "targetPort": p} for p in ports]}}


def pod(gang_pod: GangPod, namespace: str, *, image: str, command: Sequence[str], env: Mapping[str, str],
        owner_ref: Json, pod_spec: Mapping[str, Any] | None = None) -> Json:
    """The pod of one node of the gang: the user's pod_spec with tfdist's part laid over it."""
    spec: Json = copy.deepcopy(dict(pod_spec or {}))
    containers = [c for c in spec.get("containers") or () if c.get("name") != WORKER]
    worker: Json = next((copy.deepcopy(c) for c in spec.get("containers") or () if c.get("name") == WORKER), {})
    resources = worker.setdefault("resources", {})
    if gang_pod.gpus:
        for kind in ("limits", "requests"):
            resources.setdefault(kind, {})[GPU] = str(gang_pod.gpus)
    else:
        resources.setdefault("requests", {})["cpu"] = str(gang_pod.slots)
    mounts = [m for m in worker.get("volumeMounts") or () if m.get("name") != "tfdist-job"]
    worker.update(name=WORKER, image=worker.get("image") or image, command=list(command),
                  env=[*(e for e in worker.get("env") or () if e.get("name") not in env),
                       *({"name": k, "value": v} for k, v in sorted(env.items()))],
                  volumeMounts=[*mounts, {"name": "tfdist-job", "mountPath": SECRET_MOUNT, "readOnly": True}])
    spec["containers"] = [worker, *containers]
    spec["volumes"] = [*(v for v in spec.get("volumes") or () if v.get("name") != "tfdist-job"),
                       {"name": "tfdist-job", "secret": {"secretName": job_name(gang_pod.job_id), "defaultMode": 0o400}}]
    spec.update(restartPolicy="Never", automountServiceAccountToken=False, hostname=hostname(gang_pod),
                subdomain=job_name(gang_pod.job_id), affinity=_pinned(spec.get("affinity"), gang_pod.node))
    spec.pop("nodeName", None)  # bound by the scheduler, which counts its GPUs, not around it
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod_name(gang_pod), "namespace": namespace, "ownerReferences": [owner_ref],
                         "labels": labels(gang_pod.job_id, **{ATTEMPT_LABEL: str(gang_pod.attempt),
                                                              RANK_LABEL: str(gang_pod.node_rank)})},
            "spec": spec}


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
