"""`tfdist dashboard`: finds the user's credential as `tfdist jobs` does, listens (loopback by default), prints
the login link and serves until SIGTERM or Ctrl-C (within seconds: the server polls its stop flag every 0.2 s
and its request threads are daemons). `tfdist tensorboard ID` serves through the same server and login."""

from __future__ import annotations

import html
import os
import shutil
import signal
import sys
import tempfile
import threading

from cluster.client.dashboard import server as http
from cluster.client.dashboard.api import Api
from cluster.client.dashboard.gate import url_host
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


def base_url(server: http.Server, host: str) -> str:
    return f"http://{url_host(host)}:{server.server_address[1]}"


def login_url(server: http.Server, gate: http.Gate, host: str) -> str:
    return f"{base_url(server, host)}/login?token={gate.token}"


def warn_if_exposed(server: http.Server, host: str, what: str) -> None:
    if not is_loopback_listen(f"{host}:0"):
        port = server.server_address[1]
        sys.stderr.write(f"tfdist: warning: {what} listens on {host} over plain HTTP: its token, cookie and pages "
                         "cross the network unencrypted and readable; prefer the default 127.0.0.1 with an ssh "
                         f"tunnel (ssh -L {port}:127.0.0.1:{port} HOST)\n")


def _serve(server: http.Server, gate: http.Gate, api: Api, args) -> int:
    base = base_url(server, args.host)
    login = login_url(server, gate, args.host)
    print(f"tfdist dashboard of the coordinator at {api.client.address} (as {api.principal}) on {base}/\n"
          f"log in with {login}\n(keep the link to yourself: its token is the only way in); Ctrl-C stops it",
          flush=True)
    warn_if_exposed(server, args.host, "the dashboard")
    probe = api.cluster()
    if probe.status != 200:
        sys.stderr.write(f"tfdist: warning: {probe.document['error']}; the page says so until it answers\n")
    sys.stderr.flush()
    serve_until_stopped(server, login if args.open else None)
    sys.stderr.write("tfdist: dashboard stopped\n")
    return 0


def serve_until_stopped(server: http.Server, open_link: str | None = None) -> None:
    """Serve on a thread until SIGTERM or Ctrl-C; with `open_link`, open it in this machine's browser first."""
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, name="dashboard",
                              daemon=True)
    thread.start()
    handover = _open(open_link) if open_link else None
    try:
        stop.wait()
    finally:
        server.shutdown()  # returns within poll_interval; requests still waiting on the coordinator are daemons
        if handover:
            shutil.rmtree(handover, ignore_errors=True)


def handover_page(link: str) -> str:
    """A 0600 page in a new 0700 directory that sends the browser on to `link`: the browser's command line,
    which every user of the machine can read, names the file and not the token. Returns the directory."""
    folder = tempfile.mkdtemp(prefix="tfdist-dashboard-")  # 0700, made by us
    path, shown = os.path.join(folder, "login.html"), html.escape(link, quote=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(f'<!doctype html><meta charset="utf-8"><meta http-equiv="refresh" content="0;url={shown}">'
                f'<title>tfdist</title><a href="{shown}">log in</a>\n')
    return folder


def _open(link: str) -> str:
    import webbrowser

    folder = handover_page(link)
    try:
        opened = webbrowser.open("file://" + os.path.join(folder, "login.html"))
    except Exception:  # webbrowser runs whatever browser the machine has; its failure is not the dashboard's
        opened = False
    if not opened:
        sys.stderr.write("tfdist: no browser could be opened here; open the login link yourself\n")
    return folder
