"""The agent's outbox against a coordinator that cannot store for a while (issue 30): RESOURCE_EXHAUSTED (a
full disk) and UNAVAILABLE keep every item and back off, the agent says once per job that the output is
delayed, and everything arrives once, in order, exits after their job's lines. INVALID_ARGUMENT still drops
only the bad item; the bounds drop the oldest items and the job's log says how many, once. A fake client
stands in for the coordinator, storing as it does (by source and sequence); a fake clock stands in for time."""

import itertools
import logging
import types

import grpc
import pytest

from cluster.agent import outbox as outbox_module
from cluster.agent.outbox import Backoff, Outbox
from cluster.shared.model import MetricRow, WorkerExit
from cluster.shared.rpc import ClientError

pytestmark = [pytest.mark.timeout(60)]  # the old outbox dropped (and noted, and dropped...) without end
FULL = "the coordinator's disk is full (state dir /var/lib/tfdist): free space; nothing was changed"


class FakeCoordinator:
    """A client whose calls are answered `failing` (a status code) while that is set, else stored as the
    coordinator stores them: items of a batch at or below what its source already shipped are skipped."""

    def __init__(self):
        self.agents = types.SimpleNamespace(PushLogs="PushLogs", ReportMetrics="ReportMetrics",
                                            ReportExit="ReportExit")
        self.failing: grpc.StatusCode | None = None
        self.calls: list[str] = []
        self.lines: dict[str, list[str]] = {}
        self.rows: dict[str, list[int]] = {}
        self.order: list[tuple[str, str]] = []  # (kind, job) as stored
        self.during = lambda: None  # what happens on the agent while a call is in flight
        self._shipped: dict[tuple, int] = {}

    def call(self, method, request, timeout=None):
        self.calls.append(method)
        self.during()
        if self.failing == grpc.StatusCode.RESOURCE_EXHAUSTED:
            raise ClientError(FULL, self.failing)
        if self.failing is not None:
            raise ClientError("cannot reach the coordinator at 127.0.0.1:1", self.failing)
        if method == "ReportExit":
            self.order.append(("exit", request.job_id))
            return None
        items = list(request.lines if method == "PushLogs" else request.metrics)
        for i, item in enumerate(items):
            if getattr(item, "text", "") == "bad" or getattr(item, "name", "") == "bad":
                raise ClientError(f"lines[{i}].text: bad", grpc.StatusCode.INVALID_ARGUMENT)
        key = (method, request.job_id, request.source)
        last = self._shipped.get(key, 0)
        self._shipped[key] = max(last, request.first_seq + len(items) - 1)
        fresh = items[max(0, last - request.first_seq + 1):]
        if method == "PushLogs":
            self.lines.setdefault(request.job_id, []).extend(line.text for line in fresh)
        else:
            self.rows.setdefault(request.job_id, []).extend(row.step for row in fresh)
        self.order.extend(("logs" if method == "PushLogs" else "metrics", request.job_id) for _ in fresh)
        return None


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


@pytest.fixture
def coordinator():
    return FakeCoordinator()


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def outbox(coordinator, clock):
    return Outbox(coordinator, "n1", "n1/test", clock=clock)


def messages(caplog, level, words):
    return [r.getMessage() for r in caplog.records if r.levelno == level and words in r.getMessage()]


def retry(outbox, clock):
    """Lets the back-off pass, then ships: what the ship loop does."""
    clock.now += outbox.backing_off()
    outbox.ship_once()


def test_backoff_doubles_from_half_a_second_to_ten_and_starts_over():
    waits, backoff = [], Backoff()
    for now in range(8):
        backoff = backoff.failed(float(now))
        waits.append(backoff.delay)
        assert backoff.until == now + backoff.delay
    assert waits == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0, 10.0]
    assert backoff.left(7.0) == 10.0 and backoff.left(17.0) == 0.0 and backoff.left(20.0) == 0.0
    assert Backoff().left(0.0) == 0.0  # nothing failed: no wait


