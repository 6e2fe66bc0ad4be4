"""Rank- and node-scoped downloads, with several real processes at once and a real HTTP server."""

import http.server
import multiprocessing
import os
import threading
import time

import pytest

from tfdist import context_from_env
from tfdist.data import COMPLETE_MARKER, download, scoped_dir
from tfdist.errors import DownloadError

PAYLOAD = b"digits-data " * 1000


class _Handler(http.server.BaseHTTPRequestHandler):
    hits: dict = {}

    def do_GET(self):
        _Handler.hits[self.path] = _Handler.hits.get(self.path, 0) + 1
        if self.path == "/truncated.bin":
            self.send_response(200)
            self.send_header("Content-Length", str(len(PAYLOAD)))
            self.end_headers()
            self.wfile.write(PAYLOAD[:100])
            self.close_connection = True
            return
        if self.path == "/missing.bin":
            self.send_error(404)
            return
        time.sleep(0.3)  # slow enough that concurrent callers overlap
        self.send_response(200)
        self.send_header("Content-Length", str(len(PAYLOAD)))
        self.end_headers()
        self.wfile.write(PAYLOAD)

    def log_message(self, *args):
        pass


@pytest.fixture
def http_url():
    _Handler.hits = {}
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _ctx(rank, local_rank=None, node_rank=0, size=4, job="job-1"):
    return context_from_env({"TFDIST_RANK": str(rank), "TFDIST_SIZE": str(size), "TFDIST_JOB_ID": job,
                             "TFDIST_LOCAL_RANK": str(rank if local_rank is None else local_rank),
                             "TFDIST_NODE_RANK": str(node_rank)})


def _worker(url, root, scope, rank, counter_dir, queue):
    def fetch(dest):
        # Count every real fetch, then take a while so the others overlap.
        open(os.path.join(counter_dir, f"fetch-{os.getpid()}"), "w").close()
        time.sleep(0.3)
        with open(os.path.join(dest, "data.txt"), "w") as f:
            f.write("ok")
    source = url if url else fetch
    try:
        queue.put((rank, download(source, scope=scope, name="ds", root=root, ctx=_ctx(rank))))
    except Exception as e:  # pragma: no cover - reported to the test
        queue.put((rank, repr(e)))


def _run_ranks(url, root, scope, counter_dir, ranks=range(4)):
    mp = multiprocessing.get_context("fork")
    queue = mp.Queue()
    procs = [mp.Process(target=_worker, args=(url, root, scope, r, counter_dir, queue)) for r in ranks]
    for p in procs:
        p.start()
    results = dict(queue.get(timeout=60) for _ in procs)
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    return results


def test_scoped_dir_layout():
    assert scoped_dir("/d", "mnist", "rank", 3, 1) == "/d/mnist/rank3"
    assert scoped_dir("/d", "mnist", "node", 3, 1) == "/d/mnist/node1"
    with pytest.raises(DownloadError, match="scope='job' is not valid"):
        scoped_dir("/d", "x", "job", 0, 0)


def test_node_scope_fetches_once_per_node_with_four_processes(tmp_path, http_url):
    results = _run_ranks(f"{http_url}/data.bin", str(tmp_path / "root"), "node", str(tmp_path))
    assert set(results.values()) == {str(tmp_path / "root" / "ds" / "node0")}
    assert _Handler.hits == {"/data.bin": 1}
    with open(tmp_path / "root" / "ds" / "node0" / "data.bin", "rb") as f:
        assert f.read() == PAYLOAD


def test_rank_scope_fetches_once_per_rank_with_a_function(tmp_path):
    counter = tmp_path / "count"
    counter.mkdir()
    results = _run_ranks(None, str(tmp_path / "root"), "rank", str(counter))
    assert results == {r: str(tmp_path / "root" / "ds" / f"rank{r}") for r in range(4)}
    assert len(os.listdir(counter)) == 4
    for r in range(4):
        assert (tmp_path / "root" / "ds" / f"rank{r}" / "data.txt").read_text() == "ok"
    # Complete: a second round fetches nothing.
    _run_ranks(None, str(tmp_path / "root"), "rank", str(counter))
    assert len(os.listdir(counter)) == 4


def test_file_url(tmp_path):
    src = tmp_path / "src.npz"
    src.write_bytes(b"abc")
    out = download(src.as_uri(), root=str(tmp_path / "r"), ctx=_ctx(0))
    assert open(os.path.join(out, "src.npz"), "rb").read() == b"abc"
    assert out == str(tmp_path / "r" / "src" / "rank0")


def test_partial_download_is_never_taken_for_complete(tmp_path, http_url):
    root = str(tmp_path / "r")
    with pytest.raises(DownloadError, match="cut short: got 100 of 12000 bytes"):
        download(f"{http_url}/truncated.bin", name="t", root=root, ctx=_ctx(0))
    assert not os.path.exists(os.path.join(root, "t", "rank0"))

    calls = []

    def flaky(dest):
        calls.append(dest)
        with open(os.path.join(dest, "half"), "w") as f:
            f.write("x")
        if len(calls) == 1:
            raise RuntimeError("network dropped")

    with pytest.raises(DownloadError, match="RuntimeError: network dropped"):
        download(flaky, name="f", root=root, ctx=_ctx(0))
    assert not os.path.exists(os.path.join(root, "f", "rank0"))
    out = download(flaky, name="f", root=root, ctx=_ctx(0))
    assert len(calls) == 2 and os.path.exists(os.path.join(out, COMPLETE_MARKER))
    # The failure marker is cleared and no staging directory is left behind.
    assert sorted(os.listdir(os.path.join(root, "f"))) == ["rank0", "rank0.lock"]


def test_non_chief_sees_the_local_chiefs_failure_instead_of_hanging(tmp_path):
    root = str(tmp_path / "r")

    def broken(dest):
        raise RuntimeError("disk full")

    with pytest.raises(DownloadError):
        download(broken, scope="node", name="b", root=root, ctx=_ctx(0, job="job-9"))
    with pytest.raises(DownloadError, match="the local chief failed to download b: RuntimeError: disk full"):
        download(broken, scope="node", name="b", root=root, ctx=_ctx(1, job="job-9"))


def test_bad_sources_are_named(tmp_path, http_url):
    with pytest.raises(DownloadError, match="scheme 's3' is not supported"):
        download("s3://bucket/x", root=str(tmp_path), ctx=_ctx(0))
    with pytest.raises(DownloadError, match="HTTP Error 404"):
        download(f"{http_url}/missing.bin", root=str(tmp_path), ctx=_ctx(0))
