"""What a run's pods on Kubernetes say, decided from the API's Pod objects (their JSON): pure, so it is tested
as a table and the engine only reads the pods and applies the verdict.

A gang is all or nothing: its pods are created together, and while any of them is not yet Running the gang is
STARTING; once all run it is RUNNING. A pod the scheduler did not bind within the start bound tears the gang
down and places it again (NOT_STARTED: it waits on something outside the job, such as GPUs another workload
took meanwhile). A pod on its node whose image is still being pulled (or whose pull failed and is being tried
again: registries answer late, images are large) has the pull bound instead, which is longer; past it the
job fails, as it does at once for what no wait changes (BROKEN: an image name that is no name, an image a
`Never` pull policy does not have, a spec that makes no container). A gang whose pods are held by their
scheduling gates (Kueue's, until it admits the gang under its quota) is HELD: the start bound counts from
when the gates are lifted. A pod that is evicted, preempted by the
cluster's scheduler, deleted or stopped with its node is DISRUPTED (the job stops at a common step and is
placed again, no restart spent); one of a started gang that ends on its own or vanishes took its node's
agent with it: LOST names it.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, Mapping, Sequence

Json = Mapping[str, Any]
KUEUE_GATE = "kueue.x-k8s.io/admission"  # Kueue's scheduling gate (manifests.KUEUE_GATE)
# Container waiting reasons that no wait will change: the image name or the spec is wrong.
BROKEN_REASONS = ("InvalidImageName", "ErrImageNeverPull", "CreateContainerConfigError", "CreateContainerError",
                  "RunContainerError")
# Those of a pod on its node that is getting its image: a pull takes long, or failed and is tried again.
PULLING_REASONS = ("ContainerCreating", "PodInitializing", "ErrImagePull", "ImagePullBackOff")
# A pod's status reasons when its node or the cluster stopped it, not its workers.
DISRUPTED_REASONS = ("Evicted", "Preempting", "Shutdown", "NodeShutdown", "Terminated", "DeadlineExceeded",
                     "NodeLost", "UnexpectedAdmissionError")


class Verdict(str, enum.Enum):
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    NOT_STARTED = "NOT_STARTED"  # torn down and placed again (no restart spent)
    BROKEN = "BROKEN"  # torn down and failed: it cannot start
    DISRUPTED = "DISRUPTED"  # the cluster takes a pod back (eviction, preemption, deletion): a routine event
    LOST = "LOST"  # a pod of the gang ended or vanished: its node's part of the run is gone
    HELD = "HELD"  # pods held by their scheduling gates (Kueue's, until it admits the gang): no start clock yet


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
    for container in (*(status.get("initContainerStatuses") or ()), *(status.get("containerStatuses") or ())):
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


def pulling(pod: Json) -> str:
    """Why a pod bound to its node is not running yet when that is its image being pulled ("" otherwise)."""
    if not (pod.get("spec") or {}).get("nodeName"):
        return ""
    for container in (pod.get("status") or {}).get("containerStatuses") or ():
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in PULLING_REASONS:
            message = waiting.get("message") or ""
            return f"{waiting['reason']}{': ' + message if message else ''}"
    return ""


def disruption(pod: Json) -> str:
    """Why the cluster is taking the pod back ("" when it is not): its DisruptionTarget condition (eviction,
    the scheduler's preemption, the taint manager, a node shutdown), a status reason of the same, or a deletion
    someone else asked for."""
    status = pod.get("status") or {}
    target = next((c for c in status.get("conditions") or () if c.get("type") == "DisruptionTarget"
                   and c.get("status") == "True"), None)
    if target is not None:
        return f"DisruptionTarget: {target.get('reason') or '-'}{' - ' + target['message'] if target.get('message') else ''}"
    if status.get("phase") == "Failed" and status.get("reason") in DISRUPTED_REASONS:
        return f"{status['reason']}{' - ' + status['message'] if status.get('message') else ''}"
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return "deleted"
    return ""


def why_ended(pod: Json) -> str:
    status = pod.get("status") or {}
    for container in status.get("containerStatuses") or ():
        terminated = (container.get("state") or {}).get("terminated")
        if terminated:
            return f"{status.get('phase')}, exit code {terminated.get('exitCode')} ({terminated.get('reason') or '-'})"
    reason = status.get("reason") or ""
    return f"{status.get('phase')}{': ' + reason if reason else ''}{' - ' + status['message'] if status.get('message') else ''}"


def judge(pods: Mapping[str, Json | None], names: Mapping[str, str], seen_running: Sequence[str], age: float,
          start_timeout: float, pull_timeout: float = 600.0) -> GangVerdict:
    """The gang's verdict. `pods`: node -> its pod as last seen (None: not there); `names`: node -> its pod's
    name; `seen_running`: nodes whose pod was seen Running before; `age`: seconds since the gang was created."""
    for node, pod in sorted(pods.items()):
        if pod is not None and (why := disruption(pod)):
            return GangVerdict(Verdict.DISRUPTED, f"pod {names[node]} on node {node} was taken back by the cluster "
                                                  f"({why})", node)
    for node, pod in sorted(pods.items()):
        if pod is None:
            if node in seen_running:
                return GangVerdict(Verdict.LOST, f"its pod {names[node]} was deleted", node)
            continue
        if pod_phase(pod) in ("Succeeded", "Failed"):
            return GangVerdict(Verdict.LOST, f"its pod {names[node]} ended ({why_ended(pod)})", node)
    waiting = {node: pod for node, pod in pods.items() if pod_phase(pod) != "Running"}
    if not waiting:
        return GangVerdict(Verdict.RUNNING)
    gated = sorted((node, gates) for node, pod in waiting.items() if pod is not None and
                   (gates := [g.get("name", "") for g in (pod.get("spec") or {}).get("schedulingGates") or ()]))
    if gated:  # admission is a queue, not a start: its clock starts once the gates are lifted
        node, gates = gated[0]
        return GangVerdict(Verdict.HELD, f"{len(gated)} of the gang's {len(pods)} pods held by their scheduling gates "
                                         f"({', '.join(gates)}): waiting for "
                                         f"{'Kueue to admit the gang' if KUEUE_GATE in gates else 'them to be lifted'}",
                           node)
    broken = [(node, why) for node, pod in sorted(waiting.items()) if pod is not None
              for why, final in [why_pending(pod)] if final]
    if broken:
        node, why = broken[0]
        return GangVerdict(Verdict.BROKEN, f"pod {names[node]} on node {node} cannot start: {why}", node)
    pulls = {node: why for node, pod in sorted(waiting.items()) if pod is not None and (why := pulling(pod))}
    if age <= start_timeout or (len(pulls) == len(waiting) and age <= pull_timeout):
        return GangVerdict(Verdict.STARTING)
    if len(pulls) == len(waiting):  # every pod on its node, its image not there within the pull bound
        node, why = next(iter(pulls.items()))
        return GangVerdict(Verdict.BROKEN, f"pod {names[node]} on node {node} was still getting its image or "
                                           f"volumes ready after {pull_timeout:g}s ({why}); check the image's name, "
                                           "the registry's access and the pod's volumes (kubectl describe pod), or "
                                           "give a longer --image-pull-timeout", node)
    said = "; ".join(f"{names[node]} on {node}: {why_pending(pod)[0] if pod is not None else 'not created'}"
                     for node, pod in sorted(waiting.items())[:5])
    more = f" (and {len(waiting) - 5} more)" if len(waiting) > 5 else ""
    return GangVerdict(Verdict.NOT_STARTED, f"{len(waiting)} of the gang's {len(pods)} pods were not running within "
                                            f"{start_timeout:g}s ({said}{more}); the gang was torn down, no pod "
                                            "left holding its node, and the job placed again")


@dataclasses.dataclass
class Gang:
    """One run's pods, as the engine knows them."""
    job_id: str
    attempt: int
    nodes: dict[str, int]  # node -> its rank in the gang
    pod_names: dict[str, str]  # node -> its pod's name
    created: float  # monotonic
    seen_running: set[str] = dataclasses.field(default_factory=set)
    over_since: float = 0.0  # monotonic: when the engine saw the run over (0: not yet)
    tearing_down: bool = False
    disrupted: bool = False  # the job heard of its disruption (once)
    ready: bool = False  # every pod was seen Running (the job heard NodesReady)
    pod_uids: dict[str, str] = dataclasses.field(default_factory=dict)  # node -> its pod's uid, as created
    said: set[str] = dataclasses.field(default_factory=set)  # the Events said on its pods (each reason once)


def over(job: Any, attempt: int) -> str:
    """Why a run's pods go once the job side is done with run `attempt` of `job` (None: the job is gone)."""
    if job is None:
        return "the job is gone"
    if job.attempt != attempt:
        return f"the job moved on to run {job.attempt}"
    if job.state.value == "QUEUED":
        return "the job is back in the queue"
    return f"the job is {job.state.value}{': ' + job.message if job.message else ''}"
