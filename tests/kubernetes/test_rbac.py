"""The coordinator's least rights (cluster/engines/kubernetes/rbac.py) on the real apiserver, as its
ServiceAccount's own token: what a job is made of, in its namespace, and reading nodes and pods; refused
everything else (another namespace, a node's change, another namespace's Secrets, the cluster's RBAC)."""

from __future__ import annotations

import pytest
from lightkube import ApiError, Client, KubeConfig, codecs
from lightkube.models.authentication_v1 import TokenRequestSpec
from lightkube.models.core_v1 import ObjectReference, ServicePort, ServiceSpec
from lightkube.models.meta_v1 import LabelSelector, ObjectMeta
from lightkube.models.networking_v1 import NetworkPolicySpec
from lightkube.resources.core_v1 import Namespace, Node, Pod, Secret, Service, ServiceAccountToken
from lightkube.resources.events_v1 import Event
from lightkube.resources.networking_v1 import NetworkPolicy
from lightkube.resources.rbac_authorization_v1 import ClusterRole, ClusterRoleBinding

from cluster.engines.kubernetes.rbac import COORDINATOR, rbac_objects
from tests.kubernetes.cluster_helpers import fake_gpu_nodes, wait_for

pytestmark = pytest.mark.timeout(180)
NS = "tfdist-rbac"


def _refused(call) -> bool:
    try:
        result = call()
        if hasattr(result, "__iter__") and not hasattr(result, "to_dict"):
            list(result)  # lightkube lists lazily: no request until read
    except ApiError as e:
        return e.status.code == 403
    return False


def _pod(name, namespace):
    """A pod PodSecurity "restricted" admits (the shipped Namespace enforces it)."""
    from cluster.engines.kubernetes.manifests import RESTRICTED_CONTAINER

    return Pod.from_dict({"metadata": {"name": name, "namespace": namespace}, "spec": {
        "containers": [{"name": "w", "image": "x", "securityContext": RESTRICTED_CONTAINER}],
        "securityContext": {"runAsUser": 1000}, "automountServiceAccountToken": False}})


def test_the_coordinator_may_make_jobs_in_its_namespace_and_read_nodes_and_pods_and_nothing_more(plane, admin):
    fake_gpu_nodes(admin, ["rbac-node"])
    for obj in rbac_objects(NS):
        admin.create(codecs.from_dict(obj))
    try:
        token = admin.create(ServiceAccountToken(metadata=ObjectMeta(namespace=NS),
                                                 spec=TokenRequestSpec(audiences=[], expirationSeconds=3600)),
                             name=COORDINATOR, namespace=NS).status.token
        coordinator = Client(KubeConfig.from_file(plane.kubeconfig("tfdist-coordinator", token=token)))
        # allowed (the authorizer's cache may take a moment to see the new bindings)
        wait_for("the coordinator's Role in force", lambda: not _refused(lambda: coordinator.list(Pod, namespace=NS)))
        coordinator.create(Secret(metadata=ObjectMeta(name="job", namespace=NS), stringData={"node-0.json": "{}"}))
        coordinator.create(Service(metadata=ObjectMeta(name="job", namespace=NS),
                                   spec=ServiceSpec(clusterIP="None", ports=[ServicePort(port=2222)])))
        coordinator.create(_pod("job-a0-n0", NS))
        assert [n.metadata.name for n in coordinator.list(Node)] == ["rbac-node"]
        assert {p.metadata.name for p in coordinator.list(Pod, namespace="*")} >= {"job-a0-n0"}
        coordinator.create(Event(metadata=ObjectMeta(name="gang-torn-down", namespace=NS), eventTime="2026-11-27T00:00:00.000000Z",
                                 reportingController="tfdist.io/coordinator", reportingInstance="test",
                                 action="TearDown", reason="GangIncomplete", type="Normal",
                                 regarding=ObjectReference(apiVersion="v1", kind="Pod", name="job-a0-n0", namespace=NS)))
        coordinator.create(NetworkPolicy(metadata=ObjectMeta(name="job", namespace=NS), spec=NetworkPolicySpec(
            podSelector=LabelSelector(matchLabels={"tfdist.io/job": "job"}), policyTypes=["Ingress"])))
        coordinator.delete(NetworkPolicy, "job", namespace=NS)
        coordinator.delete(Pod, "job-a0-n0", namespace=NS)
        coordinator.delete(Service, "job", namespace=NS)
        coordinator.delete(Secret, "job", namespace=NS)
        # refused
        assert _refused(lambda: coordinator.create(_pod("elsewhere", "default")))
        assert _refused(lambda: coordinator.list(Secret, namespace="default"))
        assert _refused(lambda: coordinator.delete(Node, "rbac-node"))
        assert _refused(lambda: coordinator.patch(Node, "rbac-node", {"spec": {"unschedulable": True}}))
        assert _refused(lambda: coordinator.create(Namespace(metadata=ObjectMeta(name="mine"))))
        assert _refused(lambda: coordinator.delete(ClusterRoleBinding, f"{COORDINATOR}-{NS}"))
        assert not [p for p in admin.list(Pod, namespace="default") if p.metadata.name == "elsewhere"]
        assert not admin.get(Node, "rbac-node").spec.unschedulable
    finally:
        admin.delete(Namespace, NS)
        admin.delete(ClusterRoleBinding, f"{COORDINATOR}-{NS}")
        admin.delete(ClusterRole, f"{COORDINATOR}-{NS}")
        admin.delete(Node, "rbac-node")



