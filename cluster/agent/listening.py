"""Which TCP ports on this machine have a listener: how a worker's TF server port counts as joined.

Asked of the kernel's socket diagnostics over netlink (what `ss -lt` does), for listeners only: the kernel
then walks its listening table alone. /proc/net/tcp, the fallback, walks every connection bucket whatever
it holds: 5-11 ms a read on a 24 GiB machine with three sockets (it grows with memory, not sockets), taken
for each worker at every report while a job runs; netlink answers in tens of microseconds. Touches no
server (a connect would reach the worker's). Written here, not taken from a library: psutil reads
/proc/net/tcp, and pyroute2's diag sockets would be a dependency for one request.
"""

from __future__ import annotations

import socket
import struct

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
TCP_LISTEN = 10
HEADER = struct.Struct("=IHHII")  # nlmsghdr: length, type, flags, sequence, port id
REQUEST = struct.Struct("=BBBBI48s")  # inet_diag_req_v2: family, protocol, ext, pad, states, sockid (any)
SPORT_AT = HEADER.size + 4  # inet_diag_msg: family, state, timer, retrans, then the sockid's source port
ANSWER_TIMEOUT = 2.0  # seconds the kernel has to answer (it does at once; never a wait without bound)


def listening_ports() -> frozenset[int]:
    """The local ports some IPv4 or IPv6 TCP socket on this machine (this network namespace) listens on."""
    try:
        return frozenset().union(*(_asked(family) for family in (socket.AF_INET, socket.AF_INET6)))
    except OSError:  # no netlink socket diagnostics here (a kernel without inet_diag): read the tables
        return _read_proc()


def _asked(family: int) -> set[int]:
    request = REQUEST.pack(family, socket.IPPROTO_TCP, 0, 0, 1 << TCP_LISTEN, b"")
    header = HEADER.pack(HEADER.size + len(request), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP, 1, 0)
    ports: set[int] = set()
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG) as sock:
        sock.settimeout(ANSWER_TIMEOUT)
        sock.sendto(header + request, (0, 0))
        while True:
            data = sock.recv(1 << 16)
            if not data:
                raise OSError("socket diagnostics: the kernel's answer ended early")
            at = 0
            while at + HEADER.size <= len(data):
                length, kind = HEADER.unpack_from(data, at)[:2]
                if kind == NLMSG_DONE:
                    return ports
                if kind == NLMSG_ERROR or length < HEADER.size:
                    raise OSError("socket diagnostics refused the request")
                ports.add(struct.unpack_from("!H", data, at + SPORT_AT)[0])
                at += (length + 3) & ~3


def _read_proc() -> frozenset[int]:
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    fields = line.split()
                    if fields[3] == "0A":  # LISTEN
                        ports.add(int(fields[1].rsplit(":", 1)[1], 16))
        except (OSError, StopIteration, IndexError, ValueError):
            continue
    return frozenset(ports)
