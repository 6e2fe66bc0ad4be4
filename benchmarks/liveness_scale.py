"""Liveness at 10,000 agents with --lost-after at its default (6 s): what proving every node alive costs the
coordinator, and how fast it notices a node that stopped, with agents on beacons (a twentieth of them on
heartbeats alone, as older agents) beside the same cluster on heartbeats alone (before beacons).

Simulated agents register with their own node credentials over TLS, then do what real agents do: beacon
every lost_after/4 from a UDP socket, heartbeat at the interval the coordinator answers, at once on a poke.
After a settling time the coordinator's CPU and RSS are measured over a window; then some agents fall
silent (half on beacons, half on heartbeats) and ListAgents is polled until each is LOST.

    python benchmarks/liveness_scale.py                       # 10,000 agents, both modes
    python benchmarks/liveness_scale.py --agents 1000 --modes beacons
"""

from __future__ import annotations

import argparse
import functools
import heapq
import multiprocessing
import os
import socket
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from benchmarks.simulated_cluster import SLOTS_PER_NODE, SimulatedCluster, agent_channel, as_agent, cpu_seconds, rss_mib  # noqa: E402

LOST_AFTER = 6.0  # the coordinator's default


def beaconing_agents(address, credentials, stop_at, ready, silence, victims, old_every, sent, nice=0):
    """One simulated-agent process: its agents register (every `old_every`-th without beacons), then beacon
    and heartbeat as real ones do until `stop_at`; once `silence` is set, its `victims` send
    nothing more. `victims`: names. `sent`: (beacons, heartbeats, registrations again after a loss, pokes
    taken) sent, all processes together. `nice`: below the coordinator (on a real cluster agents run on other machines)."""
    import grpc

    if nice:
        os.nice(nice)

    from cluster.agent.loops import jittered
    from cluster.shared import beacon
    from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb
    from cluster.shared.protos.tfdist.v1 import cluster_pb2_grpc as pb_grpc

    stub = pb_grpc.AgentServiceStub(agent_channel(address, credentials[0]))
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setblocking(False)
    host = address.rsplit(":", 1)[0]
    agents = [{"name": c.name, "auth": as_agent(c), "old": bool(old_every) and i % old_every == 0, "key": None,
               "counter": 0, "version": 0, "interval": 1.0, "beacon_every": 1.5, "port": 0, "epoch": 0,
               "last_poke": 0, "in_flight": False, "again": False}
              for i, c in enumerate(credentials)]
    index = {a["name"]: i for i, a in enumerate(agents)}
    victim_indices = {index[name] for name in victims if name in index}
    due = []  # (when, kind, agent index, epoch): "b" beacon, "h" heartbeat; an older epoch's are dropped
    registering = []  # (agent index, Register future): each agent starts the moment it is registered
    waiting = list(range(len(agents)))[::-1]  # registered in order, a few dozen in flight

    def register(i):
        a = agents[i]
        registering.append((i, stub.Register.future(pb.RegisterRequest(agent=pb.AgentInfo(
            name=a["name"], slots=SLOTS_PER_NODE, addresses=[pb.Address(ip="127.0.0.1", prefix_len=8)]),
            beacons=not a["old"]), timeout=120, **a["auth"])))

    def registered(i, answer):
        a = agents[i]
        a.update(key=answer.beacon_key or None, nonce=answer.beacon_nonce, counter=0, version=0, interval=answer.heartbeat_interval or 1.0,
                 beacon_every=answer.beacon_interval or 1.5, port=answer.beacon_port, epoch=a["epoch"] + 1)
        now = time.monotonic()
        if a["key"]:
            heapq.heappush(due, (now, "b", i, a["epoch"]))
        heapq.heappush(due, (now + jittered(a["interval"]), "h", i, a["epoch"]))

    pending = []  # (agent index, heartbeat future)
    first_time = set(range(len(agents)))  # not yet registered once (ready once empty)
    while time.monotonic() < stop_at:
        quiet = victim_indices if silence.is_set() else set()
        while waiting and len(registering) < 32:
            register(waiting.pop())
        for item in [r for r in registering if r[1].done()]:
            registering.remove(item)
            try:
                registered(item[0], item[1].result())
                if first_time:
                    first_time.discard(item[0])
                    if not first_time:
                        ready.release()
            except grpc.RpcError:
                waiting.append(item[0])
        pokes = 0
        while True:  # pokes: heartbeat now
            try:
                poke = beacon.decode(sock.recv(beacon.MAX_DATAGRAM + 1))
            except (BlockingIOError, ConnectionRefusedError):
                break
            i = index.get(poke.name) if poke else None
            if i is not None and poke.counter > agents[i]["last_poke"] and i not in quiet:  # a fresh poke wakes it
                agents[i]["last_poke"] = poke.counter
                pokes += 1
                if agents[i]["in_flight"]:  # one heartbeat at a time, as a real agent's loop: then one more
                    agents[i]["again"] = True
                else:
                    heapq.heappush(due, (0.0, "h", i, agents[i]["epoch"]))
        still = []
        for i, future in pending:
            if not future.done():
                still.append((i, future))
                continue
            agents[i]["in_flight"] = False
            if agents[i]["again"]:
                agents[i]["again"] = False
                heapq.heappush(due, (0.0, "h", i, agents[i]["epoch"]))
            try:
                answer = future.result()
            except grpc.RpcError:
                continue
            if answer.reregister and i not in quiet:  # lost meanwhile: a real agent registers again
                agents[i]["epoch"] += 1
                waiting.append(i)
                with sent.get_lock():
                    sent[2] += 1
                continue
            agents[i]["interval"] = answer.heartbeat_interval or agents[i]["interval"]
            agents[i]["version"] = max(agents[i]["version"], answer.work_version)
        pending = still
        now = time.monotonic()
        beacons = heartbeats = 0
        while due and due[0][0] <= now:  # everything due, then sleep until the next
            when, kind, i, epoch = heapq.heappop(due)
            a = agents[i]
            if epoch != a["epoch"]:
                continue
            if kind == "b":
                heapq.heappush(due, (when + a["beacon_every"], "b", i, epoch))
                if i not in quiet:
                    a["counter"] += 1
                    try:
                        sock.sendto(beacon.encode(beacon.BEACON, a["name"], a["counter"], a["version"], a["key"], a["nonce"]),
                                    (host, a["port"]))
                    except OSError:
                        pass
                    beacons += 1
            else:
                if when > 0.0:  # a poke's heartbeat keeps the agent's schedule
                    heapq.heappush(due, (now + jittered(a["interval"]), "h", i, epoch))
                if i not in quiet and not a["in_flight"]:
                    a["in_flight"] = True
                    pending.append((i, stub.Heartbeat.future(pb.HeartbeatRequest(
                        agent=a["name"], beacon_nonce=a["nonce"] if a["key"] else b""), timeout=60, **a["auth"])))
                    heartbeats += 1
        if beacons or heartbeats or pokes:
            with sent.get_lock():
                sent[0] += beacons
                sent[1] += heartbeats
                sent[3] += pokes
        time.sleep(max(0.0, min(0.01, (due[0][0] if due else now + 0.01) - time.monotonic())))


