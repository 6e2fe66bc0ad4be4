"""Liveness beacons: the datagram format, the coordinator's book of keys and counters, its UDP service
over a real socket, and the heartbeat interval an agent gets once its beacons prove it alive."""

import socket
import threading
import types

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from cluster.coordinator.nodes.events import NodeEvents
from cluster.engines.agents.beacons import REPOKE_AFTER, BeaconBook, BeaconService
from cluster.engines.agents.liveness import Liveness
from cluster.shared.heartbeat_budget import heartbeat_interval
from cluster.coordinator.values import AgentLive, Settings
from cluster.shared import beacon
from cluster.shared.model import AgentRecord

pytestmark = [pytest.mark.timeout(60)]
KEY = bytes(range(32))

UNDER_LOAD = [HealthCheck.too_slow]  # it times input drawing: a loaded machine is no failure of the property


def test_a_datagram_reads_back_and_only_its_key_makes_it_authentic():
    data = beacon.encode(beacon.BEACON, "node-ü1", 7, 42, KEY, b"n" * 16)
    datagram = beacon.decode(data)
    assert (datagram.kind, datagram.name, datagram.counter, datagram.version, datagram.nonce) == \
        (beacon.BEACON, "node-ü1", 7, 42, b"n" * 16)
    assert beacon.authentic(datagram, KEY)
    assert not beacon.authentic(datagram, beacon.new_key())


@settings(max_examples=300, deadline=None, suppress_health_check=UNDER_LOAD)
@given(position=st.integers(min_value=0), flip=st.integers(min_value=1, max_value=255))
def test_any_changed_byte_is_refused(position, flip):
    data = bytearray(beacon.encode(beacon.BEACON, "n1", 3, 9, KEY))
    data[position % len(data)] ^= flip
    datagram = beacon.decode(bytes(data))
    assert datagram is None or not beacon.authentic(datagram, KEY)


@settings(max_examples=300, deadline=None, suppress_health_check=UNDER_LOAD)
@given(st.binary(max_size=beacon.MAX_DATAGRAM + 8))
def test_garbage_is_never_an_error(data):
    datagram = beacon.decode(data)
    assert datagram is None or not beacon.authentic(datagram, KEY)


ADDRESS = ("10.0.0.1", 7000)


def take(book, data, known=lambda name: True):
    return book.take(data, ADDRESS, known)


def test_the_book_takes_each_registrations_beacon_once_and_forgets_earlier_registrations():
    book = BeaconBook(beacon.new_key())
    assert take(book, beacon.encode(beacon.BEACON, "n1", 1, 0, KEY)) is None  # a key it never gave
    key, nonce = book.enroll("n1")
    first = beacon.encode(beacon.BEACON, "n1", 1, 0, key, nonce)
    taken = take(book, first)
    assert taken.datagram.name == "n1" and taken.counts
    assert take(book, first) is None  # a replay
    assert take(book, beacon.encode(beacon.BEACON, "n1", 2, 0, KEY, nonce)) is None  # another key
    assert take(book, beacon.encode(beacon.BEACON, "n2", 2, 0, key, nonce)) is None  # n1's key for n2
    assert take(book, beacon.encode(beacon.POKE, "n1", 3, 0, key, nonce)) is None  # not a beacon
    assert take(book, beacon.encode(beacon.BEACON, "n1", 3, 0, key, nonce)).counts
    book.enroll("n1")  # registered again: the earlier registration proves nothing
    assert take(book, beacon.encode(beacon.BEACON, "n1", 4, 0, key, nonce)) is None
    book.without("n1")  # ... nor any, once it registers without beacons
    assert take(book, beacon.encode(beacon.BEACON, "n1", 5, 0, key, nonce)) is None


