"""The dashboard's diagnose view: the runs of `tfdist diagnose` (docs/diagnose.md), each the jobs whose config
carries the same `diagnose.run`, with the verdict the CLI gives and the numbers the page draws.

Nothing of the verdict is decided here: each variant's timing is rebuilt from its job's `tfdist.diagnose.*`
metric rows by the runner's own `timings_from_rows`, and the verdict and its JSON are cluster/shared/
diagnosis.py's `diagnose` and `to_json` (`tfdist diagnose --json`'s document, schema tfdist.diagnose/1), with
a few keys for the page beside them: the run, its name, owner and state, whether it is `final`, each variant's
job state, and `chart` (step time per variant; the ranks' own medians without communication, the straggler
marked).

A run still going shows what it has measured so far: a variant whose job is active and whose ranks have not
all sent their timing is `pending` (its `reported` ranks counted), and once the baseline is measured the
verdict over the variants measured so far is given; it is `final` once no variant's job is active.

The jobs looked at are the active ones and the newest WINDOW finished ones (summaries, one ListJobs); each
variant's job and metrics are read with the user's credential through the API's shared reads, and kept once
its job has ended and SETTLED seconds passed (its rows no longer change).
"""

from __future__ import annotations

import dataclasses
import re
import time
from typing import Any, Callable, Mapping, Sequence
from urllib.parse import unquote

from cluster.client.dashboard.api import Answer, Api, can, failed
from cluster.client.diagnose_run import expected_ranks, timings_from_rows, why_from_lines
from cluster.client.job_selection import ACTIVE, FINISHED, number
from cluster.client.json_output import when
from cluster.shared import diagnosis, jobspec
from cluster.shared.diagnosis import NO_COMMUNICATION, VariantRun
from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb
from tfdist import diagnose as worker_side
from tfdist.errors import TfdistError, UserError

WINDOW = 100  # finished jobs looked through for diagnose variants (a run is 1 to 4 of them)
SETTLED = 10.0  # seconds after a job ended from which its rows are kept, not read again
KEPT = 512  # settled variants kept at most (then forgotten all at once)
SCHEMA = "tfdist.diagnose/1"
PATH = re.compile(r"^/api/diagnoses(?:/([^/]{1,200}))?$")
SUFFIX = re.compile(r" \(diagnose: [a-z_]+\)$")  # what the runner adds to a variant's job name


@dataclasses.dataclass(frozen=True)
class Read:
    """One variant's job as read: the full message (placement), its diagnose rows, each rank's line on why
    its variant was not applied, or why nothing could be read (`problem`)."""

    job: pb.Job
    rows: tuple = ()
    why: Mapping[int, str] = dataclasses.field(default_factory=dict)
    problem: str = ""


def variant_of(job: pb.Job) -> dict[str, Any]:
    """The job's `diagnose` section ({} for an ordinary job)."""
    section = job.spec.config.diagnose
    return jobspec.map_from_pb(section) if section.fields else {}


def grouped(jobs: Sequence[pb.Job]) -> dict[str, list[pb.Job]]:
    """run -> its variants' jobs in VARIANTS order (a variant's newest job, a job listed twice once). A run is its
    first job's owner's: another user's job naming the same run later is not taken into it."""
    by_run: dict[str, dict[str, pb.Job]] = {}
    owner_of: dict[str, str] = {}
    for job in sorted({j.id: j for j in jobs}.values(), key=number):
        section = variant_of(job)
        if section.get("run") and section.get("variant") in diagnosis.VARIANTS:
            run = str(section["run"])
            if owner_of.setdefault(run, job.owner) != job.owner:
                continue
            by_run.setdefault(run, {})[section["variant"]] = job
    return {run: [found[v] for v in diagnosis.VARIANTS if v in found] for run, found in by_run.items()}


