"""Synchronized preemption's agreement protocol over a real job store: ranks that step in lockstep (as
synchronous training makes them) all stop after the same step, whoever asked and whenever."""

import os
import signal
import threading
import time

import pytest

from cluster.agent.job_store import JobStore
from tfdist.errors import UnavailableError
from tfdist.preemption import SCOPE, Preemption


@pytest.fixture
def store(monkeypatch):
    server = JobStore("127.0.0.1", 0).start()
    monkeypatch.setenv("TFDIST_STORE_SECRET", server.secret)  # as the agent gives it to each worker
    yield server
    server.stop()


def lockstep(store, size, request_at, margin=1, requester=None, steps=600):
    """`size` ranks (threads) stepping together; a request lands once step `request_at` is done."""
    address = f"127.0.0.1:{store.port}"
    watchers = [Preemption(address, r, size, margin=margin) for r in range(size)]
    step_done = threading.Barrier(size)
    stopped = {}

    def rank(r):
        for step in range(1, steps):
            time.sleep(0.01)  # the step's work
            try:
                step_done.wait(timeout=5)  # an all-reduce: nobody finishes a step alone
            except threading.BrokenBarrierError:
                stopped[r] = f"left waiting after step {step - 1}"  # another rank stopped without it
                return
            if r == 0 and step == request_at:
                if requester is None:
                    store.put(SCOPE, "request", b"tfdist preempt")
                else:
                    watchers[requester]._signalled = True  # as its SIGTERM handler does
                    watchers[requester]._requested.set()
            if watchers[r].check(step):
                stopped[r] = step
                return
        stopped[r] = None

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    for w in watchers:
        w.disarm()
    assert sorted(stopped) == list(range(size)), stopped  # every rank stopped by itself (none left waiting)
    return stopped


def test_a_request_in_the_store_stops_every_rank_after_one_step(store):
    stopped = lockstep(store, 3, request_at=5)
    assert len(set(stopped.values())) == 1 and next(iter(stopped.values())) > 5, stopped


def test_a_signal_to_one_worker_stops_them_all(store):
    stopped = lockstep(store, 3, request_at=4, requester=2)
    assert len(set(stopped.values())) == 1 and None not in stopped.values(), stopped
    assert store.get(SCOPE, "request") == b"SIGTERM to rank 2"


def test_the_margin_covers_ranks_that_run_ahead(store):
    stopped = lockstep(store, 2, request_at=3, margin=4)
    assert len(set(stopped.values())) == 1 and next(iter(stopped.values())) >= 3 + 4, stopped


def test_the_chief_names_ranks_that_never_learn_the_stop_step(store):
    chief = Preemption(f"127.0.0.1:{store.port}", 0, 3, ack_timeout=0.5)
    store.put(SCOPE, "request", b"x")
    chief._requested.set()
    with pytest.raises(UnavailableError, match=r"rank\(s\) 1, 2 did not learn the stop step \(8\) within 0.5s"):
        chief.check(7)
    chief.disarm()


def test_one_process_stops_at_the_next_step_after_sigterm():
    before = signal.getsignal(signal.SIGTERM)
    alone = Preemption(None, 0, 1)
    assert alone.check(1) is False  # arms: SIGTERM now asks for a stop
    os.kill(os.getpid(), signal.SIGTERM)
    assert alone.check(2) is True and alone.stopped_at == 2
    alone.disarm()
    assert signal.getsignal(signal.SIGTERM) == before  # SIGTERM does again what it did