def test_after_a_restart_a_beacon_counts_once_a_heartbeat_named_its_registration():
    secret = beacon.new_key()
    earlier = BeaconBook(secret)
    old_key, old_nonce = earlier.enroll("n1")
    key, nonce = earlier.enroll("n1")  # registered again: the current registration
    restarted = BeaconBook(secret)  # the same secret: it is derived from the cluster's CA key
    captured = take(restarted, beacon.encode(beacon.BEACON, "n1", 50, 0, old_key, old_nonce))
    assert captured is not None and not captured.counts  # authentic, but maybe a replay: only a poke back
    poke = beacon.decode(restarted.poke("n1", 0)[0])  # goes back where the beacon came from, under its key
    assert poke.kind == beacon.POKE and beacon.authentic(poke, old_key)
    assert not take(restarted, beacon.encode(beacon.BEACON, "n1", 9, 0, key, nonce)).counts
    restarted.confirm("n1", nonce)  # its heartbeat, over TLS, names the registration it beacons under
    assert take(restarted, beacon.encode(beacon.BEACON, "n1", 51, 0, old_key, old_nonce)) is None
    assert take(restarted, beacon.encode(beacon.BEACON, "n1", 9, 0, key, nonce)) is None  # taken before: once
    assert take(restarted, beacon.encode(beacon.BEACON, "n1", 10, 0, key, nonce)).counts
    other = BeaconBook(beacon.new_key())  # another cluster's coordinator
    assert take(other, beacon.encode(beacon.BEACON, "n1", 11, 0, key, nonce)) is None
    assert take(BeaconBook(secret), beacon.encode(beacon.BEACON, "n1", 12, 0, key, nonce),
                known=lambda name: False) is None  # a name it never heard of: no key derived


def test_pokes_go_where_the_agent_beacons_from_and_count_up():
    book = BeaconBook()
    key, nonce = book.enroll("n1")
    assert book.poke("n1", 5) is None  # never beaconed: nowhere to send it
    take(book, beacon.encode(beacon.BEACON, "n1", 1, 0, key, nonce))
    pokes = [book.poke("n1", 5)]
    book.fetched("n1")  # its heartbeat was answered: the next change pokes it at once
    pokes.append(book.poke("n1", 6))
    assert [p[1] for p in pokes] == [ADDRESS] * 2
    decoded = [beacon.decode(p[0]) for p in pokes]
    assert [(d.kind, d.version) for d in decoded] == [(beacon.POKE, 5), (beacon.POKE, 6)]
    assert decoded[0].counter < decoded[1].counter and all(beacon.authentic(d, key) for d in decoded)


def test_a_node_with_a_poke_outstanding_is_not_poked_again_until_it_fetches_or_a_while_passed():
    """A submit and its cancel a few ms apart bring the node one heartbeat (it fetches the newest work),
    not two; a poke lost on the way is sent again REPOKE_AFTER later, on the node's next beacon."""
    now = [100.0]
    book = BeaconBook(clock=lambda: now[0])
    key, nonce = book.enroll("n1")
    take(book, beacon.encode(beacon.BEACON, "n1", 1, 0, key, nonce))
    assert book.poke("n1", 1) is not None
    now[0] += 0.01
    assert book.poke("n1", 2) is None  # outstanding: its coming heartbeat gets version 2 anyway
    now[0] += REPOKE_AFTER
    assert beacon.decode(book.poke("n1", 2)[0]).version == 2  # never fetched: lost on the way
    book.fetched("n1")
    assert book.poke("n1", 3) is not None  # fetched since: a new change pokes at once


class _Agents:
    """What the service is told: who beaconed, and each agent's work version."""

    def __init__(self, versions, alive=True):
        self.versions, self.alive = versions, alive
        self.seen = []
        self.event = threading.Event()

    def on_seen(self, name, now):
        self.seen.append(name)
        self.event.set()
        return self.alive


@pytest.fixture
def service_and_agent():
    made = []

    def make(agents, secret=None):
        service = BeaconService("127.0.0.1", 0, agents.on_seen, lambda name: agents.versions.get(name, 0),
                                secret=secret).start()
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.settimeout(10)
        sock.connect(("127.0.0.1", service.port))
        made.append((service, sock))
        return service, sock

    yield make
    for service, sock in made:
        sock.close()
        service.stop()


