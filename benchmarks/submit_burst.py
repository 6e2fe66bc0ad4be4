"""Burst submission: many clients submitting at once to a real coordinator (TLS, a credential checked on
every call, state in SQLite), with a deep queue already waiting.

The cluster (simulated agents, benchmarks/coordinator_scale.py) is full: one job holds every node, so
each submission queues behind `--queued` jobs already there. Then `--clients` threads in `--processes`
processes (one channel per process, as separate `tfdist` clients on one machine share nothing better)
submit as fast as they are answered for `--seconds`. Each submission carries its own submission id, as
`tfdist launch` sends one. Afterwards the coordinator's job list is checked: every acknowledged
submission is there once, none lost, none duplicated.

    .venv/bin/python benchmarks/submit_burst.py [--queued 10000] [--seconds 30] [--clients 64] [--runs 3]

Prints a table (rate and latency percentiles, medians over the runs) and writes
benchmarks/results/submit_burst.json.
"""

import argparse
import multiprocessing
import os
import statistics
import sys
import threading
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

from benchmarks.compare import print_measures, save_json  # noqa: E402
from benchmarks.simulated_cluster import SLOTS_PER_NODE, SimulatedCluster, cpu_seconds, rss_mib  # noqa: E402


def spec_message(slots: int, tag: str):
    from cluster.shared import jobspec
    from cluster.shared.config import ExperimentConfig

    spec = jobspec.job_spec(ExperimentConfig(name="burst", entrypoint=("true",), slots_per_trial=slots,
                                             distribution_mode="mwms"), submission_id=f"{tag}-{uuid.uuid4().hex}")
    return jobspec.to_pb(spec)


