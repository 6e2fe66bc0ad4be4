"""The node protocol's gRPC edge, for every node that runs `tfdist agent` (the agents engine's, Slurm's, a
Kubernetes run's pods): registration, heartbeats, the work long poll, and what nodes ship (exits, logs,
metrics). Thin: convert, call the nodes (events.py) or the job side, convert back. `beacons`: the agents
engine's UDP liveness (enrolled at registration, confirmed over TLS by a heartbeat), where it serves them."""

from __future__ import annotations

import threading
import time
from typing import Any

from cluster.coordinator.nodes import certificates as agent_certificates
from cluster.coordinator.engine import ENGINE_THREADS
from cluster.coordinator.rpc_edge import Gate, guard
from cluster.coordinator.nodes.events import NodeEvents
from cluster.shared import beacon
from cluster.shared.metrics_http import reader_principal
from cluster.shared.model import LogLine
from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb
from cluster.shared.protos.tfdist.v1 import cluster_pb2_grpc as pb_grpc
from cluster.shared.credentials import RUN_KIND, parse_run_name
from cluster.shared.work import (agent_from_pb, exit_from_pb, metric_from_pb, of_run, report_from_pb, running_from_pb,
                                 work_to_pb)
from tfdist.errors import UnauthenticatedError

WATCH_THREADS = ENGINE_THREADS  # agents' WaitForWork long polls; the others rely on beacons' pokes and heartbeats
WATCH_WAIT_MAX = 30.0  # seconds one WaitForWork call may be held


class AgentServicer(pb_grpc.AgentServiceServicer):
    def __init__(self, core: Any, nodes: NodeEvents, gate: Gate, clock=time.time,
                 beacons: Any = None):
        self.core, self.nodes, self.gate, self.clock, self.beacons = core, nodes, gate, clock, beacons
        self.watch_slots = threading.BoundedSemaphore(WATCH_THREADS)

    @guard
    def WaitForWork(self, request, context, principal):
        """Held until the agent has new work or `wait_ms` passed. With every waiting slot taken it
        answers at once with held=false, and the agent keeps to its heartbeats for a while."""
        if not self.watch_slots.acquire(blocking=False):
            return pb.WaitForWorkResponse(version=self.core.agent_board.version(request.agent), held=False)
        try:
            wait = min(max(request.wait_ms, 0) / 1000.0, WATCH_WAIT_MAX)
            return pb.WaitForWorkResponse(version=self.core.agent_board.wait(request.agent, request.seen, wait),
                                          held=True)
        finally:
            self.watch_slots.release()

    @guard
    def Register(self, request, context, principal):
        record = agent_from_pb(request.agent)
        certificate = b""  # signed first: a request it refuses registers nothing
        if request.metrics_csr:
            certificate = agent_certificates.sign(self.gate.authority, request.metrics_csr, record)
        beacons = request.beacons and self.beacons is not None and self.beacons.port != 0
        response = pb.RegisterResponse(metrics_certificate=certificate)
        if beacons:  # first: a beacon of its earlier registration still on its way counts no more
            response.beacon_key, response.beacon_nonce = self.beacons.book.enroll(record.name)
            response.beacon_port = self.beacons.port
            response.beacon_interval = beacon.interval(self.core.settings.lost_after)
        elif self.beacons is not None:
            self.beacons.book.without(record.name)
        self.nodes.register(record, tuple(running_from_pb(t) for t in request.running),
                            tuple(request.leased_jobs), self.clock())
        self.core.metrics_addresses[record.name] = request.agent.metrics_address
        response.heartbeat_interval = self.nodes.liveness.interval(record.name)
        return response

    @guard
    def CheckScrapeToken(self, request, context, principal):
        """Who a scraper of the agent's /metrics is: a credential that may read the cluster, or an error."""
        scraper = self.gate.authority.verify(request.token) if request.token else None
        if scraper is None:
            raise UnauthenticatedError("unknown or wrong token: use a credential this cluster issued")
        reader_principal(scraper)
        return pb.CheckScrapeTokenResponse(kind=scraper.kind, name=scraper.name)

    @guard
    def Heartbeat(self, request, context, principal):
        version = self.core.agent_board.version(request.agent)  # before: a later change is poked again
        work = self.nodes.heartbeat(report_from_pb(request), self.clock())
        run = parse_run_name(principal.name) if principal.kind == RUN_KIND else None
        if work is not None and run is not None:  # a run credential is told its run's work alone
            work = of_run(work, run[1], run[2])
        if work is not None:
            work.version = work.version or version  # a heartbeat that changed anything: as of its end
            if request.beacon_nonce and self.beacons is not None and self.beacons.port:
                self.beacons.book.confirm(request.agent, request.beacon_nonce)  # over TLS: its beacons count
                work.beacon_port = self.beacons.port
                self.beacons.fetched(request.agent, version)
        return work_to_pb(work, self.nodes.liveness.interval(request.agent))

    @guard
    def ReportExit(self, request, context, principal):
        """The core stamps the exit with the reporting agent and the time, and decides `tolerated` itself."""
        self.core.report_exit(request.agent, request.job_id, exit_from_pb(request.exit, agent=request.agent),
                              self.clock())
        return pb.ReportExitResponse()

    @guard
    def PushLogs(self, request, context, principal):
        self.core.push_logs(request.agent, request.job_id,
                            [LogLine(l.rank, l.stream, l.text, l.time) for l in request.lines], request.source,
                            request.first_seq)
        return pb.PushLogsResponse()

    @guard
    def ReportMetrics(self, request, context, principal):
        self.core.push_metrics(request.agent, request.job_id,
                               [metric_from_pb(m) for m in request.metrics], request.source,
                               request.first_seq)
        return pb.ReportMetricsResponse()


def add_to_server(servicer: AgentServicer, server) -> None:
    pb_grpc.add_AgentServiceServicer_to_server(servicer, server)
