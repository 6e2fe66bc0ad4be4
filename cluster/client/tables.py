"""Readable tables (default) and JSON (--json: cluster/client/json_output.py, docs/json.md) for the client
commands."""

from __future__ import annotations

import datetime

from cluster.client import exit_codes, json_output
from cluster.client.follow import TERMINAL, root_cause_exit
from cluster.shared import jobspec


def _when(ts: float) -> str:
    return datetime.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S") if ts else "-"


def table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    return "\n".join(lines)


def _ids(ids) -> str:
    """GPU indices, runs shortened: [0, 1, 2, 3, 6] -> 0-3,6."""
    ids = sorted(ids)
    runs: list[list[int]] = []
    for i in ids:
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return ",".join(f"{r[0]}-{r[-1]}" if len(r) > 2 else ",".join(map(str, r)) for r in runs)


def print_jobs(jobs, as_json: bool, left_out: int = 0) -> int:
    """`left_out`: how many jobs of the selection are not listed (said in --json; the caller says it on
    stderr for the table)."""
    if as_json:
        print(json_output.dumps(json_output.jobs(jobs, left_out)))
        return 0
    rows = [[j.id, j.spec.config.name, j.state, str(j.spec.config.slots_per_trial), _when(j.submitted_at),
             (j.waiting_reason if j.state in json_output.WAITING_STATES else "") or j.message] for j in jobs]
    print(table(["ID", "NAME", "STATE", "SLOTS", "SUBMITTED", "INFO"], rows))
    return 0


def print_job(job, as_json: bool) -> int:
    if as_json:
        print(json_output.dumps(json_output.job(job)))
        return 0
    spec = jobspec.from_pb(job.spec, validate=False)
    print(f"job {job.id} ({spec.name}): {job.state}")
    print(f"  command:   {' '.join(spec.entrypoint)}")
    print(f"  slots:     {spec.slots}   priority: {spec.priority}   mode: {spec.distribution_mode}"
          + (f" ({spec.mode_reason})" if spec.mode_reason else ""))
    print(f"  submitted: {_when(job.submitted_at)}   started: {_when(job.started_at)}   ended: {_when(job.ended_at)}")
    if job.state == "QUEUED" or (job.waiting_reason and job.state in json_output.WAITING_STATES):
        print(f"  waiting:   {job.waiting_reason or 'scheduling'}")
    if job.placement:
        print("  placement:")
        for p in job.placement:
            gpus = f", GPUs {_ids(p.gpus)}" if p.gpus else ""
            state = f" [{p.state}]" if p.state and job.state not in TERMINAL else ""
            print(f"    node {p.node_rank}: {p.agent} at {p.address}, {p.slots} slots{gpus}, ports {list(p.ports)}{state}")
    if job.attempt or spec.max_restarts:
        print(f"  runs:      {job.attempt + 1} (restarts {job.restarts} of max_restarts {spec.max_restarts})")
    if job.latest_checkpoint.step >= 0:
        print(f"  checkpoint: step {job.latest_checkpoint.step} at {job.latest_checkpoint.path}")
    if job.latest_metrics:
        shown = ", ".join(f"{m.name}={m.value:.6g} (step {m.step}, rank {m.rank})" for m in job.latest_metrics)
        print(f"  metrics:   {shown}")
    if job.message:
        code = exit_codes.of_job(job.state, job.exit_code)  # what `tfdist launch` exits with for it
        print(f"  outcome:   {job.message}" + (f" (exit code {code})" if code is not None else ""))
    first = root_cause_exit(job)
    if first is not None and first.last_lines:
        print(f"  last lines of rank {first.rank}:")
        for line in first.last_lines:
            print(f"    {line}")
    return 0


def print_agents(agents, as_json: bool) -> int:
    if as_json:
        print(json_output.dumps(json_output.agents(agents)))
        return 0
    rows = [[a.name, a.state, str(a.slots), str(a.free_slots),
             f"GPU {_ids([g.index for g in a.gpus])} (free {_ids(a.free_gpus) or '-'})" if a.gpu else "CPU",
             ", ".join(f"{x.ip}/{x.prefix_len}" for x in a.addresses if not x.ip.startswith("127.")) or "loopback",
             ", ".join(a.jobs) or "-"] for a in agents]
    print(table(["NAME", "STATE", "SLOTS", "FREE", "KIND", "ADDRESSES", "JOBS"], rows))
    return 0


def print_slurm_jobs(jobs, as_json: bool) -> int:
    """The Slurm jobs `tfdist launch --slurm` submitted (cluster/client/slurm_submit.py)."""
    if as_json:
        print(json_output.dumps(json_output.slurm_jobs(jobs)))
        return 0
    rows = [[f"{j.id}", j.name, j.state, j.nodes, j.output,
             j.describe() if j.state == "PENDING" else f"ExitCode={j.exit_code}" if j.ended else ""] for j in jobs]
    print(table(["SLURM JOB", "NAME", "STATE", "NODES", "OUTPUT", "INFO"], rows))
    return 0
