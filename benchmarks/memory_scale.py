"""The coordinator's memory through 100,000 jobs: a real `tfdist coordinator` (TLS, SQLite, default retention:
the newest 10,000 finished jobs) with 100 simulated agents, and client threads that submit one-slot jobs
and cancel each once it is placed, as fast as they are answered. Its RSS is sampled every `--every` jobs:
state that stays small shows a flat line once retention starts pruning (caches are bounded, the queue
and the allocations empty out).

    python benchmarks/memory_scale.py [--jobs 100000] [--every 10000] [--clients 16]
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from benchmarks.compare import print_measures, save_json  # noqa: E402
from benchmarks.simulated_cluster import SimulatedCluster, rss_mib  # noqa: E402
from benchmarks.submit_burst import spec_message  # noqa: E402


def stored(client):
    """How many jobs the coordinator keeps (retention prunes finished ones in rounds, every 60 s)."""
    from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb

    return client.call(client.coordinator.ListJobs, pb.ListJobsRequest(page_size=1, summary=True)).total


def churn(cluster, jobs, every, clients):
    """Submits and cancels `jobs` jobs from `clients` threads; returns [(jobs done, seconds, RSS MiB, jobs
    stored)], errors."""
    from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb
    from cluster.shared.rpc import Client

    done, lock, samples, errors = [0], threading.Lock(), [], []
    started = time.monotonic()
    next_sample = [every]

    def worker(n):
        client = Client(cluster.address, cluster.user, timeout=60)
        try:
            while True:
                with lock:
                    if done[0] >= jobs:
                        return
                    done[0] += 1
                    count = done[0]
                    if count >= next_sample[0]:
                        next_sample[0] += every
                        samples.append((count, time.monotonic() - started, rss_mib(cluster.coord.pid),
                                        stored(client)))
                response = client.call(client.coordinator.SubmitJob, pb.SubmitJobRequest(spec=spec_message(1, f"m{n}")))
                client.call(client.coordinator.CancelJob, pb.CancelJobRequest(job_id=response.job_id))
        except Exception as e:  # counted: a lost job would be a finding, not a crash of the benchmark
            errors.append(repr(e))
        finally:
            client.close()

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return samples, errors


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--every", type=int, default=10_000)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--agents", type=int, default=100)
    parser.add_argument("--settle", type=float, default=150.0, help="seconds to wait for retention to catch up")
    parser.add_argument("--out", default=os.path.join(HERE, "results", "memory_scale.json"))
    args = parser.parse_args()
    cluster = SimulatedCluster(args.agents, processes=2)
    try:
        idle = rss_mib(cluster.coord.pid)
        samples, errors = churn(cluster, args.jobs, args.every, args.clients)
        deadline = time.monotonic() + args.settle  # the next pruning rounds catch up
        while stored(cluster.client) > 10_000 and time.monotonic() < deadline:
            time.sleep(2.0)
        final, listed = rss_mib(cluster.coord.pid), stored(cluster.client)
    finally:
        cluster.close()
    later = [rss for count, _, rss, _ in samples if count >= samples[len(samples) // 5][0]] if samples else []
    result = {"benchmark": "memory_scale", "date": time.strftime("%Y-%m-%d"), "cpus": os.cpu_count(),
              "jobs": args.jobs, "agents": args.agents, "clients": args.clients, "rss_idle_mib": round(idle, 1),
              "rss_final_mib": round(final, 1), "jobs_stored_at_end": listed, "errors": errors[:5],
              "error_count": len(errors),
              "samples": [{"jobs": c, "seconds": round(s, 1), "rss_mib": round(r, 1), "stored": n}
                          for c, s, r, n in samples],
              "rss_spread_after_first_fifth_mib": round(max(later) - min(later), 1) if later else None}
    rows = [("coordinator RSS idle (100 agents)", f"{idle:.0f} MiB", "")]
    rows += [(f"RSS after {c:,} jobs ({s:.0f} s); jobs stored", f"{r:.0f} MiB; {n:,}", "flat") for c, s, r, n in samples]
    rows += [("RSS spread over the last four fifths", f"{result['rss_spread_after_first_fifth_mib']} MiB", "small"),
             ("after retention caught up: RSS; jobs stored", f"{final:.0f} MiB; {listed:,}", "; 10,000"),
             ("errors", f"{len(errors)}", "0")]
    print_measures(rows, (52, 18, 10))
    save_json(args.out, result)


if __name__ == "__main__":
    main()
