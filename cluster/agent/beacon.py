"""The agent's end of the liveness beacons (the format: cluster/shared/beacon.py): a thread that sends a
beacon every beacon interval from one UDP socket and listens on it for the coordinator's pokes, each of
which wakes the heartbeat loop (new work for this node: a job placed here, its peers ready, a stop).

Set up by each registration (`configure`); a coordinator that offers none (older, or no UDP port) leaves
it idle and the agent proves it is alive with heartbeats, as before."""

from __future__ import annotations

import dataclasses
import logging
import socket
import threading
import time

from cluster.shared import beacon

log = logging.getLogger("tfdist.agent")


@dataclasses.dataclass(frozen=True)
class BeaconPlan:
    host: str  # the coordinator's
    port: int
    key: bytes
    nonce: bytes
    interval: float


class BeaconSender:
    def __init__(self, name: str, wake: threading.Event, stop: threading.Event):
        self.name, self._wake, self._stop = name, wake, stop
        self._changed = threading.Condition()
        self._plan: BeaconPlan | None = None
        self.version = 0  # of the work last received (heartbeat answers set it)
        self._counter = 0  # of this registration's beacons: it goes on when the socket is made again
        self._last_poke = 0  # the counter of the last poke taken (the coordinator's are clock-based)
        self.pokes = 0  # pokes taken

    def configure(self, plan: BeaconPlan | None) -> None:
        """A new registration's beacons (None: the coordinator offers none)."""
        with self._changed:
            self._plan = plan
            self.version = self._counter = self._last_poke = 0
            self._changed.notify_all()

    def nonce(self) -> bytes:
        """The registration it beacons under (b"": none), for its heartbeats to name."""
        plan = self._plan
        return plan.nonce if plan is not None else b""

    def fetched(self, version: int, port: int) -> None:
        """A heartbeat answered: its work's version (later beacons carry it), and where beacons go now (a
        restarted coordinator may listen on another port; 0: unchanged)."""
        self.version = version
        with self._changed:
            plan = self._plan
            if plan is not None and port and port != plan.port:
                self._plan = dataclasses.replace(plan, port=port)  # same registration: the counter goes on
                self._changed.notify_all()

    def active(self) -> bool:
        """Whether this registration beacons (then pokes, not a long poll, bring news of work)."""
        return self._plan is not None

    def wake(self) -> None:
        """Returns the thread's wait at once (the agent stops)."""
        with self._changed:
            self._changed.notify_all()

    def run(self) -> None:
        while not self._stop.is_set():
            with self._changed:
                if self._plan is None:
                    self._changed.wait(1.0)
                    continue
                plan = self._plan
            try:
                self._beacon_with(plan)
            except OSError as e:  # no route, name not resolved: heartbeats still say we are alive
                log.debug("beacons to %s:%d: %s", plan.host, plan.port, e)
                self._stop.wait(plan.interval)

    def _beacon_with(self, plan: BeaconPlan) -> None:
        """Beacons and takes pokes under one plan, until another registration replaces it."""
        family, kind, proto, _, address = socket.getaddrinfo(plan.host, plan.port, type=socket.SOCK_DGRAM)[0]
        with socket.socket(family, kind, proto) as sock:
            # Not connected: a multi-homed coordinator may answer from another of its addresses. A poke
            # is taken by its tag, not by where it comes from.
            next_beacon = time.monotonic()
            while not self._stop.is_set() and self._plan is plan:
                now = time.monotonic()
                if now >= next_beacon:
                    self._counter += 1
                    try:
                        sock.sendto(beacon.encode(beacon.BEACON, self.name, self._counter, self.version, plan.key,
                                                  plan.nonce), address)
                    except OSError as e:  # e.g. refused: nothing listens there now; the next one may reach it
                        log.debug("beacon not sent: %s", e)
                    next_beacon = now + plan.interval
                sock.settimeout(max(0.01, min(next_beacon - now, 1.0)))
                try:
                    data = sock.recv(beacon.MAX_DATAGRAM + 1)
                except (socket.timeout, ConnectionRefusedError):  # refused: an ICMP error for a beacon
                    continue
                poke = beacon.decode(data)
                if poke is None or poke.kind != beacon.POKE or poke.name != self.name or poke.counter <= self._last_poke \
                        or not beacon.authentic(poke, plan.key):
                    continue
                self._last_poke = poke.counter  # any fresh poke: a restarted coordinator's versions may run lower
                self.pokes += 1
                self._wake.set()
