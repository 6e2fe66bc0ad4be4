"""Collectives of small values through a real job store over real sockets, ranks as threads."""

import threading

import pytest

from cluster.agent.job_store import JobStore
from tfdist.collectives import CollectiveError, Collectives
from tfdist.errors import UnavailableError
from tfdist.modes import worker_mode


@pytest.fixture
def store(monkeypatch):
    server = JobStore("127.0.0.1", 0).start()
    monkeypatch.setenv("TFDIST_STORE_SECRET", server.secret)  # as the agent gives it to each worker
    yield server
    server.stop()


def on_every_rank(store, size, fn, timeout=30.0):
    """Runs fn(collectives) on `size` ranks at once; returns their results in rank order."""
    results, errors = [None] * size, []

    def run(rank):
        try:
            results[rank] = fn(Collectives(f"127.0.0.1:{store.port}", rank, size, "mwms", timeout=timeout))
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append((rank, e))

    threads = [threading.Thread(target=run, args=(r,)) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    return results


def test_allgather_gather_broadcast_barrier_across_three_ranks(store):
    def script(c):
        everyone = c.allgather({"rank": c.rank, "path": f"/data/shard-{c.rank}"})
        on_chief = c.gather(c.rank * 10)
        chosen = c.broadcast(f"seed-{c.rank}")  # only the chief's counts
        blob = c.broadcast(b"\x00\xffraw" if c.rank == 0 else None)
        c.barrier()
        return everyone, on_chief, chosen, blob

    results = on_every_rank(store, 3, script)
    for rank, (everyone, on_chief, chosen, blob) in enumerate(results):
        assert everyone == [{"rank": r, "path": f"/data/shard-{r}"} for r in range(3)]
        assert on_chief == ([0, 10, 20] if rank == 0 else None)
        assert chosen == "seed-0" and blob == b"\x00\xffraw"


def test_many_calls_leave_the_store_small(store):
    def script(c):
        for i in range(60):
            assert c.allgather(i) == [i] * 4
            c.broadcast(i)
            c.gather(i)
        c.barrier()

    on_every_rank(store, 4, script)
    assert store.key_count() <= 4 * 4  # each rank keeps at most its keys of the calls since its last full one


def test_a_loop_of_broadcasts_or_gathers_alone_leaves_the_store_small(store):
    """Determined's should_preempt() is a broadcast per step; a chief's metrics may be a gather per step."""
    def script(c):
        for i in range(100):
            assert c.broadcast(i if c.rank == 0 else None) == i
            assert c.gather(i) == ([i] * 3 if c.rank == 0 else None)

    on_every_rank(store, 3, script)
    assert store.key_count() <= 3 * 2  # each rank's keys of its last call and the one before


def test_the_chief_gets_what_the_others_get(store):
    results = on_every_rank(store, 2, lambda c: c.broadcast({1: (2, 3)} if c.rank == 0 else None))
    assert results == [{"1": [2, 3]}, {"1": [2, 3]}]  # as JSON carries it, on every rank alike


def test_a_rank_that_never_comes_is_named_when_the_wait_ends(store):
    c = Collectives(f"127.0.0.1:{store.port}", 0, 3, "mwms", timeout=0.5)
    with pytest.raises(UnavailableError, match=r"^ctx.allgather\(\) \(collective #1\) on rank 0: rank\(s\) 1, 2 did "
                                               r"not arrive within 0.5s$"):
        c.allgather("x")


def test_size_one_returns_at_once_and_misuse_is_one_clear_error(store):
    alone = Collectives(None, 0, 1)
    assert alone.allgather(3) == [3] and alone.gather("a") == ["a"] and alone.broadcast([1]) == [1]
    alone.barrier()
    with pytest.raises(CollectiveError, match="collectives carry JSON-serialisable values or bytes"):
        alone.allgather(object())
    with pytest.raises(CollectiveError, match="the limit is 1048576. Send small values"):
        alone.broadcast("x" * (1 << 20))
    ps = worker_mode("ps").collectives(f"127.0.0.1:{store.port}", 0, 4)  # its ranks do not all run the script
    with pytest.raises(CollectiveError, match=r"^ctx.barrier\(\) needs every rank to call it, but in ps mode only "
                                              "the chief runs your script"):
        ps.barrier()
    with pytest.raises(CollectiveError, match=r"this job has no store \(TFDIST_STORE is not set\)"):
        Collectives(None, 0, 2, "mwms").allgather(1)


def test_a_store_that_is_gone_is_named():
    dead = Collectives("127.0.0.1:9", 0, 2, "mwms", timeout=1)  # port 9: nothing listens
    with pytest.raises(UnavailableError, match=r"the job's store at 127.0.0.1:9 \(served by the agent of node 0\) "
                                               "did not answer"):
        dead.allgather(1)
