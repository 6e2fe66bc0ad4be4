"""`tfdist dashboard`: finds the user's credential as `tfdist jobs` does, listens (loopback by default), prints
the login link and serves until SIGTERM or Ctrl-C (within a second: the server polls its stop flag every
0.2 s and its request threads are daemons)."""

from __future__ import annotations

import signal
import sys
import threading

from cluster.client.dashboard import server as http
from cluster.client.dashboard.api import Api
from cluster.shared.auth import find_credential, is_loopback_listen
from cluster.shared.rpc import Client

RPC_TIMEOUT = 5.0  # seconds each of the dashboard's calls may take; then the page says the coordinator did not answer


def run(args) -> int:
    address, credential = find_credential(args.coordinator, args.credentials)
    client = Client(address, credential, timeout=RPC_TIMEOUT)
    try:
        api = Api(client, credential.principal)
        server, gate = http.serve(api, args.host, args.port)
        try:
            return _serve(server, gate, api, args)
        finally:
            server.server_close()
    finally:
        client.close()


def _serve(server: http.Server, gate: http.Gate, api: Api, args) -> int:
    base = f"http://{http.url_host(args.host)}:{server.server_address[1]}"
    login = f"{base}/login?token={gate.token}"
    print(f"tfdist dashboard of the coordinator at {api.client.address} (as {api.principal}) on {base}/\n"
          f"log in with {login}\n(keep the link to yourself: its token is the only way in); Ctrl-C stops it",
          flush=True)
    if not is_loopback_listen(f"{args.host}:0"):
        sys.stderr.write(f"tfdist: warning: the dashboard listens on {args.host} over plain HTTP: its token, cookie "
                         "and pages cross the network unencrypted and readable; prefer the default 127.0.0.1 with "
                         f"an ssh tunnel (ssh -L {server.server_address[1]}:127.0.0.1:{server.server_address[1]} "
                         "HOST)\n")
    probe = api.cluster()
    if probe.status != 200:
        sys.stderr.write(f"tfdist: warning: {probe.document['error']}; the page says so until it answers\n")
    sys.stderr.flush()
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, name="dashboard",
                              daemon=True)
    thread.start()
    if args.open:
        _open(login)
    stop.wait()
    server.shutdown()  # returns within poll_interval; requests still waiting on the coordinator are daemons
    sys.stderr.write("tfdist: dashboard stopped\n")
    return 0


def _open(url: str) -> None:
    import webbrowser

    try:
        opened = webbrowser.open(url)
    except Exception:  # webbrowser runs whatever browser the machine has; its failure is not the dashboard's
        opened = False
    if not opened:
        sys.stderr.write("tfdist: no browser could be opened here; open the login link yourself\n")
