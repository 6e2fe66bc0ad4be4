"""A job's kubernetes.pod_spec through an allow-list (issue 45, Measured 4): the pods are created by the
coordinator's ServiceAccount, so what the spec may say, every user may have. Checked with the config, so a
bad spec is one line at submit, before any node is placed."""

import pytest

from cluster.shared.config import config_from_dict
from cluster.shared.config_values import ConfigError
from cluster.shared.pod_spec_rules import check_pod_spec, secrets_named

ALLOWED = {
    "containers": [{"name": "tfdist-worker", "image": "registry.example.com/train:1", "workingDir": "/app",
                    "env": [{"name": "A", "value": "1"},
                            {"name": "KEY", "valueFrom": {"secretKeyRef": {"name": "s3", "key": "key"}}}],
                    "volumeMounts": [{"name": "ckpt", "mountPath": "/ckpt"}],
                    "resources": {"limits": {"memory": "200Gi"}},
                    "securityContext": {"runAsUser": 1000, "readOnlyRootFilesystem": True,
                                        "capabilities": {"drop": ["ALL"]}},
                    "ports": [{"containerPort": 8080}],
                    "readinessProbe": {"httpGet": {"path": "/", "port": 8080}}},
                   {"name": "sidecar", "image": "busybox"}],
    "volumes": [{"name": "ckpt", "persistentVolumeClaim": {"claimName": "shared-checkpoints"}},
                {"name": "shm", "emptyDir": {"medium": "Memory"}},
                {"name": "cfg", "projected": {"sources": [{"configMap": {"name": "c"}}]}}],
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
    "nodeSelector": {"pool": "a100"},
    "securityContext": {"fsGroup": 2000, "runAsNonRoot": True},
}


def test_what_a_training_pod_needs_passes():
    check_pod_spec(ALLOWED)
    assert secrets_named(ALLOWED) == {"s3"}


@pytest.mark.parametrize("spec, named", [
    ({"serviceAccountName": "tfdist-coordinator"}, "kubernetes.pod_spec.serviceAccountName"),
    ({"automountServiceAccountToken": True}, "kubernetes.pod_spec.automountServiceAccountToken"),
    ({"hostNetwork": True}, "kubernetes.pod_spec.hostNetwork"),
    ({"hostPID": True}, "kubernetes.pod_spec.hostPID"),
    ({"nodeName": "n1"}, "kubernetes.pod_spec.nodeName"),
    ({"priorityClassName": "system-node-critical"}, "kubernetes.pod_spec.priorityClassName"),
    ({"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}, "kubernetes.pod_spec.volumes[0].hostPath"),
    ({"volumes": [{"name": "t", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}}]},
     "kubernetes.pod_spec.volumes[0].projected.sources[0].serviceAccountToken"),
    ({"volumes": [{"name": "c", "secret": {"secretName": "tfdist-job-7-a0"}}]},
     "kubernetes.pod_spec.volumes[0].secret.secretName"),
    ({"volumes": [{"name": "s", "persistentVolumeClaim": {"claimName": "tfdist-coordinator"}}]},
     "kubernetes.pod_spec.volumes[0].persistentVolumeClaim.claimName"),
    ({"containers": [{"name": "tfdist-worker", "securityContext": {"privileged": True}}]},
     "kubernetes.pod_spec.containers[0].securityContext.privileged"),
    ({"containers": [{"name": "x", "securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}]},
     "kubernetes.pod_spec.containers[0].securityContext.capabilities"),
    ({"initContainers": [{"name": "x", "securityContext": {"runAsUser": 0}}]},
     "kubernetes.pod_spec.initContainers[0].securityContext.runAsUser"),
    ({"securityContext": {"runAsNonRoot": False}}, "kubernetes.pod_spec.securityContext.runAsNonRoot"),
    ({"securityContext": {"sysctls": [{"name": "kernel.shm_rmid_forced", "value": "0"}]}},
     "kubernetes.pod_spec.securityContext.sysctls"),
    ({"containers": [{"name": "x", "envFrom": [{"secretRef": {"name": "tfdist-job-1-a0"}}]}]},
     "kubernetes.pod_spec.containers[0].envFrom[0].secretRef.name"),
    # a review's findings: a clone of the coordinator's volume, the node's network through a probe, the node's
    # ports, capabilities kept, root's group, a CSI volume's secret, and shapes that are no mapping
    ({"volumes": [{"name": "e", "ephemeral": {"volumeClaimTemplate": {"spec": {
        "dataSource": {"kind": "PersistentVolumeClaim", "name": "tfdist-coordinator"}}}}}]},
     "kubernetes.pod_spec.volumes[0].ephemeral.volumeClaimTemplate.spec.dataSource"),
    ({"volumes": [{"name": "c", "csi": {"driver": "d", "nodePublishSecretRef": {"name": "tfdist-7-a0"}}}]},
     "kubernetes.pod_spec.volumes[0].csi.nodePublishSecretRef.name"),
    ({"containers": [{"name": "x", "livenessProbe": {"httpGet": {"host": "169.254.169.254", "path": "/", "port": 80}}}]},
     "kubernetes.pod_spec.containers[0].livenessProbe.httpGet.host"),
    ({"containers": [{"name": "x", "lifecycle": {"preStop": {"tcpSocket": {"host": "10.0.0.1", "port": 10250}}}}]},
     "kubernetes.pod_spec.containers[0].lifecycle.preStop.tcpSocket.host"),
    ({"containers": [{"name": "x", "ports": [{"containerPort": 80, "hostPort": 80}]}]},
     "kubernetes.pod_spec.containers[0].ports[0].hostPort"),
    ({"containers": [{"name": "x", "securityContext": {"capabilities": {"drop": []}}}]},
     "kubernetes.pod_spec.containers[0].securityContext.capabilities"),
    ({"securityContext": {"supplementalGroups": [0]}}, "kubernetes.pod_spec.securityContext.supplementalGroups"),
    ({"securityContext": {"fsGroup": 0}}, "kubernetes.pod_spec.securityContext.fsGroup"),
    ({"containers": [{"name": "x", "env": [{"name": "A", "valueFrom": "x"}]}]},
     "kubernetes.pod_spec.containers[0].env[0].valueFrom"),
    ({"volumes": [{"name": "p", "projected": ["x"]}]}, "kubernetes.pod_spec.volumes[0].projected"),
])
def test_what_would_give_a_job_more_rights_than_its_user_is_refused_at_submit_in_one_line(spec, named):
    with pytest.raises(ConfigError) as error:
        config_from_dict({"entrypoint": "python train.py", "kubernetes": {"pod_spec": spec}})
    message = str(error.value)
    assert message.startswith(named + ":") and "\n" not in message, message


def test_the_working_dir_is_an_absolute_path_in_the_image():
    config = config_from_dict({"entrypoint": "python train.py", "kubernetes": {"working_dir": "/workspace"}})
    assert config.kubernetes["working_dir"] == "/workspace"
    with pytest.raises(ConfigError, match="kubernetes.working_dir: 'app' is not an absolute path"):
        config_from_dict({"entrypoint": "python train.py", "kubernetes": {"working_dir": "app"}})
