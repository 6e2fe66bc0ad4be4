"""The coordinator's end of the liveness beacons (the format: cluster/shared/beacon.py): one UDP socket
on the gRPC port's number, one thread that takes each agent's beacons as signs of life, and pokes that
tell an agent it has new work.

An agent asks for beacons when it registers and gets a key of its own; it proves it is alive with a
datagram every beacon interval instead of a heartbeat call, and heartbeats only to report and fetch work,
as rarely as the coordinator's heartbeat budget asks. A node silent past `lost_after` (no beacon, no
heartbeat) is lost as before. Until its first beacon arrives an agent is judged by its heartbeats alone
(UDP blocked between them: it simply stays on heartbeats)."""

from __future__ import annotations

import dataclasses
import logging
import socket
import threading
import time
from typing import Callable, Iterable

from cluster.shared import beacon

log = logging.getLogger("tfdist.coordinator")
RECEIVE_TIMEOUT = 0.5  # how often the thread looks whether it must stop


@dataclasses.dataclass
class _Peer:
    key: bytes
    nonce: bytes  # of its registration
    last_counter: int = 0  # of the beacons taken: a replay (or an older datagram) proves nothing
    address: tuple | None = None  # where its last beacon came from (pokes go there)
    pokes: int = 0  # the counter of the pokes sent to it


class BeaconBook:
    """Each agent's registration (key, nonce), counters and address. `secret`: what every key is derived from
    (the same after a restart: beacon.registration_key). Thread-safe; no sockets."""

    def __init__(self, secret: bytes | None = None):
        self._secret = secret or beacon.new_key()
        self._lock = threading.Lock()
        self._peers: dict[str, _Peer] = {}

    def enroll(self, name: str) -> tuple[bytes, bytes]:
        """(key, nonce) of the agent's new registration: from now on its earlier ones prove nothing."""
        nonce = beacon.new_nonce()
        key = beacon.registration_key(self._secret, name, nonce)
        with self._lock:
            self._peers[name] = _Peer(key, nonce)
        return key, nonce

    def without(self, name: str) -> None:
        """The agent registered without beacons: none counts for it until it registers with them."""
        with self._lock:
            self._peers[name] = _Peer(b"", b"")

    def take(self, data: bytes, address: tuple) -> beacon.Datagram | None:
        """The beacon in `data` if it is authentic under the agent's current registration (one made before
        this process started counts until the agent registers again) and newer than any taken before."""
        datagram = beacon.decode(data)
        if datagram is None or datagram.kind != beacon.BEACON:
            return None
        with self._lock:
            peer = self._peers.get(datagram.name)
            if peer is None:  # registered with an earlier run of the coordinator: its key follows from the nonce
                candidate = _Peer(beacon.registration_key(self._secret, datagram.name, datagram.nonce), datagram.nonce)
            elif not peer.key or peer.nonce != datagram.nonce or datagram.counter <= peer.last_counter:
                return None
            else:
                candidate = peer
            if not beacon.authentic(datagram, candidate.key):
                return None
            self._peers[datagram.name] = candidate
            candidate.last_counter = datagram.counter
            candidate.address = address
        return datagram

    def poke(self, name: str, version: int) -> tuple[bytes, tuple] | None:
        """(the poke's bytes, where to send them), or None for an agent that never beaconed."""
        with self._lock:
            peer = self._peers.get(name)
            if peer is None or peer.address is None:
                return None
            peer.pokes += 1
            return beacon.encode(beacon.POKE, name, peer.pokes, version, peer.key, peer.nonce), peer.address


def _bind(host: str, port: int) -> socket.socket | None:
    """A UDP socket on `host`:`port`, else on any free port of `host`; None if `host` has none."""
    for candidate in (port, 0):
        try:
            family, kind, proto, _, address = socket.getaddrinfo(host or None, candidate, type=socket.SOCK_DGRAM,
                                                                 flags=socket.AI_PASSIVE)[0]
            sock = socket.socket(family, kind, proto)
        except OSError:
            return None
        try:
            sock.bind(address)
            return sock
        except OSError:
            sock.close()
    return None


class BeaconService:
    """`seen(agent, now)`: the agent is alive now; False if the coordinator does not count it as alive (lost,
    unknown: poke it, so that its next heartbeat learns it must register again). `version(agent)`: its
    work's version now."""

    def __init__(self, host: str, port: int, seen: Callable[[str, float], bool], version: Callable[[str], int],
                 clock: Callable[[], float] = time.time, secret: bytes | None = None):
        self.book = BeaconBook(secret)
        self._seen, self._version, self._clock = seen, version, clock
        self._sock = _bind(host.strip("[]"), port)
        self.port = self._sock.getsockname()[1] if self._sock else 0  # 0: no beacons (agents heartbeat)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._receive_loop, name="beacons", daemon=True)
        self.received = 0  # beacons taken (for the metrics and the benchmark)

    def start(self) -> "BeaconService":
        if self._sock is None:
            log.warning("no UDP port for liveness beacons: agents prove they are alive with heartbeats")
        else:
            self._sock.settimeout(RECEIVE_TIMEOUT)
            self._thread.start()
            log.info("liveness beacons on UDP port %d", self.port)
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(RECEIVE_TIMEOUT * 4)
        if self._sock is not None:
            self._sock.close()

    def poke(self, names: Iterable[str]) -> None:
        """Tells each agent that beaconed that its work moved (the agent board's listener)."""
        for name in names:
            self._send(self.book.poke(name, self._version(name)))

    def _send(self, poke: tuple[bytes, tuple] | None) -> None:
        if poke is None or self._sock is None:
            return
        try:
            self._sock.sendto(*poke)
        except OSError as e:  # unreachable now: the next beacon is poked again
            log.debug("poke to %s failed: %s", poke[1], e)

    def _receive_loop(self) -> None:
        while not self._stop.is_set():
            try:
                data, address = self._sock.recvfrom(beacon.MAX_DATAGRAM + 1)
            except socket.timeout:
                continue
            except OSError as e:
                if self._stop.is_set():
                    return
                log.debug("beacon socket: %s", e)
                continue
            try:
                self._take(data, address)
            except Exception:  # keep the thread: the next beacon is taken
                log.exception("a beacon from %s failed", address)

    def _take(self, data: bytes, address: tuple) -> None:
        datagram = self.book.take(data, address)
        if datagram is None:
            return
        self.received += 1
        alive = self._seen(datagram.name, self._clock())
        version = self._version(datagram.name)
        if not alive or version > datagram.version:  # behind (a poke was lost), or must register again
            self._send(self.book.poke(datagram.name, max(version, datagram.version + (not alive))))
