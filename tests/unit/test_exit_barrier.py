"""The exit barriers (MWMS's, torch's store keep) are skipped by a worker that leaves because it failed: waiting
for ranks that are stuck without it only hid the failure from the launcher for the barrier's 30 s."""

import sys

import pytest

from tfdist.exit_watch import watch_for_failure


@pytest.fixture
def watched(monkeypatch):
    monkeypatch.setattr(sys, "excepthook", lambda *a: None)
    monkeypatch.setattr(sys, "exit", sys.exit)
    return watch_for_failure()


def test_an_uncaught_exception_marks_the_exit_as_a_failure(watched):
    sys.excepthook(RuntimeError, RuntimeError("boom"), None)
    assert watched == [RuntimeError]


def test_a_non_zero_sys_exit_marks_it_and_a_clean_one_does_not(watched):
    with pytest.raises(SystemExit):
        sys.exit(0)
    with pytest.raises(SystemExit):
        sys.exit()
    assert watched == []
    with pytest.raises(SystemExit):
        sys.exit(13)
    assert watched == [13]
