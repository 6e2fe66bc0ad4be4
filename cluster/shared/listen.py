"""What a daemon's HOST:PORT flag may say, checked before anything binds.

gRPC's C core reads fewer forms than a shell user writes (`:7474`, `127.1:7475`), prints a line of its own
and fails the bind, and every such failure read "the address is in use" (issue 30, Measured 5). Here each
wrong form is one line naming the flag, the value and a form that works; a bind that then fails says why
(in use, or not an address of this machine: `bind_failure`)."""

from __future__ import annotations

import errno
import ipaddress
import re
import socket

from tfdist.errors import UserError

EXAMPLES = "127.0.0.1:{port} (this machine only) or 0.0.0.0:{port} (every interface)"


def check_listen(flag: str, listen: str, resolve: bool = True) -> tuple[str, int]:
    """(host, port) of a listen address, or UserError naming `flag` and the fix. Port 0: any free one.
    `resolve`: a host name must resolve here (not so for where others reach this machine: a Kubernetes
    Service's name, which the cluster's DNS may serve only once the coordinator's pod is running)."""
    host, sep, port = listen.strip().rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        shown = port if sep else listen
        raise UserError(f"{flag} {listen!r} is not HOST:PORT with a port from 0 to 65535 (got {shown!r}): give "
                        f"e.g. {EXAMPLES.format(port=7470)}")
    bracketed = host.startswith("[") and host.endswith("]")
    bare = host[1:-1] if bracketed else host
    if ":" in bare and not bracketed:
        raise UserError(f"{flag} {listen!r}: an IPv6 address goes in brackets before its port: give e.g. "
                        f"[{bare}]:{port}")
    if not bare:
        raise UserError(f"{flag} {listen!r} names no host: give {EXAMPLES.format(port=int(port))}")
    try:
        ipaddress.ip_address(bare)
        return bare, int(port)
    except ValueError:
        pass
    if re.fullmatch(r"[0-9.]+", bare):
        raise UserError(f"{flag} {listen!r}: {bare} is not an IPv4 address written in full (gRPC reads no "
                        f"shorthand such as 127.1): give e.g. {EXAMPLES.format(port=int(port))}")
    if not resolve:
        if not re.fullmatch(r"[A-Za-z0-9]([-A-Za-z0-9.]{0,251}[A-Za-z0-9])?", bare):
            raise UserError(f"{flag} {listen!r}: {bare!r} is not a host name: give e.g. tfdist-coordinator.tfdist.svc:{port}")
        return bare, int(port)
    try:
        socket.getaddrinfo(bare, None, type=socket.SOCK_STREAM)
    except socket.gaierror:
        raise UserError(f"{flag} {listen!r}: the host name {bare!r} does not resolve: give an address of this "
                        f"machine, e.g. {EXAMPLES.format(port=int(port))}") from None
    return bare, int(port)


def bind_failure(flag: str, listen: str, error: OSError | None) -> UserError:
    """The one line for a bind that failed after check_listen passed: in use, or not this machine's."""
    port = listen.rpartition(":")[2]
    if error is not None and error.errno == errno.EADDRNOTAVAIL:
        return UserError(f"cannot listen on {listen}: it is not an address of this machine; choose another "
                         f"{flag} HOST:PORT, e.g. {EXAMPLES.format(port=port)}")
    if error is not None and error.errno == errno.EACCES:
        return UserError(f"cannot listen on {listen}: ports below 1024 need root (or CAP_NET_BIND_SERVICE); "
                         f"choose a port from 1024 up, e.g. {EXAMPLES.format(port=7470)}")
    return UserError(f"cannot listen on {listen}: the address is in use (another coordinator?); choose another "
                     f"{flag} HOST:PORT, or stop what listens there")