def variant_run(read: Read) -> tuple[VariantRun, int | None]:
    """The variant as the runner would have returned it, and None; or, while its job is active and not every
    rank sent its timing, an unmeasured run and how many ranks have."""
    job = read.job
    name = variant_of(job)["variant"]
    nodes = tuple(p.agent for p in sorted(job.placement, key=lambda p: p.node_rank))
    if read.problem:
        return VariantRun(name, job.id, nodes, skipped=read.problem), None
    sizes = [m.value for m in read.rows if m.name == worker_side.RECORD + "size"]
    timings = timings_from_rows(read.rows, {p.node_rank: p.agent for p in job.placement}, read.why)
    if sizes and len(timings) >= expected_ranks(job.spec.config.distribution_mode, int(sizes[0])):
        return VariantRun(name, job.id, nodes, int(sizes[0]), tuple(timings)), None
    if job.state in ACTIVE:
        return VariantRun(name, job.id, nodes), len(timings)
    missing = "any rank sent its" if not timings else \
        f"ranks other than {', '.join(str(t.rank) for t in timings)} sent their"
    return VariantRun(name, job.id, nodes, skipped=f"job {job.id} ended {job.state} before {missing} timing"
                      + (f": {job.message}" if job.message else "")), None


def _unmeasured(mode: str, runs: Sequence[VariantRun], summary: str) -> dict[str, Any]:
    """to_json's keys for a run whose baseline is not measured (yet): no verdict."""
    return {"schema": SCHEMA, "mode": mode, "nodes": [], "ranks": 0,
            "variants": [{"name": r.name, "job": r.job, "nodes": list(r.nodes), "ranks": r.ranks, "steps": 0,
                          "step_time_s": None, "samples_per_s": None, "rank_step_time_s": {}, "skipped": r.skipped}
                         for r in runs],
            "shares": {}, "scaling_efficiency": None, "straggler": None, "bandwidth": None, "verdict": None,
            "fixes": [], "summary": summary}


def run_document(run: str, reads: Sequence[Read]) -> dict[str, Any]:
    """One run's document: `tfdist diagnose --json`'s, over the variants measured so far, and the page's keys."""
    made = [variant_run(r) for r in reads]
    runs = [m[0] for m in made]
    jobs = [r.job for r in reads]
    mode = jobs[0].spec.config.distribution_mode
    active = any(j.state in ACTIVE for j in jobs)
    base = next((i for i, r in enumerate(runs) if r.name == diagnosis.BASELINE), None)
    found = None
    if base is None:
        document = _unmeasured(mode, runs, f"the baseline's job is not among the active jobs and the newest {WINDOW} "
                                           "finished ones")
    elif made[base][1] is not None:
        document = _unmeasured(mode, runs, f"measuring the baseline: job {jobs[base].id} {_state(jobs[base])}, "
                                           f"{made[base][1]} rank(s) sent their timing so far")
    else:
        try:
            found = diagnosis.diagnose(mode, runs)
            document = diagnosis.to_json(found)
        except UserError as e:  # the baseline was not measured
            document = _unmeasured(mode, runs, str(e))
    for entry, (_, reported), job in zip(document["variants"], made, jobs):
        entry.update(state=job.state, pending=reported is not None, reported=reported)
    first = jobs[0]
    document.update(
        run=run, name=SUFFIX.sub("", first.spec.config.name), owner=first.owner, state="RUNNING" if active else "ENDED",
        final=not active and found is not None, submitted_at=when(first.submitted_at),
        ended_at=None if active else when(max(j.ended_at for j in jobs)), chart=chart(document, runs))
    return document


def _state(job: pb.Job) -> str:
    return job.state + (f" ({job.waiting_reason})" if job.waiting_reason else "")


