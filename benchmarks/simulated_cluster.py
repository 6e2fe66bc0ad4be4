"""A simulated cluster for the coordinator benchmarks: a real `tfdist coordinator` process (TLS and a
credential on every call, as deployed) and agents simulated in a few processes, each agent with its own
node credential. Shared by coordinator_scale.py, liveness_scale.py, submit_burst.py, memory_scale.py and
the TLS and observability cost scripts."""

import multiprocessing
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

SLOTS_PER_NODE = 8


def agent_channel(address, credential):
    """One long-lived channel per simulated-agent process, as each real agent keeps one: TLS verified against
    the cluster's CA unless the credential is a plaintext one."""
    import grpc

    if credential.plaintext:
        return grpc.insecure_channel(address)
    options = [("grpc.ssl_target_name_override", credential.server_name)] if credential.server_name else []
    return grpc.secure_channel(address, grpc.ssl_channel_credentials(credential.ca_pem.encode()), options=options)


def as_agent(credential, token_as_metadata=False):
    """Keyword arguments for one call as `credential`'s node: the token rides as call credentials over TLS
    (what `cluster.shared.auth.channel` does for a real agent), as metadata over plaintext, or, with
    `token_as_metadata`, as metadata over the same verified TLS channel (a proposed change: see tls_cost.py)."""
    import grpc

    from cluster.shared import auth

    if credential.plaintext or token_as_metadata:
        return {"metadata": ((auth.METADATA_KEY, f"Bearer {credential.token}"),)}
    return {"credentials": grpc.access_token_call_credentials(credential.token)}


def simulated_usage(gpus):
    """What a GPU node's heartbeat carries: each GPU's utilisation and memory (a CPU node: nothing)."""
    from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb

    if not gpus:
        return None
    return pb.NodeUsage(time=time.time(), gpus=[pb.GpuUsage(index=i, utilization=0.87, memory_used_bytes=60 << 30,
                                                            memory_total_bytes=80 << 30) for i in range(gpus)])


def agent_process(address, credentials, stop_at, ready, fixed_interval, sent_total=None, token_as_metadata=False,
                  nice=0, gpus=0):
    from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb
    from cluster.shared.protos.tfdist.v1 import cluster_pb2_grpc as pb_grpc

    if nice:  # below the coordinator: on a real cluster the agents run on other machines
        os.nice(nice)
    channel = agent_channel(address, credentials[0])
    stub = pb_grpc.AgentServiceStub(channel)
    names = [c.name for c in credentials]
    auths = [as_agent(c, token_as_metadata) for c in credentials]
    count = len(names)
    interval = 1.0
    for name, auth in zip(names, auths):
        interval = stub.Register(pb.RegisterRequest(agent=pb.AgentInfo(
            name=name, slots=SLOTS_PER_NODE, addresses=[pb.Address(ip="127.0.0.1", prefix_len=8)])),
            timeout=30, **auth).heartbeat_interval
    interval = fixed_interval or interval  # fixed: ignore what the coordinator asks for
    usage = simulated_usage(gpus)
    ready.release()
    # Each agent heartbeats once per interval at its own phase, as independent agents do (a
    # synchronized burst of 1,000 would measure the burst, not the coordinator).
    start = time.monotonic()
    sent = 0
    pending = []
    while time.monotonic() < stop_at:
        due = start + sent * interval / count
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        pending.append(stub.Heartbeat.future(pb.HeartbeatRequest(agent=names[sent % count], usage=usage),
                                             timeout=30, **auths[sent % count]))
        if not fixed_interval and sent % count == 0 and pending:
            interval = pending[0].result().heartbeat_interval or interval  # it adapts to the cluster size
        sent += 1
        if sent_total is not None:  # heartbeats sent, all processes together: a rate over a window
            with sent_total.get_lock():
                sent_total.value += 1
        if len(pending) >= 64:
            for f in pending:
                f.result()
            pending = []
    channel.close()


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        kib = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return kib / 1024


