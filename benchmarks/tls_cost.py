"""What TLS and credentials cost: a real coordinator with 1,000 simulated agents heartbeating, served with
TLS and then with --insecure-plaintext, in one run.

Each round starts the coordinator twice (the order alternates from round to round), each time with the
same simulated agents as `coordinator_scale.py` (4 processes, one long-lived channel each, every agent
registering and heartbeating with its own node credential). Both modes check a credential on every call;
only the transport differs. Per mode it measures:
  - coordinator CPU (cores) over a window of heartbeats, and per heartbeat answered;
  - the simulated agents' CPU over the same window (on a real cluster it is spread over the nodes);
  - submit latency: `--jobs` SubmitJob round trips through `cluster.shared.rpc.Client` (p50, p99);
  - the one-off cost of a fresh channel: the first call on a new channel (TCP, HTTP/2 and, with TLS, the
    handshake) against the second call on it.
It also times one credential check (token, HMAC, access rule: what every call pays in both modes). With --proposed, a
third mode runs the same TLS with every token sent as plain metadata over the verified channel instead
of as gRPC call credentials (which run a Python plugin in a new thread for every call; see
tls_breakdown.py): the change proposed for cluster/shared/auth.py, measured before it is made.

    .venv/bin/python benchmarks/tls_cost.py [--agents 1000] [--rounds 3] [--jobs 200] [--window 10] [--proposed]
                                            [--agents-nice 19]

Prints a table (medians over rounds, ratio TLS / plaintext) and writes benchmarks/results/tls_cost.json
with every run and the load average before and after each.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import timeit

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)
sys.path.insert(0, HERE)
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

from coordinator_scale import SimulatedCluster, cpu_seconds, p99, submit_latencies  # noqa: E402

MODES = ("tls", "plaintext")
PROPOSED = "tls-token-as-metadata"  # the same TLS, the token as plain metadata instead of call credentials


def fresh_channel_calls(cluster, job_id, samples):
    """(first call, second call) in seconds on each of `samples` new channels, medians: the first pays the
    connection (and TLS handshake); a private subchannel pool keeps gRPC from reusing a connection."""
    from cluster.shared import auth
    from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb
    from cluster.shared.protos.tfdist.v1 import cluster_pb2_grpc as pb_grpc

    metadata = cluster.client._metadata  # the client's way of sending its token (see SimulatedCluster)
    firsts, seconds = [], []
    for _ in range(samples):
        options = [("grpc.use_local_subchannel_pool", 1)]
        if metadata and not cluster.user.plaintext:  # the proposed variant: TLS without call credentials
            import grpc

            channel = grpc.secure_channel(cluster.address, grpc.ssl_channel_credentials(cluster.user.ca_pem.encode()),
                                          [*options, ("grpc.ssl_target_name_override", cluster.user.server_name)])
        else:
            channel = auth.channel(cluster.address, cluster.user, options)
        stub = pb_grpc.CoordinatorStub(channel)
        times = []
        for _ in range(2):
            t = time.perf_counter()
            stub.GetJob(pb.GetJobRequest(job_id=job_id), timeout=30, metadata=metadata)
            times.append(time.perf_counter() - t)
        channel.close()
        firsts.append(times[0])
        seconds.append(times[1])
    return statistics.median(firsts), statistics.median(seconds)


def one_run(mode, args, seed):
    load_before = os.getloadavg()
    cluster = SimulatedCluster(args.agents, plaintext=mode == "plaintext", processes=args.processes,
                               fixed_interval=args.heartbeat_interval, token_as_metadata=mode == PROPOSED,
                               agents_nice=args.agents_nice)
    try:
        time.sleep(args.settle)  # a measurement warm-up: every agent reaches its steady heartbeat rate
        c0, a0, h0, t0 = (cpu_seconds(cluster.coord.pid), cluster.agents_cpu_seconds(), cluster.heartbeats.value,
                          time.monotonic())
        time.sleep(args.window)
        elapsed = time.monotonic() - t0
        coord_cpu = (cpu_seconds(cluster.coord.pid) - c0) / elapsed
        agents_cpu = (cluster.agents_cpu_seconds() - a0) / elapsed
        rate = (cluster.heartbeats.value - h0) / elapsed
        latencies, placed, last_job = submit_latencies(cluster.client, args.jobs, seed)
        first, second = fresh_channel_calls(cluster, last_job, args.handshakes)
    finally:
        cluster.close()
    return {"mode": mode, "coordinator_cpu_cores": round(coord_cpu, 3), "heartbeats_per_s": round(rate, 1),
            "coordinator_cpu_us_per_heartbeat": round(1e6 * coord_cpu / rate, 1) if rate else None,
            "agents_cpu_cores": round(agents_cpu, 3),
            "submit_p50_ms": round(1000 * statistics.median(latencies), 2), "submit_p99_ms": round(1000 * p99(latencies), 2),
            "placed_at_once": placed, "first_call_fresh_channel_ms": round(1000 * first, 2),
            "second_call_same_channel_ms": round(1000 * second, 2),
            "loadavg_before": [round(x, 2) for x in load_before], "loadavg_after": [round(x, 2) for x in os.getloadavg()]}


def token_check_us():
    """What every call pays in both modes before its handler runs, as the coordinator's Gate does it for a
    heartbeat: the bearer token read from the metadata, its HMAC-SHA256 checked (constant-time compare),
    the access rule applied."""
    from cluster.coordinator import access
    from cluster.shared import auth
    from cluster.shared.credentials import Authority
    from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb

    authority = Authority.create()
    credential = authority.issue("node", "sim0000", plaintext=True)
    metadata = (("user-agent", "grpc-python"), *auth.call_metadata(credential))
    request = pb.HeartbeatRequest(agent="sim0000")

    def check():
        access.decide("Heartbeat", authority.verify(auth.bearer_token(metadata)), request, lambda job: None)
    n = 20000
    return 1e6 * min(timeit.repeat(check, number=n, repeat=5)) / n


KEYS = (("coordinator_cpu_cores", "coordinator CPU while heartbeating (cores)", "{:.3f}"),
        ("coordinator_cpu_us_per_heartbeat", "coordinator CPU per heartbeat (us)", "{:.0f}"),
        ("heartbeats_per_s", "heartbeats sent per second", "{:.0f}"),
        ("agents_cpu_cores", "simulated agents' CPU (cores, all 4 processes)", "{:.3f}"),
        ("submit_p50_ms", "submit latency p50 (ms)", "{:.2f}"),
        ("submit_p99_ms", "submit latency p99 (ms)", "{:.2f}"),
        ("first_call_fresh_channel_ms", "first call on a fresh channel (ms)", "{:.2f}"),
        ("second_call_same_channel_ms", "second call on that channel (ms)", "{:.2f}"))


def source_commit():
    marker = os.path.join(REPO, ".commit")  # a tree exported with `git archive` for a stable measurement
    if os.path.exists(marker):
        return open(marker).read().strip()
    r = subprocess.run(["git", "-C", REPO, "rev-parse", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--", "cluster"], capture_output=True, text=True)
    return r.stdout.strip() + (" + uncommitted changes in cluster/" if dirty.stdout.strip() else "")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--processes", type=int, default=4, help="processes simulating the agents")
    parser.add_argument("--rounds", type=int, default=3, help="each round runs both modes (order alternates)")
    parser.add_argument("--jobs", type=int, default=200, help="submissions timed per run")
    parser.add_argument("--window", type=float, default=10.0, help="seconds of heartbeats CPU is measured over")
    parser.add_argument("--settle", type=float, default=5.0, help="seconds after registration before measuring")
    parser.add_argument("--handshakes", type=int, default=20, help="fresh channels timed per run")
    parser.add_argument("--heartbeat-interval", type=float, default=0.0,
                        help="force every agent to this interval (default: what the coordinator asks for)")
    parser.add_argument("--agents-nice", type=int, default=0, metavar="N",
                        help="run the simulated agents at nice N, below the coordinator (on a real cluster they run "
                             "on other machines; here they share its cores)")
    parser.add_argument("--proposed", action="store_true",
                        help=f"also run `{PROPOSED}`: TLS with every token sent as plain metadata (agents' and the "
                             "client's), the change proposed for cluster/shared/auth.py")
    parser.add_argument("--out", default=os.path.join(HERE, "results", "tls_cost.json"))
    args = parser.parse_args()

    modes = (*MODES, PROPOSED) if args.proposed else MODES
    runs = []
    for round_ in range(args.rounds):
        shift = round_ % len(modes)  # every mode goes first in turn
        for mode in (modes[shift:] + modes[:shift])[::-1 if round_ % 2 else 1]:
            run = one_run(mode, args, seed=round_)
            run["round"] = round_
            runs.append(run)
            print(json.dumps(run), flush=True)
    medians = {mode: {key: statistics.median([r[key] for r in runs if r["mode"] == mode and r[key] is not None]
                                             or [0.0]) for key, _, _ in KEYS}
               for mode in modes}
    ratios = {key: round(medians["tls"][key] / medians["plaintext"][key], 3) for key, _, _ in KEYS
              if medians["plaintext"][key]}
    proposed = {key: round(medians[PROPOSED][key] / medians["plaintext"][key], 3) for key, _, _ in KEYS
                if medians["plaintext"][key]} if args.proposed else {}
    result = {"benchmark": "tls_cost", "date": time.strftime("%Y-%m-%d"), "cpus": os.cpu_count(),
              "source": source_commit(), "agents": args.agents, "processes": args.processes, "rounds": args.rounds,
              "jobs_per_run": args.jobs, "cpu_window_s": args.window,
              "heartbeat_interval_s": args.heartbeat_interval or "adaptive", "agents_nice": args.agents_nice,
              "token_check_us": round(token_check_us(), 2), "medians": medians, "ratio_tls_to_plaintext": ratios,
              **({f"ratio_{PROPOSED}_to_plaintext": proposed} if proposed else {}),
              "runs": runs}
    print()
    extra = f" {'TLS+md':>9} | {'ratio':>6} |" if proposed else ""
    print(f"| {'measure, ' + str(args.agents) + ' agents (median of ' + str(args.rounds) + ')':52} | "
          f"{'TLS':>9} | {'plaintext':>9} | {'ratio':>6} |" + extra)
    print(f"|{'-' * 54}|{'-' * 11}|{'-' * 11}|{'-' * 8}|" + (f"{'-' * 11}|{'-' * 8}|" if proposed else ""))
    for key, label, fmt in KEYS:
        extra = f" {fmt.format(medians[PROPOSED][key]):>9} | {proposed.get(key, float('nan')):>6.2f} |" if proposed else ""
        print(f"| {label:52} | {fmt.format(medians['tls'][key]):>9} | {fmt.format(medians['plaintext'][key]):>9} | "
              f"{ratios.get(key, float('nan')):>6.2f} |" + extra)
    if proposed:
        print(f"TLS+md: {PROPOSED} (the proposed change); its ratio is to plaintext")
    print(f"one credential check (token, HMAC-SHA256, access rule; both modes): {result['token_check_us']} us")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
