"""The dashboard's login, session cookie and CSRF checks, over real HTTP on a loopback socket (the server of
`tfdist dashboard`, with a stand-in for the coordinator's client: what is tested here is the gate)."""

import http.client
import threading

import pytest

from cluster.client.dashboard import gate as gate_module
from cluster.client.dashboard import server as http_server
from cluster.client.dashboard.api import Api
from cluster.shared import jobspec
from cluster.shared.credentials import Principal
from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb
from cluster.shared.rpc import JobList
from tests.specs import flat_spec

TOKEN = "the-token-" + "x" * 30
SPEC = jobspec.to_pb(flat_spec(["true"], 1, name="train"))


class Coordinator:
    """What the dashboard asks a coordinator, answered from memory; records the actions asked."""

    address = "127.0.0.1:1"

    def __init__(self):
        self.asked = []

    def list_agents(self):
        return [pb.AgentInfo(name="n1", slots=2, free_slots=1, state="ALIVE", jobs=["1-ab"])]

    def jobs(self, states=(), limit=0, summary=False):
        found = [pb.Job(id="1-ab", spec=SPEC, state="RUNNING", owner="alice")] if "RUNNING" in states else []
        return JobList(found, len(found))

    def job(self, job_id):
        return pb.Job(id="1-ab", spec=SPEC, state="RUNNING", owner="alice")

    def cancel(self, job_id):
        self.asked.append(("cancel", job_id))
        return "CANCELED"


@pytest.fixture
def dashboard():
    coordinator = Coordinator()
    server, gate = http_server.serve(Api(coordinator, Principal("user", "alice")), "127.0.0.1", 0, token=TOKEN)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], gate, coordinator
    finally:
        server.shutdown()
        server.server_close()


def ask(port, method, path, headers=None, body=None, host=None):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        sent = {"Host": host or f"127.0.0.1:{port}", **(headers or {})}
        connection.request(method, path, body=body, headers=sent)
        answer = connection.getresponse()
        return answer.status, dict(answer.getheaders()), answer.read().decode()
    finally:
        connection.close()


def logged_in(port) -> tuple[str, str]:
    """(the Cookie header of a fresh session, its CSRF token)."""
    status, headers, _ = ask(port, "GET", f"/login?token={TOKEN}")
    assert status == 303 and headers["Location"] == "/"
    cookie = headers["Set-Cookie"].split(";")[0]
    status, _, body = ask(port, "GET", "/api/session", {"Cookie": cookie})
    assert status == 200
    import json

    return cookie, json.loads(body)["csrf"]


def test_without_a_session_only_the_login_answers(dashboard):
    port, gate, _ = dashboard
    for path in ("/", "/cluster", "/jobs/1-ab", "/api/jobs", "/api/cluster", "/api/jobs/1-ab", "/api/jobs/1-ab/logs",
                 "/api/session"):
        status, headers, body = ask(port, "GET", path)
        assert status == 401, path
        assert "1-ab" not in body and "alice" not in body and "n1" not in body, (path, body)
        if path.startswith("/api/"):
            assert body == '{"error": "log in first: open the login link `tfdist dashboard` printed"}'
        else:
            assert '<form method="post" action="/login">' in body
    status, _, body = ask(port, "GET", "/api/jobs", {"Cookie": f"{gate.cookie}=made-up"})
    assert status == 401  # a cookie the dashboard did not give
    status, _, body = ask(port, "GET", "/assets/style.css")
    assert status == 200 and "font" in body  # the assets hold no data: the login page needs the style


def test_the_login_link_sets_a_strict_http_only_session_cookie(dashboard):
    port, gate, _ = dashboard
    status, headers, body = ask(port, "GET", "/login?token=wrong")
    assert status == 403 and "Set-Cookie" not in headers and "not this dashboard&#x27;s" in body
    status, headers, _ = ask(port, "GET", f"/login?token={TOKEN}")
    assert status == 303 and headers["Location"] == "/"
    name, _, rest = headers["Set-Cookie"].partition("=")
    value, *attributes = rest.split("; ")
    assert name == gate.cookie == f"tfdist_dashboard_{port}" and len(value) >= 40 and value != TOKEN
    assert sorted(attributes) == ["HttpOnly", "Path=/", "SameSite=Strict"]
    status, _, body = ask(port, "GET", "/api/jobs", {"Cookie": f"other=1; {name}={value}"})
    assert status == 200 and '"id": "1-ab"' in body and '"nodes": ["n1"]' in body
    status, headers, body = ask(port, "GET", "/", {"Cookie": f"{name}={value}"})
    assert status == 200 and '<script src="/assets/app.js">' in body
    csp = headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp and "unsafe-inline" not in csp
    assert headers["X-Content-Type-Options"] == "nosniff" and headers["Cache-Control"] == "no-store"