class SimulatedCluster:
    """A real `tfdist coordinator` process (TLS, or --insecure-plaintext) and `agents` simulated agents in
    `processes` processes, each agent registering and heartbeating with its own node credential; `client` is
    a user's `rpc.Client`. Credentials come from one authority made in a temporary directory, which the
    coordinator loads with --credentials-dir. `token_as_metadata`: over TLS, every call (agents' and the
    client's) carries its token as plain metadata instead of gRPC call credentials. `agents_nice`: the agents'
    processes run at this nice value (the coordinator and the client at 0)."""

    def __init__(self, agents, plaintext=False, processes=4, fixed_interval=0.0, token_as_metadata=False,
                 agents_nice=0, gpus=0, coordinator_args=(), lost_after=60.0, agent_main=None, settle=300.0):
        """`agent_main(address, credentials, stop_at, ready)`: what each simulated-agent process runs instead
        of heartbeating (benchmarks/liveness_scale.py's beaconing agents). With `agent_main`, agents that did
        not all register within `settle` seconds are a measurement (`self.settled` False), not an error."""
        from cluster.shared.credentials import Authority
        from cluster.shared.protos.tfdist.v1 import cluster_pb2_grpc as pb_grpc
        from cluster.shared.rpc import Client

        self.tmp = tempfile.mkdtemp(prefix="tfdist-bench-")
        credentials_dir = os.path.join(self.tmp, "credentials")
        authority, _ = Authority.load_or_create(credentials_dir)
        env = dict(os.environ, PYTHONPATH=REPO, TFDIST_RUNTIME_DIR=os.path.join(self.tmp, "runtime"))
        self.coord = subprocess.Popen(
            [sys.executable, "-m", "cluster.client.cli", "coordinator", "--listen", "127.0.0.1:0", "--state-dir",
             os.path.join(self.tmp, "state"), "--credentials-dir", credentials_dir, "--lost-after", str(lost_after),
             "--subnet", "127.0.0.0/8", *(["--insecure-plaintext"] if plaintext else []), *coordinator_args],
            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.procs = []
        try:
            line = self.coord.stdout.readline()
            if " listening on " not in line:
                raise RuntimeError(f"the coordinator did not start (exit {self.coord.poll()}): {line!r}")
            self.address = line.split(" listening on ")[1].split()[0]
            self.start_lines = [line]
            while coordinator_args and "credentials in" not in self.start_lines[-1]:  # its other start-up lines
                self.start_lines.append(self.coord.stdout.readline())
                if not self.start_lines[-1]:
                    raise RuntimeError(f"the coordinator stopped while starting: {self.start_lines!r}")
            self.authority = authority
            self.user = authority.issue("admin", "bench", self.address, plaintext)  # cancels what it submits
            nodes = [authority.issue("node", f"sim{i:04d}", self.address, plaintext) for i in range(agents)]
            ctx = multiprocessing.get_context("spawn")
            ready = ctx.Semaphore(0)
            self.heartbeats = ctx.Value("q", 0)  # sent so far, all processes together
            stop_at = time.monotonic() + 900
            per = agents // processes
            self.procs = [ctx.Process(target=agent_main or agent_process, daemon=True,
                                      args=(self.address, nodes[i * per:(i + 1) * per], stop_at, ready) + (() if agent_main else (
                                            fixed_interval, self.heartbeats, token_as_metadata, agents_nice, gpus)))
                          for i in range(processes)]
            for p in self.procs:
                p.start()
            self.settled, deadline = True, time.monotonic() + settle
            for p in self.procs:
                if not ready.acquire(timeout=max(0.0, deadline - time.monotonic())):
                    if agent_main:
                        self.settled = False
                        break
                    raise RuntimeError(f"simulated agents did not register within {settle:.0f} s (process {p.pid})")
            self.client = Client(self.address, self.user, timeout=30)
            if token_as_metadata and not plaintext:
                self.client.close()
                self.client.channel = agent_channel(self.address, self.user)
                self.client.coordinator = pb_grpc.CoordinatorStub(self.client.channel)
                self.client._metadata = as_agent(self.user, True)["metadata"]
        except BaseException:
            self.close()
            raise

    def agents_cpu_seconds(self):
        return sum(cpu_seconds(p.pid) for p in self.procs)

    def close(self):
        if getattr(self, "client", None) is not None:
            self.client.close()
        started = [p for p in self.procs if p.pid is not None]
        for p in started:
            p.terminate()
        for p in started:
            p.join(timeout=30)
        self.coord.terminate()
        self.coord.wait(timeout=30)
        subprocess.run(["rm", "-rf", self.tmp])
