"""The coordinator's logic, without gRPC: every method takes plain values and `now`.

Agent work is level-triggered: what an agent must do (check ports, start
workers, stop a job) is derived on every heartbeat from the durable state,
never from a queue of messages that a restart could lose. So a coordinator
killed with -9 and restarted resumes from SQLite, and agents re-attach.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import secrets
import threading
import time
from typing import Any

from cluster import placement as placement_lib
from cluster import scheduler
from cluster.config import ConfigError, ExperimentConfig, config_from_dict
from cluster.gang import describe_exit
from cluster.model import JobState, check_transition
from cluster.coordinator.allocations import AllocationTable
from cluster.store import Store
from cluster.worker_env import NodePlacement, plan_workers, worker_environment

log = logging.getLogger("tfdist.coordinator")

# Allocation states (per job and node).
PREPARING = "PREPARING"  # the agent is asked whether the leased ports are free
READY = "READY"  # ports confirmed; the agent is told to start the workers
STARTED = "STARTED"  # the agent runs (or ran) the workers
RELEASING = "RELEASING"  # the job ended; slots are held until the agent has stopped it

MAX_LOG_LINE = 8192


class NotFound(KeyError):
    def __str__(self) -> str:
        return self.args[0]


class BadRequest(ValueError):
    pass


@dataclasses.dataclass
class AgentLive:
    name: str
    slots: int
    gpu: bool
    addresses: list[dict]
    last_heartbeat: float
    lost: bool = False
    running: set = dataclasses.field(default_factory=set)


@dataclasses.dataclass(frozen=True)
class Settings:
    lost_after: float = 10.0  # seconds without a heartbeat before a node is declared lost
    heartbeat_interval: float = 1.0  # the shortest; large clusters get longer ones
    max_heartbeats_per_s: float = 250.0  # what the coordinator asks of all agents together
    port_range: tuple[int, int] = (29500, 29999)
    subnet: str | None = None


class CoordinatorCore:
    def __init__(self, store: Store, settings: Settings = Settings(), now: float = 0.0):
        self.store = store
        self.settings = settings
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)  # notified on every job state change
        self.agents: dict[str, AgentLive] = {}
        self.excluded_ports: dict[tuple[str, str], set[int]] = {}  # (job, agent) -> ports found busy
        self.waiting: dict[str, str] = {}
        self.allocs = AllocationTable(store)
        # After a restart every known agent gets a full grace period to re-attach.
        for a in store.agents():
            self.agents[a["name"]] = AgentLive(a["name"], a["slots"], a["gpu"], a["addresses"], now)
        self._update_heartbeat_interval()

    # ---------------------------------------------------------------- agents
    def heartbeat_interval(self) -> float:
        return self._heartbeat_interval

    def _update_heartbeat_interval(self) -> None:
        """Agents heartbeat every `heartbeat_interval` seconds, stretched so that all of them together
        send at most `max_heartbeats_per_s` (a Python gRPC server spends about 0.65 ms of CPU per
        call), but never so far apart that fewer than three fit in `lost_after`. Under the lock."""
        alive = sum(1 for a in self.agents.values() if not a.lost)
        wanted = max(self.settings.heartbeat_interval, alive / self.settings.max_heartbeats_per_s)
        self._heartbeat_interval = min(wanted, max(self.settings.heartbeat_interval, self.settings.lost_after / 3))

    def register(self, name: str, slots: int, gpu: bool, addresses: list[dict], running: list[str],
                 now: float) -> None:
        if not name or slots < 1:
            raise BadRequest(f"agent {name!r}: needs a name and at least 1 slot, got {slots}")
        with self.lock:
            self.store.upsert_agent(name, slots, gpu, addresses, now)
            previous = self.agents.get(name)
            self.agents[name] = AgentLive(name, slots, gpu, addresses, now, running=set(running))
            self._update_heartbeat_interval()
            verb = "re-attached" if previous else "registered"
            log.info("agent %s %s: %d %s slots, running %s", name, verb, slots, "GPU" if gpu else "CPU",
                     sorted(running) or "nothing")
            self._mark_started(name, running, now)
            self._schedule(now)

    def heartbeat(self, name: str, running: list[str], busy_ports: dict[str, list[int]],
                  now: float) -> dict | None:
        """Returns the agent's work, or None if it must register again."""
        agent = self.agents.get(name)
        if agent is not None and not agent.lost and not running and not busy_ports and not agent.running \
                and not self.allocs.on_agent(name):
            # The common case, an idle node: no lock, no SQL (an attribute write is atomic).
            agent.last_heartbeat = now
            return {"check_ports": [], "start": [], "stop_jobs": []}
        with self.lock:
            agent = self.agents.get(name)
            if agent is None or agent.lost:
                return None
            agent.last_heartbeat = now
            agent.running = set(running)
            for job_id, busy in busy_ports.items():
                self._port_result(job_id, name, busy, now)
            self._mark_started(name, running, now)
            self._release_stopped(name, now)
            return self._work_for(name)

    def _mark_started(self, agent: str, running: list[str], now: float) -> None:
        for job_id in running:
            alloc = self.allocs.get(job_id, agent)
            if alloc is not None and alloc["state"] == READY:
                self.allocs.set_state(job_id, agent, STARTED)
                self._maybe_running(job_id, now)

    def _maybe_running(self, job_id: str, now: float) -> None:
        job = self.store.job(job_id)
        if job and job["state"] == JobState.STARTING.value and \
                all(a["state"] == STARTED for a in self.allocs.of_job(job_id)):
            self._transition(job_id, JobState.RUNNING, now, "every node started its workers", started_at=now)

    def _release_stopped(self, agent: str, now: float) -> None:
        """A RELEASING allocation is freed once the agent no longer runs the job."""
        running = self.agents[agent].running
        stopped = [a["job_id"] for a in self.allocs.on_agent(agent)
                   if a["state"] == RELEASING and a["job_id"] not in running]
        for job_id in stopped:
            self._free_allocation(job_id, agent)
        if stopped:
            self._schedule(now)
            self.changed.notify_all()

    def _free_allocation(self, job_id: str, agent: str) -> None:
        left = [a for a in self.allocs.of_job(job_id) if a["agent"] != agent]
        self.allocs.replace(job_id, left)
        self.excluded_ports.pop((job_id, agent), None)

    def _work_for(self, agent: str) -> dict:
        work: dict[str, Any] = {"check_ports": [], "start": [], "stop_jobs": []}
        running = self.agents[agent].running
        active_here = {}
        for alloc in self.allocs.on_agent(agent):
            active_here[alloc["job_id"]] = alloc
            if alloc["state"] == PREPARING:
                work["check_ports"].append({"job_id": alloc["job_id"], "ports": alloc["ports"]})
            elif alloc["state"] == READY and alloc["job_id"] not in running:
                start = self._start_task(alloc["job_id"], agent)
                if start:
                    work["start"].append(start)
        for job_id in running:
            alloc = active_here.get(job_id)
            if alloc is None or alloc["state"] == RELEASING:
                work["stop_jobs"].append(job_id)
        return work

    def _start_task(self, job_id: str, agent: str) -> dict | None:
        allocs = self.allocs.of_job(job_id)
        if not all(a["state"] in (READY, STARTED) for a in allocs):
            return None  # some node is still checking its ports: nobody starts yet
        job = self.store.job(job_id)
        spec = job["spec"]
        nodes = [NodePlacement(host=a["address"], slots=a["slots"], ports=tuple(a["ports"]),
                               process_per_slot=not self.agents[a["agent"]].gpu) for a in allocs]
        workers = plan_workers(nodes)
        config = _config_from_spec(spec)
        node_rank = next(a["node_rank"] for a in allocs if a["agent"] == agent)
        procs = [{"rank": w.rank, "command": list(spec["entrypoint"]), "port": w.port,
                  "env": worker_environment(job_id, config, workers, w.rank)}
                 for w in workers if w.node_rank == node_rank]
        return {"job_id": job_id, "working_dir": spec.get("working_dir", ""), "workers": procs,
                "startup_timeout": float(spec.get("startup_timeout") or 0)}

    def _port_result(self, job_id: str, agent: str, busy: list[int], now: float) -> None:
        allocs = self.allocs.of_job(job_id)
        mine = next((a for a in allocs if a["agent"] == agent), None)
        if mine is None or mine["state"] != PREPARING:
            return
        if not busy:
            self.allocs.set_state(job_id, agent, READY)
            return
        excluded = self.excluded_ports.setdefault((job_id, agent), set())
        excluded.update(busy)
        try:
            mine["ports"] = self._lease(agent, len(mine["ports"]), job_id, excluded)
        except placement_lib.PlacementError as e:
            self._end(job_id, JobState.FAILED, now, f"cannot lease ports on {agent}: {e}", exit_code=1)
            return
        self.allocs.replace(job_id, allocs)
        self.store.update_job(job_id, now, f"ports {busy} busy on {agent}; leased {mine['ports']} instead",
                              placement=json.dumps(allocs))

    def _lease(self, agent: str, count: int, job_id: str, excluded: set[int]) -> list[int]:
        in_use = [p for a in self.allocs.on_agent(agent) if a["job_id"] != job_id for p in a["ports"]]
        return placement_lib.choose_ports(count, self.settings.port_range, in_use, excluded)

    def report_exit(self, agent: str, job_id: str, rank: int, exit_code: int, last_lines: list[str],
                    now: float, reason: str = "") -> None:
        with self.lock:
            job = self.store.job(job_id)
            if job is None:
                raise NotFound(f"job {job_id} not found")
            if not self.store.record_exit(job_id, rank, agent, exit_code, last_lines[-20:], now):
                return
            for alloc in self.allocs.of_job(job_id):  # an exit proves the workers were started
                if alloc["agent"] == agent and alloc["state"] == READY:
                    self.allocs.set_state(job_id, agent, STARTED)
                    self._maybe_running(job_id, now)
                    job = self.store.job(job_id)
            if JobState(job["state"]).terminal:
                return
            if exit_code != 0:
                what = reason.replace(f"rank {rank} ", "", 1) if reason else describe_exit(exit_code)
                self._end(job_id, JobState.FAILED, now,
                          f"rank {rank} on node {agent} {what}; the other workers were stopped",
                          exit_code=exit_code if 0 < exit_code < 256 else 1)
                return
            processes = sum(len(a["ports"]) for a in self.allocs.of_job(job_id))  # one port per process
            if len(self.store.exits(job_id)) >= processes:
                self._end(job_id, JobState.SUCCEEDED, now, "every worker exited with code 0", exit_code=0)

    def push_logs(self, agent: str, job_id: str, lines: list[tuple[int, str, str, float]]) -> None:
        if not lines:
            return
        with self.lock:
            if self.store.job(job_id) is None:
                raise NotFound(f"job {job_id} not found")
        self.store.append_logs(job_id, [(r, s, t[:MAX_LOG_LINE], ts) for r, s, t, ts in lines])
        with self.lock:
            self.changed.notify_all()  # wakes followers waiting in logs()

    def push_metrics(self, agent: str, job_id: str, rows: list[tuple[int, int, str, float, float]]) -> None:
        if not rows:
            return
        with self.lock:
            if self.store.job(job_id) is None:
                raise NotFound(f"job {job_id} not found")
        for rank, step, name, value, t in rows:
            if not name or len(name) > 200:
                raise BadRequest(f"metric name {name[:40]!r} must have 1-200 characters")
        self.store.append_metrics(job_id, rows)

    # ---------------------------------------------------------------- jobs
    def submit(self, spec: dict, now: float) -> tuple[str, str]:
        """Stores the job durably, schedules at once; returns (job id, state after scheduling)."""
        slots = int(spec.get("slots", 0))
        if slots < 1:
            raise BadRequest(f"slots must be at least 1, got {slots}")
        if not spec.get("entrypoint"):
            raise BadRequest("the job has no entrypoint: give a command")
        _config_from_spec(spec)  # validates the rest the way the CLI does
        with self.lock:
            try:
                scheduler.check_feasible(slots, self._nodes(include_busy=True))
            except scheduler.InfeasibleJob as e:
                raise BadRequest(str(e)) from None
            seq = self.store.next_job_seq()
            job_id = f"{seq}-{secrets.token_hex(2)}"
            self.store.insert_job(job_id, seq, spec, int(spec.get("priority", 0)), slots, now,
                                  f"submitted: {slots} slots")
            self._schedule(now)
            return job_id, self.store.job(job_id)["state"]

    def resolve_job_id(self, job_ref: str) -> str:
        """Accepts a full id or just its number."""
        if self.store.job(job_ref):
            return job_ref
        if job_ref.isdigit():
            job = self.store.job_by_seq(int(job_ref))
            if job:
                return job["id"]
        raise NotFound(f"job {job_ref} not found; `tfdist jobs` lists the jobs")

    def cancel(self, job_ref: str, now: float) -> str:
        with self.lock:
            job_id = self.resolve_job_id(job_ref)
            job = self.store.job(job_id)
            if not JobState(job["state"]).terminal:
                self._end(job_id, JobState.CANCELED, now, "canceled by the user", exit_code=130)
            return self.store.job(job_id)["state"]

    def _end(self, job_id: str, state: JobState, now: float, message: str, exit_code: int) -> None:
        self._transition(job_id, state, now, message, ended_at=now, message=message, exit_code=exit_code)
        allocs = self.allocs.of_job(job_id)
        for a in allocs:
            a["state"] = RELEASING
        # A lost node holds nothing: nobody is left there to report the job stopped.
        self.allocs.replace(job_id, [a for a in allocs if a["agent"] in self.agents
                                            and not self.agents[a["agent"]].lost])
        self.waiting.pop(job_id, None)
        self._schedule(now)

    def _transition(self, job_id: str, new: JobState, now: float, event: str, **fields) -> None:
        current = JobState(self.store.job(job_id)["state"])
        check_transition(current, new)
        self.store.update_job(job_id, now, f"{new.value}: {event}", state=new.value, **fields)
        log.info("job %s %s: %s", job_id, new.value, event)
        self.changed.notify_all()

    # ---------------------------------------------------------------- scheduling
    def _nodes(self, include_busy: bool = False) -> list[scheduler.Node]:
        used = self.allocs.used_slots()
        return [scheduler.Node(a.name, a.slots, a.slots if include_busy else a.slots - used.get(a.name, 0))
                for a in self.agents.values() if not a.lost]

    def _schedule(self, now: float) -> None:
        queued = self.store.jobs([JobState.QUEUED.value])
        if not queued:
            self.waiting = {}
            return
        pending = [scheduler.PendingJob(j["id"], j["slots"], j["priority"], j["seq"]) for j in queued]
        decision = scheduler.schedule(self._nodes(), pending)
        self.waiting = dict(decision.waiting)
        for assignment in decision.assignments:
            self._place(assignment, now)

    def _place(self, assignment: scheduler.Assignment, now: float) -> None:
        job_id = assignment.job_id
        names = [name for name, _ in assignment.nodes]
        try:
            addresses = placement_lib.choose_addresses({n: self.agents[n].addresses for n in names},
                                                       self.settings.subnet)
            # Each node of a job is a different agent: its ports only compete with other jobs there.
            allocs = [{"agent": name, "node_rank": rank, "slots": slots, "address": addresses[name],
                       "ports": self._lease(name, 1 if self.agents[name].gpu else slots, job_id, set()),
                       "state": PREPARING}
                      for rank, (name, slots) in enumerate(assignment.nodes)]
            self.allocs.replace(job_id, allocs)
        except placement_lib.PlacementError as e:
            self.allocs.replace(job_id, [])
            self._end(job_id, JobState.FAILED, now, str(e), exit_code=1)
            return
        placed = ", ".join(f"{n}:{s}" for n, s in assignment.nodes)
        self._transition(job_id, JobState.STARTING, now, f"placed on {placed}", placement=json.dumps(allocs))

    def check_agents(self, now: float) -> None:
        """Declares silent agents lost and fails their jobs. Called periodically."""
        with self.lock:
            for agent in self.agents.values():
                if agent.lost or now - agent.last_heartbeat <= self.settings.lost_after:
                    continue
                agent.lost = True
                self._update_heartbeat_interval()
                silence = now - agent.last_heartbeat
                log.warning("agent %s lost: no heartbeat for %.1fs", agent.name, silence)
                for alloc in self.allocs.on_agent(agent.name):
                    job = self.store.job(alloc["job_id"])
                    if not JobState(job["state"]).terminal:
                        self._end(alloc["job_id"], JobState.FAILED, now,
                                  f"node {agent.name} was lost (no heartbeat for {silence:.0f}s); "
                                  "the other nodes' workers were stopped", exit_code=1)
                    self._free_allocation(alloc["job_id"], agent.name)
            self._schedule(now)

    # ---------------------------------------------------------------- queries
    def job_view(self, job_ref: str) -> dict:
        with self.lock:
            job = self.store.job(self.resolve_job_id(job_ref))
            job["placement"] = self.allocs.of_job(job["id"]) or job["placement"]
            job["exits"] = self.store.exits(job["id"])
            job["waiting_reason"] = self.waiting.get(job["id"], "")
            job["events"] = self.store.events(job["id"])
            job["latest_metrics"] = self.store.latest_metrics(job["id"])
            return job

    def jobs_view(self) -> list[dict]:
        with self.lock:
            jobs = self.store.jobs()
            for job in jobs:
                job["waiting_reason"] = self.waiting.get(job["id"], "")
                job["placement"] = []
            return jobs

    def agents_view(self, now: float) -> list[dict]:
        with self.lock:
            used: dict[str, list] = {}
            for a in self.allocs.all():
                used.setdefault(a["agent"], []).append(a)
            return [{"name": a.name, "slots": a.slots, "gpu": a.gpu, "addresses": a.addresses,
                     "state": "LOST" if a.lost else "ALIVE", "last_heartbeat": a.last_heartbeat,
                     "jobs": sorted({x["job_id"] for x in used.get(a.name, [])}),
                     "free_slots": a.slots - sum(x["slots"] for x in used.get(a.name, []))}
                    for a in sorted(self.agents.values(), key=lambda a: a.name)]

    def logs(self, job_ref: str, after_seq: int, rank: int, limit: int, wait: float = 0.0,
             clock=None) -> tuple[list[dict], bool]:
        """Lines after `after_seq`; with `wait`, blocks until there are some or the job ended."""
        clock = clock or time.monotonic
        job_id = self.resolve_job_id(job_ref)
        deadline = clock() + wait
        with self.lock:
            while True:
                # Ended once no node holds the job any more: its agents shipped every line first.
                ended = JobState(self.store.job(job_id)["state"]).terminal and not self.allocs.of_job(job_id)
                lines = self.store.logs(job_id, after_seq, rank, limit)
                left = deadline - clock()
                if lines or ended or left <= 0:
                    return lines, ended and len(lines) < limit
                self.changed.wait(min(left, 1.0))


def _config_from_spec(spec: dict) -> ExperimentConfig:
    raw = {
        "name": spec.get("name") or "tfdist-job",
        "entrypoint": list(spec.get("entrypoint") or []) or None,
        "resources": {"slots_per_trial": int(spec.get("slots", 1))},
        "distribution": {"mode": spec.get("distribution_mode") or "mwms"},
        "hyperparameters": json.loads(spec.get("hyperparameters_json") or "{}"),
        "environment": {"variables": dict(spec.get("environment") or {})},
        "max_restarts": int(spec.get("max_restarts", 0)),
    }
    try:
        return config_from_dict(raw)
    except ConfigError as e:
        raise BadRequest(str(e)) from None