def test_the_login_form_posts_the_token_from_the_page_itself(dashboard):
    port, _, _ = dashboard
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    origin = {"Origin": f"http://127.0.0.1:{port}"}
    status, headers, _ = ask(port, "POST", "/login", {**form, **origin}, f"token={TOKEN}")
    assert status == 303 and "HttpOnly" in headers["Set-Cookie"]
    status, headers, _ = ask(port, "POST", "/login", form, f"token={TOKEN}")  # no Origin: not from our page
    assert status == 403 and "Set-Cookie" not in headers
    status, headers, _ = ask(port, "POST", "/login", {**form, **origin}, "token=wrong")
    assert status == 403 and "Set-Cookie" not in headers
    status, _, _ = ask(port, "POST", "/login", {**form, **origin, "Content-Length": "100000"})
    assert status == 413


def test_actions_need_the_session_the_origin_and_the_csrf_header(dashboard):
    port, _, coordinator = dashboard
    cookie, csrf = logged_in(port)
    own = f"http://127.0.0.1:{port}"
    refused = [
        ({}, 403),  # no session, no Origin
        ({"Cookie": cookie}, 403),  # no Origin (not a browser's request from the page)
        ({"Cookie": cookie, "Origin": f"http://127.0.0.1:{port + 1}", http_server.CSRF_HEADER: csrf}, 403),  # port
        ({"Cookie": cookie, "Origin": "http://evil.example", http_server.CSRF_HEADER: csrf}, 403),
        ({"Cookie": cookie, "Origin": own}, 403),  # no CSRF header: a form post from a page of another port
        ({"Cookie": cookie, "Origin": own, http_server.CSRF_HEADER: csrf[:-1] + "A"}, 403),
    ]
    for headers, expected in refused:
        status, _, body = ask(port, "POST", "/api/jobs/1-ab/cancel", headers)
        assert status == expected, (headers, body)
    assert coordinator.asked == []
    status, _, body = ask(port, "GET", "/api/jobs/1-ab/cancel", {"Cookie": cookie})  # a GET changes nothing
    assert status == 404 and coordinator.asked == []
    status, _, body = ask(port, "POST", "/api/jobs/1-ab/cancel",
                          {"Cookie": cookie, "Origin": own, http_server.CSRF_HEADER: csrf})
    assert status == 200 and body == '{"state": "CANCELED", "message": "job 1-ab: CANCELED"}'
    assert coordinator.asked == [("cancel", "1-ab")]


def test_a_foreign_host_name_is_refused(dashboard):
    port, _, _ = dashboard
    cookie, _ = logged_in(port)
    for host in (f"evil.example:{port}", f"127.0.0.1:{port + 1}", ""):
        status, _, _ = ask(port, "GET", "/api/jobs", {"Cookie": cookie}, host=host or "-")
        assert status == 421, host
    for host in (f"localhost:{port}", f"127.0.0.1:{port}"):
        assert ask(port, "GET", "/api/jobs", {"Cookie": cookie}, host=host)[0] == 200


def test_logout_forgets_the_session(dashboard):
    port, _, _ = dashboard
    cookie, csrf = logged_in(port)
    other, _ = logged_in(port)
    status, _, _ = ask(port, "POST", "/logout", {"Cookie": cookie, "Origin": f"http://127.0.0.1:{port}",
                                                 http_server.CSRF_HEADER: csrf})
    assert status == 200
    assert ask(port, "GET", "/api/jobs", {"Cookie": cookie})[0] == 401
    assert ask(port, "GET", "/api/jobs", {"Cookie": other})[0] == 200  # another login stays


def test_bad_requests_are_one_line_errors(dashboard):
    port, _, _ = dashboard
    cookie, _ = logged_in(port)
    for path, status, error in [
        ("/api/jobs/1-ab/logs?after=x", 400, "after='x' is not an integer"),
        ("/api/jobs/1-ab/logs?rank=-2", 400, "rank=-2 is out of range"),
        ("/api/jobs/%3Cscript%3E", 400, "bad job id '%3Cscript%3E'"),
        ("/api/nothing", 404, "no such API: /api/nothing"),
    ]:
        got, _, body = ask(port, "GET", path, {"Cookie": cookie})
        assert got == status and error in body, (path, body)


