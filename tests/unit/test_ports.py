"""Machine-wide port leases: what keeps two tfdist jobs on one machine (even under two different
coordinators, or in two network namespaces) from ever being handed the same port."""

import socket

import pytest

from cluster.agent.ports import PortError, lease_exact, lease_range


def free_run(count: int) -> int:
    """The first of `count` consecutive free ports in tfdist's lease range. Never fixed ports in the
    ephemeral range: any outgoing connection may hold one there (this test once met port 40100 taken)."""
    low, high = lease_range()
    for first in range(high - count, low, -count):
        lease, busy = lease_exact(list(range(first, first + count)))
        lease.release()
        if not busy:
            return first
    raise AssertionError(f"no {count} consecutive free ports in {low}-{high}")


def test_a_leased_port_is_busy_for_everyone_else():
    p = free_run(3)
    first, busy = lease_exact([p, p + 1])
    assert busy == [] and first.ports == [p, p + 1]
    second, busy = lease_exact([p + 1, p + 2])
    assert busy == [p + 1] and second.ports == [p + 2]
    first.release()
    third, busy = lease_exact([p + 1])
    assert busy == []
    second.release()
    third.release()


def test_a_bound_port_is_busy():
    p = free_run(2)
    with socket.socket() as s:
        s.bind(("127.0.0.1", p))
        s.listen()
        lease, busy = lease_exact([p, p + 1])
        assert busy == [p] and lease.ports == [p + 1]
        lease.release()


def test_default_range_avoids_the_ephemeral_range():
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        eph_low, eph_high = map(int, f.read().split())
    low, high = lease_range({})
    assert high < eph_low or low > eph_high
    assert lease_range({"TFDIST_PORT_RANGE": "20000-20010"}) == (20000, 20010)
    with pytest.raises(PortError, match="is not LOW-HIGH"):
        lease_range({"TFDIST_PORT_RANGE": "abc"})