def test_the_service_counts_a_beacon_once_and_pokes_an_agent_that_is_behind(service_and_agent):
    agents = _Agents({"n1": 3})
    service, sock = service_and_agent(agents)
    key, nonce = service.book.enroll("n1")
    data = beacon.encode(beacon.BEACON, "n1", 1, 2, key, nonce)  # it has seen version 2; its work is at 3
    sock.send(data)
    poke = beacon.decode(sock.recv(beacon.MAX_DATAGRAM))
    assert (poke.kind, poke.name, poke.version) == (beacon.POKE, "n1", 3) and beacon.authentic(poke, key)
    assert agents.seen == ["n1"]
    sock.send(data)  # replayed, then a forged one: neither is a sign of life
    sock.send(beacon.encode(beacon.BEACON, "n1", 2, 3, beacon.new_key(), nonce))
    agents.event.clear()
    sock.send(beacon.encode(beacon.BEACON, "n1", 3, 3, key, nonce))  # up to date: taken, no poke
    assert agents.event.wait(10)
    assert agents.seen == ["n1", "n1"] and service.received == 2


def test_a_lost_agent_that_beacons_is_poked_to_register_again(service_and_agent):
    agents = _Agents({"n1": 4}, alive=False)
    service, sock = service_and_agent(agents)
    key, nonce = service.book.enroll("n1")
    sock.send(beacon.encode(beacon.BEACON, "n1", 1, 4, key, nonce))
    poke = beacon.decode(sock.recv(beacon.MAX_DATAGRAM))
    assert poke.kind == beacon.POKE and beacon.authentic(poke, key)  # it heartbeats, and learns it must register


def test_work_changes_poke_every_agent_that_beacons(service_and_agent):
    agents = _Agents({"n1": 0, "n2": 0})
    service, sock = service_and_agent(agents)
    key, nonce = service.book.enroll("n1")
    service.book.enroll("n2")  # never beacons: nothing to send
    sock.send(beacon.encode(beacon.BEACON, "n1", 1, 0, key, nonce))
    assert agents.event.wait(10)
    agents.versions["n1"] = 1
    service.poke(["n1", "n2", "unknown"])
    poke = beacon.decode(sock.recv(beacon.MAX_DATAGRAM))
    assert (poke.name, poke.version) == ("n1", 1)


def _one_beaconing_node(service_and_agent):
    """A service, and node n1 whose first beacon it took (its work versions: agents.versions)."""
    agents = _Agents({"n1": 0})
    service, sock = service_and_agent(agents)
    key, nonce = service.book.enroll("n1")
    sock.send(beacon.encode(beacon.BEACON, "n1", 1, 0, key, nonce))
    assert agents.event.wait(10)
    return agents, service, sock


def test_a_change_while_a_poke_is_outstanding_is_poked_once_the_older_work_is_fetched(service_and_agent):
    agents, service, sock = _one_beaconing_node(service_and_agent)
    agents.versions["n1"] = 1
    service.poke(["n1"])
    assert beacon.decode(sock.recv(beacon.MAX_DATAGRAM)).version == 1
    agents.versions["n1"] = 2  # the job is canceled before the node fetched: no second poke now ...
    service.poke(["n1"])
    service.fetched("n1", 2)  # ... its heartbeat came after the change: nothing more to tell
    service.fetched("n1", 1)  # (had it come before: it fetched version 1, and is poked for 2 at once)
    assert beacon.decode(sock.recv(beacon.MAX_DATAGRAM)).version == 2
    sock.settimeout(0.2)
    with pytest.raises(socket.timeout):
        sock.recv(beacon.MAX_DATAGRAM)  # exactly one datagram after the first poke


def test_a_failed_poke_send_leaves_nothing_outstanding(service_and_agent):
    agents, service, sock = _one_beaconing_node(service_and_agent)
    service._sock = _SendBufferFull(service._sock)  # the send fails: no poke is left outstanding ...
    agents.versions["n1"] = 7
    service.poke(["n1"])
    service._sock = service._sock.real
    agents.versions["n1"] = 8
    service.poke(["n1"])  # ... so the next change is sent at once
    assert beacon.decode(sock.recv(beacon.MAX_DATAGRAM)).version == 8


class _SendBufferFull:
    def __init__(self, real):
        self.real = real

    def sendto(self, *args):
        raise BlockingIOError("send buffer full")


