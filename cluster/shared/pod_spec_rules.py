"""What a job's `kubernetes.pod_spec` may say (pure; checked with the config, at submit and on the wire).

A job's pods are created by the coordinator's ServiceAccount, so Kubernetes' RBAC never sees the user who
wrote the spec: whatever the spec may say, every user may have. It is therefore an allow-list, not a deny-list:
the keys a training pod needs (its containers' image, env, mounts, resources, working directory; volumes of
the kinds PodSecurity "restricted" allows; where it may run) pass, and anything else is refused in one line
naming the key. Refused, among others: another ServiceAccount or its token (a projected serviceAccountToken),
hostPath/hostNetwork/hostPID/hostIPC, privileged or added capabilities, running as root, tfdist's own objects
(its Secrets hold every run's credential; its volume the cluster's CA key). Which Secrets a job may mount is
the coordinator's to say (`--allow-secret`): the engine checks that when it makes the pods."""

from __future__ import annotations

from typing import Any, Iterator, Mapping

from cluster.shared.config_values import ConfigError

# Pod-level keys a job may set; tfdist sets the rest (command, pinning, restart policy, ServiceAccount, ...).
POD_KEYS = frozenset({"containers", "initContainers", "volumes", "tolerations", "nodeSelector", "affinity",
                      "topologySpreadConstraints", "securityContext", "imagePullSecrets", "dnsConfig", "dnsPolicy",
                      "hostAliases", "enableServiceLinks", "shareProcessNamespace"})
CONTAINER_KEYS = frozenset({"name", "image", "imagePullPolicy", "command", "args", "env", "envFrom", "volumeMounts",
                            "resources", "workingDir", "ports", "securityContext", "stdin", "tty",
                            "terminationMessagePath", "terminationMessagePolicy", "livenessProbe", "readinessProbe",
                            "startupProbe", "lifecycle", "restartPolicy"})
# The volume kinds PodSecurity "restricted" allows, less what could carry a ServiceAccount token.
VOLUME_KINDS = frozenset({"emptyDir", "persistentVolumeClaim", "configMap", "secret", "downwardAPI", "ephemeral",
                          "csi", "projected"})
PROJECTED_SOURCES = frozenset({"configMap", "secret", "downwardAPI", "clusterTrustBundle"})
# securityContext fields that only take rights away (or name the non-root user/group the pod runs as).
POD_SECURITY_KEYS = frozenset({"runAsUser", "runAsGroup", "runAsNonRoot", "fsGroup", "supplementalGroups",
                               "fsGroupChangePolicy", "seccompProfile"})
CONTAINER_SECURITY_KEYS = frozenset({"runAsUser", "runAsGroup", "runAsNonRoot", "readOnlyRootFilesystem",
                                     "allowPrivilegeEscalation", "capabilities", "seccompProfile"})
RESERVED_PREFIX = "tfdist-"  # tfdist's own objects in its namespace: its run Secrets, its coordinator's volume


class PodSpecError(ConfigError):
    """One line: the refused key (its path under kubernetes.pod_spec) and what to do instead."""


def check_pod_spec(spec: Mapping[str, Any]) -> None:
    """Raises PodSpecError for the first thing in `spec` a job may not set."""
    where = "kubernetes.pod_spec"
    for key in spec:
        if key not in POD_KEYS:
            raise PodSpecError(f"{where}.{key}: not allowed in a job's pod spec ({_why(key)}); allowed: "
                               f"{', '.join(sorted(POD_KEYS))}")
    _check_security(spec.get("securityContext"), f"{where}.securityContext", POD_SECURITY_KEYS)
    for kind in ("containers", "initContainers"):
        for i, container in enumerate(_items(spec.get(kind), f"{where}.{kind}")):
            _check_container(container, f"{where}.{kind}[{i}]")
    for i, volume in enumerate(_items(spec.get("volumes"), f"{where}.volumes")):
        _check_volume(volume, f"{where}.volumes[{i}]")
    for i, ref in enumerate(_items(spec.get("imagePullSecrets"), f"{where}.imagePullSecrets")):
        _not_reserved(ref.get("name"), f"{where}.imagePullSecrets[{i}].name", "Secret")


