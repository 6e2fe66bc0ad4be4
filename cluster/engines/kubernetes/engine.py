"""The Kubernetes engine: tfdist decides which whole nodes a gang gets; Kubernetes runs it there, one pod per
node, each pod pinned to its node and asking for all of the node's GPUs, so kube-scheduler and the kubelets
still account for them.

Its nodes are the cluster's offered nodes (offers.py), each registered with the job side as a node of the
agents' protocol (cluster/coordinator/nodes/events.py). While no pod runs on a node the engine answers for it,
in-process; when a job's run is placed, every node of the gang asks to lease its ports, and once all of them
do, the engine creates the run's objects together (manifests.py: the Secret with each pod's run credential,
the headless Service, the pods). Each pod runs `tfdist agent --only-run JOB/ATTEMPT` as its node's agent:
it registers over the agents engine's AgentService (this engine runs one for its pods, without beacons:
create_engine through the registry, no import), leases and probes the ports, starts the node's
workers and ships their output, exits and progress, exactly as an agent on a machine does, so logs, metrics,
the watchdogs, the job store, preemption and restarts are the agents' own. The pods are watched through the
API (gangs.py decides): a gang not all Running within its bound is torn down and placed again (or failed, if
it cannot start); a pod that ends or vanishes fails its run; a run that is over has its objects deleted and
its nodes answered for by the engine again once its pods are gone.

What it reads of the cluster it lists once and then watches (watched.py): its namespace's tfdist pods, the
nodes of its pool, and every namespace's pods bound to a node and not ended (what others hold of a node); what
the cluster offers is read from them, never by listing again. What it decides about a run's pods is also said
as Kubernetes Events on them (pod_events.py): placed, torn down (why), preempting, failed.

A coordinator restarted (even killed) lists its namespace's tfdist pods and re-adopts them: their agents
register again and say what they run; nothing is left that no job holds.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Sequence

from cluster.coordinator.engine import (Engine, EngineBase, EngineHost, EventLock, Front, GangHeld, GangReady,
                                        NodeVanished)
from cluster.engines import create_engine, kind
from cluster.engines.kubernetes import admin_secret, gangs, manifests, pod_events, run_objects
from cluster.engines.kubernetes.gangs import Gang
from cluster.engines.kubernetes.reports import RunReports
from cluster.engines.kubernetes.api import Api, KubernetesError
from cluster.engines.kubernetes.offered import OfferedNodes
from cluster.engines.kubernetes.offers import tolerations_of
from cluster.engines.kubernetes.cluster_view import WATCH_THREAD, ClusterView
from cluster.engines.kubernetes.options import KubernetesOptions
from cluster.engines.kubernetes.pods import adopted
from cluster.engines.kubernetes.pool import AutoscaledPool
from cluster.shared.credentials import CredentialError, run_name
from cluster.shared.model import Job, JobState
from tfdist.errors import InternalError, TfdistError

log = logging.getLogger("tfdist.kubernetes")
ROUND = 1.0  # seconds between the engine's rounds when nothing wakes it
RETRY = 2.0
TEAR_DOWN_AFTER = 30.0  # seconds a run that is over may keep its pods while their agents stop its workers
RETRY_REFUSED = (403, 409, 429, 500, 502, 503, 504)  # the API's refusals that a later try may not meet (quota)


class KubernetesEngine(EngineBase):
    name = "kubernetes"

    def __init__(self, options: KubernetesOptions, api_factory=Api):
        self.options = options
        self._api_factory = api_factory
        # Its pods' agents speak the agents' protocol: the agents engine serves and watches them (no beacons
        # leave a pod).
        self.agents: Engine = create_engine("agents", kind("agents").options(beacons=False))
        self.api: Api | None = None
        self._host: EngineHost | None = None
        self._authority: Any = None
        self._plaintext = False
        self._verify: Any = None
        self._issue: Any = None
        self._admin: Any = None  # the Secret with the first administrator's credential (set at attach)
        self._advertise = options.advertise
        self._selector = run_objects.node_selector(options.node_selector)
        self._gangs: dict[tuple[str, int], Gang] = {}
        self._handed: dict[str, tuple[str, int]] = {}  # node -> the run whose pod is its agent now
        self._offered = OfferedNodes(lambda: self.host, self._handed)
        self._tolerations = tolerations_of(options.tolerate)
        self._policy = manifests.PodPolicy(options.job_service_account, tuple(self._tolerations), options.guaranteed)
        self._pool = AutoscaledPool(options, lambda: self.api, self._policy, self._selector) \
            if options.autoscaled else None  # the --node-selector pool may grow (pool.py)
        self._retries = run_objects.Retries()  # placements in a row whose pods did not start, per job
        self._reports = RunReports(lambda: self.host, self._retries, self._say_job)
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._view = ClusterView(options.namespace, self._stop, self._wake.set)  # listed once, then watched
        self._pods = self._view.pods
        self._events = pod_events.PodEvents(lambda: self.api, options.namespace, self._view.uid_of)
        self.rounds = 0  # rounds made (a test waits on them, not on the clock)
        self._threads: list[threading.Thread] = []

    # ---------------------------------------------------------------- the Engine protocol
    def event_lock(self) -> EventLock:
        return self.agents.event_lock()

    def serve(self, front: Front) -> None:
        """The agents engine's AgentService, which its pods' agents speak."""
        self._authority, self._plaintext, self._verify = front.authority, front.plaintext, front.verify
        self._issue = front.issue
        self._advertise = self._advertise or f"{front.address}:{front.port}"
        self.agents.serve(front)

    def attach(self, host: EngineHost) -> None:
        if self._authority is None:
            raise InternalError("the Kubernetes engine needs the coordinator's server (Engine.serve) before attach")
        self.agents.attach(host)
        self._host = host
        self.api = self._api_factory(self.options.namespace, self.options.kubeconfig)
        host.on_work_changed(self._work_changed)
        self._view.start(self.api, self._selector, self._start)
        self._adopt()
        AutoscaledPool.clear_with(self.api, self._pods.all())  # what an earlier coordinator left
        self._admin = admin_secret.AdminSecret(self.api, self.options.namespace,
                                               lambda: self._issue("admin", admin_secret.ADMIN, self._advertise),
                                               self._verify)
        self._admin.check()
        self._sync_offers()
        self._start("kubernetes-engine", self._loop)

    def tick(self, now: float) -> None:
        """Pods' agents silent past lost_after are lost (their runs fail), as agents are."""
        if self._host is not None:
            self.agents.tick(now)

    def close(self, timeout: float) -> None:
        """Its threads stop; the pods and their agents outlive the coordinator (a restarted one re-adopts them).
        Its watches' threads are not waited for: each is blocked reading the API's stream until its next change,
        holds nothing to save, and ends there (a daemon thread: the process does not wait for it either)."""
        self._stop.set()
        self._wake.set()
        for thread in self._threads:
            if not thread.name.startswith(WATCH_THREAD):
                thread.join(timeout=min(timeout, 5.0))
        if self._pool is not None:
            self._pool.clear(self._pods.all())  # no demand left behind for the autoscaler
        self.agents.close(timeout)
        if self.api is not None:  # what it asked of the API server (benchmarks/kubernetes_gangs.py reads it)
            log.info("kubernetes: API calls made: %s; objects received: %s",
                     ", ".join(f"{k}={v}" for k, v in sorted(self.api.calls.items())),
                     ", ".join(f"{k}={v}" for k, v in sorted(self.api.received.items())))

    # ---------------------------------------------------------------- plumbing
    @property
    def host(self) -> EngineHost:
        if self._host is None:
            raise InternalError("the Kubernetes engine is not attached to a coordinator")
        return self._host

    def _start(self, name: str, target) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _work_changed(self, names) -> None:
        if any(name in self._offered.owned for name in names):
            self._wake.set()

    def demand(self, nodes) -> None:
        """How many of the autoscaled pool's nodes the queue lacks: its placeholders follow (pool.py)."""
        if self._pool is not None:
            self._pool.demand(nodes)
            self._wake.set()

    def peer_addresses(self, job: Job, names: Sequence[str]) -> dict[str, str]:
        """Each placed node's address for the run's peers: its pod's DNS name under the run's Service."""
        return {name: manifests.dns_name(job.id, job.attempt, name, self.options.namespace) for name in names}

    def _adopt(self) -> None:
        """The runs whose pods are in the namespace (a coordinator restarted): their nodes are their pods'."""
        self._gangs.update(adopted(self.api, self.options.namespace, self._pods.all()))
        for gang in self._gangs.values():
            self._handed.update({node: (gang.job_id, gang.attempt) for node in gang.nodes})

    # ---------------------------------------------------------------- the engine's rounds
    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._round()
            except TfdistError as e:
                log.warning("kubernetes: %s", e)
                self._stop.wait(RETRY)
            except Exception:  # noqa: BLE001 - never a silent end: its nodes are not watched for silence
                log.exception("kubernetes: the engine's round failed; trying again")
                self._stop.wait(RETRY)
            self._wake.wait(ROUND)
            self._wake.clear()

    def _round(self) -> None:
        self.rounds += 1
        self._admin.check()
        if self._view.offers_due():
            self._sync_offers()
        if self._pool is not None:
            self._pool.reconcile(self._pods.all(), [n["metadata"]["name"] for n in self._view.nodes.all()])
        wanted = self._offered.heartbeat(time.time())
        for (job_id, attempt), names in wanted.items():
            self._maybe_create(job_id, attempt, names)
        for gang in list(self._gangs.values()):
            self._watch_gang(gang)

    def _sync_offers(self) -> None:
        """Reads what the cluster offers, from what the watches keep (no API call); a drain cordons a node
        first: its gang moves, then the node drains."""
        self._offered.read(self._view.offers(tolerations=self._tolerations, namespace=self.options.namespace,
                                             system=self.options.system_nodes, kind=self.options.node_kind))
        if self._pool is not None:
            self._pool.tell(self.host, self._view.nodes.all())
        for name, run in list(self._handed.items()):
            gang = self._gangs.get(run)
            if gang is None or gang.tearing_down or getattr(self._offered.offers.get(name), "why_not", "") != "cordoned":
                continue
            if gang.ready:
                self._reports.disrupted(gang, f"node {name} was cordoned (a drain)")
            else:  # not started yet: placed again elsewhere, bounded as any start that failed
                self._tear_down(gang, f"node {name} was cordoned (a drain) before its pods ran")
                self._reports.not_started_again(gang.job_id, f"node {name} was cordoned (a drain) before its pods ran")

    # ---------------------------------------------------------------- a run's objects
    def _maybe_create(self, job_id: str, attempt: int, names: set[str]) -> None:
        """Creates the run's objects once every node of its gang asks (all of them together, or none)."""
        allocs = self.host.placement(job_id)
        if not allocs or (job_id, attempt) in self._gangs or any(a.agent not in names for a in allocs) or \
                not self._retries.may_create(job_id):
            return
        job = self.host.job(job_id)
        if job is None or job.attempt != attempt or job.state != JobState.STARTING:
            return
        config = job.spec.config.kubernetes
        image, refused = run_objects.image_or_refusal(config, allocs, self.options.image, self.options.allow_secrets)
        if refused:
            self._reports.fail(job_id, refused, restartable=False)
            return
        gang = Gang(job_id, attempt, {a.agent: a.node_rank for a in allocs}, {}, time.monotonic())
        self._gangs[(job_id, attempt)] = gang
        for a in allocs:
            self._handed[a.agent] = (job_id, attempt)
        pods = run_objects.run_pods(job_id, attempt, config, allocs, self._offered.offers, namespace=self.options.namespace,
                                    image=image, agent_prefix=self.options.agent_command, coordinator=self._advertise,
                                    grace=self.host.settings.stop_grace + 30, policy=self._policy,
                                    queue=self.options.kueue_queue)
        try:
            gang.pod_names.update({a.agent: p["metadata"]["name"] for a, p in zip(allocs, pods)})
            run_objects.create_run(self.api, self.options.namespace, job_id, attempt, allocs, pods,
                                   lambda a: self._authority.issue("run", run_name(a.agent, job_id, attempt),
                                                                   self._advertise, self._plaintext).to_json())
        except CredentialError as e:  # a node name too long for a credential's
            self._reports.fail(job_id, f"no credential can be made for its pods: {e}", restartable=False)
            self._tear_down(gang, "no credential can be made for its pods")
            return
        except KubernetesError as e:
            self._tear_down(gang, f"its objects could not all be created: {e}")
            if getattr(e, "code", 0) in RETRY_REFUSED:  # a quota, a conflict, an API busy: a waiting reason
                self._reports.not_started_again(job_id, f"its pods were refused: {e}")
            else:
                self._reports.fail(job_id, f"its pods could not be created: {e}", restartable=False)
            return
        gang.pod_uids.update({a.agent: p["metadata"].get("uid", "") for a, p in zip(allocs, pods)})
        log.info("kubernetes: job %s run %d: %d pod(s) created on %s", job_id, attempt, len(allocs),
                 ", ".join(a.agent for a in allocs))
        self._events.gang(gang, pod_events.PLACED, f"job {job_id} (run {attempt}): its gang of {len(allocs)} pod(s) "
                          f"placed together on whole nodes {', '.join(a.agent for a in allocs)} by tfdist; this pod "
                          "is node {node}'s, and every pod of the gang starts or none does")

    def _watch_gang(self, gang: Gang) -> None:
        pods = {node: self._pods.get(gang.pod_names.get(node, "")) for node in gang.nodes}
        for node, pod in pods.items():
            if gangs.pod_phase(pod) == "Running":
                gang.seen_running.add(node)
        if gang.tearing_down:
            for node, pod in pods.items():
                if pod is None and self._handed.get(node) == (gang.job_id, gang.attempt):
                    self._give_back(node)
            if all(pod is None for pod in pods.values()):
                del self._gangs[(gang.job_id, gang.attempt)]
            return
        job = self.host.job(gang.job_id)
        if job is None or job.attempt != gang.attempt or not job.state.active or job.state == JobState.QUEUED:
            # Over: its agents stop what still runs (they get the stops); then its objects go.
            gang.over_since = gang.over_since or time.monotonic()
            moved_on = job is not None and job.attempt != gang.attempt  # its pods' run credentials are refused now
            if moved_on or self._workers_gone(gang) or time.monotonic() - gang.over_since > TEAR_DOWN_AFTER:
                self._tear_down(gang, gangs.over(job, gang.attempt))
            return
        if job.preempt_requested:
            self._events.gang(gang, pod_events.PREEMPTING, f"job {job.id}: preempted by tfdist: every worker stops at "
                              "one step with a checkpoint, and the job waits in the queue to resume from it")
        verdict = gangs.judge(pods, gang.pod_names, sorted(gang.seen_running), time.monotonic() - gang.created,
                              self.options.start_timeout, self.options.pull_timeout)
        if verdict.verdict == gangs.Verdict.RUNNING:
            if not gang.ready:
                gang.ready = True
                self._retries.started(gang.job_id)
                self.host.gang_event(gang.job_id, GangReady())  # its start-up clock starts: pulls are over
        elif verdict.verdict == gangs.Verdict.DISRUPTED and set(gang.nodes) - gang.seen_running:
            # Taken back before it ran (an admission error, a deletion): a start that failed.
            self._tear_down(gang, verdict.why)
            self._reports.not_started_again(gang.job_id, verdict.why)
        elif verdict.verdict == gangs.Verdict.DISRUPTED:
            self._reports.disrupted(gang, verdict.why)
            now_job = self.host.job(gang.job_id)
            still = now_job is not None and now_job.attempt == gang.attempt and now_job.state.active and \
                now_job.state != JobState.QUEUED  # not placed again already (a run that could not stop at a step)
            if still and (gangs.pod_phase(pods.get(verdict.node)) == "Failed" or pods.get(verdict.node) is None):
                self._lost(gang, verdict.node, verdict.why)  # its agent is gone already (the kubelet's eviction)
        elif verdict.verdict == gangs.Verdict.NOT_STARTED:
            self._tear_down(gang, verdict.why)
            self._reports.not_started_again(gang.job_id, verdict.why)
        elif verdict.verdict == gangs.Verdict.BROKEN:
            self._reports.fail(gang.job_id, verdict.why, restartable=False)
            self._tear_down(gang, verdict.why)
        elif verdict.verdict == gangs.Verdict.LOST:
            self._lost(gang, verdict.node, verdict.why)
        elif verdict.verdict == gangs.Verdict.HELD:  # its start bounds count from the gates' lifting
            gang.created = time.monotonic()
            self.host.gang_event(gang.job_id, GangHeld(verdict.why))
            self._events.gang(gang, pod_events.HELD, f"job {gang.job_id} (run {gang.attempt}): {verdict.why}")

    def _lost(self, gang: Gang, node: str, why: str) -> None:
        """The pod of `node` took its agent with it: its ranks are gone (the job machine decides the rest)."""
        self.host.gang_event(gang.job_id, NodeVanished(node, why))
        self._tear_down(gang, f"node {node}'s pod is gone: {why}")

    def _workers_gone(self, gang: Gang) -> bool:
        """Whether no pod of the run still reports its workers (or holds its ports)."""
        agents = [(node, self.host.node(node)) for node in gang.nodes]
        return not any(a is not None and not a.lost and self._handed.get(node) == (gang.job_id, gang.attempt) and
                       (gang.job_id in a.running or gang.job_id in a.leased) for node, a in agents)

    def _tear_down(self, gang: Gang, why: str) -> None:
        """Deletes the run's pods, Service and Secret (then said on its pods); its nodes come back once its pods
        are gone."""
        gang.tearing_down = True
        try:
            run_objects.delete_run(self.api, gang.job_id, gang.attempt, list(gang.pod_names.values()))
        except KubernetesError as e:  # the next round sees its pods still there and asks again
            gang.tearing_down = False
            gang.over_since = gang.over_since or time.monotonic()
            log.warning("kubernetes: deleting job %s run %d's objects: %s", gang.job_id, gang.attempt, e)
            return
        log.info("kubernetes: job %s run %d: its pods, Service, PodDisruptionBudget and Secret deleted", gang.job_id,
                 gang.attempt)
        self._events.gang(gang, pod_events.TORN_DOWN, f"job {gang.job_id} (run {gang.attempt}): every pod of its "
                          f"gang is deleted: {why}")

    def _give_back(self, node: str) -> None:
        """Its pod is gone: the engine answers for the node again."""
        del self._handed[node]
        self._offered.give_back(node)
        self._view.read_again()  # its slots may have changed meanwhile
        self._wake.set()

    # ---------------------------------------------------------------- Events on its pods (pod_events.py)
    def _say_job(self, job_id: str, reason: str, message: str) -> None:
        for gang in [g for g in self._gangs.values() if g.job_id == job_id]:  # one torn down just now too
            self._events.gang(gang, reason, message)
