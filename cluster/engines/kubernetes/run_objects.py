"""What one run of a job is made of on Kubernetes, decided from the job's config, its placement and the
nodes' last offers (pure: tested as values; the engine creates what it returns, in order). Each pod runs the
node's agent for that run (`tfdist agent --only-run JOB/ATTEMPT`, in the image's working directory, never the
client's) and asks for what other workloads leave of its node's CPUs and memory, beside its GPUs."""

from __future__ import annotations

import math
import time
from typing import Any, Callable, Mapping, Sequence

from cluster.engines.kubernetes import manifests
from cluster.engines.kubernetes.offers import NodeOffer
from cluster.shared.model import Allocation
from cluster.shared.pod_spec_rules import PodSpecError, check_pod_spec, secrets_named
from tfdist.errors import UserError

CREDENTIAL = f"{manifests.SECRET_MOUNT}/credential.json"
MAX_NOT_STARTED = 5  # placements in a row whose pods did not start (or were refused): then the job fails
BACKOFF_FIRST = 5.0  # seconds before the pods of the second such placement are made (doubling, at most 60)
PENDING_OWNER = {"apiVersion": "v1", "kind": "Secret", "name": "-", "uid": "-"}  # until the run's Secret exists


def refused_secret(config: Mapping[str, Any], allowed: Sequence[str]) -> str:
    """Why the job's pods may not be made ("" when they may): its pod_spec against the allow-list (again: a job
    stored before it was there), or a Secret it names that the coordinator's administrator did not allow."""
    try:
        check_pod_spec(config.get("pod_spec") or {})
    except PodSpecError as e:
        return str(e)
    refused = sorted(secrets_named(config.get("pod_spec") or {}) - set(allowed))
    if not refused:
        return ""
    return (f"kubernetes.pod_spec gives its pods Secret {refused[0]!r}, which this coordinator does not let jobs "
            f"mount; its administrator allows one with `tfdist coordinator --allow-secret {refused[0]}`")


def image_or_refusal(config, allocs: Sequence[Allocation], default: str,
                     allowed_secrets: Sequence[str]) -> tuple[str, str]:
    """The run's pods' image, and why its pods cannot be made ("" when they can): no image, a Secret not
    allowed."""
    image = pod_image(config, allocs, default)
    if not image:
        kind = "gpu" if any(a.gpus for a in allocs) else "cpu"
        pair = f" (its image pair names no {kind} image, for its {kind.upper()} nodes)" if config.get("image") else ""
        return "", (f"no image for its pods{pair}: give `kubernetes: {{image: ...}}` in the job's config, or start "
                    "the coordinator with --image")
    return image, refused_secret(config, allowed_secrets)


def pod_image(config: Mapping[str, Any], allocs: Sequence[Allocation], default: str) -> str:
    """The image of a run's pods: the config's kubernetes.image, or of its {cpu, gpu} pair (Determined's
    environment.image) the one for the nodes the job was placed on; else the coordinator's --image ("": none)."""
    image = config.get("image")
    if isinstance(image, Mapping):
        image = image.get("gpu" if any(a.gpus for a in allocs) else "cpu")
    return str(image or default or "")


def gang_pod(job_id: str, attempt: int, alloc: Allocation, offer: NodeOffer | None) -> manifests.GangPod:
    """The pod of one node: a GPU node's asks for the CPUs other workloads leave there (a CPU node's for its
    slots), and every pod for the memory they leave."""
    cpu = f"{math.floor(offer.free_cpu * 1000)}m" if offer is not None and alloc.gpus and offer.free_cpu else ""
    memory = f"{math.floor(offer.free_memory / 2**20)}Mi" if offer is not None and offer.free_memory >= 2**20 else ""
    return manifests.GangPod(job_id, attempt, alloc.node_rank, alloc.agent, alloc.slots, len(alloc.gpus), cpu, memory)


def run_pods(job_id: str, attempt: int, config: Mapping[str, Any], allocs: Sequence[Allocation],
             offers: Mapping[str, NodeOffer], *, namespace: str, image: str, agent_prefix: Sequence[str],
             coordinator: str, grace: float, policy: manifests.PodPolicy, queue: str = "") -> list[manifests.Json]:
    """The run's pods, one per allocation, owned by PENDING_OWNER until the run's Secret exists; `queue`: a
    Kueue LocalQueue that admits them as one pod group ("": none)."""
    if config.get("working_dir"):
        policy = manifests.PodPolicy(policy.service_account, policy.tolerations, policy.guaranteed, policy.user,
                                     str(config["working_dir"]))
    pods = [manifests.pod(gang_pod(job_id, attempt, a, offers.get(a.agent)), namespace, image=image,
                          command=agent_command(agent_prefix, coordinator, job_id, attempt, a), env={},
                          owner_ref=PENDING_OWNER, pod_spec=config.get("pod_spec"), grace=grace, policy=policy)
            for a in allocs]
    return manifests.in_kueue(pods, queue, manifests.gang_name(job_id, attempt)) if queue else pods


