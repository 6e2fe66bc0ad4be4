"""What `--json` prints: one designed shape per command, documented in docs/json.md (a test holds the two
together: tests/unit/test_json_output.py). Built from typed values with explicit keys, never a dump of the
wire messages: snake_case keys, numbers as numbers, nested objects, a key always present (null when it
has no value yet, e.g. `exit_code` while a job runs), times in seconds since the epoch (UTC) as numbers,
NaN and infinities as null (they are not JSON)."""

from __future__ import annotations

import json
import math
import signal
from typing import Any, Iterable

from cluster.client import exit_codes
from cluster.shared import jobspec, modes
from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb
from tfdist.errors import TfdistError


WAITING_STATES = ("QUEUED", "STARTING", "RUNNING")  # a job waits for nodes, then its nodes and ranks to start


def dumps(document: Any) -> str:
    """One document, indented for people; `allow_nan=False`: a NaN that slipped through is a bug, not
    invalid JSON for a script to choke on."""
    return json.dumps(document, indent=2, allow_nan=False)


def line(document: Any) -> str:
    """One JSON Lines record (metrics, logs): compact, no newline inside."""
    return json.dumps(document, separators=(", ", ": "), allow_nan=False)


def number(value: float) -> float | None:
    return value if math.isfinite(value) else None


def when(seconds: float) -> float | None:
    """A time the coordinator records (seconds since the epoch; 0: not yet)."""
    return seconds if seconds > 0 and math.isfinite(seconds) else None


# ---------------------------------------------------------------- tfdist job ID --json, tfdist jobs --json

def job(message: pb.Job) -> dict[str, Any]:
    spec = jobspec.from_pb(message.spec, validate=False)
    plain = jobspec.to_plain(spec)
    ranks = _ranks(spec, message.placement)
    checkpoint = message.latest_checkpoint
    has_checkpoint = message.HasField("latest_checkpoint") and checkpoint.step >= 0
    return {
        "id": message.id,
        "name": plain.pop("name"),
        "owner": message.owner,
        "state": message.state,
        "outcome": message.message or None,
        "exit_code": exit_codes.of_job(message.state, message.exit_code),
        "failed_rank": message.failed_rank if message.failed_rank >= 0 else None,
        **{key: plain.pop(key) for key in ("priority", "slots", "command", "distribution")},
        "submitted_at": when(message.submitted_at),
        "started_at": when(message.started_at),
        "ended_at": when(message.ended_at),
        "waiting_reason": (message.waiting_reason or None) if message.state in WAITING_STATES else None,
        "placement": [_node(p, ranks.get(p.node_rank, []), message.state in HOLDING) for p in message.placement],
        "attempt": message.attempt,
        "restarts": message.restarts,
        "latest_checkpoint": {
            "step": checkpoint.step if has_checkpoint else None,
            "path": (checkpoint.path or None) if has_checkpoint else None,
            "time": when(checkpoint.time) if has_checkpoint else None,
        },
        "latest_metrics": [{"name": m.name, "value": number(m.value), "step": m.step, "rank": m.rank,
                            "time": when(m.time)} for m in message.latest_metrics],
        "exits": [_exit(e) for e in message.exits],
        "throughput": throughput(message),
        **plain,
    }


def jobs(listed: Iterable[pb.Job], left_out: int = 0) -> dict[str, Any]:
    """`left_out`: the jobs of the selection not listed (older ones; --all lists every job)."""
    shown = [job(j) for j in listed]
    return {"jobs": shown, "total": len(shown) + left_out, "left_out": left_out}


HOLDING = ("STARTING", "RUNNING")  # a job in another state holds no node: its placement is where it ran


def _node(p: pb.Placement, ranks: list[dict[str, Any]], holding: bool) -> dict[str, Any]:
    return {"node_rank": p.node_rank, "node": p.agent, "address": p.address, "slots": p.slots,
            "gpus": list(p.gpus), "ports": list(p.ports), "state": (p.state or None) if holding else None,
            "ranks": ranks}


