"""The executor of a start plan with real processes and a real store: results, exits, progress, stops."""

import socket
import sys
import threading

from cluster.agent.job_run import JobRun, RunState
from cluster.agent.start_plan import NodeFacts, plan_start
from cluster.shared.model import Address, WorkerExit
from cluster.shared.modes.base import ProcessPlan
from cluster.shared.work import StartTask
from tests.conftest import MARKER_VAR
from tfdist import envvars
from tfdist.collectives import store_request
from tfdist.errors import UnavailableError


def _task(code, ranks=(0, 1), store_port=0, working_dir=""):
    processes = tuple(ProcessPlan(rank=r, node_rank=0, local_rank=i, local_size=len(ranks), port=0, gpus=(),
                                  replicas=1, env={"RANK": str(r)}) for i, r in enumerate(ranks))
    return StartTask("9-z", working_dir, (sys.executable, "-c", code), processes, failure_grace=1.0,
                     store_port=store_port, attempt=2)


def _run(task, marker, tmp_path, **kw):
    exits, lines = [], []
    node = NodeFacts("n1", (Address("127.0.0.1", 8, "lo"),), {"PATH": "/usr/bin:/bin", MARKER_VAR: marker})
    plan = plan_start(task, node, str(tmp_path))
    run = JobRun(plan, lambda rank, stream, line: lines.append((rank, line)),
                 lambda job_id, exit_: exits.append((job_id, exit_)), **kw)
    return run, exits, lines


def test_a_run_reports_its_progress_and_each_exit_and_succeeds(marker, tmp_path):
    code = "import os; open(os.environ['TFDIST_PROGRESS_FILE'], 'w').write('42'); print('r', os.environ['RANK'])"
    run, exits, lines = _run(_task(code), marker, tmp_path)
    started = []
    result = run.run(started=lambda: started.append(run.gang.process_groups()))
    assert result.state == RunState.SUCCEEDED and result.exit_codes == {0: 0, 1: 0} and result.attempt == 2
    assert len(started[0]) == 2 and sorted(lines) == [(0, "r 0"), (1, "r 1")]
    assert sorted(exits, key=lambda e: e[1].rank) == [("9-z", WorkerExit(0, "n1", 0, ("r 0",), attempt=2)),
                                                      ("9-z", WorkerExit(1, "n1", 0, ("r 1",), attempt=2))]
    progress = run.progress(now=1e12)
    assert [(p.rank, p.step) for p in progress] == [(0, 42), (1, 42)] and all(p.age > 0 for p in progress)
    assert run.running_job(1e12).ranks == (0, 1) and run.running_job(1e12).attempt == 2
    run.close()
    assert not tmp_path.exists()


def test_a_failed_rank_fails_the_run_with_the_first_failure(marker, tmp_path):
    code = "import os, sys, time\nif os.environ['RANK'] == '1': sys.exit(3)\ntime.sleep(600)"
    run, exits, _ = _run(_task(code), marker, tmp_path)
    result = run.run()
    assert result.state == RunState.FAILED and result.failure.rank == 1 and result.exit_codes[1] == 3
    assert {e.rank for _, e in exits} == {0, 1}
    run.close()


def test_a_worker_that_cannot_start_fails_every_rank(marker, tmp_path):
    run, exits, _ = _run(_task("pass", working_dir=str(tmp_path / "gone")), marker, tmp_path)
    result = run.run()
    assert result.state == RunState.NOT_STARTED and result.exit_codes == {0: 127, 1: 127}
    assert [(j, e.rank, e.exit_code, e.attempt) for j, e in exits] == [("9-z", 0, 127, 2), ("9-z", 1, 127, 2)]
    assert "cannot start rank 0" in exits[0][1].last_lines[0]


def test_the_store_is_served_and_carries_one_preemption_request(marker, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run, _, _ = _run(_task("pass", store_port=port), marker, tmp_path)
    assert run.serve_store() == ()
    try:
        assert run.request_preemption() and not run.request_preemption()
        assert run.running_job(0.0).joined_ranks == ()
    finally:
        run.close()


def test_a_busy_store_port_fails_every_rank(marker, tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        run, _, _ = _run(_task("pass", store_port=port), marker, tmp_path, store_patience=0.0)
        exits = run.serve_store()
    assert [(e.rank, e.exit_code, e.attempt) for e in exits] == [(0, 1, 2), (1, 1, 2)]
    assert exits[0].last_lines == (f"n1: cannot serve the job's store on 127.0.0.1:{port}: Address already in use",)
    assert not run.request_preemption()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _store_task(code, size):
    """Rank 0 of a job of `size` workers on this node, which serves the job's store."""
    processes = (ProcessPlan(rank=0, node_rank=0, local_rank=0, local_size=1, port=0, gpus=(), replicas=1,
                             env={"RANK": "0", envvars.SIZE: str(size)}),)
    return StartTask("9-s", "", (sys.executable, "-c", code), processes, failure_grace=1.0,
                     store_port=_free_port(), attempt=0, store_secret="s" * 64)


def _answers(run) -> bool:
    try:
        status, _ = store_request("%s:%d" % run.store.address, "GET", "/tfdist/1-1", secret="s" * 64, patience=0.5)
    except UnavailableError:
        return False
    return status in (200, 404)


def test_a_store_other_nodes_use_outlives_this_node_s_workers_until_the_job_ends(marker, tmp_path):
    """Measured (CI, two hosts): node 0's ranks finished the job's last allgather and exited; the store closed
    with them while rank 2 on the other host was still reading it, and that rank failed (connection refused).
    Kept: it answers after this node's workers are gone, until the job's end reaches the node."""
    run, _, _ = _run(_store_task("pass", size=2), marker, tmp_path)
    assert run.serve_store() == () and run.plan.store_shared
    result = run.run()
    assert result.state == RunState.SUCCEEDED and run.workers_ended
    keeping = threading.Thread(target=run.keep_store, args=(result, 120.0), daemon=True)
    keeping.start()
    try:
        assert _answers(run), "the store closed with this node's workers"
        assert keeping.is_alive()
        run.release()
        keeping.join(timeout=30)
        assert not keeping.is_alive()
    finally:
        run.release()
        run.close()
    assert not _answers(run)


def test_a_store_only_this_node_uses_or_a_failed_run_s_is_not_kept(marker, tmp_path):
    alone, _, _ = _run(_store_task("pass", size=1), marker, tmp_path / "alone")
    failed, _, _ = _run(_store_task("import sys; sys.exit(3)", size=2), marker, tmp_path / "failed")
    for run in (alone, failed):
        assert run.serve_store() == ()
        try:
            result = run.run()
            run.keep_store(result, bound=600.0)  # returns at once (a wait would end the test at its timeout)
        finally:
            run.close()
    assert not alone.plan.store_shared and failed.plan.store_shared


def test_a_kept_store_closes_after_its_bound_when_the_job_s_end_never_comes(marker, tmp_path):
    run, _, _ = _run(_store_task("pass", size=2), marker, tmp_path)
    assert run.serve_store() == ()
    try:
        run.keep_store(run.run(), bound=0.2)
    finally:
        run.close()
    assert not _answers(run)
