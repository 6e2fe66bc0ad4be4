"""What a run's pods on Kubernetes say, decided from the API's Pod objects (their JSON): pure, so it is tested
as a table and the engine only reads the pods and applies the verdict.

A gang is all or nothing: its pods are created together, and while any of them is not yet Running the gang is
STARTING; once all run it is RUNNING. One not Running within the start bound tears the gang down: placed
again (NOT_STARTED: the scheduler did not bind it, or it waits on something outside the job, such as GPUs
another workload took meanwhile) or failed for good (BROKEN: its image cannot be pulled, its spec cannot
make a container: running it again would meet the same). A pod of a started gang that ends or vanishes
(evicted, deleted, its node gone) took its node's agent with it: LOST names it.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, Mapping, Sequence

Json = Mapping[str, Any]
# Container waiting reasons that no wait will change: the image or the spec is wrong.
BROKEN_REASONS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull",
                  "CreateContainerConfigError", "CreateContainerError", "RunContainerError")


class Verdict(str, enum.Enum):
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    NOT_STARTED = "NOT_STARTED"  # torn down and placed again (no restart spent)
    BROKEN = "BROKEN"  # torn down and failed: it cannot start
    LOST = "LOST"  # a pod of the gang ended or vanished: its node's part of the run is gone


@dataclasses.dataclass(frozen=True)
class GangVerdict:
    verdict: Verdict
    why: str = ""
    node: str = ""  # LOST: whose pod


def pod_phase(pod: Json | None) -> str:
    return ((pod or {}).get("status") or {}).get("phase") or "Pending"


def why_pending(pod: Json) -> tuple[str, bool]:
    """Why a pod is not running yet, and whether that is for good (a BROKEN_REASONS container)."""
    status = pod.get("status") or {}
    for container in status.get("containerStatuses") or ():
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in BROKEN_REASONS:
            message = waiting.get("message") or ""
            return f"{waiting['reason']}{': ' + message if message else ''}", True
    scheduled = next((c for c in status.get("conditions") or () if c.get("type") == "PodScheduled"), None)
    if scheduled is not None and scheduled.get("status") == "False":
        return f"not scheduled: {scheduled.get('message') or scheduled.get('reason') or 'no reason given'}", False
    if not (pod.get("spec") or {}).get("nodeName"):
        return "not scheduled yet", False
    for container in status.get("containerStatuses") or ():
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason"):
            return f"container waiting: {waiting['reason']}", False
    return "Pending on its node", False


def why_ended(pod: Json) -> str:
    status = pod.get("status") or {}
    for container in status.get("containerStatuses") or ():
        terminated = (container.get("state") or {}).get("terminated")
        if terminated:
            return f"{status.get('phase')}, exit code {terminated.get('exitCode')} ({terminated.get('reason') or '-'})"
    reason = status.get("reason") or ""
    return f"{status.get('phase')}{': ' + reason if reason else ''}{' - ' + status['message'] if status.get('message') else ''}"


def judge(pods: Mapping[str, Json | None], names: Mapping[str, str], seen_running: Sequence[str], age: float,
          start_timeout: float) -> GangVerdict:
    """The gang's verdict. `pods`: node -> its pod as last seen (None: not there); `names`: node -> its pod's
    name; `seen_running`: nodes whose pod was seen Running before; `age`: seconds since the gang was created."""
    for node, pod in sorted(pods.items()):
        if pod is None:
            if node in seen_running:
                return GangVerdict(Verdict.LOST, f"its pod {names[node]} was deleted", node)
            continue
        if pod_phase(pod) in ("Succeeded", "Failed"):
            return GangVerdict(Verdict.LOST, f"its pod {names[node]} ended ({why_ended(pod)})", node)
        if (pod.get("metadata") or {}).get("deletionTimestamp") and node in seen_running:
            return GangVerdict(Verdict.LOST, f"its pod {names[node]} is being deleted", node)
    waiting = {node: pod for node, pod in pods.items() if pod_phase(pod) != "Running"}
    if not waiting:
        return GangVerdict(Verdict.RUNNING)
    broken = [(node, why) for node, pod in sorted(waiting.items()) if pod is not None
              for why, final in [why_pending(pod)] if final]
    if broken:
        node, why = broken[0]
        return GangVerdict(Verdict.BROKEN, f"pod {names[node]} on node {node} cannot start: {why}", node)
    if age <= start_timeout:
        return GangVerdict(Verdict.STARTING)
    said = "; ".join(f"{names[node]} on {node}: {why_pending(pod)[0] if pod is not None else 'not created'}"
                     for node, pod in sorted(waiting.items())[:5])
    more = f" (and {len(waiting) - 5} more)" if len(waiting) > 5 else ""
    return GangVerdict(Verdict.NOT_STARTED, f"{len(waiting)} of the gang's {len(pods)} pods were not running within "
                                            f"{start_timeout:g}s ({said}{more}); the gang was torn down, no pod "
                                            "left holding its node, and the job placed again")
