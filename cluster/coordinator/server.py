"""Thin gRPC servicers over CoordinatorCore: convert, call, convert back.
Domain errors map to status codes here and only here."""

from __future__ import annotations

import dataclasses
import functools
import logging
import socket
import threading
import time
from concurrent import futures

import grpc

from cluster.coordinator import answers, metrics, views
from cluster.coordinator.experiments import views as experiment_views
from cluster.coordinator.rpc_edge import Gate, answer, guard
from cluster.coordinator.wire_guard import WireGuard
from cluster.coordinator.engine import ENGINE_THREADS, Engine, Front
from cluster.coordinator.core import CoordinatorCore, Settings
from cluster.coordinator.credential_book import CredentialBook
from cluster.coordinator.credential_calls import CredentialCalls
from cluster.coordinator.process import CoordinatorProcess
from cluster.shared import jobspec
from cluster.shared.listen import bind_failure
from cluster.shared.metrics_http import MetricsEndpoint
from cluster.shared.work import usage_to_pb
from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb
from cluster.shared.protos.tfdist.v1 import cluster_pb2_grpc as pb_grpc
from cluster.coordinator.submissions import SubmitQueue
from cluster.shared.credentials import Authority, Credential, Principal
from tfdist.errors import UserError

log = logging.getLogger("tfdist.coordinator")
MAX_MESSAGE_BYTES = 8 * 1024 * 1024
RPC_THREADS = 32  # heartbeats, submissions, queries
FOLLOWER_THREADS = 64  # long-polling log followers on top; more followers poll without waiting


class CoordinatorServicer(pb_grpc.CoordinatorServicer):
    def __init__(self, core: CoordinatorCore, gate: Gate, credentials: CredentialCalls, clock=time.time,
                 submissions: SubmitQueue | None = None):
        self.core, self.gate, self.clock = core, gate, clock
        self.credentials = credentials  # an administrator's issuing, listing and revoking
        self.submissions = submissions  # None: each submission is its own event (in-process tests)
        self.follower = views.LogFollower(core)
        self.follow_slots = threading.BoundedSemaphore(FOLLOWER_THREADS)

    @guard
    def SubmitJob(self, request, context, principal):
        spec = jobspec.from_pb(request.spec)
        with self.core.lock.user_action():  # queued and stored before the nodes' heartbeats take the lock
            job_id, state = self.submissions.submit(spec, principal.name) if self.submissions else \
                self.core.submit(spec, self.clock(), owner=principal.name)
        return pb.SubmitJobResponse(job_id=job_id, state=state)

    @guard
    def GetJob(self, request, context, principal):
        return answers.job_answer(self.core, request.job_id, self.clock())

    @guard
    def ListJobs(self, request, context, principal):
        return answers.jobs_answer(self.core, self.follower.reader, request.states, request.page_token,
                                   request.page_size, request.summary)

    @guard
    def CancelJob(self, request, context, principal):
        return pb.CancelJobResponse(state=self.core.cancel(request.job_id, self.clock()))

    @guard
    def PreemptJob(self, request, context, principal):
        return pb.PreemptJobResponse(state=self.core.preempt(request.job_id, self.clock()))

    @guard
    def ResumeJob(self, request, context, principal):
        return pb.ResumeJobResponse(state=self.core.resume(request.job_id, self.clock()))

    @guard
    def GetExperiment(self, request, context, principal):
        experiment = experiment_views.find(self.follower.reader, request.experiment_id)
        return experiment_views.experiment_answer(self.follower.reader, experiment,
                                                  checkpoint_of=self.follower.reader.latest_checkpoint)

    @guard
    def ListExperiments(self, request, context, principal):
        return experiment_views.experiments_answer(self.follower.reader)

    @guard
    def IssueCredential(self, request, context, principal):
        return self.credentials.issue(request, principal)

    @guard
    def ListCredentials(self, request, context, principal):
        return self.credentials.listing()

    @guard
    def RevokeCredential(self, request, context, principal):
        return self.credentials.revoke(request, principal)

    @guard
    def GetLogs(self, request, context, principal):
        limit, wait = answers.log_bounds(request.limit, request.wait_ms / 1000.0)
        # Waiting followers may use FOLLOWER_THREADS threads at most; the rest answer at once.
        waiting = wait > 0 and self.follow_slots.acquire(blocking=False)
        try:
            lines, ended = self.follower.logs(request.job_id, request.after_seq, request.rank, limit,
                                              wait if waiting else 0.0)
        finally:
            if waiting:
                self.follow_slots.release()
        return answers.logs_answer(lines, ended)

    @guard
    def GetMetrics(self, request, context, principal):
        job_id, rows = views.metrics_view(self.core, request.job_id, request.name or None)
        return pb.GetMetricsResponse(job_id=job_id, metrics=[
            pb.Metric(rank=m.rank, step=m.step, name=m.name, value=m.value, time=m.time) for m in rows])

    @guard
    def ListAgents(self, request, context, principal):
        return pb.ListAgentsResponse(agents=[
            pb.AgentInfo(name=a.record.name, slots=a.record.slots, gpu=a.record.gpu, state=a.state,
                         last_heartbeat=a.last_heartbeat, liveness=a.liveness,
                         jobs=list(a.jobs), free_slots=a.free_slots, free_gpus=list(a.free_gpus),
                         gpus=[pb.Gpu(index=g.index, uuid=g.uuid, name=g.name) for g in a.record.gpus],
                         addresses=[pb.Address(ip=x.ip, prefix_len=x.prefix_len, interface=x.interface)
                                    for x in a.record.addresses],
                         usage=usage_to_pb(self.core.usage[a.record.name]) if a.record.name in self.core.usage
                         else None,
                         metrics_address=self.core.metrics_addresses.get(a.record.name, ""))
            for a in views.agents_view(self.core)])


