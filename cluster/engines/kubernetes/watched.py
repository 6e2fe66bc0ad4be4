"""One kind of object the Kubernetes engine reads, as last seen: listed once, then kept current by a watch
(api.watch, from the list's resource version) in a thread of its own, listed and watched again only after an
error (the API server restarting, a version it no longer has). Each object is kept as `slim` makes it (only
what the engine reads: a cluster's 10,000 pods are small in memory), and the engine is woken only when what it
keeps changed: a node's heartbeat or another workload's status changes nothing it reads, and wakes nothing."""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable

log = logging.getLogger("tfdist.kubernetes")
Json = dict[str, Any]
RETRY = 2.0  # seconds before listing and watching again after an error
Start = Callable[[Callable[[str, Json], None], Callable[[list[Json]], None], threading.Event], None]


def by_name(obj: Json) -> str:
    return obj["metadata"]["name"]


def by_namespace_and_name(obj: Json) -> str:
    meta = obj["metadata"]
    return f"{meta.get('namespace', '')}/{meta['name']}"


class Watched:
    def __init__(self, what: str, stop: threading.Event, changed: Callable[[], None],
                 slim: Callable[[Json], Json | None] = lambda obj: obj, key: Callable[[Json], str] = by_name):
        """`what` names them in messages; `slim(obj)`: what is kept of an object (None: nothing, as if deleted);
        `changed()`: called after each change of what is kept. `start` (set before `run`): the api's watch."""
        self.what, self._stop, self._changed, self._slim, self._key = what, stop, changed, slim, key
        self.start: Start | None = None
        self._objects: dict[str, Json] = {}
        self._lock = threading.Lock()
        self.listed = threading.Event()  # the first listing arrived
        self.version = 0  # bumped at each change of what is kept
        self.error = ""  # the last error met (for the start's message)

    def run(self) -> None:
        while not self._stop.is_set():
            try:
                self.start(self._seen, self._listed, self._stop)  # type: ignore[misc]
            except Exception as e:  # noqa: BLE001 - the API restarting, a dropped watch, 410 Gone: list and watch again
                self.error = str(e)
                if getattr(getattr(e, "status", None), "code", 0) == 410:  # the version is gone: routine
                    log.info("kubernetes: watching %s: its version expired; listing again", self.what)
                    continue
                log.warning("kubernetes: watching %s: %s; listing again in %gs", self.what, e, RETRY)
                self._stop.wait(RETRY)

    def get(self, name: str) -> Json | None:
        with self._lock:
            return self._objects.get(name)

    def all(self) -> list[Json]:
        with self._lock:
            return list(self._objects.values())

    def _listed(self, objects: list[Json]) -> None:
        kept = {}
        for obj in objects:
            slim = self._slim(obj)
            if slim is not None:
                kept[self._key(obj)] = slim
        with self._lock:
            same = kept == self._objects
            self._objects = kept
            if not same:
                self.version += 1
        self.listed.set()
        if not same:
            self._changed()

    def _seen(self, change: str, obj: Json) -> None:
        key = self._key(obj)
        slim = None if change == "DELETED" else self._slim(obj)
        with self._lock:
            before = self._objects.get(key)
            if slim is None:
                self._objects.pop(key, None)
            else:
                self._objects[key] = slim
            if before == slim:
                return
            self.version += 1
        self._changed()
