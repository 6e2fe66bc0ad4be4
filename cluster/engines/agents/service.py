"""The agents' gRPC edge (the node protocol's AgentService), for every node that runs `tfdist agent` (agents on
machines, Slurm's, a Kubernetes run's pods): registration, heartbeats, the work long poll, and what nodes ship
(exits, logs, metrics). Thin: convert, call the job side through the engine host, convert back; each call
passes the coordinator's gate (Front.call). `beacons`: this engine's UDP liveness (enrolled at registration,
confirmed over TLS by a heartbeat), where it serves them."""

from __future__ import annotations

import threading
import time
from typing import Any

from cluster.coordinator.engine import ENGINE_THREADS, Front
from cluster.engines.agents import certificates as agent_certificates
from cluster.engines.agents.liveness import Liveness
from cluster.engines.agents.long_poll import LongPoll
from cluster.shared import beacon
from cluster.shared.metrics_http import reader_principal
from cluster.shared.model import LogLine
from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb
from cluster.shared.protos.tfdist.v1 import cluster_pb2_grpc as pb_grpc
from cluster.shared.credentials import RUN_KIND, Principal, parse_run_name
from cluster.shared.work import (agent_from_pb, exit_from_pb, metric_from_pb, of_run, report_from_pb, running_from_pb,
                                 work_to_pb)
from tfdist.errors import UnauthenticatedError

WATCH_THREADS = ENGINE_THREADS  # agents' WaitForWork long polls; the others rely on beacons' pokes and heartbeats
WATCH_WAIT_MAX = 30.0  # seconds one WaitForWork call may be held


class AgentServicer(pb_grpc.AgentServiceServicer):
    def __init__(self, front: Front, liveness: Liveness, long_poll: LongPoll, clock=time.time, beacons: Any = None):
        self.front, self.host = front, front.host
        self.liveness, self.long_poll, self.clock, self.beacons = liveness, long_poll, clock, beacons
        self.watch_slots = threading.BoundedSemaphore(WATCH_THREADS)
        # Each node's credential, as its last call the gate let through carried it: its beacons carry none, so
        # they count only while that credential holds (not expired, its name not revoked since).
        self.credentials: dict[str, Principal] = {}

    def beacon_seen(self, name: str, now: float) -> bool:
        """A beacon from `name` proves it alive only while the credential it last called with holds."""
        principal = self.credentials.get(name)
        if principal is None or not self.front.holds(principal):
            return False
        return self.liveness.seen(name, now)

    def WaitForWork(self, request, context):
        return self.front.call("WaitForWork", request, context, self._wait_for_work)

    def Register(self, request, context):
        return self.front.call("Register", request, context, self._register)

    def CheckScrapeToken(self, request, context):
        return self.front.call("CheckScrapeToken", request, context, self._check_scrape_token)

    def Heartbeat(self, request, context):
        return self.front.call("Heartbeat", request, context, self._heartbeat)

    def ReportExit(self, request, context):
        return self.front.call("ReportExit", request, context, self._report_exit)

    def PushLogs(self, request, context):
        return self.front.call("PushLogs", request, context, self._push_logs)

    def ReportMetrics(self, request, context):
        return self.front.call("ReportMetrics", request, context, self._report_metrics)

    # ---------------------------------------------------------------- the calls, once the gate passed them
    def _wait_for_work(self, request, principal):
        """Held until the agent has new work or `wait_ms` passed. With every waiting slot taken it
        answers at once with held=false, and the agent keeps to its heartbeats for a while."""
        if not self.watch_slots.acquire(blocking=False):
            return pb.WaitForWorkResponse(version=self.host.work_version(request.agent), held=False)
        try:
            wait = min(max(request.wait_ms, 0) / 1000.0, WATCH_WAIT_MAX)
            return pb.WaitForWorkResponse(version=self.long_poll.wait(request.agent, request.seen, wait), held=True)
        finally:
            self.watch_slots.release()

    def _register(self, request, principal):
        self.credentials[request.agent.name] = principal
        record = agent_from_pb(request.agent)
        certificate = b""  # signed first: a request it refuses registers nothing
        if request.metrics_csr:
            certificate = agent_certificates.sign(self.front.authority, request.metrics_csr, record)
        beacons = request.beacons and self.beacons is not None and self.beacons.port != 0
        response = pb.RegisterResponse(metrics_certificate=certificate)
        if beacons:  # first: a beacon of its earlier registration still on its way counts no more
            response.beacon_key, response.beacon_nonce = self.beacons.book.enroll(record.name)
            response.beacon_port = self.beacons.port
            response.beacon_interval = beacon.interval(self.host.settings.lost_after)
        elif self.beacons is not None:
            self.beacons.book.without(record.name)
        self.liveness.gone(record.name)  # it beacons anew once its beacons arrive
        self.host.register_node(record, tuple(running_from_pb(t) for t in request.running),
                                tuple(request.leased_jobs), self.clock(),
                                metrics_address=request.agent.metrics_address)
        self.liveness.update()
        response.heartbeat_interval = self.liveness.interval(record.name)
        return response

    def _check_scrape_token(self, request, principal):
        """Who a scraper of the agent's /metrics is: a credential that may read the cluster, or an error."""
        scraper = self.front.verify(request.token) if request.token else None
        if scraper is None:
            raise UnauthenticatedError("unknown or wrong token: use a credential this cluster issued")
        reader_principal(scraper)
        return pb.CheckScrapeTokenResponse(kind=scraper.kind, name=scraper.name)

    def _heartbeat(self, request, principal):
        self.credentials[request.agent] = principal  # its beacons count under this one (one dict write)
        version = self.host.work_version(request.agent)  # before: a later change is poked again
        work = self.host.node_report(report_from_pb(request), self.clock())
        run = parse_run_name(principal.name) if principal.kind == RUN_KIND else None
        if work is not None and run is not None:  # a run credential is told its run's work alone
            work = of_run(work, run[1], run[2])
        if work is not None:
            work.version = work.version or version  # a heartbeat that changed anything: as of its end
            if request.beacon_nonce and self.beacons is not None and self.beacons.port:
                self.beacons.book.confirm(request.agent, request.beacon_nonce)  # over TLS: its beacons count
                work.beacon_port = self.beacons.port
                self.beacons.fetched(request.agent, version)
        return work_to_pb(work, self.liveness.interval(request.agent))

    def _report_exit(self, request, principal):
        """The job side stamps the exit with the reporting agent and the time, and decides `tolerated`."""
        self.host.report_exit(request.agent, request.job_id, exit_from_pb(request.exit, agent=request.agent),
                              self.clock())
        return pb.ReportExitResponse()

    def _push_logs(self, request, principal):
        self.host.push_logs(request.agent, request.job_id,
                            [LogLine(l.rank, l.stream, l.text, l.time) for l in request.lines], request.source,
                            request.first_seq)
        return pb.PushLogsResponse()

    def _report_metrics(self, request, principal):
        self.host.push_metrics(request.agent, request.job_id, [metric_from_pb(m) for m in request.metrics],
                               request.source, request.first_seq)
        return pb.ReportMetricsResponse()


def add_to_server(servicer: AgentServicer, server) -> None:
    pb_grpc.add_AgentServiceServicer_to_server(servicer, server)
