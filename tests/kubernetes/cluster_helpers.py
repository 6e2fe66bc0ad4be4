"""Helpers for tests against the real control plane: fake GPU nodes (KWOK), bounded waits on the API's state."""

from __future__ import annotations

import time
from typing import Callable, TypeVar

from lightkube import ApiError, Client
from lightkube.models.core_v1 import Container, NodeStatus, PodSpec, ResourceRequirements
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace, Node, Pod

T = TypeVar("T")
KWOK_LABEL = {"type": "kwok"}


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 60.0, every: float = 0.1) -> T:
    """`probe()`'s first truthy answer; an AssertionError naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        answer = probe()
        if answer:
            return answer
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:g}s")
        time.sleep(every)


def ready(node: Node) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in (node.status.conditions or ()))


def fake_gpu_nodes(client: Client, names: list[str], gpus: int = 8, cpu: str = "32",
                   labels: dict[str, str] | None = None) -> None:
    """Nodes KWOK keeps Ready, each with `gpus` allocatable nvidia.com/gpu (and `labels`); returns once all are
    Ready."""
    for name in names:
        client.create(Node(metadata=ObjectMeta(name=name, labels={**KWOK_LABEL, **(labels or {})}),
                           status=NodeStatus(allocatable={"cpu": cpu, "memory": "256Gi", "pods": "110",
                                                          "nvidia.com/gpu": str(gpus)})))
    wait_for(f"fake nodes {names} Ready", lambda: all(ready(client.get(Node, n)) for n in names))


def namespace(client: Client, name: str) -> str:
    client.create(Namespace(metadata=ObjectMeta(name=name)))
    return name


def gpu_pod(name: str, namespace_name: str, gpus: int, labels: dict[str, str] | None = None) -> Pod:
    return Pod(metadata=ObjectMeta(name=name, namespace=namespace_name, labels=labels or {}),
               spec=PodSpec(containers=[Container(name="worker", image="tfdist-test",
                                                  resources=ResourceRequirements(limits={"nvidia.com/gpu": str(gpus)}))],
                            automountServiceAccountToken=False))


def phase(client: Client, name: str, namespace_name: str) -> str:
    return client.get(Pod, name, namespace=namespace_name).status.phase or ""


def unschedulable(pod: Pod) -> bool:
    return any(c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"
               for c in (pod.status.conditions or ()))


def gone(client: Client, resource, name: str, namespace_name: str) -> bool:
    """The object is not there (404)."""
    try:
        client.get(resource, name, namespace=namespace_name)
        return False
    except ApiError as e:
        return e.status.code == 404


def coordinator_rights(plane, client: Client, namespace_name: str) -> tuple[str, list[dict]]:
    """The shipped RBAC (cluster/engines/kubernetes/rbac.py) for a coordinator of `namespace_name`, created; a
    kubeconfig holding its ServiceAccount's token (what it runs as, nothing more); the objects, for
    remove_rights."""
    from lightkube import codecs
    from lightkube.models.authentication_v1 import TokenRequestSpec
    from lightkube.resources.core_v1 import ServiceAccountToken

    from cluster.engines.kubernetes.rbac import COORDINATOR, rbac_objects

    objects = rbac_objects(namespace_name)
    for obj in objects:
        client.create(codecs.from_dict(obj))
    token = client.create(ServiceAccountToken(metadata=ObjectMeta(namespace=namespace_name),
                                              spec=TokenRequestSpec(audiences=[], expirationSeconds=7200)),
                          name=COORDINATOR, namespace=namespace_name).status.token
    return plane.kubeconfig(COORDINATOR, token=token), objects


def remove_rights(client: Client, objects: list[dict]) -> None:
    """The cluster-wide ones and the namespace (which takes the rest with it)."""
    from lightkube import codecs

    for obj in reversed(objects):
        if obj["kind"] in ("ClusterRole", "ClusterRoleBinding", "Namespace"):
            try:
                client.delete(type(codecs.from_dict(obj)), obj["metadata"]["name"])
            except ApiError as e:
                if e.status.code != 404:
                    raise