def chart(document: Mapping[str, Any], runs: Sequence[VariantRun]) -> dict[str, Any]:
    """What the page draws: a bar per variant (its step time; none while pending or skipped, with why), and a
    bar per rank of no_communication, each rank at its own pace there (the straggler marked)."""
    bars = [{"variant": e["name"], "job": e["job"], "seconds": e["step_time_s"],
             "note": f"{e['state'].lower()}: {e['reported']} rank(s) timed so far" if e["pending"] else e["skipped"]}
            for e in document["variants"]]
    apart = next((r for r in runs if r.name == NO_COMMUNICATION and r.measured), None)
    slow = (document.get("straggler") or {}).get("rank")
    ranks = [{"rank": t.rank, "node": t.node, "seconds": t.median, "straggler": t.rank == slow}
             for t in sorted(apart.timings, key=lambda t: t.rank)] if apart else []
    return {"step_time": bars, "rank_variant": NO_COMMUNICATION, "rank_step_time": ranks}


class Diagnoses:
    """The diagnose answers for one dashboard: reads through its Api (the user's credential, its shared reads)."""

    def __init__(self, api: Api, clock: Callable[[], float] = time.time):
        self.api, self.clock = api, clock
        self._settled: dict[str, Read] = {}

    def answer(self, path: str) -> Answer:
        """GET /api/diagnoses (every run, newest first) or /api/diagnoses/RUN (one)."""
        match = PATH.match(path)
        if match is None:
            return Answer(404, {"error": f"no such API: {path[:100]}"})
        try:
            runs = grouped(self._jobs())
        except TfdistError as e:
            return failed(e)
        if match.group(1) is None:
            ordered = sorted(runs.items(), key=lambda item: -max(number(j) for j in item[1]))
            return Answer(200, {"diagnoses": [self._document(run, jobs) for run, jobs in ordered],
                                "window": WINDOW, "now": self.clock()})
        run = unquote(match.group(1))
        if run not in runs:
            return Answer(404, {"error": f"no diagnose run {run[:64]!r} among the active jobs and the newest "
                                         f"{WINDOW} finished ones"})
        return Answer(200, {**self._document(run, runs[run]), "now": self.clock()})

    def _jobs(self) -> list[pb.Job]:
        client = self.api.client
        active, finished = self.api.shared.get("diagnose-jobs", lambda: (
            client.jobs(ACTIVE, 0, True), client.jobs(FINISHED, WINDOW, True)))
        return [*active, *finished]

    def _document(self, run: str, jobs: Sequence[pb.Job]) -> dict[str, Any]:
        return run_document(run, [self._read(job) for job in jobs])

    def _read(self, summary: pb.Job) -> Read:
        kept = self._settled.get(summary.id)
        if kept is not None:
            return kept
        rights = can(self.api.principal, summary.owner)
        if not rights.metrics:
            return Read(summary, problem=f"job {summary.id} belongs to user {summary.owner}: only its owner or an "
                                         "admin reads its metrics")
        shared, client = self.api.shared, self.api.client
        try:
            job, read_at = shared.get_when(("job", summary.id), lambda: client.job(summary.id))
            # An ended job's rows read after it was seen ended: all of them (they are stored before the exit that
            # ends it), so its final verdict is the CLI's, not one from rows a shared read kept from before.
            history = shared.get(("metrics", summary.id), lambda: client.metrics(summary.id),
                                 since=read_at if job.state in FINISHED else None)
        except TfdistError as e:
            return Read(summary, problem=str(e))
        rows = tuple(m for m in history.metrics if m.name.startswith(worker_side.RECORD))
        why: dict[int, str] = {}
        if rights.logs and any(m.name == worker_side.RECORD + "applied" and not m.value for m in rows):
            try:
                why = why_from_lines(client.logs(job.id, 0, -1, 10000).lines)
            except TfdistError:  # the reason is a courtesy; the verdict stands without it
                pass
        read = Read(job, rows, why)
        if job.state in FINISHED and job.ended_at and self.clock() - job.ended_at >= SETTLED:
            if len(self._settled) >= KEPT:
                self._settled.clear()
            self._settled[job.id] = read
        return read
