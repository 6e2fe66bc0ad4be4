"""Machine-wide port leases: what keeps two tfdist jobs on one machine (even under two different
coordinators, or in two network namespaces) from ever being handed the same port."""

import socket

import pytest

from cluster.ports import PortError, lease_exact, lease_range


def test_a_leased_port_is_busy_for_everyone_else():
    first, busy = lease_exact([40100, 40101])
    assert busy == [] and first.ports == [40100, 40101]
    second, busy = lease_exact([40101, 40102])
    assert busy == [40101] and second.ports == [40102]
    first.release()
    third, busy = lease_exact([40101])
    assert busy == []
    second.release()
    third.release()


def test_a_bound_port_is_busy():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 40200))
        s.listen()
        lease, busy = lease_exact([40200, 40201])
        assert busy == [40200] and lease.ports == [40201]
        lease.release()


def test_default_range_avoids_the_ephemeral_range():
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        eph_low, eph_high = map(int, f.read().split())
    low, high = lease_range({})
    assert high < eph_low or low > eph_high
    assert lease_range({"TFDIST_PORT_RANGE": "20000-20010"}) == (20000, 20010)
    with pytest.raises(PortError, match="is not LOW-HIGH"):
        lease_range({"TFDIST_PORT_RANGE": "abc"})
