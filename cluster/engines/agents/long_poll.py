"""The WaitForWork long poll's waits: an agent without beacons (`--no-beacons`, UDP blocked, a Kubernetes
pod's) holds one call, answered as soon as its node's work version moves (the job side bumps it once per
event that changes the node's work: EngineHost.work_version, on_work_changed), so that a start takes round
trips rather than heartbeat intervals. Agents on beacons hold none: pokes wake them."""

from __future__ import annotations

import threading

from cluster.coordinator.engine import EngineHost


class LongPoll:
    def __init__(self, host: EngineHost):
        self.host = host
        self._cond = threading.Condition()
        self._closed = False
        host.on_work_changed(self._changed)

    def _changed(self, nodes) -> None:
        with self._cond:
            self._cond.notify_all()

    def wait(self, name: str, seen: int, timeout: float) -> int:
        """The node's work version once it differs from `seen`, or after `timeout` (at once when closed)."""
        with self._cond:
            self._cond.wait_for(lambda: self._closed or self.host.work_version(name) != seen, timeout)
        return self.host.work_version(name)

    def close(self) -> None:
        """Every held call answers now (the coordinator is stopping)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