def test_a_restarted_service_pokes_beacons_from_before_and_counts_them_once_confirmed(service_and_agent):
    agents = _Agents({"n1": 0})
    service, sock = service_and_agent(agents, secret=b"s" * 32)
    key, nonce = BeaconBook(b"s" * 32).enroll("n1")  # the coordinator before the restart, same secret
    sock.send(beacon.encode(beacon.BEACON, "n1", 1, 0, key, nonce))
    assert beacon.decode(sock.recv(beacon.MAX_DATAGRAM)).kind == beacon.POKE and agents.seen == []
    service.book.confirm("n1", nonce)
    sock.send(beacon.encode(beacon.BEACON, "n1", 2, 0, key, nonce))
    assert agents.event.wait(10) and agents.seen == ["n1"]


def _live(name):
    return AgentLive(AgentRecord(name, 1, ()), last_heartbeat=0.0)


def test_an_agent_is_on_the_long_interval_only_once_a_beacon_arrived():
    settings_ = Settings(lost_after=6.0, heartbeat_interval=1.0, max_heartbeats_per_s=250.0)
    agents = {f"n{i}": _live(f"n{i}") for i in range(10_000)}
    # The job side's half as it is (NodeEvents.seen over these nodes); the host's other reads as CoreHost's.
    nodes = types.SimpleNamespace(host=types.SimpleNamespace(agents=agents, lock=threading.RLock()))
    host = types.SimpleNamespace(settings=settings_, node=agents.get, node_count=lambda: len(agents),
                                 node_seen=lambda name, now, beacons=False: NodeEvents.seen(nodes, name, now, beacons))
    liveness = Liveness(host)
    assert liveness.interval("n0") == 2.0  # 10,000 on heartbeats: three within lost_after
    for i in range(0, 10_000, 2):  # every other agent beacons
        assert liveness.seen(f"n{i}", 5.0)
    assert agents["n0"].last_heartbeat == 5.0 and agents["n0"].beaconing and not agents["n1"].beaconing
    assert liveness.interval("n0") == 20.0  # 5,000 beaconing agents share 250 heartbeats/s
    assert liveness.interval("n1") == 2.0  # its heartbeats still prove it alive: capped by lost_after
    agents["n0"].lost = True
    assert not liveness.seen("n0", 9.0) and agents["n0"].last_heartbeat == 5.0  # a lost node stays lost
    agents["n2"] = _live("n2")  # n2 registered again: until its new beacons come, its heartbeats prove it alive
    liveness.gone("n2")
    assert liveness.interval("n2") == 2.0 and liveness.seen("n2", 9.0) and liveness.interval("n2") == 20.0


def test_beacon_agents_heartbeat_within_the_budget_not_within_lost_after():
    s = Settings(lost_after=6.0, heartbeat_interval=1.0, max_heartbeats_per_s=250.0)
    assert heartbeat_interval(10_000, s) == 2.0
    assert heartbeat_interval(10_000, s, beacons=True) == 40.0
    assert heartbeat_interval(10, s, beacons=True) == 1.0
    assert beacon.interval(s.lost_after) == 1.5


def test_an_agent_beacons_to_the_service_and_a_poke_wakes_its_heartbeat_loop(service_and_agent):
    from cluster.agent.beacon import BeaconPlan, BeaconSender

    agents = _Agents({"n1": 0})
    service, _ = service_and_agent(agents)
    wake, stop = threading.Event(), threading.Event()
    sender = BeaconSender("n1", wake, stop)
    thread = threading.Thread(target=sender.run, daemon=True)
    thread.start()
    try:
        sender.configure(BeaconPlan("127.0.0.1", service.port, *service.book.enroll("n1"), 0.05))
        assert agents.event.wait(10) and sender.active()  # its beacons arrive
        assert not wake.is_set()  # nothing new for it
        agents.versions["n1"] = 1
        service.poke(["n1"])
        assert wake.wait(10) and sender.pokes >= 1  # (each beacon until it fetches the work is poked again)
        wake.clear()
        sender.fetched(1, 0)  # its heartbeat fetched the work: later beacons carry version 1
        sender.configure(BeaconPlan("127.0.0.1", service.port, *service.book.enroll("n1"), 0.05))  # registered again
        agents.event.clear()
        assert agents.event.wait(10)  # the new key's beacons are taken
    finally:
        stop.set()
        sender.wake()
        thread.join(10)
    assert not thread.is_alive()


