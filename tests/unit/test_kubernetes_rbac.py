"""The coordinator's RBAC objects (cluster/engines/kubernetes/rbac.py) as values: no wildcard anywhere, the
cluster-wide role only reads nodes and pods, every object named and labelled for its namespace. The rights
themselves are tried on the real apiserver (tests/kubernetes/test_rbac.py)."""

from cluster.engines.kubernetes.rbac import rbac_objects


def test_no_wildcard_and_the_cluster_role_only_reads():
    objects = rbac_objects("ml")
    assert [o["kind"] for o in objects] == ["Namespace", "ServiceAccount", "Role", "RoleBinding", "ClusterRole",
                                            "ClusterRoleBinding"]
    rules = [r for o in objects for r in o.get("rules", ())]
    assert not [r for r in rules if "*" in r["verbs"] + r["resources"] + r["apiGroups"]]
    cluster_role = next(o for o in objects if o["kind"] == "ClusterRole")
    assert cluster_role["rules"] == [{"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["get", "list", "watch"]}]
    assert {o["metadata"].get("namespace") for o in objects if o["kind"] in ("ServiceAccount", "Role", "RoleBinding")} == {"ml"}
    assert cluster_role["metadata"]["name"] == "tfdist-coordinator-ml"  # one coordinator per namespace, side by side
    assert all(o["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "tfdist"} for o in objects)
