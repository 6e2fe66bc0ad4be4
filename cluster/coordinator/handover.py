"""Gangs an engine places itself (Engine.places_gangs: a gang API, Kueue's admission, Ray's placement groups):
the job side hands each queued run over once, as a GangRequest, instead of choosing its nodes; the engine
says why it waits (`gang_waiting`, shown as the job's waiting reason) and later where it landed
(`gang_placed`), which the job side checks and then places as if its own scheduler had chosen those nodes.
Without such an engine none of this runs: tfdist's whole-node scheduler places every job."""

from __future__ import annotations

from typing import Callable, Iterable, Mapping, Sequence

from cluster.coordinator.engine import GangRequest
from cluster.coordinator.scheduler import PendingJob
from cluster.shared.model import Job, JobState


class Handover:
    def __init__(self, engine: str, place: Callable[[GangRequest], None]):
        self.engine, self._place = engine, place
        self.handed: dict[str, tuple[int, str]] = {}  # job -> (its run handed over, the engine's latest word)

    def round(self, queued: Iterable[PendingJob], skip: Iterable[str], job: Callable[[str], Job | None]) -> dict[str, str]:
        """Hands over each queued run not handed yet (`skip`: runs whose earlier run's nodes still hold them);
        returns every queued job's waiting reason."""
        waiting: dict[str, str] = {}
        held = set(skip)
        for pending in queued:
            stored = job(pending.id)
            if stored is None:
                continue
            if pending.id in held:
                waiting[pending.id] = "waiting for its earlier run's nodes to let it go"
                continue
            attempt = stored.attempt
            if self.handed.get(pending.id, (None, ""))[0] != attempt:
                self.handed[pending.id] = (attempt, "")
                self._place(GangRequest(pending.id, attempt, pending.slots, pending.priority, pending.nodes))
            why = self.handed[pending.id][1]
            waiting[pending.id] = f"waiting for the {self.engine} engine to place it" + (f": {why}" if why else "")
        return waiting

    def waiting(self, job_id: str, attempt: int, why: str) -> bool:
        """The engine's word on a run it was handed; False if that run is not waiting for it."""
        if self.handed.get(job_id, (None, ""))[0] != attempt:
            return False
        self.handed[job_id] = (attempt, why)
        return True

    def transition(self, job: Job, state: JobState) -> None:
        """A job handed over left the queue (placed, canceled): it is no longer the engine's to place."""
        if state != JobState.QUEUED:
            self.handed.pop(job.id, None)


def placement_problem(job: Job | None, attempt: int, handed: Mapping[str, tuple[int, str]],
                      nodes: Sequence[tuple[str, int]], free: Mapping[str, int]) -> str:
    """Why an engine's placement of a run cannot be taken ("" when it can): the run must be the one handed
    over and still queued; each node offered, alive, named once, with the slots free; the slots the job's."""
    if job is None or job.state != JobState.QUEUED or job.attempt != attempt or \
            handed.get(job.id, (None, ""))[0] != attempt:
        return f"job {job.id if job else '?'} (run {attempt}) is not waiting for the engine's placement"
    names = [name for name, _ in nodes]
    if not nodes or len(set(names)) != len(names):
        return f"a placement names each node once, at least one: got {names}"
    for name, slots in nodes:
        if name not in free:
            return f"node {name} is not offered (or was lost)"
        if slots < 1 or slots > free[name]:
            return f"node {name} has {free[name]} free slot(s), not {slots}"
    if sum(slots for _, slots in nodes) != job.spec.slots:
        return f"the placement has {sum(s for _, s in nodes)} slot(s); job {job.id} needs {job.spec.slots}"
    return ""
