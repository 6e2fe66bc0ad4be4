import sys

import pytest

from cluster.shared.model import Address
from cluster.coordinator.placement import PlacementError, choose_addresses, choose_gpus, choose_ports
from tests.stand_in_nvml import StandInNvml


def a(ip, prefix=24, iface="eth0"):
    return Address(ip, prefix, iface)


def test_common_subnet_is_found_and_loopback_skipped():
    nodes = {"n1": [a("127.0.0.1", 8, "lo"), a("10.1.0.5", 16), a("198.18.0.2")],
             "n2": [a("127.0.0.1", 8, "lo"), a("198.18.0.3")]}
    assert choose_addresses(nodes) == {"n1": "198.18.0.2", "n2": "198.18.0.3"}


def test_most_specific_common_subnet_wins():
    nodes = {"n1": [a("10.0.0.1", 8), a("10.5.0.1", 24)], "n2": [a("10.0.0.2", 8), a("10.5.0.2", 24)]}
    assert choose_addresses(nodes) == {"n1": "10.5.0.1", "n2": "10.5.0.2"}


def test_override_subnet_and_errors():
    nodes = {"n1": [a("10.0.0.1", 8), a("192.168.1.1")], "n2": [a("10.0.0.2", 8), a("192.168.1.2")]}
    assert choose_addresses(nodes, "10.0.0.0/8") == {"n1": "10.0.0.1", "n2": "10.0.0.2"}
    with pytest.raises(PlacementError, match="node n1 has no address in the configured subnet 172.16.0.0/12"):
        choose_addresses(nodes, "172.16.0.0/12")
    with pytest.raises(PlacementError, match="nodes n1, n2 share no IPv4 subnet; start the coordinator with --subnet"):
        choose_addresses({"n1": [a("10.0.0.1")], "n2": [a("10.9.0.2")]})


def test_single_node_uses_loopback():
    assert choose_addresses({"n1": [a("10.0.0.1")]}) == {"n1": "127.0.0.1"}


def test_ports_skip_used_and_excluded():
    assert choose_ports(3, (100, 110), in_use=[100, 102], excluded=[101]) == [103, 104, 105]
    with pytest.raises(PlacementError, match="no 3 free ports left in 100-102"):
        choose_ports(3, (100, 102), in_use=[101])


def test_gpus_are_never_shared():
    assert choose_gpus(range(8), held=[0, 1, 5], count=3) == (2, 3, 4)
    assert choose_gpus(range(8), held=[], count=8) == tuple(range(8))
    with pytest.raises(PlacementError, match=r"2 GPUs wanted but only 1 free \(\[7\]\)"):
        choose_gpus(range(8), held=range(7), count=2)


def test_nvidia_smi_query_lines_are_parsed_and_malformed_ones_skipped():
    from cluster.shared.gpus import parse_gpu_query
    from cluster.shared.model import Gpu

    text = ("0, GPU-aaaa, NVIDIA H100 80GB HBM3\n"
            "1, GPU-bbbb, NVIDIA H100, with a comma\n"
            "No devices were found\n"
            "x, GPU-cccc, broken\n")
    assert parse_gpu_query(text) == [Gpu(0, "GPU-aaaa", "NVIDIA H100 80GB HBM3"),
                                      Gpu(1, "GPU-bbbb", "NVIDIA H100, with a comma")]


def test_without_nvidia_smi_the_gpus_are_nvmls_restricted_to_the_agents_visible_devices(monkeypatch, tmp_path):
    from cluster.shared.gpus import discover_gpus
    from cluster.shared.model import Gpu

    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi: a container with the driver's library only
    nvml = StandInNvml([("GPU-aaaa", "NVIDIA H200"), ("GPU-bbbb", "NVIDIA H200")])
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    assert discover_gpus(env={}) == [Gpu(0, "GPU-aaaa", "NVIDIA H200"), Gpu(1, "GPU-bbbb", "NVIDIA H200")]
    assert nvml.shut_down
    assert discover_gpus(env={"CUDA_VISIBLE_DEVICES": "GPU-bbbb"}) == [Gpu(1, "GPU-bbbb", "NVIDIA H200")]
    monkeypatch.setitem(sys.modules, "pynvml", StandInNvml([("GPU-aaaa", "x")], fails_to_start=True))
    assert discover_gpus(env={}) == []
