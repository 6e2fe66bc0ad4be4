"""A gang's objects on Kubernetes (cluster/engines/kubernetes/manifests.py) as values: pinning that keeps the
scheduler's GPU accounting, the user's pod_spec as the base and tfdist's part laid over it, the owner chain."""

from cluster.engines.kubernetes import manifests as m

OWNER = {"apiVersion": "v1", "kind": "Secret", "name": "tfdist-7-ab12", "uid": "u-1", "blockOwnerDeletion": True}
GANG = m.GangPod("7-AB12", attempt=2, node_rank=1, node="gpu-3", slots=8, gpus=8)


def _pod(pod_spec=None, gang=GANG):
    return m.pod(gang, "ml", image="registry/tfdist:1", command=["python", "-m", "x"], env={"A": "1"},
                 owner_ref=OWNER, pod_spec=pod_spec)


def test_names_are_dns_labels_and_the_pod_is_reachable_by_a_stable_name():
    assert m.job_name("7-AB12") == "tfdist-7-ab12" and m.job_name("x_y.z") == "tfdist-x-y-z"
    pod = _pod()
    assert pod["metadata"]["name"] == "tfdist-7-ab12-a2-n1"
    # A run's pods are named after their nodes, under a subdomain of the run's own (its Service's).
    assert (pod["spec"]["hostname"], pod["spec"]["subdomain"]) == ("gpu-3", "tfdist-7-ab12-a2")
    assert m.dns_name("7-AB12", 2, "gpu-3", "ml") == "gpu-3.tfdist-7-ab12-a2.ml.svc"
    # A node name that is no DNS label (dots, capitals, too long) gets a label of its own, one per node.
    dotted, long = m.hostname("ip-10-0-0-1.ec2.Internal"), m.hostname("n" * 80)
    assert dotted.startswith("ip-10-0-0-1-ec2-internal-") and dotted != m.hostname("ip-10-0-0-1.ec2.internal")
    assert len(long) <= 63 and long != m.hostname("n" * 81)


def test_a_pod_mounts_only_its_own_nodes_credential_and_no_service_account_token():
    spec = _pod()["spec"]
    volume = next(v for v in spec["volumes"] if v["name"] == "tfdist-job")
    assert volume["secret"]["items"] == [{"key": "node-1.json", "path": "credential.json"}]
    assert volume["secret"]["defaultMode"] == 0o400 and spec["automountServiceAccountToken"] is False


