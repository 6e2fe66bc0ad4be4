"""Where TLS's per-call cost goes: one client making sequential calls to a real coordinator process, by
how the token travels.

Variants (each against its own `tfdist coordinator`, TLS or --insecure-plaintext):
  plaintext, token as metadata          what `--insecure-plaintext` does
  TLS, token as call credentials        what `cluster.shared.auth.channel` did before: a Python metadata
                                        plugin (`grpc.access_token_call_credentials`) that gRPC runs
                                        for every call
  TLS, token as metadata                what it does now: the same verified TLS channel, the token in each call's
                                        metadata by the caller (as the plaintext path does)
For each: latency per call (median, p99), the client's CPU per call, the coordinator's CPU per call, and
how many Python threads the client started per call. Rounds alternate the order; medians.

    .venv/bin/python benchmarks/tls_breakdown.py [--calls 2000] [--rounds 3]

Writes benchmarks/results/tls_breakdown.json.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)
sys.path.insert(0, HERE)

from coordinator_scale import cpu_seconds, p99  # noqa: E402

VARIANTS = ("plaintext, token as metadata", "TLS, token as call credentials", "TLS, token as metadata")


class Coordinator:
    def __init__(self, plaintext):
        from cluster.shared.credentials import Authority

        self.tmp = tempfile.mkdtemp(prefix="tfdist-tlsb-")
        credentials_dir = os.path.join(self.tmp, "credentials")
        self.authority, _ = Authority.load_or_create(credentials_dir)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cluster.client.cli", "coordinator", "--listen", "127.0.0.1:0", "--state-dir",
             os.path.join(self.tmp, "state"), "--credentials-dir", credentials_dir, "--lost-after", "600",
             *(["--insecure-plaintext"] if plaintext else [])],
            cwd=REPO, env=dict(os.environ, PYTHONPATH=REPO, TFDIST_RUNTIME_DIR=os.path.join(self.tmp, "runtime")),
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline()
        if " listening on " not in line:
            self.close()
            raise RuntimeError(f"the coordinator did not start: {line!r}")
        self.address = line.split(" listening on ")[1].split()[0]
        self.node = self.authority.issue("node", "n1", self.address, plaintext)

    def close(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)
        subprocess.run(["rm", "-rf", self.tmp])


def stub_and_kwargs(variant, coordinator):
    import grpc

    from cluster.shared import auth
    from cluster.shared.protos.tfdist.v1 import cluster_pb2_grpc as pb_grpc

    node = coordinator.node
    if variant == VARIANTS[1]:
        tls = grpc.composite_channel_credentials(grpc.ssl_channel_credentials(node.ca_pem.encode()),
                                                 grpc.access_token_call_credentials(node.token))
        channel = grpc.secure_channel(coordinator.address, tls, [("grpc.ssl_target_name_override", node.server_name)])
        kwargs = {}  # the token rides as call credentials (tfdist's way before the metadata change)
    elif variant == VARIANTS[2]:
        tls = grpc.ssl_channel_credentials(node.ca_pem.encode())
        channel = grpc.secure_channel(coordinator.address, tls, [("grpc.ssl_target_name_override", node.server_name)])
        kwargs = {"metadata": ((auth.METADATA_KEY, f"Bearer {node.token}"),)}
    else:
        channel = grpc.insecure_channel(coordinator.address)
        kwargs = {"metadata": auth.call_metadata(node)}
    return channel, pb_grpc.AgentServiceStub(channel), kwargs


class ThreadCounter:
    """Counts `threading.Thread.start` calls in this process (gRPC runs Python metadata plugins in them)."""

    def __init__(self):
        self.count, self._original = 0, threading.Thread.start

    def __enter__(self):
        counter = self

        def start(thread, *a, **k):
            counter.count += 1
            return counter._original(thread, *a, **k)
        threading.Thread.start = start
        return self

    def __exit__(self, *exc):
        threading.Thread.start = self._original


def measure(variant, coordinator, calls):
    from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb

    channel, stub, kwargs = stub_and_kwargs(variant, coordinator)
    stub.Register(pb.RegisterRequest(agent=pb.AgentInfo(name="n1", slots=8, addresses=[
        pb.Address(ip="127.0.0.1", prefix_len=8)])), timeout=30, **kwargs)
    request = pb.HeartbeatRequest(agent="n1")
    for _ in range(200):  # warm
        stub.Heartbeat(request, timeout=30, **kwargs)
    latencies = []
    server0, client0 = cpu_seconds(coordinator.proc.pid), time.process_time()
    with ThreadCounter() as threads:
        for _ in range(calls):
            t = time.perf_counter()
            stub.Heartbeat(request, timeout=30, **kwargs)
            latencies.append(time.perf_counter() - t)
    client_cpu, server_cpu = time.process_time() - client0, cpu_seconds(coordinator.proc.pid) - server0
    channel.close()
    latencies.sort()
    return {"variant": variant, "latency_p50_us": round(1e6 * statistics.median(latencies), 1),
            "latency_p99_us": round(1e6 * p99(latencies), 1), "client_cpu_us_per_call": round(1e6 * client_cpu / calls, 1),
            "coordinator_cpu_us_per_call": round(1e6 * server_cpu / calls, 1),
            "client_threads_started_per_call": round(threads.count / calls, 3), "loadavg": os.getloadavg()[0]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=os.path.join(HERE, "results", "tls_breakdown.json"))
    args = parser.parse_args()
    tls, plain = Coordinator(plaintext=False), Coordinator(plaintext=True)
    runs = []
    try:
        for round_ in range(args.rounds):
            for variant in (VARIANTS if round_ % 2 == 0 else VARIANTS[::-1]):
                run = measure(variant, plain if variant == VARIANTS[0] else tls, args.calls)
                runs.append(dict(run, round=round_))
                print(json.dumps(runs[-1]), flush=True)
    finally:
        tls.close()
        plain.close()
    keys = ("latency_p50_us", "latency_p99_us", "client_cpu_us_per_call", "coordinator_cpu_us_per_call",
            "client_threads_started_per_call")
    medians = {v: {k: statistics.median(r[k] for r in runs if r["variant"] == v) for k in keys} for v in VARIANTS}
    print()
    print(f"| {'variant (median of ' + str(args.rounds) + ', ' + str(args.calls) + ' heartbeats each)':44} | "
          + " | ".join(f"{k:>14}" for k in ("p50 us", "p99 us", "client us/call", "coord us/call", "threads/call"))
          + " |")
    print(f"|{'-' * 46}|" + "|".join("-" * 16 for _ in keys) + "|")
    for v in VARIANTS:
        print(f"| {v:44} | " + " | ".join(f"{medians[v][k]:>14}" for k in keys) + " |")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"benchmark": "tls_breakdown", "date": time.strftime("%Y-%m-%d"), "cpus": os.cpu_count(),
                   "calls": args.calls, "rounds": args.rounds, "medians": medians, "runs": runs}, f, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
