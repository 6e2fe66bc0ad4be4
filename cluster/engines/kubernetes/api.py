"""The Kubernetes engine's thin edge to the API server (lightkube): objects go in and come out as the API's
JSON, which the pure parts (offers.py, manifests.py, gangs.py) read and write. What the engine reads it lists
once and then watches (from the list's resource version, with label and field selectors): nothing is listed
periodically. Every call is counted, and every object received (the coordinator's API load per job and per
minute is measured: benchmarks/kubernetes_gangs.py, benchmarks/kubernetes_api_load.py)."""

from __future__ import annotations

import collections
import logging
import threading
from typing import Any, Callable, Iterable, Mapping

from cluster.engines.kubernetes.offers import MANAGED_BY, TFDIST
from tfdist.errors import UserError

log = logging.getLogger("tfdist.kubernetes")
Json = dict[str, Any]
WATCH_SECONDS = 300  # the server ends a watch this often; lightkube resumes it from its last version (a
# version too old for the server raises, and the objects are listed and watched again: the list is the truth)
WATCH_GRACE = 60  # seconds past WATCH_SECONDS a watch's stream may stay silent before it is taken for dead
LIST_CHUNK = 500  # objects per page of a list (a cluster's 10,000 pods are 20 pages, not one huge answer)
_KINDS = {"Pod": ("lightkube.resources.core_v1", "Pod"), "Service": ("lightkube.resources.core_v1", "Service"),
          "Secret": ("lightkube.resources.core_v1", "Secret"), "Node": ("lightkube.resources.core_v1", "Node"),
          "Event": ("lightkube.resources.core_v1", "Event"),
          "NetworkPolicy": ("lightkube.resources.networking_v1", "NetworkPolicy"),
          "PodDisruptionBudget": ("lightkube.resources.policy_v1", "PodDisruptionBudget")}
_warm = threading.Lock()
_warmed = False


class KubernetesError(UserError):
    """The cluster cannot be reached or refused tfdist: the message names the call and what to check."""


def _resource(kind: str):
    module, name = _KINDS[kind]
    return getattr(__import__(module, fromlist=[name]), name)


def warm_up() -> None:
    """Decodes each kind of object once, in this thread, before the engine's threads start: msgspec 0.22
    (under lightkube 1.0) crashes the process (SIGSEGV) when two threads first build one type's decoding
    information at the same moment; once built it is safe."""
    global _warmed
    from lightkube import codecs

    with _warm:
        if _warmed:
            return
        for kind, (module, _) in _KINDS.items():
            version = {"policy_v1": "policy/v1", "networking_v1": "networking.k8s.io/v1"}.get(module.rsplit(".", 1)[1], "v1")
            codecs.from_dict({"apiVersion": version, "kind": kind, "metadata": {
                "name": "warm-up", "labels": {"a": "b"}, "annotations": {"a": "b"}},
                **({"involvedObject": {"kind": "Pod", "name": "p", "uid": "u"}} if kind == "Event" else {})})
        codecs.from_dict(WARM_POD)
        _warmed = True


