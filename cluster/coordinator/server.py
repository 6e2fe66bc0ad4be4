"""Thin gRPC servicers over CoordinatorCore: convert, call, convert back.
Domain errors map to status codes here and only here."""

from __future__ import annotations

import logging
import sys
import threading
import time
from concurrent import futures

import grpc

from cluster.auth import TokenInterceptor, check_listen_policy
from cluster.coordinator.core import BadRequest, CoordinatorCore, NotFound, Settings
from cluster.protos.tfdist.v1 import cluster_pb2 as pb
from cluster.protos.tfdist.v1 import cluster_pb2_grpc as pb_grpc
from cluster.store import Store

log = logging.getLogger("tfdist.coordinator")
MAX_MESSAGE_BYTES = 8 * 1024 * 1024


def _guard(fn):
    def wrapper(self, request, context):
        try:
            return fn(self, request, context)
        except NotFound as e:
            context.abort(grpc.StatusCode.NOT_FOUND, str(e))
        except BadRequest as e:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        except Exception as e:  # a bug: log it whole, answer with one line
            log.exception("%s failed", fn.__name__)
            context.abort(grpc.StatusCode.INTERNAL, f"coordinator error in {fn.__name__}: {type(e).__name__}: {e}")
    wrapper.__name__ = fn.__name__
    return wrapper


def spec_to_dict(spec: pb.JobSpec) -> dict:
    return {"name": spec.name, "entrypoint": list(spec.entrypoint), "slots": spec.slots,
            "distribution_mode": spec.distribution_mode, "hyperparameters_json": spec.hyperparameters_json,
            "environment": dict(spec.environment), "max_restarts": spec.max_restarts, "priority": spec.priority,
            "working_dir": spec.working_dir, "startup_timeout": spec.startup_timeout}


def job_to_pb(job: dict) -> pb.Job:
    spec = job["spec"]
    return pb.Job(
        id=job["id"], spec=pb.JobSpec(**{k: v for k, v in spec.items() if k in pb.JobSpec.DESCRIPTOR.fields_by_name}),
        state=job["state"], submitted_at=job["submitted_at"], started_at=job["started_at"] or 0,
        ended_at=job["ended_at"] or 0, waiting_reason=job.get("waiting_reason", ""), message=job["message"] or "",
        exit_code=job["exit_code"] if job["exit_code"] is not None else -1,
        placement=[pb.Placement(agent=a["agent"], node_rank=a["node_rank"], slots=a["slots"], address=a["address"],
                                ports=a["ports"]) for a in job.get("placement", [])],
        exits=[pb.WorkerExit(rank=e["rank"], agent=e["agent"], exit_code=e["exit_code"], last_lines=e["last_lines"])
               for e in job.get("exits", [])],
        latest_metrics=[pb.Metric(**m) for m in job.get("latest_metrics", [])])


class CoordinatorServicer(pb_grpc.CoordinatorServicer):
    def __init__(self, core: CoordinatorCore, clock=time.time):
        self.core, self.clock = core, clock

    @_guard
    def SubmitJob(self, request, context):
        job_id, state = self.core.submit(spec_to_dict(request.spec), self.clock())
        return pb.SubmitJobResponse(job_id=job_id, state=state)

    @_guard
    def GetJob(self, request, context):
        return job_to_pb(self.core.job_view(request.job_id))

    @_guard
    def ListJobs(self, request, context):
        return pb.ListJobsResponse(jobs=[job_to_pb(j) for j in self.core.jobs_view()])

    @_guard
    def CancelJob(self, request, context):
        return pb.CancelJobResponse(state=self.core.cancel(request.job_id, self.clock()))

    @_guard
    def GetLogs(self, request, context):
        limit = min(request.limit or 1000, 5000)
        wait = min(max(request.wait_ms, 0), 10_000) / 1000.0
        lines, ended = self.core.logs(request.job_id, request.after_seq, request.rank, limit, wait)
        return pb.GetLogsResponse(job_ended=ended, lines=[
            pb.LogLine(seq=l["seq"], rank=l["rank"], stream=l["stream"], text=l["text"], time=l["time"])
            for l in lines])

    @_guard
    def ListAgents(self, request, context):
        return pb.ListAgentsResponse(agents=[
            pb.AgentInfo(name=a["name"], slots=a["slots"], gpu=a["gpu"], state=a["state"],
                         last_heartbeat=a["last_heartbeat"], jobs=a["jobs"], free_slots=a["free_slots"],
                         addresses=[pb.Address(ip=x["ip"], prefix_len=x["prefix_len"],
                                               interface=x.get("interface", "")) for x in a["addresses"]])
            for a in self.core.agents_view(self.clock())])


