import socket

import pytest

from cluster.ports import PortError, lease_ports, lease_range


def test_two_leases_never_share_a_port():
    with lease_ports(20, (40100, 40140)) as a, lease_ports(20, (40100, 40140)) as b:
        assert len(set(a.ports)) == 20 and not set(a.ports) & set(b.ports)


def test_port_in_use_is_skipped():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 40200))
        s.listen()
        with lease_ports(2, (40200, 40202)) as lease:
            assert 40200 not in lease.ports


def test_range_exhausted_is_a_clear_error():
    with lease_ports(3, (40300, 40302)):
        with pytest.raises(PortError, match="could not lease 1 free ports in 40300-40302; set TFDIST_PORT_RANGE"):
            lease_ports(1, (40300, 40302))


def test_default_range_avoids_the_ephemeral_range():
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        eph_low, eph_high = map(int, f.read().split())
    low, high = lease_range({})
    assert high < eph_low or low > eph_high
    assert lease_range({"TFDIST_PORT_RANGE": "20000-20010"}) == (20000, 20010)
    with pytest.raises(PortError, match="is not LOW-HIGH"):
        lease_range({"TFDIST_PORT_RANGE": "abc"})
