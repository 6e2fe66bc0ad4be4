"""The coordinator's own objects on Kubernetes, as the API's JSON (pure): what `tfdist kubernetes manifests`
prints for `kubectl apply -f -`. Its least rights (rbac.py), a PersistentVolumeClaim for its state (the SQLite
store and its credentials directory, which survive the pod), a one-replica Deployment that runs
`tfdist coordinator --engine kubernetes` as its ServiceAccount, and a Service its jobs' pods and its users reach
it at, and the namespace's NetworkPolicies (no pod takes a connection but the coordinator on its port and each
run's pods from each other). Its own pod mounts the ServiceAccount token (it calls the API); its jobs' pods
never do.

The volume's root is not the coordinator's: on a block volume (EBS, PD, Azure Disk) it is root's, and the
kubelet's fsGroup pass makes it `root:1000 2775`. tfdist keeps its state only in a directory of its own (0700),
so the state is a folder it makes under the root (`state/`), as is its HOME (`home/`). The pod passes
PodSecurity "restricted" (non-root, no privilege escalation, no capabilities, the runtime's seccomp profile)."""

from __future__ import annotations

from typing import Any

from cluster.engines.kubernetes.offers import MANAGED_BY, TFDIST
from cluster.engines.kubernetes.rbac import COORDINATOR, rbac_objects

PORT = 7470
VOLUME = "/var/lib/tfdist"  # where its volume is mounted (its root may be root's: never the state itself)
STATE = f"{VOLUME}/state"  # made by the coordinator, 0700, its own
HOME = f"{VOLUME}/home"
LOST_AFTER = 30
Json = dict[str, Any]


def service_address(namespace: str) -> str:
    """Where the jobs' pods (and users inside the cluster) reach the coordinator."""
    return f"{COORDINATOR}.{namespace}.svc:{PORT}"


def coordinator_objects(namespace: str, image: str, storage: str = "10Gi", storage_class: str = "") -> list[Json]:
    """In the order `kubectl apply` creates them. `image`: one with tfdist installed, for the coordinator and,
    unless a job's config names another, for its jobs' pods."""
    labels = {MANAGED_BY: TFDIST, "app.kubernetes.io/name": COORDINATOR}
    meta = {"name": COORDINATOR, "namespace": namespace, "labels": labels}
    claim: Json = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": storage}}}
    if storage_class:
        claim["storageClassName"] = storage_class
    command = ["tfdist", "coordinator", "--engine", "kubernetes", "--namespace", namespace,
               "--listen", f"0.0.0.0:{PORT}", "--http", "off", "--state-dir", STATE,
               "--advertise", service_address(namespace), "--image", image,
               # A pod that ends or vanishes is seen through the API at once; heartbeats only catch an agent that
               # hangs, and a pod's agent shares its CPUs with the workers it starts (6 s were missed under load).
               "--lost-after", str(LOST_AFTER)]
    container = {"name": "coordinator", "image": image, "command": command,
                 "ports": [{"name": "grpc", "containerPort": PORT}],
                 "env": [{"name": "HOME", "value": HOME}],  # its published credential and caches: on the volume
                 "volumeMounts": [{"name": "state", "mountPath": VOLUME}, {"name": "tmp", "mountPath": "/tmp"}],
                 "readinessProbe": {"tcpSocket": {"port": PORT}, "periodSeconds": 5},
                 "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                     "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": True}}
    return [
        *rbac_objects(namespace),
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta, "spec": claim},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
         "spec": {"replicas": 1, "strategy": {"type": "Recreate"},  # one coordinator owns the state at a time
                  "selector": {"matchLabels": labels},
                  "template": {"metadata": {"labels": labels},
                               "spec": {"serviceAccountName": COORDINATOR, "containers": [container],
                                        "terminationGracePeriodSeconds": 30,
                                        "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000,
                                                            "fsGroup": 1000,
                                                            "seccompProfile": {"type": "RuntimeDefault"}},
                                        "volumes": [{"name": "state",
                                                     "persistentVolumeClaim": {"claimName": COORDINATOR}},
                                                    {"name": "tmp", "emptyDir": {}}]}}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": meta,
         "spec": {"selector": labels, "ports": [{"name": "grpc", "port": PORT, "targetPort": PORT}]}},
        *network_policies(namespace, labels),
    ]


def network_policies(namespace: str, coordinator_labels: Json) -> list[Json]:
    """No pod of the namespace takes a connection unless a policy says so (a job's gRPC ports trust whoever
    connects); the coordinator takes its port from anyone (TLS and a credential on every call: its users, its
    jobs' agents); each run's pods take their own (manifests.network_policy, made with the run). Egress stays
    open. Enforced where the cluster's network enforces NetworkPolicies (Calico, Cilium, ...)."""
    meta = {"namespace": namespace, "labels": {MANAGED_BY: TFDIST}}
    return [
        {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": "tfdist-default-deny", **meta},
         "spec": {"podSelector": {}, "policyTypes": ["Ingress"]}},
        {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": COORDINATOR, **meta},
         "spec": {"podSelector": {"matchLabels": coordinator_labels}, "policyTypes": ["Ingress"],
                  "ingress": [{"ports": [{"protocol": "TCP", "port": PORT}]}]}},
    ]
