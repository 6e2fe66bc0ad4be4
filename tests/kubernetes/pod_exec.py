"""Run by the test kubelet inside a pod's own mount and UTS namespaces (`unshare --mount --uts`, and the pod's
network namespace when it has one): sets the pod's hostname, makes its mounts private, binds each volume
at its mountPath (and the pod's hosts file over /etc/hosts), then becomes the container's command.

    python pod_exec.py --hostname H [--bind SRC:DST]... [--hosts FILE] -- COMMAND [ARG]...
"""

from __future__ import annotations

import argparse
import ctypes
import os
import socket
import sys

MS_REC, MS_PRIVATE, MS_BIND, MS_RDONLY, MS_REMOUNT = 0x4000, 0x40000, 0x1000, 0x1, 0x20


def _mount(source: str | None, target: str, flags: int) -> None:
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    if libc.mount(source.encode() if source else None, target.encode(), None, flags, None) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"mount {source} on {target}: {os.strerror(error)}")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hostname", required=True)
    parser.add_argument("--bind", action="append", default=[])
    parser.add_argument("--read-only", action="append", default=[])
    parser.add_argument("--hosts")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        sys.exit("pod_exec: no command")
    socket.sethostname(args.hostname)
    _mount(None, "/", MS_REC | MS_PRIVATE)  # nothing mounted here reaches the host
    for spec in args.bind:
        source, target = spec.split(":", 1)
        _mount(source, target, MS_BIND | MS_REC)
        if target in args.read_only:
            _mount(None, target, MS_BIND | MS_REMOUNT | MS_RDONLY)
    if args.hosts:
        _mount(args.hosts, "/etc/hosts", MS_BIND)
    try:
        os.execvp(command[0], command)
    except OSError as e:
        sys.stderr.write(f"pod_exec: cannot run {command[0]}: {e.strerror}\n")
        sys.exit(127)


if __name__ == "__main__":
    main(sys.argv[1:])