def test_the_gate_keeps_a_bounded_number_of_sessions():
    gate = gate_module.Gate(1, token="t")
    assert gate.login("T") is None and gate.login("") is None
    first = gate.login("t")
    sessions = [gate.login("t") for _ in range(gate_module.MAX_SESSIONS)]
    assert gate.csrf(f"{gate.cookie}={first}") is None  # the oldest was forgotten
    assert all(gate.csrf(f"{gate.cookie}={s}") for s in sessions)
    assert len({gate.csrf(f"{gate.cookie}={s}") for s in sessions}) == len(sessions)  # a CSRF token each


def test_hosts_and_ports():
    assert gate_module.allowed_hosts("0.0.0.0", 80) is None
    assert gate_module.allowed_hosts("127.0.0.1", 7490) == {"127.0.0.1:7490", "localhost:7490", "[::1]:7490"}
    assert "10.0.0.5:7490" in gate_module.allowed_hosts("10.0.0.5", 7490)
    assert gate_module.url_host("::1") == "[::1]"
    taken = http_server.listen("127.0.0.1", 0)
    try:
        with pytest.raises(Exception, match=rf"cannot listen on 127.0.0.1:{taken.server_address[1]}: .*--port"):
            http_server.listen("127.0.0.1", taken.server_address[1])
    finally:
        taken.server_close()


def echo_board(environ, start_response):
    """A stand-in for TensorBoard's WSGI application: answers what it was asked."""
    import json

    body = environ["wsgi.input"].read(int(environ["CONTENT_LENGTH"] or 0))
    start_response("200 OK", [("Content-Type", "application/json"), ("Connection", "close"),
                              ("Content-Security-Policy", "default-src 'self'")])
    return [json.dumps({"path": environ["PATH_INFO"], "query": environ["QUERY_STRING"], "body": body.decode(),
                        "cookie": environ.get("HTTP_COOKIE")}).encode()]


@pytest.fixture
def with_tensorboard():
    from cluster.client import tensorboard_app

    made = []
    boards = tensorboard_app.Boards(make=lambda directory, prefix: made.append((directory, prefix)) or echo_board)
    boards.open("1-ab", "/events")
    server, gate = http_server.serve(Api(Coordinator(), Principal("user", "alice"), boards=boards), "127.0.0.1", 0,
                                     token=TOKEN)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], made
    finally:
        server.shutdown()
        server.server_close()


def test_tensorboard_is_served_behind_the_session(with_tensorboard):
    import json

    port, made = with_tensorboard
    assert made == [("/events", "/tensorboard/1-ab")]  # TensorBoard's --path_prefix: its links stay under it
    status, _, body = ask(port, "GET", "/tensorboard/1-ab/data/runs")
    assert status == 401 and '<form method="post" action="/login">' in body  # no session: the login, not the board
    cookie, _ = logged_in(port)
    status, headers, _ = ask(port, "GET", "/tensorboard/1-ab", {"Cookie": cookie})
    assert status == 303 and headers["Location"] == "/tensorboard/1-ab/"
    status, headers, body = ask(port, "GET", "/tensorboard/1-ab/data/plugin/scalars/tags?run=.", {"Cookie": cookie})
    assert status == 200 and json.loads(body) == {"path": "/tensorboard/1-ab/data/plugin/scalars/tags",
                                                  "query": "run=.", "body": "", "cookie": None}
    assert headers["Content-Security-Policy"] == "default-src 'self'"  # TensorBoard's own policy for its pages
    assert headers["X-Frame-Options"] == "SAMEORIGIN" and headers["Referrer-Policy"] == "no-referrer"
    assert headers.get("Connection") != "close"  # hop-by-hop headers are the server's, not the application's
    form = {"Cookie": cookie, "Content-Type": "application/x-www-form-urlencoded"}
    status, _, body = ask(port, "POST", "/tensorboard/1-ab/data/plugin/scalars/scalars_multirun", form, "tag=loss")
    assert status == 403 and "did not come from the dashboard's own page" in body  # no Origin: not its page
    status, _, body = ask(port, "POST", "/tensorboard/1-ab/data/plugin/scalars/scalars_multirun",
                          {**form, "Origin": f"http://127.0.0.1:{port}"}, "tag=loss")
    assert status == 200 and json.loads(body)["body"] == "tag=loss"
    status, _, body = ask(port, "GET", "/tensorboard/2-zz/", {"Cookie": cookie})  # Coordinator knows only 1-ab
    assert status == 404 and body == "job 2-zz's TensorBoard is at /tensorboard/1-ab/"
    status, _, body = ask(port, "GET", "/tensorboard/%3Cx%3E/", {"Cookie": cookie})
    assert status == 400 and body == "bad job id '%3Cx%3E'"