def test_the_change_board_forgets_old_keys_and_never_repeats_a_version():
    from cluster.coordinator.values import ChangeBoard

    board = ChangeBoard(limit=3)
    board.bump(["j1"])
    seen = board.version("j1")
    board.bump(["j2", "j3", "j4"])  # j1 is the oldest: forgotten
    assert board.version("j1") == 0 and board.wait("j1", seen, 0.0) == 0  # a waiter on it wakes, once
    board.bump(["j1"])
    assert board.version("j1") > board.version("j4") > seen  # never a version seen before


def test_stopping_the_service_wakes_its_thread_instead_of_waiting_out_its_poll(monkeypatch):
    """Every coordinator stops its beacon service on the way out (each local launch paid it): the receiving
    thread noticed only at its next poll timeout. With that timeout made 60 s, the thread still ends at once."""
    import threading

    from cluster.engines.agents import beacons

    monkeypatch.setattr(beacons, "RECEIVE_TIMEOUT", 60.0)
    service = beacons.BeaconService("127.0.0.1", 0, lambda name, now: True, lambda name: 0).start()
    assert service.port and service._thread.is_alive()
    stopping = threading.Thread(target=service.stop, daemon=True)
    stopping.start()
    service._thread.join(10)  # a bound far below the poll's 60 s
    assert not service._thread.is_alive(), "the beacon thread waited out its poll"
    stopping.join(10)
    service.stop()  # twice is harmless


def test_stop_from_several_threads_at_once_closes_each_descriptor_once():
    """The review's case: three simultaneous stops double-wrote and double-closed the wake pipe (EBADF, and a
    close could hit a descriptor reused meanwhile). A service that never bound holds no pipe at all."""
    import os
    import threading

    from cluster.engines.agents import beacons

    def open_fds():
        return len(os.listdir("/proc/self/fd"))

    before = open_fds()
    for _ in range(20):
        service = beacons.BeaconService("127.0.0.1", 0, lambda name, now: True, lambda name: 0).start()
        errors = []

        def stop():
            try:
                service.stop()
            except OSError as e:  # noqa: PERF203 (the failure under test)
                errors.append(e)

        stoppers = [threading.Thread(target=stop) for _ in range(3)]
        for t in stoppers:
            t.start()
        for t in stoppers:
            t.join(30)
        assert not errors, errors
    unbound = beacons.BeaconService("192.0.2.1", 0, lambda name, now: True, lambda name: 0)  # not this machine's
    assert unbound.port == 0 and unbound._wake_read == -1
    unbound.stop()
    assert open_fds() == before


def test_a_beacon_counts_only_while_the_credential_its_node_last_called_with_holds(tmp_path):
    """A beacon carries no token: revoking the node (or its credential expiring) must end what its beacons prove
    (review of issue 49's change: a revoked node's beacons kept it alive and its jobs never failed)."""
    from cluster.coordinator.credential_book import CredentialBook
    from cluster.engines.agents.service import AgentServicer
    from cluster.shared.credentials import Authority

    book = CredentialBook(Authority.create())
    seen = []
    liveness = types.SimpleNamespace(seen=lambda name, now: seen.append(name) or True)
    servicer = AgentServicer(types.SimpleNamespace(host=None, holds=book.holds), liveness, long_poll=None)
    assert not servicer.beacon_seen("n1", 1.0) and seen == []  # no call of its was let through yet
    servicer.credentials["n1"] = book.verify(book.issue("node", "n1", None, "").token)  # as a heartbeat records it
    assert servicer.beacon_seen("n1", 2.0) and seen == ["n1"]
    book.revoke("node", "n1", "admin root")
    assert not servicer.beacon_seen("n1", 3.0) and seen == ["n1"]  # it is lost once silent past lost_after
