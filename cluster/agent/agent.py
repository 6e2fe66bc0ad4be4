"""The agent's loop: heartbeat, lease and probe ports, start and stop gangs, ship output and exits.

Workers outlive a coordinator restart: the agent keeps them running, keeps
their output and exits queued, and re-attaches when the coordinator is back.
Workers do NOT outlive their agent: they die with it (PR_SET_PDEATHSIG), and
an agent that starts again kills whatever their process groups left behind
(it keeps their ids in a file), then registers without them, so the
coordinator fails their jobs at once instead of waiting on workers that are gone.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import secrets
import shutil
import signal
import socket
import tempfile
import threading
import time

import grpc

from cluster.agent.netinfo import discover_addresses, discover_gpus
from cluster.agent.outbox import Outbox
from cluster.agent.job_store import JobStore
from cluster.shared.rpc import Client, ClientError
from cluster.shared.commands import CommandError, resolve_command
from cluster.agent.gang import Gang, WorkerLaunch
from cluster.shared.model import Address, Gpu
from cluster.agent.ports import PortLease, lease_exact
from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb
from tfdist import envvars
from tfdist.preemption import SCOPE as PREEMPT_SCOPE
from tfdist.metrics import MAX_NAME as MAX_METRIC_NAME

log = logging.getLogger("tfdist.agent")
WATCH_WAIT = 10.0  # seconds one WaitForWork long poll may be held by the coordinator
WATCH_BACKOFF = 30.0  # seconds of heartbeats alone when the coordinator had no waiting slot
DRAIN_LIMIT = 3600.0  # seconds a finished job's output waits for an unreachable coordinator


class Agent:
    def __init__(self, coordinator: str, *, name: str, slots: int | None = None, token: str | None = None,
                 addresses: list[Address] | None = None, gpus: list[Gpu] | None = None):
        if slots is None:
            gpus = discover_gpus() if gpus is None else gpus
            if not gpus:
                raise ValueError("this node has no GPUs (nvidia-smi found none): give --slots N CPU worker slots")
        else:
            if discover_gpus() if gpus is None else gpus:
                log.warning("--slots %d: CPU worker slots; this node's GPUs are hidden from its workers", slots)
            gpus = []
        self.name = name
        self.gpus = list(gpus)
        self.slots = len(self.gpus) if self.gpus else slots
        self.addresses = addresses or [Address(a["ip"], a["prefix_len"], a.get("interface", ""))
                                       for a in discover_addresses(coordinator)]
        self.client = Client(coordinator, token)
        self.heartbeat_interval = 1.0
        self.source = f"{name}/{secrets.token_hex(4)}"  # this agent process, for the coordinator's dedup
        self.outbox = Outbox(self.client, name, self.source)
        self._lock = threading.Lock()
        self._gangs: dict[str, Gang] = {}  # job id -> gang whose workers run or are being reaped
        # (job id, attempt) of runs that ended here: a repeated start or port check of one is ignored.
        self._finished: collections.OrderedDict[tuple[str, int], None] = collections.OrderedDict()
        self._attempts: dict[str, int] = {}  # job id -> the run of it whose ports or workers this agent holds
        self._port_results: dict[str, list[int]] = {}
        self._port_leases: dict[str, PortLease] = {}  # held from the check until the job ends
        self._stores: dict[str, JobStore] = {}  # the key-value stores of jobs whose first node this is
        self._probing: set[str] = set()
        self._probe_results: dict[str, list[pb.ProbeFailure]] = {}
        self._job_dirs: dict[str, str] = {}
        self._metrics_lock = threading.Lock()
        self._metric_files: dict[str, dict[str, int]] = {}  # job -> {file written by tfdist.report_metrics: offset}
        self._stop = threading.Event()
        self._wake = threading.Event()  # heartbeat now
        self._registered = False
        self.registered = threading.Event()  # set once the first registration succeeded
        # One file per agent process: several agents of one name can run on a machine at once
        # (every `tfdist launch` embeds one called "local"), and only a dead one's leftovers are fair game.
        self._groups_dir = os.path.join(tempfile.gettempdir(), f"tfdist-agent-{os.getuid()}")
        self._groups_file = os.path.join(self._groups_dir, f"{name.replace('/', '_')}.{os.getpid()}.groups.json")

    # ---------------------------------------------------------------- main loop
    def run(self) -> None:
        kill_leftovers(self._groups_dir, self.name.replace("/", "_"))
        shipper = threading.Thread(target=self._ship_loop, daemon=True)
        shipper.start()
        threading.Thread(target=self._watch_loop, daemon=True).start()
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

    def _watch_loop(self) -> None:
        """Long polls WaitForWork and heartbeats as soon as the coordinator has new work for this node
        (a job placed here, its peers ready, a stop): a multi-node job's start takes round trips, not
        heartbeat intervals. Heartbeats alone still do everything, a little later."""
        seen = 0
        while not self._stop.is_set():
            try:
                response = self.client.call(self.client.agents.WaitForWork, pb.WaitForWorkRequest(
                    agent=self.name, seen=seen, wait_ms=int(WATCH_WAIT * 1000)), timeout=WATCH_WAIT + 10)
            except ClientError as e:
                if e.code == grpc.StatusCode.UNIMPLEMENTED:
                    return  # an older coordinator: heartbeats alone
                self._stop.wait(max(self.heartbeat_interval, 1.0))
                continue
            if response.version != seen:
                seen = response.version
                self._wake.set()
            if not response.held:
                self._stop.wait(WATCH_BACKOFF)

    def wake(self) -> None:
        """Heartbeat at once instead of at the next interval (e.g. work was just submitted)."""
        self._wake.set()

    def stop(self) -> None:
        """Stops the loop and every job's workers (the agent is shutting down). Returns at once."""
        self._stop.set()
        self._wake.set()
        self.outbox.wake.set()
        with self._lock:
            gangs = list(self._gangs.values())
            leases = list(self._port_leases.values())
        for gang in gangs:
            gang.stop()
        for lease in leases:
            lease.release()

    def shutdown(self, timeout: float) -> None:
        """stop(), then waits up to `timeout` for the workers to end (SIGTERM, then SIGKILL after
        the gang's grace period), so they may save what they were doing."""
        self.stop()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if not self._gangs:
                    break
            time.sleep(0.05)
        self._save_groups()

    def running_jobs(self) -> list[str]:
        with self._lock:
            return list(self._gangs)

    def _running(self) -> list[pb.RunningTask]:
        with self._lock:
            return [pb.RunningTask(job_id=j, ranks=[w.rank for w in g.workers],
                                   joined_ranks=sorted(set(g.joined_ranks()) | self._store_joined(j)),
                                   progress=[pb.RankProgress(rank=r, step=s, age=a) for r, s, a in _progress(g)],
                                   attempt=self._attempts.get(j, 0))
                    for j, g in self._gangs.items()]

    def _fill_node_placeholders(self, env: dict) -> None:
        """Values a launch plan cannot know: the name of the interface carrying the job's address here
        ("" if unknown: Gloo then picks by hostname)."""
        ip = env.get(envvars.NODE_ADDRESS, "")
        interface = next((a.interface for a in self.addresses if a.ip == ip and a.interface), "")
        for key, value in env.items():
            if value == envvars.NODE_INTERFACE_PLACEHOLDER:
                env[key] = interface

    def _store_joined(self, job_id: str) -> set[int]:
        """Horovod ranks (of every node) that reached the Gloo rendezvous in the store this agent serves."""
        server = self._stores.get(job_id)
        return server.ranks_joined() if server else set()

    def _leased(self) -> list[str]:
        with self._lock:
            return [j for j in self._port_leases if j not in self._gangs]

    def _register(self) -> None:
        info = pb.AgentInfo(name=self.name, slots=self.slots, gpu=bool(self.gpus),
                            gpus=[pb.Gpu(index=g.index, uuid=g.uuid, name=g.name) for g in self.gpus],
                            addresses=[pb.Address(ip=a.ip, prefix_len=a.prefix_len, interface=a.interface)
                                       for a in self.addresses])
        response = self.client.call(self.client.agents.Register, pb.RegisterRequest(
            agent=info, running=self._running(), leased_jobs=self._leased()))
        self.heartbeat_interval = response.heartbeat_interval or 1.0
        self._registered = True
        self.registered.set()
        log.info("registered with %s as %s (%d %s slots)", self.client.address, self.name, self.slots,
                 "GPU" if self.gpus else "CPU")

    def _heartbeat(self) -> bool:
        """One heartbeat; True when there is follow-up to send at once (port checks to answer)."""
        with self._lock:
            ports = [pb.PortCheckResult(job_id=j, busy_ports=b) for j, b in self._port_results.items()]
            self._port_results.clear()
            probes = [pb.ProbeResult(job_id=j, failures=f) for j, f in self._probe_results.items()]
            self._probe_results.clear()
        response = self.client.call(self.client.agents.Heartbeat, pb.HeartbeatRequest(
            agent=self.name, running=self._running(), leased_jobs=self._leased(), port_results=ports,
            probe_results=probes))
        if response.reregister:
            self._registered = False
            return True
        if response.heartbeat_interval:
            self.heartbeat_interval = response.heartbeat_interval
        for check in response.check_ports:
            self._check_ports(check.job_id, list(check.ports), check.attempt)
        for probe in response.probe:
            self._start_probe(probe)
        for task in response.start:
            self._start(task)
        for job_id in response.preempt:
            with self._lock:
                store = self._stores.get(job_id)
            if store is not None and store.get(PREEMPT_SCOPE, "request") is None:
                log.info("job %s: preemption requested; its workers stop at a common step", job_id)
                store.put(PREEMPT_SCOPE, "request", b"tfdist preempt")
        for job_id in response.dump_stacks:
            with self._lock:
                gang = self._gangs.get(job_id)
            if gang:
                log.warning("job %s: the step watchdog asks for every worker's Python stacks", job_id)
                gang.dump_stacks()
        for job_id in response.stop_jobs:
            self._stop_job(job_id, response.stop_grace.get(job_id))
        return bool(response.check_ports)

    def _stop_job(self, job_id: str, grace: float | None = None) -> None:
        with self._lock:
            gang = self._gangs.get(job_id)
            lease = None if gang else self._port_leases.pop(job_id, None)
        if gang:
            if not gang.stopping:
                log.info("stopping job %s", job_id)
            gang.stop(grace)
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
            if job_id in self._gangs or (job_id, attempt) in self._finished:
                return
            self._attempts[job_id] = attempt
            old = self._port_leases.pop(job_id, None)
            if old:
                old.release()
            lease, busy = lease_exact(ports)
            if busy:
                lease.release()
            else:
                self._port_leases[job_id] = lease
            self._port_results[job_id] = busy

    def _start_probe(self, probe: pb.Probe) -> None:
        with self._lock:
            if probe.job_id in self._probing or probe.job_id not in self._port_leases:
                return
            self._probing.add(probe.job_id)
        threading.Thread(target=self._probe, args=(probe,), daemon=True).start()

    def _probe(self, probe: pb.Probe) -> None:
        """Connects to every peer's leased ports; the failures go back with the next heartbeat."""
        failures = []
        for target in probe.targets:
            error = connect_error(target.address, target.port, probe.timeout or 3.0)
            if error:
                failures.append(pb.ProbeFailure(target=target, error=error))
        if failures:
            log.warning("job %s: cannot reach %s", probe.job_id,
                        ", ".join(f"{f.target.peer} at {f.target.address}:{f.target.port} ({f.error})"
                                  for f in failures))
        with self._lock:
            self._probing.discard(probe.job_id)
            self._probe_results[probe.job_id] = failures
        self._wake.set()

    # ---------------------------------------------------------------- jobs
    def _start(self, task: pb.StartTask) -> None:
        run = (task.job_id, task.attempt)
        with self._lock:
            if task.job_id in self._gangs or run in self._finished:
                return  # a start repeated before our heartbeat said we run it
            self._attempts[task.job_id] = task.attempt
            lease = self._port_leases.get(task.job_id)
            try:
                command = resolve_command(list(task.workers[0].command), task.working_dir or None) \
                    if task.workers else []
            except CommandError as e:
                for w in task.workers:
                    self.outbox.exit(task.job_id, pb.WorkerExit(rank=w.rank, agent=self.name, exit_code=127,
                                                                last_lines=[f"{self.name}: {e}"],
                                                                attempt=task.attempt))
                self._finished[run] = None
                self._attempts.pop(task.job_id, None)
                return
            if lease:
                lease.stop_listening()  # the ports are the workers' now
            if task.store_port:
                host = task.workers[0].env.get(envvars.NODE_ADDRESS, "127.0.0.1") if task.workers else "127.0.0.1"
                try:
                    self._stores[task.job_id] = _serve_store(host, task.store_port)
                except OSError as e:
                    log.warning("job %s: cannot serve its store on %s:%d: %s", task.job_id, host, task.store_port, e)
                    if lease:
                        lease.release()
                        self._port_leases.pop(task.job_id, None)
                    for w in task.workers:
                        self.outbox.exit(task.job_id, pb.WorkerExit(
                            rank=w.rank, agent=self.name, exit_code=1,
                            last_lines=[f"{self.name}: cannot serve the job's store on "
                                        f"{host}:{task.store_port}: {e.strerror}"], attempt=task.attempt))
                    self._finished[run] = None
                    self._attempts.pop(task.job_id, None)
                    return
            job_dir = tempfile.mkdtemp(prefix=f"tfdist-{task.job_id}-")  # ready and metrics files
            self._job_dirs[task.job_id] = job_dir
            workers = []
            self._metric_files[task.job_id] = {}
            for w in task.workers:
                ready = os.path.join(job_dir, f"rank{w.rank}.ready")
                metrics = os.path.join(job_dir, f"rank{w.rank}.metrics")
                self._metric_files[task.job_id][metrics] = 0
                env = with_bootstrap({**os.environ, **w.env, envvars.READY_FILE: ready, envvars.METRICS_FILE: metrics,
                                      envvars.PROGRESS_FILE: os.path.join(job_dir, f"rank{w.rank}.progress")})
                self._fill_node_placeholders(env)
                workers.append(WorkerLaunch(rank=w.rank, command=command, env=env, ready_file=ready, port=w.port,
                                            expendable=w.expendable))
            gang = Gang(workers, self._sink(task.job_id), cwd=task.working_dir or None,
                        failure_grace=task.failure_grace or None, on_exit=self._exit_sink(task.job_id))
            self._gangs[task.job_id] = gang
        log.info("starting job %s: ranks %s", task.job_id, [w.rank for w in task.workers])
        threading.Thread(target=self._run_gang, args=(task.job_id, gang), daemon=True).start()

    def _run_gang(self, job_id: str, gang: Gang) -> None:
        # start() and run() in this thread: the workers die with it (PDEATHSIG).
        try:
            gang.start()
            self._save_groups()
            gang.run()
        except Exception as e:  # could not even start: report every rank as failed
            log.error("job %s: %s", job_id, e)
            for w in gang.workers:
                self._exit_sink(job_id)(w.rank, 127, (str(e),))
        self._read_metrics(final=True, only=job_id)  # the last rows, before the files go
        self._drain(job_id)
        with self._lock:
            lease = self._port_leases.pop(job_id, None)
            if lease:
                lease.release()
            store = self._stores.pop(job_id, None)
            if store:
                store.stop()
            shutil.rmtree(self._job_dirs.pop(job_id, ""), ignore_errors=True)
            self._metric_files.pop(job_id, None)
            self._gangs.pop(job_id, None)
            self._finished[(job_id, self._attempts.pop(job_id, 0))] = None
            while len(self._finished) > 10_000:
                self._finished.popitem(last=False)
        self.outbox.forget(job_id)
        self._save_groups()
        self._wake.set()  # tell the coordinator at once: the job's slots are free

    def _save_groups(self) -> None:
        """The workers' process groups, so a restarted agent can stop what a killed one left."""
        with self._lock:
            groups = {j: g.process_groups() for j, g in self._gangs.items()}
        if not groups:  # nothing a successor would have to clean up
            _unlink(self._groups_file)
            return
        try:
            os.makedirs(self._groups_dir, mode=0o700, exist_ok=True)
            tmp = self._groups_file + ".tmp"
            with open(tmp, "w") as f:
                json.dump(groups, f)
            os.replace(tmp, self._groups_file)
        except OSError as e:
            log.warning("cannot record worker process groups in %s: %s", self._groups_file, e)

    def _sink(self, job_id: str):
        def sink(rank: int, stream: str, line: str) -> None:
            self.outbox.line(job_id, rank, stream, line)
        return sink

    def _exit_sink(self, job_id: str):
        def on_exit(rank: int, code: int, last_lines: tuple) -> None:
            # What the worker recorded goes first: a preempted run's step must be known before its exits.
            self._read_metrics(only=job_id)
            with self._lock:
                attempt = self._attempts.get(job_id, 0)
            self.outbox.exit(job_id, pb.WorkerExit(rank=rank, agent=self.name, exit_code=code,
                                                   last_lines=list(last_lines), attempt=attempt))
        return on_exit

    def _drain(self, job_id: str) -> None:
        """Waits until the job's output and exits reached the coordinator (it may be restarting)."""
        deadline = time.monotonic() + DRAIN_LIMIT
        while self.outbox.owes(job_id) and time.monotonic() < deadline and not self._stop.is_set():
            self.outbox.wake.set()
            self._stop.wait(0.01)

    # ---------------------------------------------------------------- shipping
    def _ship_loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._read_metrics()
                self.outbox.ship_once()
            except ClientError as e:
                log.debug("shipping deferred: %s", e)
                self._stop.wait(1.0)
                continue
            self.outbox.wake.wait(0.1)
            self.outbox.wake.clear()

    def _read_metrics(self, final: bool = False, only: str | None = None) -> None:
        """New complete lines of the workers' metrics files (a partial last line waits, unless `final`).
        One reader at a time (the shipper, a worker's exit, a gang's end): each line is shipped once."""
        with self._metrics_lock:
            self._read_metrics_locked(final, only)

    def _read_metrics_locked(self, final: bool, only: str | None) -> None:
        with self._lock:
            files = {job: dict(paths) for job, paths in self._metric_files.items() if only in (None, job)}
        for job_id, paths in files.items():
            for path, offset in paths.items():
                try:
                    with open(path, "rb") as f:
                        f.seek(offset)
                        data = f.read()
                except FileNotFoundError:
                    continue
                complete = data if final else data[:data.rfind(b"\n") + 1]
                for raw in complete.splitlines():
                    self._parse_metrics_line(job_id, path, raw)
                with self._lock:
                    if job_id in self._metric_files:
                        self._metric_files[job_id][path] = offset + len(complete)

    def _parse_metrics_line(self, job_id: str, path: str, raw: bytes) -> None:
        try:
            record = json.loads(raw)
            rank, step, at = int(record["rank"]), int(record["step"]), float(record["time"])
            values = dict(record["values"])
        except (ValueError, KeyError, TypeError, AttributeError):
            log.warning("job %s: skipping a malformed metrics line in %s", job_id, path)
            return
        for name, value in values.items():
            name = str(name)
            if not name or len(name) > MAX_METRIC_NAME:
                self.outbox.line(job_id, rank, "stderr", f"tfdist: dropped metric {name[:40]!r}"
                                 f"{'...' if len(name) > 40 else ''} of step {step}: a metric name has 1-"
                                 f"{MAX_METRIC_NAME} characters ({len(name)} given)")
                continue
            try:
                number = float(value)
            except (TypeError, ValueError):
                continue
            self.outbox.metric(job_id, pb.Metric(rank=rank, step=step, name=name, value=number, time=at,
                                                 note=str(record.get("note", ""))[:4096]))


