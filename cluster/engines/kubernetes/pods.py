"""The namespace's tfdist pods as last seen: listed, then kept current by a watch (api.watch_pods) in a thread
of its own, listed and watched again after any error. The engine reads them without calling the API, and is
woken at each change."""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable

from cluster.engines.kubernetes import manifests
from cluster.engines.kubernetes.gangs import pod_phase

log = logging.getLogger("tfdist.kubernetes")
Json = dict[str, Any]
RETRY = 2.0  # seconds before listing and watching again after an error


class PodWatch:
    def __init__(self, api, stop: threading.Event, changed: Callable[[], None]):
        self.api, self._stop, self._changed = api, stop, changed
        self._pods: dict[str, Json] = {}
        self._lock = threading.Lock()
        self.listed = threading.Event()  # the first listing arrived
        self.error = ""  # the last error met (for the start's message)

    def run(self) -> None:
        while not self._stop.is_set():
            try:
                self.api.watch_pods(self._seen, self._listed, self._stop)
            except Exception as e:  # noqa: BLE001 - the API restarting, a dropped watch: list and watch again
                self.error = str(e)
                log.warning("kubernetes: watching pods: %s; again in %gs", e, RETRY)
                self._stop.wait(RETRY)

    def get(self, name: str) -> Json | None:
        with self._lock:
            return self._pods.get(name)

    def all(self) -> list[Json]:
        with self._lock:
            return list(self._pods.values())

    def _listed(self, pods: list[Json]) -> None:
        with self._lock:
            self._pods = {p["metadata"]["name"]: p for p in pods}
        self.listed.set()
        self._changed()

    def _seen(self, kind: str, pod: Json) -> None:
        with self._lock:
            if kind == "DELETED":
                self._pods.pop(pod["metadata"]["name"], None)
            else:
                self._pods[pod["metadata"]["name"]] = pod
        self._changed()


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