@pytest.mark.parametrize("code", [grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNAVAILABLE])
def test_a_full_disk_delays_output_and_every_line_arrives_once_in_order(outbox, coordinator, clock, caplog, code):
    caplog.set_level(logging.DEBUG, "tfdist.agent")
    sent = [f"line {i}" for i in range(1500)]
    for text in sent[:700]:
        outbox.line("j1", 0, "stdout", text)
    outbox.metric("j1", MetricRow(rank=0, step=1, name="loss", value=0.5, time=1.0))
    coordinator.failing = code
    outbox.ship_once()  # held, not dropped
    assert outbox.dropped == 0 and outbox.backing_off() == 0.5 and outbox.owes("j1")

    calls = len(coordinator.calls)
    clock.now += 0.4
    outbox.ship_once()  # backing off: nothing is sent
    assert len(coordinator.calls) == calls
    waits = []
    for text in sent[700:1400]:  # the job prints on
        outbox.line("j1", 0, "stdout", text)
        if text.endswith("00"):
            retry(outbox, clock)
            waits.append(outbox.backoff.delay)
    assert waits == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0, 10.0]
    outbox.exit("j1", WorkerExit(rank=0, agent="n1", exit_code=0))
    retry(outbox, clock)
    assert coordinator.calls.count("ReportExit") == 0

    coordinator.failing = None
    clock.now += 4.0  # the disk has room again before the wait is over: nothing sent yet
    outbox.ship_once()
    assert "j1" not in coordinator.lines
    for text in sent[1400:]:
        outbox.line("j1", 0, "stdout", text)
    retry(outbox, clock)
    assert coordinator.lines["j1"] == sent and coordinator.rows["j1"] == [1]
    assert coordinator.order[-1] == ("exit", "j1")  # after every line
    assert outbox.backoff == Backoff() and not outbox.owes("j1") and outbox.dropped == 0
    delayed = messages(caplog, logging.WARNING, "output delayed")
    assert len(delayed) == 1 and delayed[0].startswith("job j1: output delayed: the coordinator could not take it ("), \
        delayed
    assert "holding 701 items" in delayed[0]  # 700 lines and a metric row
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        assert FULL in delayed[0]
    delivered = messages(caplog, logging.INFO, "delivered")
    assert delivered == ["job j1: delayed output delivered: 1502 items, 55.5 s after the coordinator first could "
                         "not take them"]
    assert not messages(caplog, logging.WARNING, "dropped")

    coordinator.failing = code  # a second outage is said again, once
    outbox.line("j1", 0, "stdout", "more")
    outbox.ship_once()
    retry(outbox, clock)
    assert len(messages(caplog, logging.WARNING, "output delayed")) == 2 and outbox.backoff.delay == 1.0


def test_each_job_with_held_output_is_named_once(outbox, coordinator, clock, caplog):
    caplog.set_level(logging.INFO, "tfdist.agent")
    coordinator.failing = grpc.StatusCode.RESOURCE_EXHAUSTED
    outbox.line("j1", 0, "stdout", "a")
    outbox.metric("j2", MetricRow(rank=1, step=3, name="loss", value=0.5, time=1.0))
    for _ in range(5):
        retry(outbox, clock)
    delayed = sorted(messages(caplog, logging.WARNING, "output delayed"))
    assert [m.split(":")[0] for m in delayed] == ["job j1", "job j2"] and all("holding 1 items" in m for m in delayed)
    coordinator.failing = None
    retry(outbox, clock)
    assert coordinator.lines == {"j1": ["a"]} and coordinator.rows == {"j2": [3]}
    assert sorted(m.split(":")[0] for m in messages(caplog, logging.INFO, "delivered")) == ["job j1", "job j2"]


def test_invalid_argument_still_drops_only_the_bad_item_after_an_outage(outbox, coordinator, clock, caplog):
    caplog.set_level(logging.INFO, "tfdist.agent")
    sent = [f"line {i}" for i in range(40)]
    sent[17] = "bad"
    for text in sent:
        outbox.line("j1", 0, "stdout", text)
    coordinator.failing = grpc.StatusCode.RESOURCE_EXHAUSTED
    outbox.ship_once()
    retry(outbox, clock)
    coordinator.failing = None
    retry(outbox, clock)
    stored = coordinator.lines["j1"]
    assert stored[:39] == [t for t in sent if t != "bad"] and outbox.dropped == 1
    assert stored[39:] == ["tfdist: agent n1 dropped a log line of rank 0 that the coordinator refused: lines[0].text: bad"]
    assert len(messages(caplog, logging.WARNING, "dropped a log line")) == 1


