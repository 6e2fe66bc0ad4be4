"""The agent's loop: heartbeat, check ports, start and stop gangs, ship output and exits.

Workers outlive a coordinator restart: the agent keeps them running, keeps
their output and exits buffered, and re-attaches when the coordinator is back.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import shutil
import tempfile
import threading
import time

from cluster.agent.netinfo import discover_addresses, gpu_count
import grpc

from cluster.client import Client, ClientError
from cluster.commands import CommandError, resolve_command
from cluster.gang import Gang, WorkerLaunch
from cluster.ports import PortLease, lease_exact
from tfdist import envvars
from cluster.protos.tfdist.v1 import cluster_pb2 as pb

log = logging.getLogger("tfdist.agent")
LOG_BATCH = 500
MAX_BUFFERED_LINES = 200_000


class Agent:
    def __init__(self, coordinator: str, *, name: str, slots: int | None = None, token: str | None = None,
                 addresses: list[dict] | None = None, startup_timeout: float = 300.0):
        gpus = gpu_count() if slots is None else 0
        if slots is None and gpus == 0:
            raise ValueError("this node has no GPUs (nvidia-smi found none): give --slots N CPU worker slots")
        self.name = name
        self.gpu = slots is None
        self.slots = gpus if self.gpu else slots
        self.addresses = addresses or discover_addresses(coordinator)
        self.client = Client(coordinator, token)
        self.startup_timeout = startup_timeout
        self.heartbeat_interval = 1.0
        self._lock = threading.Lock()
        self._gangs: dict[str, Gang] = {}  # job id -> gang whose workers run or are being reaped
        self._finished: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._logs: dict[str, collections.deque] = collections.defaultdict(collections.deque)
        self._exits: collections.deque = collections.deque()  # (job id, WorkerExit)
        self._port_results: dict[str, list[int]] = {}
        self._port_leases: dict[str, PortLease] = {}  # held from the check until the job ends
        self._ready_dirs: dict[str, str] = {}
        self._metric_files: dict[str, dict[str, int]] = {}  # job -> {file written by tfdist.report_metrics: offset}
        self._metrics: dict[str, collections.deque] = collections.defaultdict(collections.deque)
        self._stop = threading.Event()
        self._wake = threading.Event()  # heartbeat now: a job ended
        self._ship_now = threading.Event()  # ship now: a worker exited
        self._registered = False
        self.registered = threading.Event()  # set once the first registration succeeded

    # ---------------------------------------------------------------- main loop
    def run(self) -> None:
        shipper = threading.Thread(target=self._ship_loop, daemon=True)
        shipper.start()
        while not self._stop.is_set():
            try:
                if not self._registered:
                    self._register()
                urgent = self._heartbeat()
            except ClientError as e:
                log.warning("coordinator unreachable (%s); workers keep running, retrying", e)
                urgent = False
            if not urgent:
                self._wake.wait(self.heartbeat_interval)
            self._wake.clear()

    def wake(self) -> None:
        """Heartbeat at once instead of at the next interval (e.g. work was just submitted)."""
        self._wake.set()

    def stop(self) -> None:
        """Stops the loop and every job's workers (the agent is shutting down)."""
        self._stop.set()
        self._wake.set()
        self._ship_now.set()
        with self._lock:
            gangs = list(self._gangs.values())
        for gang in gangs:
            gang.stop()

    def _running(self) -> list[pb.RunningTask]:
        with self._lock:
            return [pb.RunningTask(job_id=j, ranks=[w.rank for w in g.workers]) for j, g in self._gangs.items()]

    def _register(self) -> None:
        info = pb.AgentInfo(name=self.name, slots=self.slots, gpu=self.gpu,
                            addresses=[pb.Address(ip=a["ip"], prefix_len=a["prefix_len"],
                                                  interface=a.get("interface", "")) for a in self.addresses])
        response = self.client.call(self.client.agents.Register,
                                    pb.RegisterRequest(agent=info, running=self._running()))
        self.heartbeat_interval = response.heartbeat_interval or 1.0
        self._registered = True
        self.registered.set()
        log.info("registered with %s as %s (%d %s slots)", self.client.address, self.name, self.slots,
                 "GPU" if self.gpu else "CPU")

    def _heartbeat(self) -> bool:
        """One heartbeat; True when there is follow-up to send at once (port check results)."""
        with self._lock:
            results = [pb.PortCheckResult(job_id=j, busy_ports=b) for j, b in self._port_results.items()]
            self._port_results.clear()
        response = self.client.call(self.client.agents.Heartbeat, pb.HeartbeatRequest(
            agent=self.name, running=self._running(), port_results=results))
        if response.reregister:
            self._registered = False
            return True
        if response.heartbeat_interval:
            self.heartbeat_interval = response.heartbeat_interval
        for check in response.check_ports:
            self._check_ports(check.job_id, list(check.ports))
        for task in response.start:
            self._start(task)
        for job_id in response.stop_jobs:
            with self._lock:
                gang = self._gangs.get(job_id)
            if gang:
                log.info("stopping job %s", job_id)
                gang.stop()
        return bool(response.check_ports)

    def _check_ports(self, job_id: str, ports: list[int]) -> None:
        """Leases the ports machine-wide (so no other tfdist job on this machine, with this or
        another coordinator, takes them) and reports those that are busy."""
        with self._lock:
            old = self._port_leases.pop(job_id, None)
            if old:
                old.release()
            lease, busy = lease_exact(ports)
            if busy:
                lease.release()
            else:
                self._port_leases[job_id] = lease
            self._port_results[job_id] = busy

    # ---------------------------------------------------------------- jobs
    def _start(self, task: pb.StartTask) -> None:
        with self._lock:
            if task.job_id in self._gangs or task.job_id in self._finished:
                return  # a start repeated before our heartbeat said we run it
            try:
                command = resolve_command(list(task.workers[0].command), task.working_dir or None) if task.workers else []
            except CommandError as e:
                command = []
                for w in task.workers:
                    self._exit_sink(task.job_id)(w.rank, 127, (f"{self.name}: {e}",))
                self._finished[task.job_id] = None
                return
            ready_dir = tempfile.mkdtemp(prefix=f"tfdist-{task.job_id}-")  # tfdist.init() touches rank files
            self._ready_dirs[task.job_id] = ready_dir
            workers = []
            self._metric_files[task.job_id] = {}
            for w in task.workers:
                ready = os.path.join(ready_dir, f"rank{w.rank}.ready")
                metrics = os.path.join(ready_dir, f"rank{w.rank}.metrics")
                self._metric_files[task.job_id][metrics] = 0
                env = {**os.environ, **w.env, envvars.READY_FILE: ready, envvars.METRICS_FILE: metrics}
                workers.append(WorkerLaunch(rank=w.rank, command=command, env=env, ready_file=ready, port=w.port))
            gang = Gang(workers, self._sink(task.job_id), startup_timeout=task.startup_timeout or self.startup_timeout,
                        cwd=task.working_dir or None, on_exit=self._exit_sink(task.job_id))
            self._gangs[task.job_id] = gang
        log.info("starting job %s: ranks %s", task.job_id, [w.rank for w in task.workers])
        threading.Thread(target=self._run_gang, args=(task.job_id, gang), daemon=True).start()

    def _run_gang(self, job_id: str, gang: Gang) -> None:
        # start() and run() in this thread: the workers die with it (PDEATHSIG).
        try:
            gang.start()
            gang.run()
        except Exception as e:  # could not even start: report every rank as failed
            log.error("job %s: %s", job_id, e)
            for w in gang.workers:
                self._exit_sink(job_id)(w.rank, 127, (str(e),))
        self._drain(job_id)
        with self._lock:
            lease = self._port_leases.pop(job_id, None)
            if lease:
                lease.release()
            shutil.rmtree(self._ready_dirs.pop(job_id, ""), ignore_errors=True)
            self._metric_files.pop(job_id, None)
            self._metrics.pop(job_id, None)
            self._gangs.pop(job_id, None)
            self._finished[job_id] = None
            while len(self._finished) > 10_000:
                self._finished.popitem(last=False)
        self._wake.set()  # tell the coordinator at once: the job's slots are free

    def _sink(self, job_id: str):
        buffer = self._logs[job_id]

        def sink(rank: int, stream: str, line: str) -> None:
            buffer.append(pb.LogLine(rank=rank, stream=stream, text=line, time=time.time()))
            if len(buffer) > MAX_BUFFERED_LINES:  # coordinator away for long: keep the newest
                buffer.popleft()
        return sink

    def _exit_sink(self, job_id: str):
        def on_exit(rank: int, code: int, last_lines: tuple, reason: str = "") -> None:
            self._exits.append((job_id, pb.WorkerExit(rank=rank, agent=self.name, exit_code=code,
                                                      last_lines=list(last_lines), reason=reason)))
            self._ship_now.set()
        return on_exit

    def _drain(self, job_id: str, timeout: float = 3600.0) -> None:
        """Waits until the job's output and exits reached the coordinator (it may be restarting)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self._stop.is_set():
            if not self._logs.get(job_id) and not self._metrics.get(job_id) and \
                    not any(j == job_id for j, _ in list(self._exits)):
                self._logs.pop(job_id, None)
                return
            self._ship_now.set()
            time.sleep(0.01)

    # ---------------------------------------------------------------- shipping
    def _ship_loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._ship_once()
            except ClientError as e:
                log.debug("shipping deferred: %s", e)
                self._stop.wait(1.0)
                continue
            self._ship_now.wait(0.1)
            self._ship_now.clear()

    def _read_metrics(self) -> None:
        """New complete lines of the workers' metrics files (a partial last line waits)."""
        with self._lock:
            files = {job: dict(paths) for job, paths in self._metric_files.items()}
        for job_id, paths in files.items():
            for path, offset in paths.items():
                try:
                    with open(path, "rb") as f:
                        f.seek(offset)
                        data = f.read()
                except FileNotFoundError:
                    continue
                complete = data[:data.rfind(b"\n") + 1]
                for raw in complete.splitlines():
                    try:
                        record = json.loads(raw)
                        for name, value in record["values"].items():
                            self._metrics[job_id].append(pb.Metric(rank=int(record["rank"]), step=int(record["step"]),
                                                                   name=str(name), value=float(value),
                                                                   time=float(record["time"])))
                    except (ValueError, KeyError, TypeError, AttributeError):
                        log.warning("job %s: skipping a malformed metrics line in %s", job_id, path)
                with self._lock:
                    if job_id in self._metric_files:
                        self._metric_files[job_id][path] = offset + len(complete)

    def _ship_batches(self, queues: dict, send) -> None:
        """Sends every queue's items in batches; an item leaves its queue only once it was sent."""
        for job_id, queue in list(queues.items()):
            while queue:
                batch = [queue[i] for i in range(min(LOG_BATCH, len(queue)))]
                send(job_id, batch)
                for _ in batch:
                    queue.popleft()

    def _ship_once(self) -> None:
        self._read_metrics()
        self._ship_batches(self._metrics, lambda job_id, batch: self.client.call(
            self.client.agents.ReportMetrics, pb.ReportMetricsRequest(agent=self.name, job_id=job_id, metrics=batch)))
        self._ship_batches(self._logs, lambda job_id, batch: self.client.call(
            self.client.agents.PushLogs, pb.PushLogsRequest(agent=self.name, job_id=job_id, lines=batch)))
        while self._exits:  # after the logs: a job's last lines arrive before its exit
            job_id, exit_ = self._exits[0]
            if self._logs.get(job_id):
                break
            try:
                self.client.call(self.client.agents.ReportExit,
                                 pb.ReportExitRequest(agent=self.name, job_id=job_id, exit=exit_))
            except ClientError as e:
                if e.code != grpc.StatusCode.NOT_FOUND:
                    raise
                log.warning("dropping the exit of rank %d: %s", exit_.rank, e)  # the job is gone
            self._exits.popleft()