class Api:
    def __init__(self, namespace: str, kubeconfig: str = ""):
        from lightkube import Client, KubeConfig
        from lightkube.core.exceptions import ConfigError

        try:
            config = KubeConfig.from_file(kubeconfig) if kubeconfig else KubeConfig.from_service_account()
        except Exception as e:  # noqa: BLE001 - lightkube's KeyError, TypeError or YAML error on a file that is no kubeconfig
            why = f"no {e} in it (not a kubeconfig)" if isinstance(e, KeyError) else \
                str(e) if isinstance(e, (ConfigError, OSError)) else \
                f"not a kubeconfig ({type(e).__name__}: {' '.join(str(e).split())})"
            if kubeconfig:
                raise KubernetesError(f"cannot read the Kubernetes credentials of --kubeconfig {kubeconfig}: {why}; give "
                                      "a kubeconfig file (`kubectl config view --raw --minify > FILE`)") from None
            raise KubernetesError(f"cannot read the Kubernetes credentials of the pod's ServiceAccount (in-cluster): "
                                  f"{why}; outside the cluster pass --kubeconfig FILE") from None
        self.namespace = namespace
        self.client = Client(config, namespace=namespace, field_manager=TFDIST)
        # lightkube reads a watch's stream without a read timeout: a connection the network dropped without a
        # word (the API server's host gone, a balancer's failover) would block its watch for ever, and nothing
        # lists again. The server ends each watch after WATCH_SECONDS, so a stream silent for longer is dead:
        # the read times out, the watch raises, and it is listed and watched again.
        watch_timeout = getattr(getattr(self.client, "_client", None), "_watch_timeout", None)
        if watch_timeout is not None:
            watch_timeout.read = WATCH_SECONDS + WATCH_GRACE
        self.calls: collections.Counter[str] = collections.Counter()  # "verb kind" -> API calls made
        self.received: collections.Counter[str] = collections.Counter()  # kind -> objects listed or watched
        warm_up()

    def _call(self, what: str, call: Callable[[], Any], count: bool = True) -> Any:
        from lightkube import ApiError

        if count:
            self.calls[what] += 1
        try:
            return call()
        except ApiError as e:
            raise ApiRefused(what, e.status.code or 0, e.status.message or str(e)) from None

    def watch(self, kind: str, seen: Callable[[str, Json], None], listed: Callable[[list[Json]], None],
              stopping: threading.Event, *, scope: str, namespace: str | None = None,
              labels: Mapping[str, Any] | None = None, fields: Mapping[str, Any] | None = None) -> None:
        """Lists the objects (`listed(all of them)`, in chunks of LIST_CHUNK), then hands each change after that
        list's resource version to `seen(type, object)`, until `stopping`. lightkube resumes the watch from the
        last version it saw each time the server ends it; a version the server no longer has (410 Gone) raises,
        and the caller lists again (the list is the truth). `scope` names the call in `calls` and `received`."""
        resource = _resource(kind)
        where: dict[str, Any] = {"labels": dict(labels) if labels else None, "fields": dict(fields) if fields else None}
        if namespace is not None:
            where["namespace"] = namespace
        what = f"{kind}{scope}"
        while not stopping.is_set():
            objects = self._call(f"list {what}", lambda: self.client.list(resource, chunk_size=LIST_CHUNK, **where))
            items = self._call(f"list {what}", lambda: [o.to_dict() for o in objects], count=False)
            self.received[what] += len(items)
            listed(items)
            self.calls[f"watch {what}"] += 1
            for change, obj in self.client.watch(resource, resource_version=objects.resourceVersion,
                                                 server_timeout=WATCH_SECONDS, **where):
                if stopping.is_set():
                    return
                self.received[what] += 1
                seen(change, obj.to_dict())

    def watch_pods(self, seen: Callable[[str, Json], None], listed: Callable[[list[Json]], None],
                   stopping: threading.Event) -> None:
        """This namespace's tfdist pods (its runs')."""
        self.watch("Pod", seen, listed, stopping, scope="", namespace=self.namespace, labels={MANAGED_BY: TFDIST})

    def watch_nodes(self, seen: Callable[[str, Json], None], listed: Callable[[list[Json]], None],
                    stopping: threading.Event, selector: Mapping[str, str] | None = None) -> None:
        """The cluster's nodes (those `selector` picks: the pool offered)."""
        self.watch("Node", seen, listed, stopping, scope="", labels=selector)

    def watch_bound_pods(self, seen: Callable[[str, Json], None], listed: Callable[[list[Json]], None],
                         stopping: threading.Event) -> None:
        """Every namespace's pods that hold their node's resources: bound to a node and not ended (the server
        filters: a pod that ends arrives as DELETED)."""
        from lightkube import operators

        self.watch("Pod", seen, listed, stopping, scope=" (all namespaces)", namespace="*",
                   fields={"spec.nodeName": operators.not_equal(""),
                           "status.phase": operators.not_in(["Succeeded", "Failed"])})

    def get(self, kind: str, name: str) -> Json | None:
        """This namespace's object, or None where there is none."""
        try:
            return self._call(f"get {kind}", lambda: self.client.get(_resource(kind), name,
                                                                     namespace=self.namespace).to_dict())
        except ApiRefused as e:
            if e.code == 404:
                return None
            raise

    def create(self, obj: Mapping[str, Any], dry_run: bool = False) -> Json:
        """Creates `obj` (`dry_run`: only asks the API's admission whether it would: quota, PodSecurity, the spec)."""
        from lightkube import codecs

        resource = codecs.from_dict(dict(obj))
        return self._call(f"create {obj['kind']}{' (dry run)' if dry_run else ''}",
                          lambda: self.client.create(resource, dry_run=dry_run).to_dict())

    def delete(self, kind: str, names: Iterable[str]) -> None:
        """Deletes each named object of this namespace; one already gone is fine."""
        for name in names:
            try:
                self._call(f"delete {kind}", lambda: self.client.delete(_resource(kind), name, namespace=self.namespace))
            except ApiRefused as e:
                if e.code != 404:
                    raise


class ApiRefused(KubernetesError):
    def __init__(self, what: str, code: int, message: str):
        super().__init__(f"the Kubernetes API refused to {what}: {message} (HTTP {code})")
        self.code = code


WARM_POD = {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "w", "namespace": "n", "labels": {"a": "b"}, "annotations": {"a": "b"}, "uid": "u",
                         "deletionTimestamp": "2026-01-01T00:00:00Z",
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Secret", "name": "s", "uid": "u"}]},
            "spec": {"nodeName": "n", "hostname": "h", "subdomain": "s", "restartPolicy": "Never",
                     "terminationGracePeriodSeconds": 30, "automountServiceAccountToken": False,
                     "containers": [{"name": "c", "image": "i", "command": ["x"], "args": ["y"],
                                     "env": [{"name": "A", "value": "1"},
                                             {"name": "B", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"},
                                                                         "fieldRef": {"fieldPath": "metadata.name"}}}],
                                     "volumeMounts": [{"name": "v", "mountPath": "/m", "readOnly": True}],
                                     "resources": {"limits": {"cpu": "1"}, "requests": {"cpu": "1"}}}],
                     "volumes": [{"name": "v", "secret": {"secretName": "s", "defaultMode": 256,
                                                          "items": [{"key": "k", "path": "p"}]}}],
                     "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}],
                     "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                         "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In",
                                                                 "values": ["n"]}]}]}}}},
            "status": {"phase": "Running", "podIP": "1.2.3.4", "reason": "r", "message": "m",
                       "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                       "message": "m"}],
                       "containerStatuses": [{"name": "c", "image": "i", "imageID": "", "ready": True,
                                              "restartCount": 0, "state": {"waiting": {"reason": "r", "message": "m"},
                                                                           "terminated": {"exitCode": 0}}}]}}
