"""The node protocol's events applied to the job side: a node registers, heartbeats (what it runs and holds,
its port checks and peer probes) and goes silent. Each is one event of the coordinator's (`host.event`: under
its lock, in one store transaction); what it means is decided by the pure functions beside this file
(reconcile.py: a node's report or silence, port_checks.py: port checks and probes, work.py: its work) and
becomes the job machine's events (Joined, NodesStarted, Progress, PortsBusy, Failed), which the job side
applies. Agent work is level-triggered: derived on every heartbeat from the durable state, never from
messages a restart could lose.

Every engine's nodes speak it, through the engine host (cluster/coordinator/engine_host.py): agents over
the agents engine's gRPC AgentService (cluster/engines/agents/service.py, which also keeps their liveness and
long poll), the local engine in-process for its one node (`watched=False`: an engine's own node is never
lost for silence)."""

from __future__ import annotations

import logging
from typing import Any, Iterable, Sequence

from cluster.coordinator import job_machine, policy
from cluster.coordinator.values import AgentLive, BadRequest, Lookup
from cluster.coordinator.nodes import reconcile, work as work_lib
from cluster.coordinator.nodes.handshake import Handshake
from cluster.shared.heartbeat_budget import heartbeat_interval
from cluster.shared.model import AgentRecord, Allocation, AllocState
from cluster.shared.work import AgentReport, RunningJob, Work

log = logging.getLogger("tfdist.coordinator")