class AgentServicer(pb_grpc.AgentServiceServicer):
    def __init__(self, core: CoordinatorCore, clock=time.time):
        self.core, self.clock = core, clock

    @_guard
    def Register(self, request, context):
        a = request.agent
        self.core.register(a.name, a.slots, a.gpu,
                           [{"ip": x.ip, "prefix_len": x.prefix_len, "interface": x.interface} for x in a.addresses],
                           [t.job_id for t in request.running], self.clock())
        return pb.RegisterResponse(heartbeat_interval=self.core.heartbeat_interval())

    @_guard
    def Heartbeat(self, request, context):
        work = self.core.heartbeat(request.agent, [t.job_id for t in request.running],
                                   {r.job_id: list(r.busy_ports) for r in request.port_results}, self.clock())
        if work is None:
            return pb.HeartbeatResponse(reregister=True)
        return pb.HeartbeatResponse(
            check_ports=[pb.PortCheck(**c) for c in work["check_ports"]],
            start=[pb.StartTask(job_id=s["job_id"], working_dir=s["working_dir"], startup_timeout=s["startup_timeout"],
                                workers=[pb.WorkerProcess(**w) for w in s["workers"]]) for s in work["start"]],
            stop_jobs=work["stop_jobs"], heartbeat_interval=self.core.heartbeat_interval())

    @_guard
    def ReportExit(self, request, context):
        e = request.exit
        self.core.report_exit(request.agent, request.job_id, e.rank, e.exit_code, list(e.last_lines), self.clock(),
                              e.reason)
        return pb.ReportExitResponse()

    @_guard
    def PushLogs(self, request, context):
        self.core.push_logs(request.agent, request.job_id,
                            [(l.rank, l.stream, l.text, l.time) for l in request.lines])
        return pb.PushLogsResponse()


    @_guard
    def ReportMetrics(self, request, context):
        self.core.push_metrics(request.agent, request.job_id,
                               [(m.rank, m.step, m.name, m.value, m.time) for m in request.metrics])
        return pb.ReportMetricsResponse()


class CoordinatorServer:
    """The daemon: gRPC server + a thread that declares silent agents lost."""

    def __init__(self, state_dir: str, listen: str = "127.0.0.1:0", token: str | None = None,
                 settings: Settings = Settings(), max_workers: int = 32):
        check_listen_policy(listen, token)
        # Hundreds of heartbeat threads share the GIL with a submit: hand it over sooner than
        # Python's default 5 ms, or each of a submit's GIL re-acquisitions waits behind them.
        sys.setswitchinterval(0.0005)
        self.store = Store(f"{state_dir}/coordinator.sqlite" if state_dir != ":memory:" else ":memory:")
        self.core = CoordinatorCore(self.store, settings, now=time.time())
        options = [("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                   ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                   ("grpc.so_reuseport", 0)]
        interceptors = [TokenInterceptor(token)] if token else []
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers), options=options,
                                  interceptors=interceptors)
        pb_grpc.add_CoordinatorServicer_to_server(CoordinatorServicer(self.core), self.server)
        pb_grpc.add_AgentServiceServicer_to_server(AgentServicer(self.core), self.server)
        self.port = self.server.add_insecure_port(listen)
        if self.port == 0:
            raise OSError(f"cannot listen on {listen}: the address is in use or not on this machine")
        self.address = f"{listen.rsplit(':', 1)[0]}:{self.port}"
        self._stop = threading.Event()
        self._checker = threading.Thread(target=self._check_loop, daemon=True)

    def start(self) -> "CoordinatorServer":
        self.server.start()
        self._checker.start()
        log.info("coordinator listening on %s", self.address)
        return self

    def _check_loop(self) -> None:
        interval = min(1.0, self.core.settings.lost_after / 4)
        while not self._stop.wait(interval):
            try:
                self.core.check_agents(time.time())
            except Exception:  # keep the daemon alive; the next round retries
                log.exception("agent check failed")

    def stop(self, grace: float = 1.0) -> None:
        self._stop.set()
        self.server.stop(grace).wait()
        self.store.close()
