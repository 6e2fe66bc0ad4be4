"""Kubernetes Events on a run's pods, so that `kubectl describe pod` and `kubectl get events` say what tfdist
decided about them, as the cluster's own controllers do: the gang placed (on which whole nodes, chosen how), torn
down (why), preempted (a node taken back, or tfdist's own preemption: a common step, a checkpoint) and failed.
The Event's object is pure (event_object); PodEvents sends it. Best effort: an Event the API refuses is said once
in the log and changes nothing of the job (each is sent after what it says was done) (the job's own message and log say it all too)."""

from __future__ import annotations

import datetime
import logging
import secrets
from typing import Any, Callable, Mapping

from cluster.engines.kubernetes.offers import MANAGED_BY, TFDIST

log = logging.getLogger("tfdist.kubernetes")
Json = dict[str, Any]
COMPONENT = "tfdist-coordinator"
MESSAGE_MAX = 1024  # what the API keeps of an Event's message

# The reasons, as Kubernetes' own controllers name theirs (CamelCase, one word).
PLACED, TORN_DOWN, PREEMPTING, FAILED, NOT_STARTED = "GangPlaced", "GangTornDown", "Preempting", "GangFailed", \
    "GangNotStarted"
HELD = "GangHeld"  # its pods' scheduling gates (Kueue's admission) hold the gang
WARNINGS = (FAILED, NOT_STARTED)


def event_object(namespace: str, pod: str, uid: str, reason: str, message: str, when: datetime.datetime,
                 suffix: str) -> Json:
    """A core/v1 Event about pod `pod` (its `uid`: `kubectl describe` matches on it), named as the API's own
    (POD.SUFFIX, unique)."""
    stamp = when.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    involved = {"apiVersion": "v1", "kind": "Pod", "name": pod, "namespace": namespace}
    if uid:
        involved["uid"] = uid
    return {"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{pod}.{suffix}", "namespace": namespace, "labels": {MANAGED_BY: TFDIST}},
            "involvedObject": involved, "reason": reason, "message": message[:MESSAGE_MAX],
            "type": "Warning" if reason in WARNINGS else "Normal", "source": {"component": COMPONENT},
            "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1, "reportingComponent": COMPONENT,
            "reportingInstance": COMPONENT}


class PodEvents:
    def __init__(self, api: Callable[[], Any], namespace: str, uid_of: Callable[[str], str]):
        """`api()`: the engine's Api; `uid_of(pod)`: the pod's uid as last seen ("" if unknown)."""
        self._api, self.namespace, self._uid_of = api, namespace, uid_of
        self._refused = False  # said once

    def say(self, pods: Mapping[str, str], reason: str, message: str, uids: Mapping[str, str] | None = None) -> None:
        """One Event on each of `pods` (node -> pod name); `message` may name {node}."""
        api, when = self._api(), datetime.datetime.now(datetime.timezone.utc)
        for node, pod in sorted(pods.items()):
            uid = (uids or {}).get(node) or self._uid_of(pod)
            event = event_object(self.namespace, pod, uid, reason, message.replace("{node}", node), when,
                                 secrets.token_hex(8))
            try:
                api.create(event)
            except Exception as e:  # noqa: BLE001 - refused (RBAC without events, a quota) or unreachable: the job goes on
                if not self._refused:
                    self._refused = True
                    log.warning("kubernetes: no Events on tfdist's pods: %s", e)
                return

    def gang(self, gang: Any, reason: str, message: str) -> None:
        """One Event on each pod of the run made so far (gangs.Gang), once per reason and run."""
        if reason in gang.said:
            return
        gang.said.add(reason)
        made = {node: name for node, name in gang.pod_names.items() if gang.pod_uids.get(node) or self._uid_of(name)}
        self.say(made, reason, message, gang.pod_uids)
