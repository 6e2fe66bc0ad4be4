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

import dataclasses
import logging
import secrets
import threading
import time

import grpc

from cluster.agent.beacon import BeaconSender
from cluster.agent.edge import CoordinatorLink
from cluster.agent.loops import jittered, ship_loop, watch_loop
from cluster.agent.leftovers import GroupsFile, kill_leftovers
from cluster.agent.metrics_endpoint import NodeCollector, NodeMetrics
from cluster.agent.netinfo import discover_addresses
from cluster.agent.node_runs import NodeRuns, Shipping
from cluster.agent.outbox import Outbox
from cluster.agent.ports import Prober, lease_dir
from cluster.agent.unreachable import Unreachable
from cluster.agent.usage import UsageSampler
from cluster.shared.credentials import Credential, parse_run_name
from cluster.shared.gpus import discover_gpus
from cluster.shared.model import Address, AgentRecord, Gpu
from cluster.shared.rpc import Client, ClientError
from cluster.shared.work import AgentReport, ProbeTask, Work, of_run
from tfdist.errors import UserError

log = logging.getLogger("tfdist.agent")
REFUSED = (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)
DRAIN_LIMIT = 3600.0  # seconds a finished job's output waits for an unreachable coordinator


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
                 metrics_listen: str | None = None, beacons: bool = True, only_run: tuple[str, int] | None = None,
                 working_dir: str | None = None):
        """`beacons`: prove the node alive with UDP beacons where the coordinator offers them (False:
        with heartbeats alone, as agents before them did; for UDP blocked between node and coordinator).
        `only_run`: (job, attempt) whose work alone it carries out (a Kubernetes pod's agent: the node is
        its pod's only for that run; another's work waits for that run's own pod). `working_dir`: where its
        workers run, whatever directory the job was launched from (a pod has none of the client's: its
        config's or its image's)."""
        self.name = name
        self.only_run = only_run
        self.working_dir = working_dir
        self.gpus, self.slots = node_slots(slots, gpus)
        self.addresses = addresses or [Address(a["ip"], a["prefix_len"], a.get("interface", ""))
                                       for a in discover_addresses(coordinator)]
        speaks_for = (parse_run_name(credential.name) or ("",))[0] if credential.kind == "run" else credential.name
        if credential.kind not in ("node", "run") or speaks_for != name:
            raise NodeCredentialError(f"agent {name!r} needs a node credential issued for {name!r}; this one is for "
                                      f"{credential.kind} {credential.name!r} (`tfdist credentials DIR --node {name}`)")
        self.client = Client(coordinator, credential)
        self.link = CoordinatorLink(self.client, name)
        self.heartbeat_interval = 1.0
        self.use_beacons = beacons
        self.source = f"{name}/{secrets.token_hex(4)}"  # this agent process, for the coordinator's dedup
        self.outbox = Outbox(self.client, name, self.source)
        self.runs = NodeRuns(name, self.addresses, Shipping(
            lambda job, rank, stream, text: self.outbox.line(job, rank, stream, text), self.outbox.metric,
            self.outbox.exit, self._drain, self.outbox.forget), changed=self.wake, started=self._save_groups)
        self.metrics = self.runs.metrics
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
                # A credential problem, retrying will not help: refused at registration, or no longer accepted
                # (expired, revoked: the coordinator declares the node lost; its jobs fail and are placed again).
                if e.code in REFUSED and not self._registered or e.code == grpc.StatusCode.UNAUTHENTICATED:
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
        self.runs.stop_all()

    def shutdown(self, timeout: float) -> None:
        """stop(), then waits up to `timeout` for the workers to end (SIGTERM, then SIGKILL after
        the gang's grace period), so they may save what they were doing."""
        self.stop()
        self.runs.wait_idle(timeout)
        self._save_groups()

    def running_jobs(self) -> list[str]:
        return self.runs.job_ids()

    # ---------------------------------------------------------------- what it measures
    def _worker_pids(self) -> dict[str, list[int]]:
        return self.runs.process_groups()

    def _serve_metrics(self, certificate: bytes) -> None:
        """Starts /metrics after the first registration, with the certificate the coordinator signed."""
        self.node_metrics.serve(certificate, self.client, NodeCollector(
            self.name, self.slots, tuple(g.index for g in self.gpus), lambda: self.usage.latest, self.running_jobs,
            lambda: self.heartbeat_failures))

    # ---------------------------------------------------------------- talking to the coordinator
    def _register(self) -> None:
        record = AgentRecord(self.name, self.slots, tuple(self.addresses), tuple(self.gpus))
        registration = self.link.register(record, self.runs.running(), self.runs.leased(), self.node_metrics.address(),
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
        ports = self.runs.take_port_results()
        probes = self._prober.take()
        work, interval = self.link.heartbeat(AgentReport(self.name, self.runs.running(), self.runs.leased(), ports, probes,
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
        if self.only_run is not None:
            work = of_run(work, *self.only_run)
        if self.working_dir is not None and work.start:
            work = dataclasses.replace(work, start=[dataclasses.replace(t, working_dir=self.working_dir)
                                                    for t in work.start])
        for task in work.probes:
            self._start_probe(task)
        self.runs.apply(work)

    def _start_probe(self, task: ProbeTask) -> None:
        """Connects to every peer's leased ports of a job whose ports this node holds."""
        if self.runs.holds_ports(task.job_id):
            self._prober.start(task)

    def _save_groups(self) -> None:
        """The workers' process groups, so a restarted agent can stop what a killed one left."""
        self._groups.save(self.runs.process_groups())

    def _drain(self, job_id: str) -> None:
        """Waits until the job's output and exits reached the coordinator (it may be restarting)."""
        deadline = time.monotonic() + DRAIN_LIMIT
        while self.outbox.owes(job_id) and time.monotonic() < deadline and not self._stop.is_set():
            self.outbox.wake.set()
            self._stop.wait(0.01)
