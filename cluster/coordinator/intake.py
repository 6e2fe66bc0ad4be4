"""One submission stored and scheduled, inside the core's event (CoordinatorCore.submit_batch): a retried
submission (a known submission id) answers its job, an inadmissible one is refused before anything is
written, an admitted one is stored QUEUED, joins the in-memory queue and is scheduled at once."""

from __future__ import annotations

import dataclasses
import secrets

from cluster.coordinator import admission
from cluster.coordinator.lifecycle import JobLifecycle
from cluster.coordinator.metrics import Telemetry
from cluster.coordinator.scheduler import PendingJob
from cluster.coordinator.store import StateStore
from cluster.coordinator.values import BadRequest, Settings
from cluster.shared import diagnose_variant
from cluster.shared.model import JobSpec, JobState


class Intake:
    def __init__(self, store: StateStore, lifecycle: JobLifecycle, settings: Settings, telemetry: Telemetry):
        self.store, self.lifecycle, self.settings, self.telemetry = store, lifecycle, settings, telemetry
        self.admissions = admission.Admissions()  # its answers, per size and mode, while the node sizes stay

    def _as_variant_of_original(self, spec: JobSpec, owner: str) -> JobSpec:
        """A diagnose variant of an existing job (config.diagnose.of): its client saw the job with its environment's
        values hidden, so the variant is made here from the job as stored, taking from the submission only what
        a variant changes (diagnose_variant.variant_of): its command cannot differ, and no value is read back
        by another command. The owner's alone; anyone else's is refused."""
        of = spec.config.diagnose.get("of") if spec.config.diagnose else None
        if not of:
            return spec
        original = self.store.job(of)
        if original is None or original.owner != owner:
            raise BadRequest(f"job {of}: not a job of yours to diagnose (its environment stays with its owner); "
                             "diagnose it from its config with tfdist diagnose --config FILE")
        return dataclasses.replace(spec, config=diagnose_variant.variant_of(original.spec.config, spec.config),
                                   working_dir=original.spec.working_dir)

    def submit(self, spec: JobSpec, now: float, owner: str, admit: bool = True) -> tuple[str, str]:
        """(job id, state after scheduling); BadRequest when the cluster could never hold the job. `admit`
        False: it was admitted already (an experiment's trial): it queues whatever the nodes are now."""
        known = self.store.job_by_submission(spec.submission_id) if spec.submission_id else None
        if known is not None:
            return known.id, known.state.value
        spec = self._as_variant_of_original(spec, owner)
        refusal = self.admissions.refusal(spec, self.lifecycle.sizes()) if admit else ""
        if refusal:
            raise BadRequest(refusal)
        seq = max(self.store.next_job_seq(), self.settings.first_job_seq)
        last = self.settings.last_job_seq
        if last and seq > last:
            raise BadRequest(f"this local run's job numbers {self.settings.first_job_seq}..{last} are all taken; "
                             "launch again for another job")
        job_id = f"{seq}-{secrets.token_hex(2)}"
        self.store.insert_job(job_id, seq, spec, now, f"submitted: {spec.slots} slots", owner=owner)
        self.telemetry.submitted.labels(spec.distribution_mode).inc()
        queued = PendingJob(job_id, spec.slots, spec.priority, seq, diagnose_variant.pinned_nodes(spec.config.diagnose))
        self.lifecycle.queue.add(queued)
        self.lifecycle.schedule(now, submitted=queued)
        return job_id, JobState.QUEUED.value if job_id in self.lifecycle.queue else self.store.job(job_id).state.value