def agent_command(prefix: Sequence[str], coordinator: str, job_id: str, attempt: int, alloc: Allocation) -> list[str]:
    """The pod's agent: its node's, for this run alone, heartbeating (no beacons out of a pod), its workers in
    the container's working directory (the config's kubernetes.working_dir, else the image's)."""
    command = [*prefix, "agent", "--name", alloc.agent, "--credentials", CREDENTIAL, "--coordinator", coordinator,
               "--only-run", f"{job_id}/{attempt}", "--no-beacons", "--working-dir", "."]
    return command if alloc.gpus else [*command, "--slots", str(alloc.slots)]


def node_selector(text: str) -> dict[str, str]:
    """`k=v,k2=v2` as a label selector (UsageError naming the bad part)."""
    selector = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, equals, value = part.partition("=")
        if not equals or not key:
            raise UserError(f"--node-selector {text!r}: {part!r} is not LABEL=VALUE; give e.g. pool=training")
        selector[key.strip()] = value.strip()
    return selector


def create_run(api, namespace: str, job_id: str, attempt: int, allocs: Sequence[Allocation],
               pods: Sequence[manifests.Json], credential_of: Callable[[Allocation], str]) -> dict[str, str]:
    """Creates the run's objects: each pod first as a dry run (the API's admission, a namespace's quota and
    PodSecurity among it, on every pod before any is made), then its Secret, Service, PodDisruptionBudget,
    NetworkPolicy and pods, owned by the Secret (each pod's uid, as made, written into `pods`). Returns node -> pod
    name; raises the API's refusal (what was made before it is for delete_run)."""
    for pod in pods:
        api.create(pod, dry_run=True)
    secret = api.create(manifests.secret(job_id, attempt, namespace, {
        manifests.credential_key(a.node_rank): credential_of(a) for a in allocs}))
    owner = manifests.owner(secret)
    api.create(manifests.service(job_id, attempt, namespace, sorted({p for a in allocs for p in a.ports}), owner))
    api.create(manifests.disruption_budget(job_id, attempt, namespace, len(pods), owner))
    api.create(manifests.network_policy(job_id, attempt, namespace, owner))
    names = {}
    for a, pod in zip(allocs, pods):
        pod["metadata"]["ownerReferences"] = [owner]
        names[a.agent] = pod["metadata"]["name"]
        pod["metadata"]["uid"] = (api.create(pod).get("metadata") or {}).get("uid", "")  # its Events name it
    return names


def ensure_policy(api, namespace: str, job_id: str, attempt: int) -> None:
    """The run's NetworkPolicy, where a run adopted from a coordinator that made none lacks it (the namespace's
    default deny would otherwise cut its pods off from each other); owned by its Secret, as a new run's."""
    name = manifests.gang_name(job_id, attempt)
    if api.get("NetworkPolicy", name) is not None:
        return
    secret = api.get("Secret", name)
    if secret is not None:
        api.create(manifests.network_policy(job_id, attempt, namespace, manifests.owner(secret)))


def delete_run(api, job_id: str, attempt: int, pod_names: Sequence[str]) -> None:
    """Deletes the run's pods, Service, PodDisruptionBudget, NetworkPolicy and Secret (those already gone are
    fine)."""
    name = manifests.gang_name(job_id, attempt)
    api.delete("Pod", list(pod_names))
    for kind in ("Service", "PodDisruptionBudget", "NetworkPolicy", "Secret"):
        api.delete(kind, [name])


class Retries:
    """The placements in a row whose pods did not start, per job: each next one waits a backoff, and after
    MAX_NOT_STARTED the job fails (never an endless loop of placements)."""

    def __init__(self):
        self.tries: dict[str, int] = {}
        self._hold_until: dict[str, float] = {}

    def may_create(self, job_id: str) -> bool:
        return time.monotonic() >= self._hold_until.get(job_id, 0.0)

    def failed(self, job_id: str) -> int:
        """One more placement of the job did not start: how many in a row now."""
        tries = self.tries[job_id] = self.tries.get(job_id, 0) + 1
        self._hold_until[job_id] = time.monotonic() + min(60.0, BACKOFF_FIRST * 2 ** (tries - 1))
        return tries

    def started(self, job_id: str) -> None:
        self.tries.pop(job_id, None)
        self._hold_until.pop(job_id, None)