def _check_port_free(listen: str) -> None:
    """Raises OSError if something already listens on `listen` (port 0: any free one, nothing to check)."""
    host, _, port = listen.rpartition(":")
    if not port.isdigit() or int(port) == 0:
        return
    for family, kind, proto, _, address in socket.getaddrinfo(host.strip("[]") or None, int(port),
                                                             type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE):
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC's own: TIME_WAIT is no conflict
            probe.bind(address)


class CoordinatorServer:
    """The daemon: a CoordinatorProcess (process.py: store, core, engine, the watchdog loop) behind its gRPC
    server (the users' Coordinator service, and the engine's own: the agents engine's AgentService and
    beacons) and /metrics.

    It serves TLS with `authority`'s certificate (a fresh authority, kept in memory, when none is given)
    and accepts only credentials that authority issued. Plaintext only with `plaintext=True`
    (--insecure-plaintext): the caller warns. `process`: serve one already running (a local launch's,
    served from a thread half a second in); it stays the caller's to close.
    """

    def __init__(self, state_dir: str, listen: str = "127.0.0.1:0", authority: Authority | None = None,
                 settings: Settings = Settings(), max_workers: int = RPC_THREADS, plaintext: bool = False,
                 http_listen: str | None = None, engine: Engine | None = None,
                 process: CoordinatorProcess | None = None):
        """`engine`: where jobs run (cluster/coordinator/engine.py; the agents engine for a cluster); None: no
        node ever joins (a stored state, read)."""
        self.authority = authority or Authority.create(hosts=[listen.rsplit(":", 1)[0].strip("[]")])
        self.plaintext = plaintext
        self.owns_process = process is None
        if process is None:
            if not settings.store_key:  # the job stores' secrets: stable for as long as the authority is
                settings = dataclasses.replace(settings, store_key=self.authority.derived_key("job store"))
            process = CoordinatorProcess(state_dir, settings, engine)
        self.process = process
        self.store, self.core = process.store, process.core
        try:
            self.book = CredentialBook(self.authority)  # who may still use a credential: expiry, revocations
            self._serve(listen, max_workers, plaintext, http_listen)
        except BaseException:
            if self.owns_process:
                self.process.close()
            raise

    def _serve(self, listen: str, max_workers: int, plaintext: bool, http_listen: str | None) -> None:
        options = [("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                   ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                   ("grpc.so_reuseport", 0)]
        threads = max_workers + FOLLOWER_THREADS + ENGINE_THREADS
        # Undecodable requests: a one-line status, and a rate-limited log line (wire_guard).
        wire = WireGuard(self.book, lambda method, code: self.core.telemetry.rpc_errors.labels(method, code).inc())
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=threads), options=options, interceptors=[wire])
        gate = Gate(self.book, self.core)
        self.submissions = SubmitQueue(self.core.submit_batch)  # concurrent submissions share a transaction
        servicer = CoordinatorServicer(self.core, gate, CredentialCalls(self.book, lambda: self.local_address, plaintext),
                                       submissions=self.submissions)
        pb_grpc.add_CoordinatorServicer_to_server(servicer, self.server)
        bind_error = None
        try:
            _check_port_free(listen)  # before gRPC, whose C core would print a line of its own
            if plaintext:
                self.port = self.server.add_insecure_port(listen)
            else:
                tls = grpc.ssl_server_credentials([(self.authority.key_pem, self.authority.cert_pem)])
                self.port = self.server.add_secure_port(listen, tls)
        except OSError as e:  # in use, or not an address of this machine
            self.port, bind_error = 0, e
        except RuntimeError:  # grpc raises "Failed to bind to address ..."
            self.port = 0
        if self.port == 0:
            raise bind_failure("--listen", listen, bind_error)
        host = listen.rsplit(":", 1)[0]
        self.address = f"{host}:{self.port}"
        if self.owns_process and self.process.engine is not None:  # its own services, e.g. the agents'
            self.process.engine.serve(Front(self.server, gate, self.core.host, self.authority, host, self.port,
                                            plaintext, call=functools.partial(answer, gate), verify=self.book.verify,
                                            holds=self.book.holds, issue=self._engine_issue))
        self.metrics_endpoint = None  # /metrics for Prometheus (http_listen; None: none)
        if http_listen:
            try:
                self.metrics_endpoint = MetricsEndpoint(
                    http_listen, lambda: metrics.exposition(self.core.telemetry, self.core), self._scraper,
                    None if plaintext else (self.authority.cert_pem, self.authority.key_pem), "the coordinator's /metrics")
            except UserError:
                self.server.stop(0)
                raise

    @property
    def local_address(self) -> str:
        """Where a client on this machine reaches it (a wildcard listen is reached on loopback)."""
        host = self.address.rsplit(":", 1)[0].strip("[]")
        if host in ("0.0.0.0", "::", ""):
            return f"127.0.0.1:{self.port}"
        return self.address

    def issue(self, kind: str, name: str, days: float | None = None) -> Credential:
        """A credential of this coordinator's authority, naming where it listens (recorded in its book; `days`:
        how long it holds, None: its kind's default)."""
        return self.book.issue(kind, name, days, "", self.local_address, self.plaintext)

    def _engine_issue(self, kind: str, name: str, coordinator: str = "") -> Credential:
        """A credential its engine hands out (the Kubernetes admin Secret's), recorded in the book."""
        return self.book.issue(kind, name, None, "", coordinator or self.local_address, self.plaintext)

    def _scraper(self, token: str) -> Principal | None:
        return self.book.verify(token)

    def start(self) -> "CoordinatorServer":
        """The engine attaches first (its services answer from the first call), then the server starts."""
        try:
            self.process.start()
        except BaseException:  # its engine could not attach: leave nothing running
            self.server.stop(0)
            if self.owns_process:
                self.process.close()
            raise
        self.submissions.start()
        self.server.start()
        if self.metrics_endpoint is not None:
            self.metrics_endpoint.start()
        log.info("coordinator listening on %s", self.address)
        return self

    def stop(self, grace: float = 1.0, engine_timeout: float = 10.0) -> None:
        """`engine_timeout`: how long its engine's workers may take to stop (their grace, then SIGKILL)."""
        if self.owns_process:
            self.process.close_engine(engine_timeout)  # its workers' last exits still reach the store
        if self.metrics_endpoint is not None:
            self.metrics_endpoint.stop()
        self.server.stop(grace).wait()
        self.submissions.stop()
        if self.owns_process:
            self.process.close()
