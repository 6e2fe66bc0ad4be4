"""The least rights the Kubernetes engine's coordinator runs with, as the API's JSON (pure): its Namespace
(labelled for PodSecurity "restricted": every pod there, the coordinator's and its jobs', must pass it) and
ServiceAccount, a Role in that namespace for what a job is made of (pods, the headless Service, the job's
Secret, its PodDisruptionBudget and NetworkPolicy) and the events that say why a gang was torn down, and a ClusterRole that only
reads: nodes (what is offered) and pods (other workloads' GPU requests on those nodes are on their pods, not on
the Node). Nothing else: it cannot write outside its namespace, change a node, or read another namespace's
Secrets. The jobs' pods run as a ServiceAccount of their own, bound to nothing, with no token mounted: a
training script can do nothing with the API.
"""

from __future__ import annotations

from typing import Any

from cluster.engines.kubernetes.offers import MANAGED_BY, TFDIST

COORDINATOR = "tfdist-coordinator"
JOB_ACCOUNT = "tfdist-job"  # the jobs' pods' ServiceAccount: no binding, no token
JOB_RESOURCES = ("pods", "services", "secrets")
POLICY_RESOURCES = ("poddisruptionbudgets",)
NETWORK_RESOURCES = ("networkpolicies",)  # each run's ingress (manifests.network_policy)
POD_SECURITY = {f"pod-security.kubernetes.io/{mode}": "restricted" for mode in ("enforce", "warn", "audit")}
JOB_VERBS = ("get", "list", "watch", "create", "delete")
CLUSTER_READS = ("nodes", "pods")
READ_VERBS = ("get", "list", "watch")


def _meta(name: str, namespace: str | None = None, **labels: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {MANAGED_BY: TFDIST, **labels}}
    if namespace is not None:
        meta["namespace"] = namespace
    return meta


def rbac_objects(namespace: str) -> list[dict[str, Any]]:
    """In the order they can be created. The cluster-wide names carry the namespace: several coordinators
    (one per namespace) can share a cluster."""
    cluster_name = f"{COORDINATOR}-{namespace}"
    subject = {"kind": "ServiceAccount", "name": COORDINATOR, "namespace": namespace}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": _meta(namespace, **POD_SECURITY)},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(COORDINATOR, namespace),
         "automountServiceAccountToken": True},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(JOB_ACCOUNT, namespace),
         "automountServiceAccountToken": False},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": _meta(COORDINATOR, namespace),
         "rules": [{"apiGroups": [""], "resources": list(JOB_RESOURCES), "verbs": list(JOB_VERBS)},
                   {"apiGroups": ["policy"], "resources": list(POLICY_RESOURCES), "verbs": list(JOB_VERBS)},
                   {"apiGroups": ["networking.k8s.io"], "resources": list(NETWORK_RESOURCES),
                    "verbs": list(JOB_VERBS)},
                   {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": _meta(COORDINATOR, namespace),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": COORDINATOR},
         "subjects": [subject]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": _meta(cluster_name),
         "rules": [{"apiGroups": [""], "resources": list(CLUSTER_READS), "verbs": list(READ_VERBS)}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": _meta(cluster_name),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_name},
         "subjects": [subject]},
    ]
