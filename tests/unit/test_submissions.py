"""The coordinator's submission writer (cluster/coordinator/submissions.py) over a real core and SQLite
file: concurrent submissions are stored in shared batches, one refusal does not refuse its batch-mates, a
retried submission id is one job even inside one batch, and a stopping writer answers what it holds."""

import threading
import time

import pytest

from tests.agent_core import AgentCore
from cluster.coordinator.core import BadRequest, Settings
from cluster.coordinator.store import SqliteStore
from cluster.coordinator.submissions import SubmitQueue
from cluster.shared.model import JobState
from tests.core_nodes import Node, spec
from tfdist.errors import UnavailableError


@pytest.fixture
def core(tmp_path):
    core = AgentCore(SqliteStore(str(tmp_path / "c.sqlite")), Settings(port_range=(30000, 30009)))
    for name in ("a1", "a2"):
        Node(core, name, slots=2).register()
    return core


def test_concurrent_submissions_share_batches_and_each_gets_its_own_answer(core):
    batches, real = [], core.submit_batch
    entered, release = threading.Event(), threading.Event()

    def watched(submissions, now):
        batches.append(len(submissions))
        if len(batches) == 1:  # the first batch waits: the others gather behind it
            entered.set()
            release.wait(10)
        return real(submissions, now)

    writer = SubmitQueue(watched).start()
    answers = {}

    def submit(i, slots):
        try:
            answers[i] = writer.submit(spec(slots, submission_id=f"s{i % 40}"), "alice")
        except BadRequest as e:
            answers[i] = e

    threads = [threading.Thread(target=submit, args=(0, 2))]
    threads[0].start()
    assert entered.wait(10)
    threads += [threading.Thread(target=submit, args=(i, 3 if i == 7 else 2)) for i in range(1, 48)]
    for t in threads[1:]:
        t.start()
    deadline = time.monotonic() + 10
    while writer._queue.qsize() < 47 and time.monotonic() < deadline:  # bounded: all handed over
        time.sleep(0.005)
    release.set()
    for t in threads:
        t.join(10)
    writer.stop()
    assert batches[0] == 1 and sum(batches) == 48 and len(batches) <= 3, batches  # 47 waiting: one batch or two
    assert isinstance(answers[7], BadRequest) and "slots_per_trial=3 can never be scheduled" in str(answers[7])
    ids = {i: a[0] for i, a in answers.items() if i != 7}
    assert all(ids[i] == ids[i + 40] for i in range(7))  # a repeated submission id: one job
    assert len(set(ids.values())) == 40 and len(core.store.jobs()) == 40  # 40 ids (s7 stored by its second try)
    states = {core.store.job(j).state for j in ids.values()}
    assert states == {JobState.STARTING, JobState.QUEUED}


def test_a_stopping_writer_stores_what_it_holds_then_refuses(core):
    writer = SubmitQueue(core.submit_batch).start()
    job_id, state = writer.submit(spec(2), "alice")
    assert core.store.job(job_id).state.value == state == "STARTING"
    writer.stop()
    with pytest.raises(UnavailableError, match="the coordinator is stopping; submit again when it is back"):
        writer.submit(spec(2), "alice")
    never_started = SubmitQueue(core.submit_batch)
    never_started.stop()  # stopping one that never ran is fine


def test_a_failed_batch_tells_each_of_its_submitters(core):
    def broken(submissions, now):
        raise RuntimeError("a bug")

    writer = SubmitQueue(broken).start()
    with pytest.raises(Exception, match="storing 1 submissions failed: RuntimeError: a bug"):
        writer.submit(spec(2), "alice")
    writer.stop()