def test_too_many_query_fields_is_a_bad_request_not_a_crash(dashboard, caplog):
    port, _, _ = dashboard
    query = "&".join(f"f{i}=1" for i in range(20))
    status, _, body = ask(port, "GET", f"/login?token={TOKEN}&{query}")
    assert status == 400 and body == "too many query fields"
    form = {"Content-Type": "application/x-www-form-urlencoded", "Origin": f"http://127.0.0.1:{port}"}
    status, _, body = ask(port, "POST", "/login", form, f"token={TOKEN}&{query}")
    assert status == 400 and "That was not a login form." in body
    assert not [r for r in caplog.records if r.levelname == "ERROR"]


def test_a_client_that_hangs_up_is_not_an_error(caplog):
    server = http_server.Server(("127.0.0.1", 0))
    try:
        for error, logged in ((BrokenPipeError(32, "Broken pipe"), False), (ConnectionResetError(), False),
                              (ValueError("a bug"), True)):
            caplog.clear()
            try:
                raise error
            except Exception:
                server.handle_error(None, ("127.0.0.1", 5))
            assert bool([r for r in caplog.records if r.levelname == "ERROR"]) is logged, error
    finally:
        server.server_close()


def test_connections_beyond_the_cap_are_closed_and_the_server_goes_on(monkeypatch):
    import socket
    import time

    monkeypatch.setattr(http_server, "MAX_CONNECTIONS", 3)
    server, _ = http_server.serve(Api(Coordinator(), Principal("user", "alice")), "127.0.0.1", 0, token=TOKEN)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    port = server.server_address[1]
    idle = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(3)]  # say nothing: held
    try:
        extra = socket.create_connection(("127.0.0.1", port), timeout=10)
        extra.sendall(b"GET /login HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % port)
        assert extra.recv(100) == b""  # closed unanswered: three are being served
        extra.close()
        idle.pop().close()  # one leaves: its thread ends when it reads the end of the stream
        deadline = time.monotonic() + 30
        while True:
            status = None
            try:
                status = ask(port, "GET", "/login")[0]
            except (ConnectionError, http.client.HTTPException):
                pass
            if status == 200 or time.monotonic() > deadline:
                break
        assert status == 200
    finally:
        for s in idle:
            s.close()
        server.shutdown()
        server.server_close()


def test_a_session_unused_for_long_ends():
    now = [1000.0]
    gate = gate_module.Gate(1, token="t", clock=lambda: now[0])
    session = gate.login("t")
    cookie = f"{gate.cookie}={session}"
    now[0] += gate_module.SESSION_IDLE - 1
    assert gate.csrf(cookie)  # used: its idle time starts again
    now[0] += gate_module.SESSION_IDLE - 1
    assert gate.csrf(cookie)
    now[0] += gate_module.SESSION_IDLE + 1
    assert gate.csrf(cookie) is None
    assert gate.csrf(cookie) is None  # and it stays ended


def test_open_hands_the_login_link_over_in_a_private_file_not_on_the_browsers_command_line(monkeypatch):
    import os
    import stat
    import webbrowser

    from cluster.client.dashboard import command

    opened = []
    monkeypatch.setattr(webbrowser, "open", lambda url: opened.append(url) or True)
    link = f"http://127.0.0.1:7490/login?token={TOKEN}"
    folder = command._open(link)
    try:
        assert len(opened) == 1 and TOKEN not in opened[0] and opened[0] == f"file://{folder}/login.html"
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
        page = os.path.join(folder, "login.html")
        assert stat.S_IMODE(os.stat(page).st_mode) == 0o600 and os.stat(page).st_uid == os.getuid()
        assert f'content="0;url={link}"' in open(page).read()
    finally:
        import shutil

        shutil.rmtree(folder)
