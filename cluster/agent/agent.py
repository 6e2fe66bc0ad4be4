"""The agent's loop: heartbeat, lease and probe ports, start and stop job runs, ship output and exits.

Works on typed values only (cluster/shared/work.py); the wire is converted at its edges (edge.py for
the heartbeat, outbox.py for what is shipped). Starting a run is a plan (start_plan.py) executed by a
JobRun (job_run.py) on top of a Gang (gang.py).

Workers outlive a coordinator restart: the agent keeps them running, keeps
their output and exits queued, and re-attaches when the coordinator is back.
Workers do NOT outlive their agent: they die with it (PR_SET_PDEATHSIG), and
an agent that starts again kills whatever their process groups left behind
(leftovers.py), then registers without them, so the coordinator fails their
jobs at once instead of waiting on workers that are gone.
"""

from __future__ import annotations

import collections
import logging
import secrets
import tempfile
import threading
import time

import grpc

from cluster.agent.beacon import BeaconSender
from cluster.agent.edge import CoordinatorLink
from cluster.agent.loops import jittered, ship_loop, watch_loop
from cluster.agent.job_run import JobRun
from cluster.agent.leftovers import GroupsFile, kill_leftovers
from cluster.agent.metrics_endpoint import NodeCollector, NodeMetrics
from cluster.agent.metrics_tail import MetricsTail
from cluster.agent.netinfo import discover_addresses, discover_gpus
from cluster.agent.outbox import Outbox
from cluster.agent.ports import PortLease, Prober, lease_dir, lease_for_job
from cluster.agent.start_plan import node_facts, plan_start
from cluster.agent.unreachable import Unreachable
from cluster.agent.usage import UsageSampler
from cluster.shared.credentials import Credential
from cluster.shared.model import Address, AgentRecord, Gpu, WorkerExit
from cluster.shared.rpc import Client, ClientError
from cluster.shared.work import AgentReport, ProbeTask, RunningJob, StartTask, Work
from tfdist.errors import UserError

log = logging.getLogger("tfdist.agent")
REFUSED = (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)
DRAIN_LIMIT = 3600.0  # seconds a finished job's output waits for an unreachable coordinator
FINISHED_KEPT = 10_000  # runs remembered as finished (a repeated start of one is ignored)


def _say(emit, line: str | None) -> None:
    if line:
        emit("%s", line, stacklevel=2)  # the caller's line in the log


class NoSlotsError(UserError, ValueError):
    """The node has nothing to run workers on: no GPUs found and no CPU slots given."""


class NodeCredentialError(UserError):
    """The agent's credential is not a node credential for its own name."""


def node_slots(slots: int | None, gpus: list[Gpu] | None) -> tuple[list[Gpu], int]:
    """(the GPUs workers get, the slots offered): every GPU found without --slots; --slots N CPU worker
    slots hide the GPUs."""
    if slots is None:
        gpus = discover_gpus() if gpus is None else gpus
        if not gpus:
            raise NoSlotsError("this node has no GPUs (nvidia-smi found none): give --slots N CPU worker slots")
        return list(gpus), len(gpus)
    if discover_gpus() if gpus is None else gpus:
        log.warning("--slots %d: CPU worker slots; this node's GPUs are hidden from its workers", slots)
    return [], slots


