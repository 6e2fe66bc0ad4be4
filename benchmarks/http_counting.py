"""Imported first into a process whose Kubernetes API traffic a benchmark measures (any version of tfdist's
code, so both sides of a comparison are counted alike): every HTTP request httpx sends (lightkube's) is
counted by verb and resource, and every byte read back, and the totals are written as JSON to the file
$TFDIST_BENCH_HTTP_COUNTS each second (replaced whole: a reader never sees half of it)."""

from __future__ import annotations

import collections
import json
import os
import re
import threading

import httpx2 as httpx  # what lightkube sends its requests with

COUNTS = os.environ["TFDIST_BENCH_HTTP_COUNTS"]
_lock = threading.Lock()
requests: collections.Counter[str] = collections.Counter()  # "VERB resource" -> requests sent
received: collections.Counter[str] = collections.Counter()  # "VERB resource" -> bytes read back
_send, _iter_raw = httpx.Client.send, httpx.Response.iter_raw
_RESOURCE = re.compile(r"/(?:api/v1|apis/[^/]+/[^/]+)(?:/namespaces/[^/]+)?/([a-z]+)")


def what(request: httpx.Request) -> str:
    """"LIST pods", "WATCH nodes", "POST events"...: the verb the API server would log, and the resource."""
    found = _RESOURCE.search(request.url.path)
    resource = found.group(1) if found else request.url.path
    named = found is not None and request.url.path.rstrip("/") != found.group(0)
    verb = request.method
    if verb == "GET" and not named:
        verb = "WATCH" if request.url.params.get("watch") in ("true", "1") else "LIST"
    scope = "" if "/namespaces/" in request.url.path else " (cluster-wide)"
    return f"{verb} {resource}{scope}"


def send(self, request, *args, **kwargs):
    key = what(request)
    with _lock:
        requests[key] += 1
    request.extensions["tfdist_counted_as"] = key  # a whole answer is read inside send: iter_raw finds it here
    return _send(self, request, *args, **kwargs)


def iter_raw(self, *args, **kwargs):
    key = self.request.extensions.get("tfdist_counted_as", "other")
    for chunk in _iter_raw(self, *args, **kwargs):
        with _lock:
            received[key] += len(chunk)
        yield chunk


def _write_forever() -> None:
    stop = threading.Event()
    while not stop.wait(1.0):
        with _lock:
            text = json.dumps({"requests": dict(requests), "bytes": dict(received)})
        with open(f"{COUNTS}.tmp", "w") as f:
            f.write(text)
        os.replace(f"{COUNTS}.tmp", COUNTS)


httpx.Client.send = send  # type: ignore[method-assign]
httpx.Response.iter_raw = iter_raw  # type: ignore[method-assign]
threading.Thread(target=_write_forever, name="http-counting", daemon=True).start()