def _serve_store(host: str, port: int, patience: float = 3.0) -> JobStore:
    """The job's store on its leased port. The lease's own test socket was closed just before; a bind
    that still finds the port in use is retried briefly before the job is failed."""
    deadline = time.monotonic() + patience
    while True:
        try:
            return JobStore(host, port).start()
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


BOOTSTRAP = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "tfdist",
                         "compat", "bootstrap")


def _progress(gang: Gang) -> list[tuple[int, int, float]]:
    """(rank, last step, seconds since) of the ranks that report progress (tfdist.report_progress)."""
    found = []
    now = time.time()
    for w in gang.workers:
        path = w.env.get(envvars.PROGRESS_FILE)
        try:
            with open(path) as f:
                step = int(f.read().split()[0])
            found.append((w.rank, step, max(0.0, now - os.stat(path).st_mtime)))
        except (OSError, ValueError, IndexError, TypeError):
            continue  # not reporting (yet), or caught mid-write: the next heartbeat reads it
    return found


def with_bootstrap(env: dict) -> dict:
    """Puts tfdist's worker start-up (tfdist/compat/bootstrap/sitecustomize.py) first on PYTHONPATH, so a
    script that never imports tfdist still gets the Keras 3 fix; TFDIST_KERAS_PATCH=0 leaves it out."""
    if env.get("TFDIST_KERAS_PATCH", "1") == "0" or not os.path.isdir(BOOTSTRAP):
        return env
    rest = env.get("PYTHONPATH", "")
    return {**env, "PYTHONPATH": BOOTSTRAP + (os.pathsep + rest if rest else "")}


