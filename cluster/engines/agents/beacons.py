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
import os
import select
import socket
import threading
import time
from typing import Callable, Iterable

from cluster.shared import beacon

log = logging.getLogger("tfdist.coordinator")
RECEIVE_TIMEOUT = 0.5  # how often the thread looks whether it must stop
# Beacons are taken in batches: at 10,000 agents (6,700 a second) one wake-up, and one hand-over of
# Python's GIL, per datagram took the lock-holding thread's turn thousands of times a second.
BATCH_EVERY = 0.005  # seconds
MOST_AT_ONCE = 4096  # datagrams a batch takes before it looks whether to stop
RECEIVE_BUFFER = 4 << 20  # bytes (the kernel caps it at net.core.rmem_max)
# A node poked and not yet heard fetching is poked again only this many seconds later: its heartbeat
# fetches the newest work anyway (a submit and its cancel bring one heartbeat, not two), and a beacon
# sent before its heartbeat returned does not poke it again. A poke lost on the way: the next beacon.
REPOKE_AFTER = 1.0


@dataclasses.dataclass
class _Peer:
    key: bytes  # b"": the agent registered without beacons
    nonce: bytes  # of its registration
    confirmed: bool = True  # the nonce is the one it registered or heartbeat under (both over TLS)
    last_counter: int = 0  # of the beacons taken: a replay (or an older datagram) proves nothing
    address: tuple | None = None  # where its last beacon came from (pokes go there)
    pokes: int = 0  # the counter of the pokes sent to it (clock-based: above any an earlier run sent)
    poked_at: float | None = None  # (monotonic) when the poke it has not fetched after went; None: none

    def next_poke(self) -> int:
        self.pokes = max(self.pokes + 1, time.time_ns() // 1000)
        return self.pokes


@dataclasses.dataclass(frozen=True)
class Taken:
    datagram: beacon.Datagram
    counts: bool  # False: a registration not confirmed since this coordinator started (poke it to heartbeat)


class BeaconBook:
    """Each agent's registration (key, nonce), counters and address. `secret`: what every key is derived from
    (the same after a restart: beacon.registration_key). Thread-safe; no sockets.

    After a restart the book is empty: a beacon under a registration made before is authentic (its key
    follows from the nonce) but might be a replay of one captured long ago, so it does not count as a sign
    of life. It gets a poke back, and the agent's heartbeat, over TLS, names the nonce it beacons under
    (`confirm`): from then on only that registration's beacons count, each counter once."""

    def __init__(self, secret: bytes | None = None, clock: Callable[[], float] = time.monotonic):
        self._secret, self._clock = secret or beacon.new_key(), clock
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

    def confirm(self, name: str, nonce: bytes) -> None:
        """`name`'s heartbeat says it beacons under `nonce` (a registration made before this coordinator
        started, or this one's): only that registration's beacons count from now on."""
        with self._lock:
            peer = self._peers.get(name)
            if peer is not None and peer.confirmed and peer.nonce == nonce:
                return
            same = peer if peer is not None and peer.nonce == nonce else None
            self._peers[name] = _Peer(beacon.registration_key(self._secret, name, nonce), nonce,
                                      last_counter=same.last_counter if same else 0,
                                      address=same.address if same else None, pokes=peer.pokes if peer else 0,
                                      poked_at=same.poked_at if same else None)

    def take(self, data: bytes, address: tuple, known: Callable[[str], bool] = lambda name: True) -> Taken | None:
        """The beacon in `data` if it is authentic and newer than any taken under its registration (a poke
        then goes back where it came from, under its key); None for anything else (no state is kept for
        it). `known`: names worth a key derivation (an unknown name costs one dictionary lookup)."""
        datagram = beacon.decode(data)
        if datagram is None or datagram.kind != beacon.BEACON:
            return None
        name = datagram.name
        with self._lock:
            peer = self._peers.get(name)
            if peer is not None and peer.confirmed:
                if not peer.key or peer.nonce != datagram.nonce or datagram.counter <= peer.last_counter \
                        or not beacon.authentic(datagram, peer.key):
                    return None
            else:
                if not known(name):
                    return None
                key = beacon.registration_key(self._secret, name, datagram.nonce)
                if not beacon.authentic(datagram, key):
                    return None
                if peer is None or peer.nonce != datagram.nonce or datagram.counter > peer.last_counter:
                    peer = self._peers[name] = _Peer(key, datagram.nonce, confirmed=False,
                                                     pokes=peer.pokes if peer else 0)
            peer.last_counter = max(peer.last_counter, datagram.counter)
            peer.address = address
            return Taken(datagram, peer.confirmed)

    def poke(self, name: str, version: int) -> tuple[bytes, tuple] | None:
        """(the poke's bytes, where to send them); None for an agent that never beaconed, or one poked less
        than REPOKE_AFTER ago that has not fetched its work since (its coming heartbeat gets the newest)."""
        now = self._clock()
        with self._lock:
            peer = self._peers.get(name)
            if peer is None or peer.address is None or not peer.key:
                return None
            if peer.poked_at is not None and now - peer.poked_at < REPOKE_AFTER:
                return None
            peer.poked_at = now
            return beacon.encode(beacon.POKE, name, peer.next_poke(), version, peer.key, peer.nonce), peer.address

    def fetched(self, name: str) -> None:
        """`name`'s heartbeat was answered (or its poke never left): a change from now on pokes it at once."""
        with self._lock:
            peer = self._peers.get(name)
            if peer is not None:
                peer.poked_at = None


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
    work's version now. `known(agent)`: the coordinator has heard of it (others' beacons are dropped
    before any key is derived)."""

    def __init__(self, host: str, port: int, seen: Callable[[str, float], bool], version: Callable[[str], int],
                 clock: Callable[[], float] = time.time, secret: bytes | None = None,
                 known: Callable[[str], bool] = lambda name: True):
        self.book = BeaconBook(secret)
        self._seen, self._version, self._clock, self._known = seen, version, clock, known
        self._sock = _bind(host.strip("[]"), port)
        if self._sock is not None:  # a burst of 10,000 beacons waits in the kernel, not dropped
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
        self.port = self._sock.getsockname()[1] if self._sock else 0  # 0: no beacons (agents heartbeat)
        self._stop = threading.Event()
        # stop() writes here so the receiving thread leaves its poll at once, not after RECEIVE_TIMEOUT (which
        # every local launch paid on its way out); only where there is a thread to wake
        self._wake_read, self._wake_write = os.pipe() if self._sock is not None else (-1, -1)
        self._stopping = threading.Lock()  # one stop() closes the descriptors, however many threads call it
        self._thread = threading.Thread(target=self._receive_loop, name="beacons", daemon=True)
        self.received = 0  # beacons counted as signs of life

    def start(self) -> "BeaconService":
        if self._sock is None:
            log.warning("no UDP port for liveness beacons: agents prove they are alive with heartbeats")
        else:
            self._sock.setblocking(False)  # waits in poll; a poke a full send buffer drops is sent again later
            self._thread.start()
            log.info("liveness beacons on UDP port %d", self.port)
        return self

    def stop(self) -> None:
        with self._stopping:
            self._stop.set()
            if self._wake_write >= 0:
                os.write(self._wake_write, b"x")
            if self._thread.is_alive():
                self._thread.join(RECEIVE_TIMEOUT * 4)
            if self._sock is not None:
                self._sock.close()
            for fd in (self._wake_read, self._wake_write):
                if fd >= 0:
                    os.close(fd)
            self._wake_read = self._wake_write = -1

    def poke(self, names: Iterable[str]) -> None:
        """Tells each agent that beaconed that its work moved (the agent board's listener)."""
        for name in names:
            self._send(name, self.book.poke(name, self._version(name)))

    def fetched(self, name: str, version: int) -> None:
        """`name` was answered its work as of `version`: poked again if it moved since (a change while its
        poke was outstanding, or while it heartbeated, sent none)."""
        self.book.fetched(name)
        now = self._version(name)
        if now > version:
            self._send(name, self.book.poke(name, now))

    def _send(self, name: str, poke: tuple[bytes, tuple] | None) -> None:
        if poke is None or self._sock is None:
            return
        try:
            self._sock.sendto(*poke)
        except OSError as e:  # unreachable now, or the send buffer full: the next change or beacon pokes again
            self.book.fetched(name)
            log.debug("poke to %s failed: %s", poke[1], e)

    def _receive_loop(self) -> None:
        sock = self._sock
        if sock is None:  # never bound (port 0: beacons off)
            return
        waiting = select.poll()  # not select.select: a busy coordinator's descriptors pass 1,024
        waiting.register(sock, select.POLLIN)
        wake = self._wake_read
        waiting.register(wake, select.POLLIN)
        while not self._stop.is_set():
            try:
                readable = [fd for fd, _ in waiting.poll(RECEIVE_TIMEOUT * 1000) if fd != wake]
            except (OSError, ValueError) as e:  # closed under it: the service is stopping
                if self._stop.is_set():
                    return
                log.warning("beacon socket: %s", e)
                self._stop.wait(RECEIVE_TIMEOUT)
                continue
            if readable:
                self._drain()
                self._stop.wait(BATCH_EVERY)

    def _drain(self) -> None:
        """Takes the beacons waiting in the kernel, up to MOST_AT_ONCE."""
        sock = self._sock
        if sock is None:
            return
        for _ in range(MOST_AT_ONCE):
            try:
                data, address = sock.recvfrom(beacon.MAX_DATAGRAM + 1)
            except BlockingIOError:
                return
            except OSError as e:  # the socket closed under it (stopping): back to waiting
                log.debug("beacon socket: %s", e)
                return
            try:
                self._take(data, address)
            except Exception:  # keep the thread: the next beacon is taken
                log.exception("a beacon from %s failed", address)

    def _take(self, data: bytes, address: tuple) -> None:
        taken = self.book.take(data, address, self._known)
        if taken is None:
            return
        name = taken.datagram.name
        if not taken.counts:  # from before this coordinator started: its heartbeat must confirm it first
            self._send(name, self.book.poke(name, self._version(name)))
            return
        self.received += 1
        alive = self._seen(name, self._clock())
        version = self._version(name)
        if not alive or version > taken.datagram.version:  # behind (a poke was lost), or it must register again
            self._send(name, self.book.poke(name, version))
