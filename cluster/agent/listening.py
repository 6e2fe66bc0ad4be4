"""Which TCP ports on this machine a worker listens on: how a worker's TF server port counts as joined.

A port counts only when the socket listening on it belongs to the worker's own session (the worker and
whatever it started): another job's worker, a daemon or another user's process that took the same port
number (it was free while this rank had not bound it yet) is not this rank joining. Reproduced: a rank that
never joined counted as joined once a concurrent job's worker listened on its leased port, and the job then
waited forever instead of failing at its startup timeout.

Listeners are asked of the kernel's socket diagnostics over netlink (what `ss -lt` does): the kernel then
walks its listening table alone and names each listener's socket inode. /proc/net/tcp, the fallback, walks
every connection bucket whatever it holds: 5-11 ms a read on a 24 GiB machine with three sockets (it grows
with memory, not sockets), taken for each worker at every report while a job runs; netlink answers in tens
of microseconds. An inode is matched to its process through /proc/PID/fd (what `ss -p` does), read only for
ports that have a listener. Touches no server (a connect would reach the worker's). Written here, not taken
from a library: psutil reads /proc/net/tcp, and pyroute2's diag sockets would be a dependency for one
request.
"""

from __future__ import annotations

import os
import socket
import struct
from typing import Mapping

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
TCP_LISTEN = 10
HEADER = struct.Struct("=IHHII")  # nlmsghdr: length, type, flags, sequence, port id
REQUEST = struct.Struct("=BBBBI48s")  # inet_diag_req_v2: family, protocol, ext, pad, states, sockid (any)
SPORT_AT = HEADER.size + 4  # inet_diag_msg: family, state, timer, retrans, then the sockid's source port
# ... the 48-byte sockid, then expires, rqueue, wqueue, uid and the socket's inode (32 bits each)
INODE_AT = HEADER.size + 4 + 48 + 16
ANSWER_TIMEOUT = 2.0  # seconds the kernel has to answer (it does at once; never a wait without bound)

Listeners = dict[int, frozenset[int]]  # port -> the inodes of the sockets listening on it


def listened_by_sessions(sessions: Mapping[int, int]) -> set[int]:
    """Of `sessions` (port -> a session id: a worker started in a session of its own), the ports a process
    of that session listens on (IPv4 or IPv6, this network namespace)."""
    found = listeners()
    wanted = {port: session for port, session in sessions.items() if port in found}
    if not wanted:
        return set()
    owned = socket_inodes_of_sessions(set(wanted.values()))
    return {port for port, session in wanted.items() if found[port] & owned.get(session, frozenset())}


def listeners() -> Listeners:
    """Every listening TCP port of this machine (this network namespace), with its sockets' inodes."""
    try:
        return _merged(_asked(socket.AF_INET), _asked(socket.AF_INET6))
    except OSError:  # no netlink socket diagnostics here (a kernel without inet_diag): read the tables
        return _read_proc()


def socket_inodes_of_sessions(sessions: set[int]) -> dict[int, frozenset[int]]:
    """Session id -> the inodes of the sockets its processes hold. Processes that end meanwhile, or that
    this process may not look into (another user's), are skipped."""
    owned: dict[int, set[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                # pid (comm) state ppid pgrp session ...: comm may hold anything but the last ')'
                session = int(f.read().rsplit(b")", 1)[1].split()[3])
            if session not in sessions:
                continue
            inodes = owned.setdefault(session, set())
            for fd in os.listdir(f"/proc/{entry}/fd"):
                target = os.readlink(f"/proc/{entry}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(int(target[8:-1]))
        except (OSError, IndexError, ValueError):
            continue
    return {session: frozenset(inodes) for session, inodes in owned.items()}


def _merged(*tables: Listeners) -> Listeners:
    merged: dict[int, frozenset[int]] = {}
    for table in tables:
        for port, inodes in table.items():
            merged[port] = merged.get(port, frozenset()) | inodes
    return merged


def _asked(family: int) -> Listeners:
    request = REQUEST.pack(family, socket.IPPROTO_TCP, 0, 0, 1 << TCP_LISTEN, b"")
    header = HEADER.pack(HEADER.size + len(request), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP, 1, 0)
    found: dict[int, set[int]] = {}
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
                    return {port: frozenset(inodes) for port, inodes in found.items()}
                if kind == NLMSG_ERROR or length < INODE_AT + 4:
                    raise OSError("socket diagnostics refused the request")
                port = struct.unpack_from("!H", data, at + SPORT_AT)[0]
                found.setdefault(port, set()).add(struct.unpack_from("=I", data, at + INODE_AT)[0])
                at += (length + 3) & ~3


def _read_proc() -> Listeners:
    found: dict[int, set[int]] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    fields = line.split()
                    if fields[3] == "0A":  # LISTEN
                        found.setdefault(int(fields[1].rsplit(":", 1)[1], 16), set()).add(int(fields[9]))
        except (OSError, StopIteration, IndexError, ValueError):
            continue
    return {port: frozenset(inodes) for port, inodes in found.items()}
