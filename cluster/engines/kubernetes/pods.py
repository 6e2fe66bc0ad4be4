"""The runs a restarted coordinator finds among its namespace's tfdist pods (kept current by a watch:
watched.py), read from the labels and annotations manifests.py puts on each pod, and adopted."""

from __future__ import annotations

import logging
import time
from typing import Any

from cluster.engines.kubernetes import manifests, run_objects
from cluster.engines.kubernetes.api import KubernetesError
from cluster.engines.kubernetes.gangs import Gang, pod_phase

log = logging.getLogger("tfdist.kubernetes")
Json = dict[str, Any]


def runs_of(pods: list[Json]) -> dict[tuple[str, int], dict[str, tuple[int, str, bool]]]:
    """(job id, attempt) -> node -> (its rank, its pod's name, Running): the runs a restarted coordinator finds
    (from the labels and annotations manifests.py puts on each pod); pods not made by it are left out."""
    runs: dict[tuple[str, int], dict[str, tuple[int, str, bool]]] = {}
    for pod in pods:
        meta = pod["metadata"]
        annotations, labels = meta.get("annotations") or {}, meta.get("labels") or {}
        job_id, node = annotations.get(manifests.JOB_ID_ANNOTATION), annotations.get(manifests.NODE_ANNOTATION)
        attempt, rank = labels.get(manifests.ATTEMPT_LABEL, ""), labels.get(manifests.RANK_LABEL, "")
        if job_id and node and attempt.isdigit() and rank.isdigit():
            runs.setdefault((job_id, int(attempt)), {})[node] = (int(rank), meta["name"], pod_phase(pod) == "Running")
    return runs


def adopted(api: Any, namespace: str, pods: list[Json]) -> dict[tuple[str, int], Gang]:
    """The runs of `pods` as gangs the engine watches again, each given the NetworkPolicy an earlier coordinator
    may not have made (without it the namespace's default deny cuts its pods off from each other)."""
    found: dict[tuple[str, int], Gang] = {}
    for (job_id, attempt), nodes in runs_of(pods).items():
        try:
            run_objects.ensure_policy(api, namespace, job_id, attempt)
        except KubernetesError as e:  # its pods go on as they were; said once
            log.warning("kubernetes: job %s run %d: no NetworkPolicy for its pods: %s", job_id, attempt, e)
        gang = found[(job_id, attempt)] = Gang(job_id, attempt, {}, {}, time.monotonic())
        for node, (rank, name, running) in nodes.items():
            gang.nodes[node], gang.pod_names[node] = rank, name
            if running:
                gang.seen_running.add(node)
    if found:
        log.info("kubernetes: re-adopted the pods of %s", ", ".join(f"{j} (run {a})" for j, a in found))
    return found
