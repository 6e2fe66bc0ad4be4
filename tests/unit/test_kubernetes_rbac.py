"""The coordinator's RBAC objects (cluster/engines/kubernetes/rbac.py) as values: no wildcard anywhere, the
cluster-wide role only reads nodes and pods, every object named and labelled for its namespace. The rights
themselves are tried on the real apiserver (tests/kubernetes/test_rbac.py)."""

import pytest

from cluster.engines.kubernetes.rbac import rbac_objects


def test_no_wildcard_and_the_cluster_role_only_reads():
    objects = rbac_objects("ml")
    assert [o["kind"] for o in objects] == ["Namespace", "ServiceAccount", "ServiceAccount", "Role", "RoleBinding",
                                            "ClusterRole", "ClusterRoleBinding"]
    rules = [r for o in objects for r in o.get("rules", ())]
    assert not [r for r in rules if "*" in r["verbs"] + r["resources"] + r["apiGroups"]]
    cluster_role = next(o for o in objects if o["kind"] == "ClusterRole")
    assert cluster_role["rules"] == [{"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["get", "list", "watch"]}]
    assert {o["metadata"].get("namespace") for o in objects if o["kind"] in ("ServiceAccount", "Role", "RoleBinding")} == {"ml"}
    assert cluster_role["metadata"]["name"] == "tfdist-coordinator-ml"  # one coordinator per namespace, side by side
    assert all(o["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "tfdist" for o in objects)


def test_the_namespace_enforces_podsecurity_restricted_and_the_jobs_account_has_no_binding_nor_token():
    """Issue 45, Measured 9 and 4: the shipped Namespace was not labelled; job pods could run as any account."""
    objects = rbac_objects("ml")
    namespace = objects[0]
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    job_account = next(o for o in objects if o["kind"] == "ServiceAccount" and o["metadata"]["name"] == "tfdist-job")
    assert job_account["automountServiceAccountToken"] is False
    subjects = [s for o in objects for s in o.get("subjects", ())]
    assert all(s["name"] == "tfdist-coordinator" for s in subjects)  # bound to nothing
    role = next(o for o in objects if o["kind"] == "Role")
    assert {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"],
            "verbs": ["get", "list", "watch", "create", "delete"]} in role["rules"]


def test_nobody_is_given_exec_or_attach_into_a_pod_by_the_shipped_manifests():
    """Issue 49, Must 3: credentials are issued over the coordinator's API with the admin credential in the
    Secret tfdist-admin; no shipped rule lets anyone into the coordinator's pod (or a job's)."""
    from cluster.engines.kubernetes.deploy import coordinator_objects

    for obj in [*rbac_objects("tfdist"), *coordinator_objects("tfdist", "tfdist:1")]:
        for rule in obj.get("rules", []):
            assert not {"pods/exec", "pods/attach", "pods/portforward", "*"} & set(rule["resources"]), obj["metadata"]


def test_no_job_may_be_given_the_administrator_s_credential():
    from cluster.engines.kubernetes.options import allowed_secrets
    from tfdist.errors import UserError

    assert allowed_secrets(["s3-credentials,tfdist-admin-notes"]) == ("s3-credentials", "tfdist-admin-notes")
    with pytest.raises(UserError, match="--allow-secret tfdist-admin would give jobs the administrator's credential"):
        allowed_secrets(["s3-credentials", "tfdist-admin"])


def test_the_shipped_manifests_close_the_namespace_but_the_coordinator_s_port():
    """Issue 49, Must 4: no pod of the namespace takes a connection unless a policy lets it; the coordinator takes
    its port from anyone (TLS and a credential on every call); each run lets in its own pods (made with it)."""
    from cluster.engines.kubernetes.deploy import PORT, coordinator_objects

    policies = {o["metadata"]["name"]: o["spec"] for o in coordinator_objects("tfdist", "tfdist:1")
                if o["kind"] == "NetworkPolicy"}
    assert policies["tfdist-default-deny"] == {"podSelector": {}, "policyTypes": ["Ingress"]}
    coordinator = policies["tfdist-coordinator"]
    assert coordinator["podSelector"]["matchLabels"]["app.kubernetes.io/name"] == "tfdist-coordinator"
    assert coordinator["ingress"] == [{"ports": [{"protocol": "TCP", "port": PORT}]}]
    role = next(o for o in rbac_objects("tfdist") if o["kind"] == "Role")
    assert any(r["apiGroups"] == ["networking.k8s.io"] and r["resources"] == ["networkpolicies"] for r in role["rules"])