def _ranks(spec: jobspec.JobSpec, placement: Iterable[pb.Placement]) -> dict[int, list[dict[str, Any]]]:
    """Each node's processes, planned by the job's mode from its placement as the coordinator planned them
    (the planners are pure); none where the placement cannot be planned (a job stored by another version)."""
    nodes = sorted(placement, key=lambda p: p.node_rank)
    if not nodes:
        return {}
    try:
        plan = modes.planner(spec.distribution_mode).plan(
            modes.Placement("", tuple(modes.NodePlacement(p.agent, p.address, p.slots, tuple(p.ports), bool(p.gpus))
                                      for p in nodes)), spec.config, [list(p.gpus) for p in nodes])
    except (TfdistError, ValueError, IndexError):
        return {}
    found: dict[int, list[dict[str, Any]]] = {}
    for process in plan.processes:
        found.setdefault(nodes[process.node_rank].node_rank, []).append(
            {"rank": process.rank, "local_rank": process.local_rank, "role": process.role, "port": process.port,
             "gpus": list(process.gpus)})
    return found


def _exit(e: pb.WorkerExit) -> dict[str, Any]:
    """A worker's exit; killed by signal N: exit code 128+N (as a shell and `tfdist launch` say it)."""
    killed = e.exit_code < 0
    try:
        name = signal.Signals(-e.exit_code).name if killed else None
    except ValueError:
        name = f"signal {-e.exit_code}"
    return {"rank": e.rank, "node": e.agent, "exit_code": 128 - e.exit_code if killed else e.exit_code,
            "signal": name, "reason": e.reason or None, "tolerated": e.tolerated, "attempt": e.attempt,
            "last_lines": list(e.last_lines)}


# ---------------------------------------------------------------- tfdist agents --json

def agents(listed: Iterable[pb.AgentInfo]) -> dict[str, Any]:
    return {"agents": [_agent(a) for a in listed]}


def _agent(a: pb.AgentInfo) -> dict[str, Any]:
    free = set(a.free_gpus)
    return {"name": a.name, "state": a.state, "kind": "gpu" if a.gpu else "cpu", "slots": a.slots,
            "free_slots": a.free_slots,
            "gpus": [{"index": g.index, "uuid": g.uuid, "name": g.name, "free": g.index in free} for g in a.gpus],
            "addresses": [{"ip": x.ip, "prefix_len": x.prefix_len, "interface": x.interface or None}
                          for x in a.addresses],
            "last_heartbeat": when(a.last_heartbeat), "jobs": list(a.jobs),
            "usage": usage(a), "metrics_address": a.metrics_address or None, "liveness": a.liveness or "heartbeats"}


def usage(a: pb.AgentInfo) -> dict[str, Any] | None:
    """The agent's latest sample (GPUs, each job's workers' CPU and memory); None until it reports one."""
    u = a.usage
    if not a.HasField("usage") or not (u.gpus or u.jobs):
        return None
    return {"time": when(u.time),
            "gpus": [{"index": g.index, "utilization": number(g.utilization),
                      "memory_used_bytes": g.memory_used_bytes, "memory_total_bytes": g.memory_total_bytes}
                     for g in u.gpus],
            "jobs": [{"job_id": j.job_id, "cpu_seconds": number(j.cpu_seconds), "rss_bytes": j.rss_bytes,
                      "processes": j.processes} for j in u.jobs]}


def throughput(job: pb.Job) -> dict[str, Any] | None:
    """A running job's speed; None until the coordinator measured one."""
    t = job.throughput
    if not job.HasField("throughput") or t.steps_per_second <= 0:
        return None
    return {"steps_per_second": number(t.steps_per_second),
            "examples_per_second": number(t.examples_per_second) if t.examples_per_second > 0 else None,
            "time": when(t.time)}


# ---------------------------------------------------------------- tfdist jobs --slurm --json

def slurm_jobs(listed) -> dict[str, Any]:
    from cluster.client.slurm_submit import exit_code

    return {"jobs": [{"id": j.id, "name": j.name, "state": j.state,
                      "reason": j.reason if j.reason not in ("", "None") else None,
                      "exit_code": exit_code(j) if j.ended else None, "slurm_exit_code": j.exit_code,
                      "nodes": j.nodes if j.nodes not in ("", "(null)") else None, "output": j.output,
                      "restarts": j.restarts} for j in listed]}


# ---------------------------------------------------------------- tfdist metrics ID --json (JSON Lines)

def metric_rows(history: pb.GetMetricsResponse) -> list[dict[str, Any]]:
    """One record per (step, rank), in step order: the metrics under their own key, so a metric named
    `step` or `rank` cannot overwrite those; a NaN or infinite value is null."""
    by_key: dict[tuple[int, int], dict[str, float | None]] = {}
    for m in history.metrics:
        by_key.setdefault((m.step, m.rank), {})[m.name] = number(m.value)
    return [{"step": step, "rank": rank, "metrics": values} for (step, rank), values in sorted(by_key.items())]
