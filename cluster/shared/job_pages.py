"""Walking ListJobs' pages, whoever answers them: the gRPC client (rpc.py) and a local launch's in-process
client (cluster/coordinator/in_process.py) list jobs the same way."""

from __future__ import annotations

from typing import Callable

from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb
from tfdist.errors import UnavailableError

JOBS_PAGE = 500  # jobs asked for per ListJobs call (the coordinator caps what it sends)


class JobList(list):
    """Jobs, oldest first, and how many matched the request in all (`total`)."""

    def __init__(self, jobs=(), total: int = 0):
        super().__init__(jobs)
        self.total = total


def walk_pages(fetch: Callable[[pb.ListJobsRequest], pb.ListJobsResponse], states=(), limit: int = 0,
               summary: bool = False, source: str = "the coordinator") -> JobList:
    """The jobs (in `states`: names), every one or the newest `limit`, oldest first, asking `fetch` page after
    page; `.total` says how many matched. `summary`: what a table shows only (no exits, metrics...)."""
    found: list[pb.Job] = []
    token, total = "", 0
    while True:
        size = min(limit - len(found), JOBS_PAGE) if limit else 0
        page = fetch(pb.ListJobsRequest(page_size=size, page_token=token, states=list(states), summary=summary))
        found.extend(page.jobs)
        total = page.total
        if not page.next_page_token or (limit and len(found) >= limit):
            break
        if page.next_page_token == token:
            raise UnavailableError(f"{source} gave the same page twice (page token {token})")
        token = page.next_page_token
    return JobList(reversed(found[:limit] if limit else found), total)