def secrets_named(spec: Mapping[str, Any]) -> set[str]:
    """Every Secret the spec would give its pods (volumes, projected sources, env, envFrom)."""
    names: set[str] = set()
    for volume in spec.get("volumes") or ():
        if isinstance(volume, Mapping):
            if isinstance(volume.get("secret"), Mapping):
                names.add(str(volume["secret"].get("secretName", "")))
            if isinstance(volume.get("csi"), Mapping) and isinstance(volume["csi"].get("nodePublishSecretRef"), Mapping):
                names.add(str(volume["csi"]["nodePublishSecretRef"].get("name", "")))
            for source in (volume.get("projected") or {}).get("sources") or ():
                if isinstance(source, Mapping) and isinstance(source.get("secret"), Mapping):
                    names.add(str(source["secret"].get("name", "")))
    for container in _containers(spec):
        for item in container.get("env") or ():
            ref = ((item or {}).get("valueFrom") or {}).get("secretKeyRef") if isinstance(item, Mapping) else None
            if isinstance(ref, Mapping):
                names.add(str(ref.get("name", "")))
        for item in container.get("envFrom") or ():
            ref = item.get("secretRef") if isinstance(item, Mapping) else None
            if isinstance(ref, Mapping):
                names.add(str(ref.get("name", "")))
    return names