class NodeEvents:
    def __init__(self, host: Any, now: float):
        self.host = host
        self.restart_grace(now)
        self.handshake = Handshake(host)

    def restart_grace(self, now: float) -> None:
        """After a coordinator's restart every known agent gets a full grace period to re-attach, from `now`
        (as its engine attaches): lost_after, plus the longest heartbeat interval it may have been given (its
        beacons count again once a heartbeat confirms them)."""
        grace = heartbeat_interval(len(self.host.agents), self.host.settings, beacons=True)
        for agent in self.host.agents.values():
            agent.last_heartbeat = max(agent.last_heartbeat, now + grace)

    def register(self, record: AgentRecord, running: Sequence[RunningJob], leased: Iterable[str], now: float,
                 watched: bool = True, held_elsewhere: int = 0, metrics_address: str = "") -> None:
        """An agent (re)joins, saying what it runs and which jobs' ports it holds (on heartbeats until its
        first beacon arrives, if it beacons). `watched`: lost when silent (False: an engine's own node);
        `held_elsewhere`: its slots work outside tfdist holds (AgentLive.held_elsewhere)."""
        if not record.name or record.slots < 1:
            raise BadRequest(f"agent {record.name!r}: needs a name and at least 1 slot, got {record.slots}")
        if record.gpus and len(record.gpus) != record.slots:
            raise BadRequest(f"agent {record.name}: {record.slots} slots but {len(record.gpus)} GPUs")
        host = self.host
        with host.event():
            host.store.upsert_agent(record, now)
            previous = host.agents.get(record.name)
            agent = AgentLive(record, now, running={j.job_id: set(j.joined_ranks) for j in running},
                              leased=set(leased), attempts={j.job_id: j.attempt for j in running}, watched=watched,
                              held_elsewhere=held_elsewhere)
            host.agents[record.name] = agent
            host.metrics_addresses[record.name] = metrics_address
            host.lifecycle.node_changed(record.name)
            log.info("agent %s %s: %d %s slots, running %s", record.name, "re-attached" if previous else "registered",
                     record.slots, "GPU" if record.gpu else "CPU", sorted(agent.running) or "nothing")
            self._reconcile(agent, now, came_back=True)
            host.lifecycle.schedule(now)

    def heartbeat(self, report: AgentReport, now: float) -> Work | None:
        """Returns the agent's work, or None if it must register again."""
        host = self.host
        name, leased = report.agent, set(report.leased_jobs)
        agent = host.agents.get(name)
        host.telemetry.heartbeats.inc()
        if report.usage is not None and agent is not None:
            host.usage[name] = report.usage  # one dict write: atomic, no lock needed
        if agent is not None and not agent.lost and not report.running and not leased and not report.port_results \
                and not report.probe_results and not agent.busy and not host.allocs.on_agent(name):
            # The common case, an idle node: no lock, no SQL (an attribute write is atomic).
            agent.last_heartbeat = now
            return Work()
        host.lock.node_turn()  # users' actions in flight first, where the engine's lock orders them
        with host.event(version_of=name) as event:
            agent = host.agents.get(name)
            if agent is None or agent.lost:
                return None
            agent.last_heartbeat = now
            agent.running = {j.job_id: set(j.joined_ranks) for j in report.running}
            agent.attempts = {j.job_id: j.attempt for j in report.running}
            agent.leased = leased
            for job in report.running:  # the step watchdog: when each rank last moved, on our clock
                held = host.allocs.get(job.job_id, name)
                if (job.progress or host.runs.get(job.job_id).progress) and held is not None and \
                        held.state != AllocState.RELEASING and \
                        reconcile.runs_current(agent, job.job_id, self._attempt(job.job_id)):
                    host.lifecycle.handle(job.job_id, job_machine.Progress(job), now)
                    host.throughput.note(job.job_id, host.runs.get(job.job_id).progress)
            for job_id, busy in report.port_results.items():
                self.handshake.port_result(job_id, name, list(busy), now)
            for job_id, failures in report.probe_results.items():
                self.handshake.probe_result(job_id, name, failures, now)
            self._reconcile(agent, now, came_back=False)
            work = self._work_for(agent)
        work.version = event.version  # the version its answer covers, its own change included
        return work

    def held_elsewhere(self, name: str, slots: int, now: float) -> None:
        """Work outside tfdist now holds `slots` of the node (its engine saw it): its free slots change."""
        host = self.host
        known = host.agents.get(name)
        if known is None or known.held_elsewhere == slots:  # the common case, read without the lock: no event
            return
        with host.event():
            agent = host.agents.get(name)
            if agent is None or agent.held_elsewhere == slots:
                return
            agent.held_elsewhere = slots
            host.lifecycle.node_changed(name)
            host.lifecycle.schedule(now)

    def check_lost(self, now: float) -> list[str]:
        """Declares silent agents lost, failing and freeing their jobs; returns their names. Called periodically
        (Engine.tick)."""
        host = self.host
        silent = reconcile.lost_agents(list(host.agents.values()), now, host.settings.lost_after)  # no lock: reads
        if not silent:
            return []
        lost = []
        with host.event():
            for name, silence in reconcile.still_silent(host.agents, silent, now, host.settings.lost_after):
                host.node_lost(name, policy.lost(name, silence), now)
                lost.append(name)
                log.warning("agent %s lost: no heartbeat or beacon for %.1fs", name, silence)
            host.lifecycle.schedule(now)
        return lost

    def seen(self, name: str, now: float, beacons: bool = False) -> bool:
        """A sign of life from `name` other than a report (a beacon): alive now. False if it is not counted
        alive (lost, unknown): it must heartbeat, and so learn that it registers again. No lock but where its
        liveness changes (an attribute write, as an idle heartbeat's)."""
        agent = self.host.agents.get(name)
        if agent is None or agent.lost:
            return False
        agent.last_heartbeat = max(agent.last_heartbeat, now)
        if beacons and not agent.beaconing:  # its first beacon (since it registered, or this coordinator started)
            with self.host.lock:
                if agent.lost or self.host.agents.get(name) is not agent:
                    return False
                agent.beaconing = True
        return True

    def _attempt(self, job_id: str) -> int | None:
        job = self.host.store.job(job_id)
        return job.attempt if job is not None else None

    def _allocations_of(self, agent: str) -> dict[str, tuple[Allocation, ...]]:
        """Job -> all of its allocations, for each job holding `agent` (in the agent's order)."""
        allocs = self.host.allocs
        return {a.job_id: allocs.of_job(a.job_id) for a in allocs.on_agent(agent)}

    def _reconcile(self, agent: AgentLive, now: float, came_back: bool) -> None:
        """Brings the allocations on `agent` in line with what it says it runs and holds."""
        host, lifecycle = self.host, self.host.lifecycle
        exited: Lookup[str, set[int]] = Lookup(lambda job_id: {e.rank for e in lifecycle.exits(job_id)})
        ranks_on: Lookup[str, list[int]] = Lookup(lambda job_id: lifecycle.ranks_on(job_id, agent.name))
        decisions = reconcile.reconcile(agent, self._allocations_of(agent.name), Lookup(self._attempt), exited,
                                        ranks_on, came_back)
        for d in decisions:
            if d.action in (reconcile.Action.JOINED, reconcile.Action.STARTED):
                lifecycle.handle(d.job_id, job_machine.Joined(frozenset(d.joined)), now)
                if d.action == reconcile.Action.STARTED:
                    host.allocs.update(d.job_id, agent.name, state=AllocState.STARTED)
                    lifecycle.handle(d.job_id, job_machine.NodesStarted(), now)
            elif d.action == reconcile.Action.LEASE_AGAIN:
                host.allocs.set_state(d.job_id, AllocState.LEASING)
                host.store.update_job(d.job_id, now, d.event)
            elif d.outcome is not None:
                lifecycle.handle(d.job_id, job_machine.Failed(d.outcome), now)
        # What ended (just now, or before) and the agent no longer holds frees its slots.
        released = reconcile.released(agent, host.allocs.on_agent(agent.name))
        for job_id in released:
            lifecycle.free(job_id, agent.name)
        if released:
            lifecycle.schedule(now)

    def _work_for(self, agent: AgentLive) -> Work:
        host = self.host
        dump = [job_id for job_id in host.runs.dumping() if agent.name in host.runs.get(job_id).dump_to]
        work = work_lib.work_for(agent, self._allocations_of(agent.name), Lookup(host.store.job),
                                 Lookup(host.lifecycle.plan), host.settings, dump)
        for job_id in dump:
            host.lifecycle.handle(job_id, job_machine.StacksAsked(agent.name), 0.0)  # asked once
        return work