def listed(client):
    from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb

    return client.call(client.coordinator.ListAgents, pb.ListAgentsRequest(), timeout=120).agents


def one_run(agents, mode, window, settle, victims, processes):
    """`mode`: "beacons" (every 20th agent on heartbeats alone) or "heartbeats" (all of them)."""
    ctx = multiprocessing.get_context("spawn")
    silence, sent = ctx.Event(), ctx.Array("q", 4)
    old_every = 20 if mode == "beacons" else 1
    per = agents // processes
    victim_names = frozenset(f"sim{i:04d}" for i in range(victims))  # the first process's first agents
    main = functools.partial(beaconing_agents, silence=silence, victims=victim_names, old_every=old_every, sent=sent)
    cluster = SimulatedCluster(agents, processes=processes, lost_after=LOST_AFTER, agent_main=main, settle=180.0)
    try:
        client = cluster.client
        expected = agents - -(-per // old_every) * processes if mode == "beacons" else 0
        deadline = time.monotonic() + settle
        while time.monotonic() < deadline:  # until every agent that can is on beacons (and a little more)
            on_beacons = sum(a.liveness == "beacons" for a in listed(client))
            if on_beacons >= expected:
                break
            time.sleep(2.0)
        time.sleep(5.0)  # their heartbeats stretched to the interval the coordinator answers
        alive = sum(a.state == "ALIVE" for a in listed(client))
        c0, s0, t0 = cpu_seconds(cluster.coord.pid), tuple(sent), time.monotonic()
        time.sleep(window)
        elapsed = time.monotonic() - t0
        cpu = (cpu_seconds(cluster.coord.pid) - c0) / elapsed
        beacons_per_s, heartbeats_per_s = ((sent[k] - s0[k]) / elapsed for k in (0, 1))
        rss = rss_mib(cluster.coord.pid)
        losses_before = sum(a.state == "LOST" for a in listed(client))
        again = sent[2] - s0[2]
        silenced = time.monotonic()
        silence.set()
        detected = {}
        while len(detected) < len(victim_names) and time.monotonic() - silenced < 60:
            for a in listed(client):
                if a.name in victim_names and a.state == "LOST" and a.name not in detected:
                    detected[a.name] = time.monotonic() - silenced
            time.sleep(0.25)
        kinds = {"beacons": [], "heartbeats": []}
        for i in range(victims):
            name = f"sim{i:04d}"
            kinds["heartbeats" if (old_every and i % old_every == 0) else "beacons"].append(detected.get(name))
        return {"agents": agents, "mode": mode, "coordinator_cpu_cores": round(cpu, 3),
                "coordinator_rss_mib": round(rss, 1), "beacons_per_s": round(beacons_per_s),
                "heartbeats_per_s": round(heartbeats_per_s), "agents_on_beacons": expected,
                "false_losses_before_silence": losses_before, "registered_in_time": cluster.settled,
                "alive_before_window": alive, "registered_again_in_window": again,
                "loss_detected_s": {k: [None if v is None else round(v, 2) for v in vals] for k, vals in kinds.items()},
                "loss_detected_max_s": round(max(detected.values()), 2) if len(detected) == victims else None,
                "undetected": victims - len(detected)}
    finally:
        cluster.close()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--agents", type=int, default=10_000)
    parser.add_argument("--modes", default="beacons,heartbeats")
    parser.add_argument("--window", type=float, default=20.0, help="seconds over which CPU and sends are measured")
    parser.add_argument("--settle", type=float, default=120.0, help="at most this long for agents to be on beacons")
    parser.add_argument("--victims", type=int, default=40, help="agents that fall silent (every 20th on heartbeats)")
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--out", default=os.path.join(HERE, "results", "liveness_scale.json"))
    args = parser.parse_args()
    runs = [one_run(args.agents, mode, args.window, args.settle, args.victims, args.processes)
            for mode in args.modes.split(",")]
    rows = []
    for r in runs:
        label = f"{r['agents']:,} agents, {r['mode']}"
        detected = [v for vals in r["loss_detected_s"].values() for v in vals if v is not None]
        rows += [(f"{label}: coordinator CPU / RSS", f"{r['coordinator_cpu_cores']:.2f} / {r['coordinator_rss_mib']:.0f} MiB",
                  "<= 1 / 200 MiB"),
                 (f"{label}: beacons/s / heartbeats/s", f"{r['beacons_per_s']:,} / {r['heartbeats_per_s']:,}", ""),
                 (f"{label}: loss detected p50 / max (s), undetected, false",
                  f"{statistics.median(detected) if detected else float('nan'):.1f} / "
                  f"{max(detected) if detected else float('nan'):.1f}, {r['undetected']}, "
                  f"{r['false_losses_before_silence']}", "<= 10 s"),
                 (f"{label}: alive before the window; registered again in it",
                  f"{r['alive_before_window']:,}; {r['registered_again_in_window']:,}", f"{r['agents']:,}; 0")]
    from benchmarks.compare import print_measures, save_json

    print_measures(rows, (62, 26, 16))
    save_json(args.out, {"benchmark": "liveness_scale", "date": time.strftime("%Y-%m-%d"), "cpus": os.cpu_count(),
                         "lost_after_s": LOST_AFTER, "runs": runs})


if __name__ == "__main__":
    main()