def test_a_pod_is_pinned_by_affinity_not_bound_around_the_scheduler():
    spec = _pod({"nodeName": "elsewhere"})["spec"]
    assert "nodeName" not in spec
    assert spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] == [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-3"]}]}]


def test_the_users_node_affinity_terms_each_get_the_pin():
    user = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["other"]}]}]}},
        "podAntiAffinity": {"x": 1}}}
    affinity = _pod(user)["spec"]["affinity"]
    terms = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    pin = {"key": "metadata.name", "operator": "In", "values": ["gpu-3"]}
    assert terms == [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}], "matchFields": [pin]},
                     {"matchFields": [pin]}]
    assert affinity["podAntiAffinity"] == {"x": 1}
    assert user["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0] \
        == {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}  # the user's value untouched


def test_the_users_pod_spec_is_the_base_and_tfdists_part_wins():
    user = {"containers": [{"name": "sidecar", "image": "log:1"},
                           {"name": "tfdist-worker", "image": "mine:2", "env": [{"name": "A", "value": "0"},
                                                                                {"name": "B", "value": "2"}],
                            "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                            "resources": {"limits": {"nvidia.com/gpu": "1", "memory": "64Gi"}}}],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "d"}}],
            "tolerations": [{"key": "gpu", "operator": "Exists"}], "nodeSelector": {"pool": "a100"},
            "restartPolicy": "Always", "automountServiceAccountToken": True}
    spec = _pod(user)["spec"]
    worker, sidecar = spec["containers"]
    assert worker["name"] == "tfdist-worker" and worker["image"] == "mine:2"
    assert sidecar == {**user["containers"][0], "securityContext": m.RESTRICTED_CONTAINER}
    assert worker["command"] == ["python", "-m", "x"]
    assert worker["env"] == [{"name": "B", "value": "2"}, {"name": "A", "value": "1"}]
    assert worker["resources"] == {"limits": {"nvidia.com/gpu": "8", "memory": "64Gi"}, "requests": {"nvidia.com/gpu": "8"}}
    assert worker["volumeMounts"] == [{"name": "data", "mountPath": "/data"},
                                      {"name": "tfdist-job", "mountPath": "/var/run/tfdist", "readOnly": True}]
    assert spec["volumes"][-1] == {"name": "tfdist-job", "secret": {
        "secretName": "tfdist-7-ab12-a2", "defaultMode": 0o400, "items": [{"key": "node-1.json", "path": "credential.json"}]}}
    assert (spec["restartPolicy"], spec["automountServiceAccountToken"]) == ("Never", False)
    assert spec["serviceAccountName"] == "tfdist-job"
    assert (spec["tolerations"], spec["nodeSelector"]) == (user["tolerations"], user["nodeSelector"])


def test_a_cpu_node_asks_for_its_slots_in_cpus_and_the_default_image():
    gang = m.GangPod("7", attempt=0, node_rank=0, node="cpu-1", slots=4, gpus=0)
    worker = _pod(gang=gang)["spec"]["containers"][0]
    assert worker["image"] == "registry/tfdist:1" and worker["resources"] == {"requests": {"cpu": "4"}}


def test_everything_is_labelled_and_owned_by_the_jobs_secret():
    pod, service = _pod(), m.service("7-AB12", 2, "ml", [2222, 2223], OWNER)
    secret = m.secret("7-AB12", 2, "ml", {"node-0.json": b"{}"})
    for obj in (pod, service, secret):
        assert obj["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "tfdist"
        assert obj["metadata"]["labels"]["tfdist.io/job"] == "tfdist-7-ab12"
        assert obj["metadata"]["annotations"]["tfdist.io/job-id"] == "7-AB12"  # read back after a restart
    assert pod["metadata"]["ownerReferences"] == service["metadata"]["ownerReferences"] == [OWNER]
    assert pod["metadata"]["labels"]["tfdist.io/attempt"] == "2" and pod["metadata"]["labels"]["tfdist.io/node-rank"] == "1"
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    assert pod["metadata"]["annotations"]["tfdist.io/node"] == "gpu-3"
    assert service["spec"]["selector"] == {"app.kubernetes.io/managed-by": "tfdist", "tfdist.io/job": "tfdist-7-ab12",
                                           "tfdist.io/attempt": "2"}
    assert secret["stringData"] == {"node-0.json": "{}"}
    created = {**secret, "metadata": {**secret["metadata"], "uid": "u-9"}}
    assert m.owner(created) == {"apiVersion": "v1", "kind": "Secret", "name": "tfdist-7-ab12-a2", "uid": "u-9",
                                "blockOwnerDeletion": True}


def test_every_pod_passes_podsecurity_restricted_and_runs_under_a_service_account_with_no_rights():
    """Issue 45, Measured 9 and 4: no security context failed "restricted"; the pods could name any ServiceAccount."""
    spec = _pod({"initContainers": [{"name": "fetch", "image": "x"}],
                 "securityContext": {"fsGroup": 2000}})["spec"]
    for container in (*spec["containers"], *spec["initContainers"]):
        assert container["securityContext"] == m.RESTRICTED_CONTAINER
    assert spec["securityContext"] == {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 2000,
                                       "seccompProfile": {"type": "RuntimeDefault"}}
    assert spec["serviceAccountName"] == "tfdist-job" and spec["automountServiceAccountToken"] is False
    named = m.pod(GANG, "ml", image="i", command=["c"], env={}, owner_ref=OWNER,
                  policy=m.PodPolicy(service_account="training", user=4242))["spec"]
    assert named["serviceAccountName"] == "training" and named["securityContext"]["runAsUser"] == 4242


def test_a_pod_asks_for_its_nodes_cpus_and_memory_and_guaranteed_sets_the_limits():
    """Issue 45, Measured 7: pods asking for GPUs alone were BestEffort and a quota that needs requests refused them."""
    gang = m.GangPod("7", attempt=0, node_rank=0, node="gpu-1", slots=8, gpus=8, cpu="94500m", memory="700Gi")
    burstable = _pod(gang=gang)["spec"]["containers"][0]["resources"]
    assert burstable == {"limits": {"nvidia.com/gpu": "8"},
                         "requests": {"nvidia.com/gpu": "8", "cpu": "94500m", "memory": "700Gi"}}
    guaranteed = m.pod(gang, "ml", image="i", command=["c"], env={}, owner_ref=OWNER,
                       policy=m.PodPolicy(guaranteed=True))["spec"]["containers"][0]["resources"]
    assert guaranteed["limits"] == guaranteed["requests"] == {"nvidia.com/gpu": "8", "cpu": "94500m", "memory": "700Gi"}
    mine = _pod({"containers": [{"name": "tfdist-worker", "resources": {"requests": {"cpu": "4"},
                                                                       "limits": {"memory": "64Gi"}}}]}, gang)
    assert mine["spec"]["containers"][0]["resources"] == {
        "limits": {"memory": "64Gi", "nvidia.com/gpu": "8"},
        "requests": {"cpu": "4", "nvidia.com/gpu": "8", "memory": "64Gi"}}


def test_tolerations_and_working_dir_come_from_the_coordinator_and_the_config():
    policy = m.PodPolicy(tolerations=({"key": "nvidia.com/gpu", "operator": "Exists"},), working_dir="/workspace")
    spec = m.pod(GANG, "ml", image="i", command=["c"], env={}, owner_ref=OWNER, policy=policy,
                 pod_spec={"tolerations": [{"key": "pool", "operator": "Exists"}]})["spec"]
    assert spec["tolerations"] == [{"key": "pool", "operator": "Exists"}, {"key": "nvidia.com/gpu", "operator": "Exists"}]
    assert spec["containers"][0]["workingDir"] == "/workspace"
    assert "workingDir" not in _pod()["spec"]["containers"][0]  # the image's own


def test_a_runs_disruption_budget_keeps_every_pod_of_its_gang():
    budget = m.disruption_budget("7-AB12", 2, "ml", 3, OWNER)
    assert budget["kind"] == "PodDisruptionBudget" and budget["spec"]["minAvailable"] == 3
    assert budget["spec"]["selector"]["matchLabels"] == m.labels("7-AB12", 2)
    assert budget["metadata"]["ownerReferences"] == [OWNER] and budget["metadata"]["name"] == "tfdist-7-ab12-a2"