def connect_error(address: str, port: int, timeout: float) -> str:
    """'' if a TCP connection to address:port opens within `timeout`, else what went wrong."""
    try:
        with socket.create_connection((address, port), timeout=timeout):
            return ""
    except socket.timeout:
        return f"no answer within {timeout:g}s (packets dropped: a firewall?)"
    except OSError as e:
        return e.strerror or str(e)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _process_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def kill_leftovers(groups_dir: str, name: str) -> None:
    """Kills the process groups that dead runs of an agent of this name recorded (their workers'
    children, which outlived them), checking each process still belongs to that job before touching
    it. Files of agents still running are left alone."""
    try:
        files = [f for f in os.listdir(groups_dir) if f.startswith(f"{name}.") and f.endswith(".groups.json")]
    except OSError:
        return
    wanted: dict[int, str] = {}
    for filename in files:
        owner = filename[len(name) + 1:-len(".groups.json")]
        if not owner.isdigit() or _process_alive(int(owner)):
            continue
        path = os.path.join(groups_dir, filename)
        try:
            with open(path) as f:
                wanted.update({int(pgid): job for job, pgids in json.load(f).items() for pgid in pgids})
        except (OSError, ValueError, AttributeError):
            pass
        _unlink(path)
    killed = []
    for entry in os.listdir("/proc") if wanted else ():
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                pgid = int(f.read().rsplit(")", 1)[1].split()[2])
            if pgid not in wanted:
                continue
            with open(f"/proc/{entry}/environ", "rb") as f:
                if f"{envvars.JOB_ID}={wanted[pgid]}".encode() not in f.read().split(b"\0"):
                    continue
            os.kill(int(entry), signal.SIGKILL)
            killed.append(int(entry))
        except (OSError, ValueError, IndexError):
            continue
    if killed:
        log.warning("killed %d leftover worker process(es) of a previous run of this agent: %s", len(killed), killed)
