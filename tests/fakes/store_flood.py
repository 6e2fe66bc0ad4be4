"""A hostile client of a job's store (tests/unit/test_job_store_abuse.py, benchmarks/job_store_abuse.py):
holds COUNT connections open that never finish a request, reopening any the store closes, until stdin
closes or HOLD seconds pass. Modes: `halfopen` sends a partial request line once; `slowloris` sends one
more byte every 0.2 s. Prints one line when its connections are open, or after 5 s ("open N refused R
pending P": P connections the kernel has not accepted yet), and one when
it stops ("closed-by-store C reopened O refused R").

    python store_flood.py PORT COUNT MODE HOLD   (host 127.0.0.1, or HOST:PORT)
"""

import errno
import resource
import select
import socket
import sys
import time


def _open(host: str, port: int) -> socket.socket | None:
    s = socket.socket()
    s.setblocking(False)
    code = s.connect_ex((host, port))
    if code not in (0, errno.EINPROGRESS):
        s.close()
        return None
    return s


def main() -> None:
    target, count, mode, hold = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
    host, _, port = target.rpartition(":")
    host, port_n = host or "127.0.0.1", int(port)
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    line = b"GET /tfdist/1-0 HTTP/1.1\r\n"
    stats = {"refused": 0, "reopened": 0, "closed": 0}
    conns: dict[int, tuple[socket.socket, int]] = {}  # fd -> (socket, bytes of the request line sent; -1 none)
    poller = select.poll()

    def add() -> None:
        s = _open(host, port_n)
        if s is None:
            stats["refused"] += 1
            return
        conns[s.fileno()] = (s, -1)
        poller.register(s, select.POLLOUT)

    for _ in range(count):
        add()
    deadline = time.monotonic() + hold
    announced = False
    last_trickle = time.monotonic()
    while time.monotonic() < deadline:
        if select.select([sys.stdin], [], [], 0)[0] and not sys.stdin.readline():
            break
        for fd, event in poller.poll(50):
            s, sent = conns[fd]
            if event & (select.POLLIN | select.POLLHUP | select.POLLERR):
                try:
                    data = s.recv(4096)
                except OSError:
                    data = b""
                if not data:  # refused, or closed by the store: open another in its place
                    stats["refused" if sent < 0 else "closed"] += 1
                    poller.unregister(fd)
                    del conns[fd]
                    s.close()
                    add()
                    stats["reopened"] += 1
                continue
            if event & select.POLLOUT and sent < 0:
                try:
                    s.send(line[:5])
                    conns[fd] = (s, 5)
                except OSError:
                    pass
                poller.modify(fd, select.POLLIN)
        if mode == "slowloris" and time.monotonic() - last_trickle > 0.2:
            last_trickle = time.monotonic()
            for fd, (s, sent) in list(conns.items()):
                if 0 < sent < len(line):
                    try:
                        s.send(line[sent:sent + 1])
                        conns[fd] = (s, sent + 1)
                    except OSError:
                        pass
        pending = sum(sent < 0 for _, sent in conns.values())
        if not announced and (not pending or time.monotonic() > deadline - hold + 5):
            print(f"open {len(conns) - pending} refused {stats['refused']} pending {pending}", flush=True)
            announced = True
    print(f"closed-by-store {stats['closed']} reopened {stats['reopened']} refused {stats['refused']}", flush=True)
    for s, _ in conns.values():
        s.close()


if __name__ == "__main__":
    main()