def test_the_byte_bound_drops_the_oldest_and_the_log_says_how_many_once(outbox, coordinator, clock, caplog,
                                                                       monkeypatch):
    caplog.set_level(logging.INFO, "tfdist.agent")
    monkeypatch.setattr(outbox_module, "MAX_HELD_BYTES", 100 * 64)  # about 100 lines of these
    outbox.line("j2", 0, "stdout", "other job")  # another job's items stay: the chatty one loses its own
    coordinator.failing = grpc.StatusCode.RESOURCE_EXHAUSTED
    sent = [f"line {i:04d} " + "x" * 30 for i in range(1000)]
    for text in sent:
        outbox.line("j1", 0, "stdout", text)
    for _ in range(3):
        retry(outbox, clock)
    coordinator.failing = None
    retry(outbox, clock)
    stored = coordinator.lines["j1"]
    note, kept = stored[0], stored[1:]
    assert 50 < len(kept) < 100 and kept == sent[-len(kept):]  # the newest, in order
    lost = 1000 - len(kept)
    assert note == (f"tfdist: agent n1 dropped {lost:,} log lines of this job, the oldest it held while the "
                    "coordinator could not take them: an agent holds at most 0 MiB of unsent output, 200,000 log "
                    "lines a job (free the coordinator's disk sooner, or print less)")
    assert coordinator.lines["j2"] == ["other job"] and outbox.lost == lost
    outbox.line("j1", 0, "stdout", "after")
    retry(outbox, clock)
    assert coordinator.lines["j1"][-2:] == [kept[-1], "after"]  # said once
    assert len(messages(caplog, logging.WARNING, f"dropped {lost:,} log lines")) == 1


def test_over_the_byte_bound_the_job_holding_the_most_pays_not_the_one_that_prints_next(
        outbox, coordinator, clock, monkeypatch):
    """A chatty job fills the bound during an outage; a quiet job printing after it keeps all its lines (the
    review's case: it kept only its newest line, and the chatty job 85 of its own)."""
    monkeypatch.setattr(outbox_module, "MAX_HELD_BYTES", 100 * 64)
    coordinator.failing = grpc.StatusCode.RESOURCE_EXHAUSTED
    for i in range(300):
        outbox.line("chatty", 0, "stdout", f"line {i:04d} " + "x" * 30)
    quiet = [f"q{i}" for i in range(5)]
    for text in quiet:
        outbox.line("quiet", 0, "stdout", text)
    retry(outbox, clock)
    coordinator.failing = None
    retry(outbox, clock)
    assert coordinator.lines["quiet"] == quiet
    assert coordinator.lines["chatty"][0].startswith("tfdist: agent n1 dropped ")


def test_what_the_bound_drops_of_a_batch_in_flight_counts_as_lost_only_if_that_batch_fails(
        outbox, coordinator, clock, monkeypatch):
    """The job prints on while a batch is on its way: the oldest items a bound drops are then that batch's own."""
    monkeypatch.setattr(outbox_module, "MAX_HELD_BYTES", 100 * 64)
    sent = [f"line {i:04d} " + "x" * 30 for i in range(1000)]
    printing = iter(sent)

    def print_some():
        for text in itertools.islice(printing, 40):
            outbox.line("j1", 0, "stdout", text)

    coordinator.failing = grpc.StatusCode.RESOURCE_EXHAUSTED
    for _ in range(10):
        print_some()
        outbox.ship_once()
        clock.now += outbox.backing_off()
    coordinator.failing = None
    coordinator.during = print_some
    while outbox.owes("j1"):
        retry(outbox, clock)
    stored = coordinator.lines["j1"]
    notes = [t for t in stored if t.startswith("tfdist:")]
    kept = [t for t in stored if not t.startswith("tfdist:")]
    assert kept == sorted(set(kept)) and set(kept) <= set(sent) and kept[-1] == sent[-1]  # once each, in order
    said = sum(int(n.split()[4].replace(",", "")) for n in notes)
    assert said == len(sent) - len(kept) == outbox.lost > 0, (said, len(kept), outbox.lost, notes)


def test_the_count_bound_drops_the_oldest_rows_and_the_log_says_so(outbox, coordinator, clock, monkeypatch):
    monkeypatch.setattr(outbox_module, "MAX_QUEUED", 50)
    coordinator.failing = grpc.StatusCode.RESOURCE_EXHAUSTED
    for step in range(80):
        outbox.metric("j1", MetricRow(rank=2, step=step, name="loss", value=0.5, time=1.0))
    outbox.ship_once()
    coordinator.failing = None
    retry(outbox, clock)
    assert coordinator.rows["j1"] == list(range(30, 80))
    assert coordinator.lines["j1"] == [
        "tfdist: agent n1 dropped 30 metric rows of this job, the oldest it held while the coordinator could not "
        "take them: an agent holds at most 256 MiB of unsent output, 50 metric rows a job (free the "
        "coordinator's disk sooner, or print less)"]
    retry(outbox, clock)
    assert len(coordinator.lines["j1"]) == 1
