"""Coordinator scale: the pure scheduler's placements/s, and a real coordinator process with
1,000 simulated agents heartbeating over gRPC: submit-to-placed latency, coordinator CPU and memory.

    .venv/bin/python benchmarks/coordinator_scale.py [--agents 1000] [--jobs 300] [--runs 5]

Writes benchmarks/results/coordinator_scale.json and prints a table.
"""

import argparse
import json
import multiprocessing
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

from cluster.coordinator import scheduler  # noqa: E402

SLOTS_PER_NODE = 8


def job_sizes(rng, count):
    """Jobs of 1 to 16 whole nodes, and one in four smaller than a node."""
    return [rng.choice([1, 2, 4]) if rng.random() < 0.25 else SLOTS_PER_NODE * rng.randint(1, 16)
            for _ in range(count)]


# ---------------------------------------------------------------- pure scheduler

def bench_scheduler(nodes_count, jobs_count, seed):
    rng = random.Random(seed)
    free = {f"n{i:04d}": SLOTS_PER_NODE for i in range(nodes_count)}
    pending = [scheduler.PendingJob(f"j{i}", s, seq=i) for i, s in enumerate(job_sizes(rng, jobs_count))]
    running: dict[str, list] = {}
    placed = 0
    busy = 0.0
    while pending:
        nodes = [scheduler.Node(n, SLOTS_PER_NODE, f) for n, f in free.items()]
        t0 = time.perf_counter()
        decision = scheduler.schedule(nodes, pending)
        busy += time.perf_counter() - t0
        done = {a.job_id for a in decision.assignments}
        for a in decision.assignments:
            running[a.job_id] = list(a.nodes)
            for name, used in a.nodes:
                free[name] -= used
        placed += len(done)
        pending = [j for j in pending if j.id not in done]
        for job_id in rng.sample(sorted(running), k=len(running) // 2):  # half the running jobs end
            for name, used in running.pop(job_id):
                free[name] += used
    return placed / busy


# ---------------------------------------------------------------- simulated agents

def agent_process(address, first, count, stop_at, ready, fixed_interval):
    import grpc

    from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb
    from cluster.shared.protos.tfdist.v1 import cluster_pb2_grpc as pb_grpc

    channel = grpc.insecure_channel(address)
    stub = pb_grpc.AgentServiceStub(channel)
    names = [f"sim{i:04d}" for i in range(first, first + count)]
    interval = 1.0
    for name in names:
        interval = stub.Register(pb.RegisterRequest(agent=pb.AgentInfo(
            name=name, slots=SLOTS_PER_NODE, addresses=[pb.Address(ip="127.0.0.1", prefix_len=8)])),
            timeout=30).heartbeat_interval
    interval = fixed_interval or interval  # fixed: ignore what the coordinator asks for
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
        pending.append(stub.Heartbeat.future(pb.HeartbeatRequest(agent=names[sent % count]), timeout=30))
        if not fixed_interval and sent % count == 0 and pending:
            interval = pending[0].result().heartbeat_interval or interval  # it adapts to the cluster size
        sent += 1
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


def bench_cluster(agents, jobs, seed, processes=4, cpu_window=10.0, fixed_interval=0.0):
    import grpc

    from cluster.shared import jobspec
    from cluster.shared.config import ExperimentConfig
    from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb
    from cluster.shared.protos.tfdist.v1 import cluster_pb2_grpc as pb_grpc

    state = tempfile.mkdtemp(prefix="tfdist-bench-")
    coord = subprocess.Popen([sys.executable, "-m", "cluster.client.cli", "coordinator", "--listen", "127.0.0.1:0",
                              "--state-dir", state, "--lost-after", "60", "--subnet", "127.0.0.0/8"],
                             cwd=REPO, env=dict(os.environ, PYTHONPATH=REPO), stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
    address = coord.stdout.readline().split(" listening on ")[1].split()[0]
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Semaphore(0)
    stop_at = time.monotonic() + 600
    per = agents // processes
    procs = [ctx.Process(target=agent_process, args=(address, i * per, per, stop_at, ready, fixed_interval),
                         daemon=True)
             for i in range(processes)]
    try:
        for p in procs:
            p.start()
        for _ in procs:
            ready.acquire(timeout=300)
        channel = grpc.insecure_channel(address)
        stub = pb_grpc.CoordinatorStub(channel)
        registered = len(stub.ListAgents(pb.ListAgentsRequest(), timeout=30).agents)
        time.sleep(5)  # every agent is heartbeating at its interval
        c0, t0 = cpu_seconds(coord.pid), time.monotonic()
        time.sleep(cpu_window)
        cpu = (cpu_seconds(coord.pid) - c0) / (time.monotonic() - t0)
        rss_idle = rss_mib(coord.pid)

        rng = random.Random(seed)
        latencies, placed = [], 0
        for slots in job_sizes(rng, jobs):
            spec = jobspec.to_pb(jobspec.job_spec(ExperimentConfig(name="bench", entrypoint=("true",),
                                                                   slots_per_trial=slots, distribution_mode="mwms")))
            t = time.perf_counter()
            response = stub.SubmitJob(pb.SubmitJobRequest(spec=spec), timeout=30)  # scheduled before it returns
            latencies.append(time.perf_counter() - t)
            job_id = response.job_id
            placed += response.state == "STARTING"
            stub.CancelJob(pb.CancelJobRequest(job_id=job_id), timeout=30)  # frees its nodes for the next
        rss_after_jobs = rss_mib(coord.pid)
        channel.close()
        latencies.sort()
        return {"agents_registered": registered, "coordinator_cpu_cores": round(cpu, 3),
                "coordinator_rss_mib": round(rss_idle, 1), "coordinator_rss_after_jobs_mib": round(rss_after_jobs, 1),
                "heartbeat_interval_s": fixed_interval or "adaptive",
                "submit_to_placed_p50_ms": round(1000 * statistics.median(latencies), 2),
                "submit_to_placed_p99_ms": round(1000 * latencies[int(0.99 * (len(latencies) - 1))], 2),
                "jobs": jobs, "placed_at_once": placed}
    finally:
        for p in procs:
            p.terminate()
        coord.terminate()
        coord.wait(timeout=30)
        subprocess.run(["rm", "-rf", state])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", default=os.path.join(HERE, "results", "coordinator_scale.json"))
    args = parser.parse_args()

    rates = [bench_scheduler(args.agents, 2000, seed) for seed in range(args.runs)]
    adaptive = bench_cluster(args.agents, args.jobs, seed=1)
    forced = bench_cluster(args.agents, args.jobs, seed=1, fixed_interval=1.0)
    result = {
        "benchmark": "coordinator_scale", "date": time.strftime("%Y-%m-%d"), "cpus": os.cpu_count(),
        "scheduler_placements_per_s_median": round(statistics.median(rates)),
        "scheduler_placements_per_s_runs": [round(r) for r in rates],
        "adaptive_heartbeats": adaptive, "heartbeats_forced_to_1hz": forced,
    }
    rows = [("scheduler placements/s (1,000 nodes, jobs of 1-16 nodes)",
             f"{result['scheduler_placements_per_s_median']:,}", ">= 2,000")]
    for label, r in (("adaptive heartbeats", adaptive), ("heartbeats forced to 1 Hz", forced)):
        rows += [
            (f"submit-to-placed p50, {args.agents} agents, {label}", f"{r['submit_to_placed_p50_ms']} ms", ""),
            (f"submit-to-placed p99, {args.agents} agents, {label}", f"{r['submit_to_placed_p99_ms']} ms",
             "<= 50 ms"),
            (f"coordinator CPU, {args.agents} agents, {label}", f"{r['coordinator_cpu_cores']:.2f} cores", ""),
            (f"coordinator memory (RSS), {args.agents} agents, {label}",
             f"{r['coordinator_rss_mib']:.0f} MiB", ""),
            (f"coordinator memory after {args.jobs} jobs, {label}", f"{r['coordinator_rss_after_jobs_mib']:.0f} MiB",
             ""),
        ]
    print(f"| {'measure':60} | {'tfdist':>12} | {'aim':>9} |")
    print(f"|{'-' * 62}|{'-' * 14}|{'-' * 11}|")
    for name, value, aim in rows:
        print(f"| {name:60} | {value:>12} | {aim:>9} |")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