def _containers(spec: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    for kind in ("containers", "initContainers"):
        for container in spec.get(kind) or ():
            if isinstance(container, Mapping):
                yield container


def _items(value: Any, where: str) -> list[Mapping[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, Mapping) for v in value):
        raise PodSpecError(f"{where}: expected a list of mappings")
    return value


def _why(key: str) -> str:
    if key in ("serviceAccountName", "serviceAccount", "automountServiceAccountToken"):
        return "a job's pods run under the ServiceAccount the coordinator's administrator names, with no token"
    if key in ("hostNetwork", "hostPID", "hostIPC", "hostUsers"):
        return "a job's pods never share the node's namespaces"
    if key in ("nodeName", "schedulerName", "restartPolicy", "hostname", "subdomain", "terminationGracePeriodSeconds",
               "activeDeadlineSeconds", "runtimeClassName", "preemptionPolicy", "overhead", "priority",
               "schedulingGates", "resourceClaims"):
        return "tfdist sets it for the gang"
    if key == "priorityClassName":
        return "tfdist's queue orders jobs: give the job a priority with `tfdist launch --priority`"
    return "not a key a training pod needs"


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise PodSpecError(f"{where}: expected a mapping, got {type(value).__name__}")
    return value


def _check_container(container: Mapping[str, Any], where: str) -> None:
    for key in container:
        if key not in CONTAINER_KEYS:
            raise PodSpecError(f"{where}.{key}: not allowed in a job's container; allowed: "
                               f"{', '.join(sorted(CONTAINER_KEYS))}")
    _check_security(container.get("securityContext"), f"{where}.securityContext", CONTAINER_SECURITY_KEYS)
    for i, item in enumerate(_items(container.get("env"), f"{where}.env")):
        ref = _mapping(_mapping(item.get("valueFrom"), f"{where}.env[{i}].valueFrom").get("secretKeyRef"),
                       f"{where}.env[{i}].valueFrom.secretKeyRef")
        _not_reserved(ref.get("name"), f"{where}.env[{i}].valueFrom.secretKeyRef.name", "Secret")
    for i, item in enumerate(_items(container.get("envFrom"), f"{where}.envFrom")):
        for kind, what in (("secretRef", "Secret"), ("configMapRef", "ConfigMap")):
            _not_reserved(_mapping(item.get(kind), f"{where}.envFrom[{i}].{kind}").get("name"),
                          f"{where}.envFrom[{i}].{kind}.name", what)
    for i, port in enumerate(_items(container.get("ports"), f"{where}.ports")):
        for key in ("hostPort", "hostIP"):
            if key in port:
                raise PodSpecError(f"{where}.ports[{i}].{key}: not allowed (a job's pods take no port of the node)")
    # The kubelet makes a probe's or handler's request from the node: a `host` there reaches what the node does.
    handlers = {name: container.get(name) for name in ("livenessProbe", "readinessProbe", "startupProbe")}
    lifecycle = _mapping(container.get("lifecycle"), f"{where}.lifecycle")
    handlers.update({f"lifecycle.{name}": lifecycle.get(name) for name in ("postStart", "preStop")})
    for name, handler in handlers.items():
        for kind, action in _mapping(handler, f"{where}.{name}").items():
            if isinstance(action, Mapping) and "host" in action:
                raise PodSpecError(f"{where}.{name}.{kind}.host: not allowed (the kubelet would make the request "
                                   "from the node); probe the pod itself")


def _check_security(context: Any, where: str, allowed: frozenset[str]) -> None:
    if context is None:
        return
    if not isinstance(context, Mapping):
        raise PodSpecError(f"{where}: expected a mapping")
    for key, value in context.items():
        if key not in allowed:
            raise PodSpecError(f"{where}.{key}: not allowed (a job's pods may only give rights up); allowed: "
                               f"{', '.join(sorted(allowed))}")
        if key in ("runAsUser", "runAsGroup") and value == 0:
            raise PodSpecError(f"{where}.{key}: 0 (root) is not allowed; a job's pods run as a user other than root")
        if key == "runAsNonRoot" and value is not True:
            raise PodSpecError(f"{where}.runAsNonRoot: {value!r}; a job's pods run as a user other than root (true)")
        if key == "allowPrivilegeEscalation" and value is not False:
            raise PodSpecError(f"{where}.allowPrivilegeEscalation: {value!r}; only false is allowed")
        if key == "capabilities" and (not isinstance(value, Mapping) or value.get("add") or set(value) - {"drop"}
                                      or "ALL" not in (value.get("drop") or ())):
            raise PodSpecError(f"{where}.capabilities: only `drop` with ALL in it is allowed (a job's pods hold no "
                               "capability)")
        if key in ("fsGroup",) and value == 0 or key == "supplementalGroups" and (
                not isinstance(value, list) or 0 in value):
            raise PodSpecError(f"{where}.{key}: group 0 (root) is not allowed")
        if key == "seccompProfile" and (not isinstance(value, Mapping) or value.get("type") == "Unconfined"):
            raise PodSpecError(f"{where}.seccompProfile: {value!r}; RuntimeDefault or Localhost, never Unconfined")


def _check_volume(volume: Mapping[str, Any], where: str) -> None:
    kinds = [k for k in volume if k != "name"]
    for kind in kinds:
        if kind not in VOLUME_KINDS:
            raise PodSpecError(f"{where}.{kind}: volumes of kind {kind} are not allowed in a job's pods (hostPath and "
                               f"the node's own storage least of all); allowed: {', '.join(sorted(VOLUME_KINDS))}")
    body = {k: volume[k] for k in kinds}
    claim = _mapping(_mapping(body.get("ephemeral"), f"{where}.ephemeral").get("volumeClaimTemplate"),
                     f"{where}.ephemeral.volumeClaimTemplate")
    for key in ("dataSource", "dataSourceRef"):
        if key in _mapping(claim.get("spec"), f"{where}.ephemeral.volumeClaimTemplate.spec"):
            raise PodSpecError(f"{where}.ephemeral.volumeClaimTemplate.spec.{key}: not allowed (a clone of another "
                               "volume, tfdist's own among them); give a claim of your own")
    secret_ref = _mapping(_mapping(body.get("csi"), f"{where}.csi").get("nodePublishSecretRef"),
                          f"{where}.csi.nodePublishSecretRef")
    _not_reserved(secret_ref.get("name"), f"{where}.csi.nodePublishSecretRef.name", "Secret")
    if isinstance(body.get("secret"), Mapping):
        _not_reserved(body["secret"].get("secretName"), f"{where}.secret.secretName", "Secret")
    if isinstance(body.get("configMap"), Mapping):
        _not_reserved(body["configMap"].get("name"), f"{where}.configMap.name", "ConfigMap")
    if isinstance(body.get("persistentVolumeClaim"), Mapping):
        _not_reserved(body["persistentVolumeClaim"].get("claimName"), f"{where}.persistentVolumeClaim.claimName",
                      "PersistentVolumeClaim")
    if "projected" in body:
        sources = _mapping(body["projected"], f"{where}.projected").get("sources")
        for i, source in enumerate(_items(sources, f"{where}.projected.sources")):
            for kind in source:
                if kind not in PROJECTED_SOURCES:
                    raise PodSpecError(f"{where}.projected.sources[{i}].{kind}: not allowed (a job's pods get no "
                                       f"ServiceAccount token); allowed: {', '.join(sorted(PROJECTED_SOURCES))}")
            _not_reserved(_mapping(source.get("secret"), f"{where}.projected.sources[{i}].secret").get("name"),
                          f"{where}.projected.sources[{i}].secret.name", "Secret")


def _not_reserved(name: Any, where: str, what: str) -> None:
    if isinstance(name, str) and name.startswith(RESERVED_PREFIX):
        raise PodSpecError(f"{where}: {name!r} is one of tfdist's own {what}s (they hold every job's credentials "
                           f"and the coordinator's state); name a {what} of your own")
