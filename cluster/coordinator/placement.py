"""Pure helpers that turn a scheduler assignment into a concrete per-node placement:
which address each node is reached at, and which ports each node's workers get."""

from __future__ import annotations

import ipaddress
from typing import Iterable, Mapping, Sequence

from cluster.shared.model import Address
from tfdist.errors import TfdistError


class PlacementError(TfdistError, ValueError):
    pass


def choose_addresses(node_addresses: Mapping[str, Sequence[Address]], subnet: str | None = None) -> dict[str, str]:
    """One address per node such that all of them are on one common subnet.

    `node_addresses`: node -> its addresses. `subnet` (CIDR) overrides the
    choice, like Determined's dtrain_network_interface. A one-node job may use loopback.
    """
    names = list(node_addresses)
    if subnet:
        try:
            net = ipaddress.ip_network(subnet, strict=False)
        except ValueError:  # `tfdist coordinator --subnet` checks it at start; a Settings made in-process too
            raise PlacementError(f"the configured subnet {subnet!r} is not a network such as 10.0.0.0/24") from None
        chosen = {}
        for name in names:
            ips = [a.ip for a in node_addresses[name] if (ip := _parsed(a.ip)) is not None and ip in net]
            if not ips:
                raise PlacementError(f"node {name} has no address in the configured subnet {subnet}")
            chosen[name] = ips[0]
        return chosen
    if len(names) == 1:
        return {names[0]: "127.0.0.1"}
    networks: dict = {}
    for name in names:
        for a in node_addresses[name]:
            ip = _parsed(a.ip)
            if ip is None or ip.version != 4 or ip.is_loopback or ip.is_link_local or not 0 <= a.prefix_len <= 32:
                continue
            net = ipaddress.ip_interface(f"{a.ip}/{a.prefix_len}").network
            networks.setdefault(net, {}).setdefault(name, a.ip)
    common = [(net, ips) for net, ips in networks.items() if len(ips) == len(names)]
    if not common:
        raise PlacementError(f"nodes {', '.join(names)} share no IPv4 subnet; start the coordinator with "
                             "--subnet CIDR naming the network the nodes should use")
    common.sort(key=lambda item: (item[0].prefixlen, str(item[0])), reverse=True)  # the most specific
    return dict(common[0][1])


def _parsed(ip: str):
    """The address, or None for one that is not (the server's edge refuses those; state from before it may
    hold one): one node's bad address must not fail every placement."""
    try:
        return ipaddress.ip_address(ip)
    except ValueError:
        return None


def choose_ports(count: int, port_range: tuple[int, int], in_use: Iterable[int], excluded: Iterable[int] = ()) -> list[int]:
    """The lowest `count` ports of the range that no other job on the node holds and no check found busy."""
    taken = set(in_use) | set(excluded)
    low, high = port_range
    ports = []
    for port in range(low, high + 1):
        if port not in taken:
            ports.append(port)
            if len(ports) == count:
                return ports
    raise PlacementError(f"no {count} free ports left in {low}-{high} on the node; widen --port-range")


def choose_gpus(all_gpus: Iterable[int], held: Iterable[int], count: int) -> tuple[int, ...]:
    """The lowest `count` GPU indices of the node that no other job holds (neighbours in PCI order
    usually share a switch). Two jobs never share a GPU."""
    taken = set(held)
    free = sorted(g for g in all_gpus if g not in taken)
    if len(free) < count:
        raise PlacementError(f"{count} GPUs wanted but only {len(free)} free ({free}); the scheduler and the "
                             "allocations disagree")
    return tuple(free[:count])