@pytest.fixture
def manifests_namespace(admin):
    yield "tfdist-manifests"
    try:
        admin.delete(Namespace, "tfdist-manifests")
    except ApiError:
        pass


def test_the_shipped_coordinator_manifests_are_accepted_by_the_api_server(plane, admin, manifests_namespace):
    """`tfdist kubernetes manifests` prints what the API server takes as it is (checked by the server itself:
    the namespace made, everything else dry-run): the RBAC above, the state's claim, the Deployment, the Service,
    the NetworkPolicies."""
    import subprocess
    import sys

    import yaml

    from tests.conftest import REPO

    ns = manifests_namespace
    printed = subprocess.run([sys.executable, "-m", "cluster.client.cli", "kubernetes", "manifests", "--namespace", ns,
                              "--image", "registry.example.com/tfdist:1"], cwd=REPO, capture_output=True, text=True,
                             timeout=60)
    assert printed.returncode == 0, printed.stderr
    objects = list(yaml.safe_load_all(printed.stdout))
    assert [o["kind"] for o in objects] == ["Namespace", "ServiceAccount", "ServiceAccount", "Role", "RoleBinding",
                                            "ClusterRole", "ClusterRoleBinding", "PersistentVolumeClaim", "Deployment",
                                            "Service", "NetworkPolicy", "NetworkPolicy"]
    admin.create(codecs.from_dict(objects[0]))
    for obj in objects[1:]:
        admin.create(codecs.from_dict(obj), dry_run=True)  # the server validates it whole, stores nothing
    deployment = objects[8]["spec"]["template"]["spec"]
    assert deployment["serviceAccountName"] == COORDINATOR and "--engine" in deployment["containers"][0]["command"]
    assert f"tfdist-coordinator.{ns}.svc:7470" in deployment["containers"][0]["command"]
    # Measured 9: PodSecurity "restricted", which the shipped Namespace enforces, admits the coordinator's pod
    # (a Deployment's pods are checked when the ReplicaSet makes them: the template is tried as a pod here).
    assert objects[0]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    template = {k: v for k, v in deployment.items() if k != "serviceAccountName"}  # (its account is a dry run's)
    admin.create(codecs.from_dict({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "coordinator-template", "namespace": ns}, "spec": template}), dry_run=True)