class Agent:
    def __init__(self, coordinator: str, *, name: str, credential: Credential, slots: int | None = None,
                 addresses: list[Address] | None = None, gpus: list[Gpu] | None = None,
                 metrics_listen: str | None = None, beacons: bool = True):
        """`beacons`: prove the node alive with UDP beacons where the coordinator offers them (False:
        with heartbeats alone, as agents before them did; for UDP blocked between node and coordinator)."""
        self.name = name
        self.gpus, self.slots = node_slots(slots, gpus)
        self.addresses = addresses or [Address(a["ip"], a["prefix_len"], a.get("interface", ""))
                                       for a in discover_addresses(coordinator)]
        if credential.kind != "node" or credential.name != name:
            raise NodeCredentialError(f"agent {name!r} needs a node credential issued for {name!r}; this one is for "
                                      f"{credential.kind} {credential.name!r} (`tfdist credentials DIR --node {name}`)")
        self.client = Client(coordinator, credential)
        self.link = CoordinatorLink(self.client, name)
        self.heartbeat_interval = 1.0
        self.use_beacons = beacons
        self.source = f"{name}/{secrets.token_hex(4)}"  # this agent process, for the coordinator's dedup
        self.outbox = Outbox(self.client, name, self.source)
        self.metrics = MetricsTail(self.outbox.metric, lambda job, rank, text: self.outbox.line(job, rank, "stderr", text))
        self._lock = threading.Lock()
        self._runs: dict[str, JobRun] = {}  # job id -> its run whose workers run or are being reaped
        # (job id, attempt) of runs that ended here: a repeated start or port check of one is ignored.
        self._finished: collections.OrderedDict[tuple[str, int], None] = collections.OrderedDict()
        self._attempts: dict[str, int] = {}  # job id -> the run of it whose ports or workers this agent holds
        self._port_results: dict[str, tuple[int, ...]] = {}
        self._port_leases: dict[str, PortLease] = {}  # held from the check until the job ends
        self._stop = threading.Event()
        self._wake = threading.Event()  # heartbeat now
        self.beacons = BeaconSender(name, self._wake, self._stop)
        self._prober = Prober(on_done=self._wake.set)  # its results go with the next heartbeat
        self._registered = False
        self._unreachable = Unreachable()  # when to say so while the coordinator does not answer
        self.registered = threading.Event()  # set once the first registration succeeded
        self.refused = ""  # why the coordinator refused this node's credential (run() then returns)
        self._groups = GroupsFile(name)  # its directory and the lease directory: refused now if not ours
        lease_dir()
        self.usage = UsageSampler([g.index for g in self.gpus], self._worker_pids)
        self.heartbeat_failures = 0
        self.node_metrics = NodeMetrics(name, metrics_listen, credential.plaintext)  # --metrics-listen's /metrics

    # ---------------------------------------------------------------- main loop
    def run(self) -> None:
        kill_leftovers(self._groups.directory, self.name)
        self.usage.start()
        threading.Thread(target=ship_loop, args=(self.outbox, self.metrics, self._stop), daemon=True).start()
        threading.Thread(target=watch_loop, args=(self.link, self._stop, self._wake, lambda: self.heartbeat_interval,
                                                  self.beacons.active), daemon=True).start()
        threading.Thread(target=self.beacons.run, name="beacons", daemon=True).start()
        while not self._stop.is_set():
            try:
                if not self._registered:
                    self._register()
                urgent = self._heartbeat()
                _say(log.info, self._unreachable.answered(time.monotonic()))
            except ClientError as e:
                if e.code in REFUSED and not self._registered:  # a credential problem: retrying will not help
                    self.refused = f"the coordinator refused this node's credential: {e}"
                    log.error("%s", self.refused)
                    self._stop.set()
                    return
                self.heartbeat_failures += 1
                _say(log.warning, self._unreachable.failed(time.monotonic(), e))  # at once, then less often
                urgent = False
            if not urgent:
                self._wake.wait(jittered(self.heartbeat_interval))
            self._wake.clear()

    def wake(self) -> None:
        """Heartbeat at once instead of at the next interval (e.g. work was just submitted)."""
        self._wake.set()

    def stop(self) -> None:
        """Stops the loop and every job's workers (the agent is shutting down). Returns at once."""
        self._stop.set()
        self.usage.stop()
        self.node_metrics.stop()
        self.beacons.wake()
        self._wake.set()
        self.outbox.wake.set()
        with self._lock:
            runs = list(self._runs.values())
            leases = list(self._port_leases.values())
        for run in runs:
            run.gang.stop()
        for lease in leases:
            lease.release()

    def shutdown(self, timeout: float) -> None:
        """stop(), then waits up to `timeout` for the workers to end (SIGTERM, then SIGKILL after
        the gang's grace period), so they may save what they were doing."""
        self.stop()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if not self._runs:
                    break
            time.sleep(0.05)
        self._save_groups()

    def running_jobs(self) -> list[str]:
        with self._lock:
            return list(self._runs)

    # ---------------------------------------------------------------- what it measures
    def _worker_pids(self) -> dict[str, list[int]]:
        with self._lock:
            return {job_id: run.gang.process_groups() for job_id, run in self._runs.items()}

    def _serve_metrics(self, certificate: bytes) -> None:
        """Starts /metrics after the first registration, with the certificate the coordinator signed."""
        self.node_metrics.serve(certificate, self.client, NodeCollector(
            self.name, self.slots, tuple(g.index for g in self.gpus), lambda: self.usage.latest, self.running_jobs,
            lambda: self.heartbeat_failures))

    # ---------------------------------------------------------------- talking to the coordinator
    def _running(self) -> tuple[RunningJob, ...]:
        now = time.time()
        with self._lock:
            return tuple(run.running_job(now) for run in self._runs.values())

    def _leased(self) -> tuple[str, ...]:
        with self._lock:
            return tuple(j for j in self._port_leases if j not in self._runs)

    def _register(self) -> None:
        record = AgentRecord(self.name, self.slots, tuple(self.addresses), tuple(self.gpus))
        registration = self.link.register(record, self._running(), self._leased(), self.node_metrics.address(),
                                          self.node_metrics.csr, beacons=self.use_beacons)
        self.heartbeat_interval = registration.heartbeat_interval or 1.0
        self.beacons.configure(registration.beacons)
        self._registered = True
        self._serve_metrics(registration.metrics_certificate)
        self.registered.set()
        log.info("registered with %s as %s (%d %s slots)", self.client.address, self.name, self.slots,
                 "GPU" if self.gpus else "CPU")

    def _heartbeat(self) -> bool:
        """One heartbeat; True when there is follow-up to send at once (port checks to answer)."""
        with self._lock:
            ports, self._port_results = self._port_results, {}
        probes = self._prober.take()
        work, interval = self.link.heartbeat(AgentReport(self.name, self._running(), self._leased(), ports, probes,
                                                         self.usage.latest), self.beacons.nonce())
        if work is None:
            self._registered = False
            return True
        if interval:
            self.heartbeat_interval = interval
        self.beacons.fetched(work.version, work.beacon_port)
        self._apply(work)
        return bool(work.check_ports)

    def _apply(self, work: Work) -> None:
        for job_id, ports in work.check_ports:
            self._check_ports(job_id, list(ports), work.attempts.get(job_id, 0))
        for task in work.probes:
            self._start_probe(task)
        for task in work.start:
            self._start(task)
        for job_id in work.preempt:
            run = self._run_of(job_id)
            if run is not None and run.request_preemption():
                log.info("job %s: preemption requested; its workers stop at a common step", job_id)
        for job_id in work.dump_stacks:
            run = self._run_of(job_id)
            if run is not None:
                log.warning("job %s: the step watchdog asks for every worker's Python stacks", job_id)
                run.gang.dump_stacks()
        for job_id in work.stop_jobs:
            self._stop_job(job_id, work.stop_grace.get(job_id))

    def _run_of(self, job_id: str) -> JobRun | None:
        with self._lock:
            return self._runs.get(job_id)

    # ---------------------------------------------------------------- ports
    def _stop_job(self, job_id: str, grace: float | None = None) -> None:
        with self._lock:
            run = self._runs.get(job_id)
            lease = None if run else self._port_leases.pop(job_id, None)
        if run:
            if not run.gang.stopping:
                log.info("stopping job %s", job_id)
            run.gang.stop(grace)
        if lease:
            lease.release()
            with self._lock:
                self._attempts.pop(job_id, None)
            self._wake.set()

    def _check_ports(self, job_id: str, ports: list[int], attempt: int = 0) -> None:
        """Leases the ports machine-wide (so no other tfdist job on this machine, with this or
        another coordinator, takes them), listens on them for the peers' probes, and reports
        those that are busy."""
        with self._lock:
            if job_id in self._runs or (job_id, attempt) in self._finished:
                return
            self._attempts[job_id] = attempt
            old = self._port_leases.pop(job_id, None)
            if old:
                old.release()
            lease, busy = lease_for_job(job_id, ports)
            if busy:
                lease.release()
            else:
                self._port_leases[job_id] = lease
            self._port_results[job_id] = tuple(busy)

    def _start_probe(self, task: ProbeTask) -> None:
        """Connects to every peer's leased ports of a job whose ports this node holds."""
        with self._lock:
            if task.job_id not in self._port_leases:
                return
        self._prober.start(task)

    # ---------------------------------------------------------------- job runs
    def _start(self, task: StartTask) -> None:
        with self._lock:
            if task.job_id in self._runs or (task.job_id, task.attempt) in self._finished:
                return  # a start repeated before our heartbeat said we run it
            self._attempts[task.job_id] = task.attempt
            lease = self._port_leases.get(task.job_id)
            plan = plan_start(task, node_facts(self.name, self.addresses),
                              tempfile.mkdtemp(prefix=f"tfdist-{task.job_id}-"))  # ready and metrics files
            run = JobRun(plan, self._line_sink(task.job_id), self._report_exit)
            exits = plan.exits
            if plan.can_start:
                if lease:
                    lease.stop_listening()  # the ports are the workers' now
                exits = run.serve_store()
                if exits and lease:
                    lease.release()
                    self._port_leases.pop(task.job_id, None)
            if exits:  # every rank failed before any started
                run.close()
                for exit_ in exits:
                    self.outbox.exit(task.job_id, exit_)
                self._forget_run(task.job_id)
                return
            self.metrics.add(task.job_id, plan.metrics_files)
            self._runs[task.job_id] = run
        log.info("starting job %s: ranks %s", task.job_id, list(plan.ranks))
        threading.Thread(target=self._run_job, args=(run,), daemon=True).start()

    def _run_job(self, run: JobRun) -> None:
        # In this thread: the workers die with it (PDEATHSIG).
        result = run.run(started=self._save_groups)
        log.debug("job %s (run %d) on this node: %s", run.job_id, result.attempt, result.state.value)
        self.metrics.read(final=True, only=run.job_id)  # the last rows, before the files go
        self._drain(run.job_id)
        with self._lock:
            lease = self._port_leases.pop(run.job_id, None)
            if lease:
                lease.release()
            run.close()
            self.metrics.forget(run.job_id)
            self._runs.pop(run.job_id, None)
            self._forget_run(run.job_id)
        self.outbox.forget(run.job_id)
        self._save_groups()
        self._wake.set()  # tell the coordinator at once: the job's slots are free

    def _forget_run(self, job_id: str) -> None:
        """Under the lock: the job's run ended here; a repeated start of it is ignored."""
        self._finished[(job_id, self._attempts.pop(job_id, 0))] = None
        while len(self._finished) > FINISHED_KEPT:
            self._finished.popitem(last=False)

    def _save_groups(self) -> None:
        """The workers' process groups, so a restarted agent can stop what a killed one left."""
        with self._lock:
            groups = {j: run.gang.process_groups() for j, run in self._runs.items()}
        self._groups.save(groups)

    def _line_sink(self, job_id: str):
        def sink(rank: int, stream: str, line: str) -> None:
            self.outbox.line(job_id, rank, stream, line)
        return sink

    def _report_exit(self, job_id: str, exit_: WorkerExit) -> None:
        # What the worker recorded goes first: a preempted run's step must be known before its exits.
        self.metrics.read(only=job_id)
        self.outbox.exit(job_id, exit_)

    def _drain(self, job_id: str) -> None:
        """Waits until the job's output and exits reached the coordinator (it may be restarting)."""
        deadline = time.monotonic() + DRAIN_LIMIT
        while self.outbox.owes(job_id) and time.monotonic() < deadline and not self._stop.is_set():
            self.outbox.wake.set()
            self._stop.wait(0.01)
