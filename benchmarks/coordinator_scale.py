"""Coordinator scale: the pure scheduler's placements/s, and a real coordinator process with
1,000 simulated agents heartbeating over gRPC: submit-to-placed latency, coordinator CPU and memory.
The coordinator serves TLS and checks a credential on every call, as deployed (the simulated cluster:
benchmarks/simulated_cluster.py).

    .venv/bin/python benchmarks/coordinator_scale.py [--agents 1000,3000,10000] [--jobs 200] [--forced]
                                                     [--burst-seconds 30] [--burst-queued 10000]

The cost curve: submit-to-placed p50/p99, coordinator CPU and memory at each cluster size, and a burst of
submissions (benchmarks/submit_burst.py: 64 clients, 1,000/s offered, a deep queue). Writes
benchmarks/results/coordinator_scale.json and prints a table.
"""

import argparse
import multiprocessing
import os
import random
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

from benchmarks.simulated_cluster import SLOTS_PER_NODE, SimulatedCluster, cpu_seconds, rss_mib  # noqa: E402
from cluster.coordinator import scheduler  # noqa: E402

AGENTS_NICE = 10  # simulated agents run below the coordinator: on a real cluster they are on other machines


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
        for job_id in rng.sample(sorted(running), k=(len(running) + 1) // 2):  # half the running jobs end (one at least)
            for name, used in running.pop(job_id):
                free[name] += used
    return placed / busy


def submit_latencies(client, jobs, seed):
    """`jobs` submissions one after another, each canceled once placed: (sorted latencies in s, how many were
    placed at once, the last job's id)."""
    from cluster.shared import jobspec
    from cluster.shared.config import ExperimentConfig
    from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb

    rng = random.Random(seed)
    latencies, placed = [], 0
    for slots in job_sizes(rng, jobs):
        spec = jobspec.to_pb(jobspec.job_spec(ExperimentConfig(name="bench", entrypoint=("true",),
                                                               slots_per_trial=slots, distribution_mode="mwms")))
        t = time.perf_counter()
        response = client.call(client.coordinator.SubmitJob, pb.SubmitJobRequest(spec=spec))  # scheduled on return
        latencies.append(time.perf_counter() - t)
        placed += response.state == "STARTING"
        client.call(client.coordinator.CancelJob, pb.CancelJobRequest(job_id=response.job_id))  # frees its nodes
    return sorted(latencies), placed, response.job_id


def p99(sorted_values):
    return sorted_values[int(0.99 * (len(sorted_values) - 1))]


def bench_cluster(agents, jobs, seed, processes=4, cpu_window=10.0, fixed_interval=0.0, liveness="heartbeats", rounds=1):
    """`liveness`: "beacons": the agents beacon and heartbeat as agents do now (benchmarks/liveness_scale.py),
    --lost-after at its default; "heartbeats": unary heartbeats alone, --lost-after 60 (as before beacons).
    `rounds` of `jobs` jobs on the one cluster: p50 and p99 are the medians of the rounds'."""
    from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb

    if liveness == "beacons" and not fixed_interval:
        import functools

        from benchmarks.liveness_scale import LOST_AFTER, beaconing_agents

        ctx = multiprocessing.get_context("spawn")
        sent = ctx.Array("q", 4)  # beacons, heartbeats, registrations again, pokes taken
        main = functools.partial(beaconing_agents, silence=ctx.Event(), victims=frozenset(), old_every=0, sent=sent,
                                 nice=AGENTS_NICE)
        cluster = SimulatedCluster(agents, processes=processes, lost_after=LOST_AFTER, agent_main=main)
    else:
        sent = None
        cluster = SimulatedCluster(agents, processes=processes, fixed_interval=fixed_interval)
    try:
        client = cluster.client
        registered = len(client.call(client.coordinator.ListAgents, pb.ListAgentsRequest()).agents)
        # Every agent heartbeats at its final interval once it has heartbeated once since the last one
        # registered: the longest interval is the heartbeat budget's (250/s: 40 s at 10,000 agents).
        time.sleep(max(5.0, agents / 250.0))
        c0, t0 = cpu_seconds(cluster.coord.pid), time.monotonic()
        time.sleep(cpu_window)
        cpu = (cpu_seconds(cluster.coord.pid) - c0) / (time.monotonic() - t0)
        rss_idle = rss_mib(cluster.coord.pid)
        counted = (lambda: list(sent)) if sent else (lambda: [0, 0, 0, 0])  # beacons, heartbeats, again, pokes
        c0, t0, start = cpu_seconds(cluster.coord.pid), time.monotonic(), counted()
        per_round, placed = [], 0
        for r in range(rounds):  # on the same cluster: one noisy second on this machine moves one round's p99
            before = counted()[1]
            latencies, placed_now, _ = submit_latencies(client, jobs, seed + r)
            per_round.append((1000 * statistics.median(latencies), 1000 * p99(latencies),
                              (counted()[1] - before) / jobs))
            placed += placed_now
        loop_cpu, loop_wall = cpu_seconds(cluster.coord.pid) - c0, time.monotonic() - t0
        _, heartbeats, again, pokes = (b - a for a, b in zip(start, counted()))
        rss_after_jobs = rss_mib(cluster.coord.pid)
        return {"agents_registered": registered, "coordinator_cpu_cores": round(cpu, 3),
                "coordinator_rss_mib": round(rss_idle, 1), "coordinator_rss_after_jobs_mib": round(rss_after_jobs, 1),
                "heartbeat_interval_s": fixed_interval or "adaptive", "liveness": liveness,
                "submit_to_placed_p50_ms": round(statistics.median(r[0] for r in per_round), 2),
                "submit_to_placed_p99_ms": round(statistics.median(r[1] for r in per_round), 2),
                "rounds_p50_p99_ms_heartbeats_per_job": [[round(x, 2) for x in r] for r in per_round],
                "jobs": jobs, "rounds": rounds, "placed_at_once": placed,
                "coordinator_cpu_ms_per_job": round(1000 * loop_cpu / (jobs * rounds), 2),
                "coordinator_cpu_cores_during_jobs": round(loop_cpu / loop_wall, 3),
                "heartbeats_per_job": round(heartbeats / (jobs * rounds), 1) if sent else None,
                "pokes_per_job": round(pokes / (jobs * rounds), 1) if sent else None,
                "agents_registered_again": again if sent else None}  # lost meanwhile: a simulating process starved (it must be 0)
    finally:
        cluster.close()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--agents", default="1000,3000,10000",
                        help="simulated cluster sizes, comma-separated: the curve (adaptive heartbeats)")
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5,
                        help="rounds of --jobs jobs on each cluster: p50/p99 are the medians of the rounds'")
    parser.add_argument("--runs", type=int, default=3, help="runs of the pure scheduler")
    parser.add_argument("--forced", action="store_true",
                        help="also the smallest size with heartbeats forced to 1 Hz (what adaptive ones avoid)")
    parser.add_argument("--burst-seconds", type=int, default=30,
                        help="the burst of benchmarks/submit_burst.py (64 clients, 1,000/s offered; 0: none)")
    parser.add_argument("--burst-queued", type=int, default=10_000)
    parser.add_argument("--liveness", choices=("beacons", "heartbeats"), default="beacons",
                        help="simulated agents on beacons (as agents now are; --lost-after 6) or on unary heartbeats "
                             "alone (--lost-after 60, as measured before beacons)")
    parser.add_argument("--label", default="", help="what this run measures (e.g. the commit), kept in the JSON")
    parser.add_argument("--out", default=os.path.join(HERE, "results", "coordinator_scale.json"))
    args = parser.parse_args()
    sizes = [int(n) for n in args.agents.split(",")]

    rates = [bench_scheduler(sizes[0], 2000, seed) for seed in range(args.runs)]
    curve = {n: bench_cluster(n, args.jobs, seed=1, liveness=args.liveness, rounds=args.rounds) for n in sizes}
    result = {
        "benchmark": "coordinator_scale", "date": time.strftime("%Y-%m-%d"), "cpus": os.cpu_count(),
        "label": args.label, "liveness": args.liveness,
        "scheduler_placements_per_s_median": round(statistics.median(rates)),
        "scheduler_placements_per_s_runs": [round(r) for r in rates],
        "curve": {str(n): r for n, r in curve.items()},
    }
    if args.forced:
        result["heartbeats_forced_to_1hz"] = bench_cluster(sizes[0], args.jobs, seed=1, fixed_interval=1.0)
    if args.burst_seconds:
        from benchmarks.submit_burst import one_run

        result["burst"] = one_run(argparse.Namespace(agents=100, queued=args.burst_queued, seconds=args.burst_seconds,
                                                     clients=64, processes=4, rate=1000.0))
    rows = [(f"scheduler placements/s ({sizes[0]:,} nodes, jobs of 1-16 nodes)",
             f"{result['scheduler_placements_per_s_median']:,}", ">= 2,000")]
    for n, r in curve.items():
        rows += [
            (f"submit-to-placed p50 / p99, {n:,} agents", f"{r['submit_to_placed_p50_ms']:.1f} / "
                                                           f"{r['submit_to_placed_p99_ms']:.1f} ms", "p99 <= 20 ms"),
            (f"coordinator CPU / RSS idle / RSS after jobs, {n:,} agents",
             f"{r['coordinator_cpu_cores']:.2f} / {r['coordinator_rss_mib']:.0f} / "
             f"{r['coordinator_rss_after_jobs_mib']:.0f} MiB", ""),
        ]
    if "heartbeats_forced_to_1hz" in result:
        r = result["heartbeats_forced_to_1hz"]
        rows.append((f"submit-to-placed p50 / p99, {sizes[0]:,} agents at 1 Hz",
                     f"{r['submit_to_placed_p50_ms']:.1f} / {r['submit_to_placed_p99_ms']:.1f} ms", ""))
    if "burst" in result:
        b = result["burst"]
        rows += [(f"burst: submissions/s (64 clients, 1,000/s offered, {args.burst_queued:,} queued)",
                  f"{b['submits_per_s']:,.0f}", ">= 1,000"),
                 ("burst: latency p50 / p99", f"{b['p50_ms']:.1f} / {b['p99_ms']:.1f} ms", "p99 <= 50 ms"),
                 ("burst: lost / duplicated", f"{b['lost']} / {b['duplicated']}", "0 / 0")]
    from benchmarks.compare import print_measures, save_json

    print_measures(rows, (66, 20, 12))
    save_json(args.out, result)


if __name__ == "__main__":
    main()