def client_process(address, credential, threads, start_at, stop_at, slots, out, interval=0.0):
    """`threads` threads submitting until `stop_at`, each one submission every `interval` seconds (0: as
    soon as the last was answered); puts (latencies, acknowledged ids, errors, this process's CPU seconds)
    on `out`."""
    from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb
    from cluster.shared.rpc import Client

    client = Client(address, credential, timeout=60)
    latencies, ids, errors, lock = [], [], [], threading.Lock()

    def submitter(n):
        mine_l, mine_ids, mine_err = [], [], []
        specs = [spec_message(slots, f"b{os.getpid()}-{n}") for _ in range(64)]  # made before the clock starts
        k = 0
        next_at = start_at + (interval * n / threads if interval else 0.0)  # threads out of phase
        while time.time() < start_at:
            time.sleep(0.001)
        while time.time() < stop_at:
            if interval:
                delay = next_at - time.time()
                if delay > 0:
                    time.sleep(delay)
                next_at += interval
            spec = specs[k % len(specs)]
            spec.submission_id = f"b{os.getpid()}-{n}-{k}"
            k += 1
            t = time.perf_counter()
            try:
                answer = client.call(client.coordinator.SubmitJob, pb.SubmitJobRequest(spec=spec))
            except Exception as e:  # counted, not fatal: the table says how many
                mine_err.append(str(e)[:200])
                continue
            mine_l.append((time.time(), time.perf_counter() - t))
            mine_ids.append(answer.job_id)
        with lock:
            latencies.extend(mine_l)
            ids.extend(mine_ids)
            errors.extend(mine_err)

    workers = [threading.Thread(target=submitter, args=(n,)) for n in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    client.close()
    out.put((latencies, ids, errors, time.process_time()))


def prequeue(cluster, count, slots):
    """`count` jobs queued behind the full cluster, submitted 32 at a time (futures)."""
    from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb

    client = cluster.client
    pending = []
    for i in range(count):
        pending.append(client.coordinator.SubmitJob.future(
            pb.SubmitJobRequest(spec=spec_message(slots, "pre")), timeout=120, metadata=client._metadata))
        if len(pending) >= 32:
            for f in pending:
                f.result()
            pending = []
    for f in pending:
        f.result()


def percentile(values, q):
    return values[min(len(values) - 1, int(q * (len(values) - 1)))]


def one_run(args):
    from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb

    cluster = SimulatedCluster(args.agents, processes=2, fixed_interval=1.0, agents_nice=10)
    try:
        client = cluster.client
        blocker = client.call(client.coordinator.SubmitJob,
                              pb.SubmitJobRequest(spec=spec_message(args.agents * SLOTS_PER_NODE, "blocker")))
        assert blocker.state == "STARTING", blocker
        t0 = time.monotonic()
        prequeue(cluster, args.queued, SLOTS_PER_NODE)
        prequeue_s = time.monotonic() - t0
        ctx = multiprocessing.get_context("spawn")
        out = ctx.Queue()
        start_at = time.time() + 3 + args.processes  # every process has made its channel and specs
        stop_at = start_at + args.seconds
        per = args.clients // args.processes
        interval = args.clients / args.rate if args.rate else 0.0
        procs = [ctx.Process(target=client_process, args=(cluster.address, cluster.user, per, start_at, stop_at,
                                                          SLOTS_PER_NODE, out, interval)) for _ in range(args.processes)]
        for p in procs:
            p.start()
        while time.time() < start_at:
            time.sleep(0.01)
        c0 = cpu_seconds(cluster.coord.pid)
        results = [out.get(timeout=args.seconds + 300) for _ in procs]
        cpu = (cpu_seconds(cluster.coord.pid) - c0) / (time.time() - start_at)
        for p in procs:
            p.join(timeout=60)
        latencies = sorted(l for r in results for _, l in r[0])
        ids = [i for r in results for i in r[1]]
        errors = [e for r in results for e in r[2]]
        stored = client.jobs(["QUEUED"], summary=True)
        stored_ids = {j.id for j in stored}
        seconds = [int(when - start_at) for r in results for when, _ in r[0]]
        per_second = [seconds.count(s) for s in range(args.seconds)]
        return {
            "acknowledged": len(ids), "errors": len(errors), "error_examples": errors[:3],
            "submits_per_s": round(len(ids) / args.seconds, 1),
            "slowest_second_submits": min(per_second) if per_second else 0,
            "p50_ms": round(1000 * percentile(latencies, 0.5), 2), "p90_ms": round(1000 * percentile(latencies, 0.9), 2),
            "p99_ms": round(1000 * percentile(latencies, 0.99), 2), "max_ms": round(1000 * latencies[-1], 2),
            "coordinator_cpu_cores": round(cpu, 2), "coordinator_rss_mib": round(rss_mib(cluster.coord.pid), 1),
            "clients_cpu_cores": round(sum(r[3] for r in results) / (args.seconds + 3 + args.processes), 2),
            "offered_per_s": args.rate or None,
            "queued_before": args.queued, "prequeue_s": round(prequeue_s, 1),
            "lost": len(set(ids) - stored_ids), "duplicated": len(ids) - len(set(ids)),
            "queued_after": len(stored), "expected_after": args.queued + len(set(ids)),
        }
    finally:
        cluster.close()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--agents", type=int, default=100)
    parser.add_argument("--queued", type=int, default=10_000)
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--rate", type=float, default=1000.0,
                        help="submissions/s offered by all clients together (0: each submits as soon as answered)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--label", default="", help="what this run measures (e.g. the commit), kept in the JSON")
    parser.add_argument("--out", default=os.path.join(HERE, "results", "submit_burst.json"))
    args = parser.parse_args()

    runs = []
    for i in range(args.runs):
        runs.append(one_run(args))
        print(f"run {i + 1}: {runs[-1]}", flush=True)
    median = {k: statistics.median(r[k] for r in runs) for k in runs[0] if isinstance(runs[0][k], (int, float))}
    result = {"benchmark": "submit_burst", "date": time.strftime("%Y-%m-%d"), "cpus": os.cpu_count(),
              "label": args.label, "agents": args.agents, "clients": args.clients, "processes": args.processes,
              "seconds": args.seconds, "queued_before": args.queued, "median": median, "runs": runs}
    rows = [
        ("acknowledged submissions/s", f"{median['submits_per_s']:,.0f}", ">= 1,000"),
        ("slowest second (submissions)", f"{median['slowest_second_submits']:,.0f}", ""),
        ("latency p50 / p90", f"{median['p50_ms']:.1f} / {median['p90_ms']:.1f} ms", ""),
        ("latency p99 / max", f"{median['p99_ms']:.1f} / {median['max_ms']:.1f} ms", "p99 <= 50 ms"),
        ("coordinator CPU / RSS", f"{median['coordinator_cpu_cores']:.2f} cores / "
                                  f"{median['coordinator_rss_mib']:.0f} MiB", ""),
        ("the clients' CPU", f"{median['clients_cpu_cores']:.2f} cores", ""),
        ("lost / duplicated / errors", f"{median['lost']:.0f} / {median['duplicated']:.0f} / {median['errors']:.0f}",
         "0 / 0 / 0"),
    ]
    offered = f"{args.rate:,.0f}/s offered" if args.rate else "each as soon as answered"
    print(f"\n{args.clients} clients ({offered}), {args.seconds} s, {args.queued:,} jobs queued before, {args.agents} agents, "
          f"{os.cpu_count()} CPUs (medians of {args.runs} runs)")
    print_measures(rows, (34, 24, 14))
    save_json(args.out, result)


if __name__ == "__main__":
    main()
