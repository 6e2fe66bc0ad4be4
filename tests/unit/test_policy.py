"""The coordinator's decisions as pure functions: outcomes by each mode's success rule, start-up
deadlines, and the failure decision."""

from cluster.shared.model import Allocation, AllocState, JobState, WorkerExit
from cluster.shared.modes import SuccessRule
from cluster.coordinator.policy import FailureAction, Outcome, job_outcome, on_failure, startup_overdue


def ex(rank, code, t, agent="n1", reason=""):
    return WorkerExit(rank, agent, code, (), t, reason)


def test_all_ranks_rule_waits_for_every_rank():
    assert job_outcome(SuccessRule.ALL_RANKS, 3, [ex(0, 0, 1), ex(2, 0, 2)]) is None
    assert job_outcome(SuccessRule.ALL_RANKS, 3, [ex(0, 0, 1), ex(2, 0, 2), ex(1, 0, 3)]) == \
        Outcome(JobState.SUCCEEDED, "every worker exited with code 0", 0)


def test_chief_rule_succeeds_with_rank_0():
    assert job_outcome(SuccessRule.CHIEF, 4, [ex(2, 0, 1)]) is None
    assert job_outcome(SuccessRule.CHIEF, 4, [ex(0, 0, 2)]).state == JobState.SUCCEEDED


def test_the_earliest_failure_is_the_root_cause():
    outcome = job_outcome(SuccessRule.ALL_RANKS, 3, [ex(0, -15, 5), ex(2, 7, 4, "n2"), ex(1, -9, 6)])
    assert outcome == Outcome(JobState.FAILED, "rank 2 on node n2 exited with code 7; the other workers were "
                                               "stopped", 7, 2)
    killed = job_outcome(SuccessRule.ALL_RANKS, 2, [ex(1, -9, 1)])
    assert killed.exit_code == 137 and "was killed by signal SIGKILL" in killed.message  # 128 + 9, as a shell says
    assert job_outcome(SuccessRule.CHIEF, 2, [ex(1, 3, 1)]).state == JobState.FAILED  # a worker failure fails too


def test_startup_deadlines_name_who_is_missing():
    started = [Allocation("j", "n1", 0, 2, "h", (1, 2), state=AllocState.STARTED),
               Allocation("j", "n2", 1, 2, "g", (1, 2), state=AllocState.STARTED)]
    assert startup_overdue(4, started, [0], started_clock=0, now=10, timeout=15) is None
    late = startup_overdue(4, started, [0, 2], started_clock=0, now=16, timeout=15)
    assert late.message.startswith("rank(s) 1, 3 did not join within the startup timeout of 15s") and late.rank == 1
    assert startup_overdue(4, started, [0, 1, 2, 3], 0, 16, 15) is None
    assert startup_overdue(1, started[:1], [], 0, 99, 15) is None  # nobody waits on a one-process job
    stuck = [started[0], Allocation("j", "n2", 1, 2, "g", (1, 2), state=AllocState.LEASED)]
    assert startup_overdue(4, stuck, [0, 1], 0, 16, 15).message.startswith(
        "node(s) n2 did not start their workers within the startup timeout of 15s")


def test_a_failure_fails_the_job_without_max_restarts():
    outcome = Outcome(JobState.FAILED, "rank 1 on node a exited with code 1", 1)
    decision = on_failure(outcome, restarts=0, max_restarts=0)
    assert decision.action == FailureAction.FAIL and decision.outcome == outcome
    assert decision.message == outcome.message


def test_failures_restart_the_gang_until_max_restarts_is_spent():
    outcome = Outcome(JobState.FAILED, "rank 1 on node a was killed by signal SIGKILL", 1, rank=1)
    first = on_failure(outcome, restarts=0, max_restarts=2)
    assert first.action == FailureAction.RESTART
    assert first.message == "rank 1 on node a was killed by signal SIGKILL; restarting the job (restart 1 of 2)"
    assert on_failure(outcome, restarts=1, max_restarts=2).action == FailureAction.RESTART
    last = on_failure(outcome, restarts=2, max_restarts=2)
    assert last.action == FailureAction.FAIL and last.outcome.rank == 1
    assert last.outcome.message.endswith("(after 2 restarts, max_restarts=2)")


def test_failures_that_would_repeat_are_not_restarted():
    placement = Outcome(JobState.FAILED, "no node has 4 GPUs", 1, restartable=False)
    assert on_failure(placement, restarts=0, max_restarts=3).action == FailureAction.FAIL
    missing = Outcome(JobState.FAILED, "rank 0 on node a exited with code 127", 127, rank=0)
    decision = on_failure(missing, restarts=0, max_restarts=3)
    assert decision.action == FailureAction.FAIL and "would fail the same way" in decision.message
    not_executable = Outcome(JobState.FAILED, "rank 0 on node a exited with code 126", 126, rank=0)
    assert on_failure(not_executable, restarts=0, max_restarts=3).action == FailureAction.FAIL


def test_parameter_server_workers_are_expendable_but_ps_tasks_are_not():
    workers = {1, 2, 3}  # ranks 1-3 workers, 4 a ps task
    died = [ex(2, -9, 1.0)]
    assert job_outcome(SuccessRule.CHIEF, 5, died, workers) is None  # training goes on without rank 2
    done = job_outcome(SuccessRule.CHIEF, 5, died + [ex(0, 0, 5.0), ex(4, -15, 6.0)], workers)
    assert done.state == JobState.SUCCEEDED and done.message == "the chief (rank 0) exited with code 0"
    lost_ps = job_outcome(SuccessRule.CHIEF, 5, died + [ex(4, -9, 2.0)], workers)
    assert lost_ps.state == JobState.FAILED and lost_ps.rank == 4
    everyone = job_outcome(SuccessRule.CHIEF, 5, [ex(1, 1, 1.0), ex(2, -9, 2.0), ex(3, -9, 3.0)], workers)
    assert everyone.state == JobState.FAILED and everyone.message.startswith(
        "every worker task is gone (rank(s) 1, 2, 3 failed)")
    # Under ALL_RANKS (MWMS, Horovod) nothing is expendable: any failure fails the job.
    assert job_outcome(SuccessRule.ALL_RANKS, 3, died).state == JobState.FAILED


def test_the_step_watchdog_names_the_rank_silent_the_longest():
    from cluster.coordinator.policy import stalled

    progress = {0: (120, 100.0), 1: (97, 80.0)}  # rank -> (last step, when)
    assert stalled({}, [0, 1], 500.0, 10) is None  # nobody reports: no watchdog
    assert stalled(progress, [0, 1], 89.0, 10) is None
    outcome = stalled(progress, [0, 1], 95.0, 10)
    assert outcome.state == JobState.FAILED and outcome.rank == 1 and outcome.message.startswith(
        "rank 1 made no progress for 15s (after step 97; the step watchdog allows 10s)")
    # A rank that never reported counts from the job's first report.
    never = stalled({0: (5, 100.0)}, [0, 1, 2], 111.0, 10)
    assert never.rank == 1 and "before its first step" in never.message
    # Measured under load: the rank that hung wrote its last step a moment after the rank that waits for it
    # (a report within 0.5 s of the last is written late); it is still the one named, not the one waiting.
    late = stalled({0: (4, 100.0), 1: (3, 100.4)}, [0, 1], 110.2, 10)
    assert late.rank == 1 and "after step 3" in late.message
    assert stalled({0: (4, 100.0), 1: (9, 109.0)}, [0, 1], 110.2, 10).rank == 0  # one that moved since is not named
    # Only the ranks that train are watched (ps mode: the chief).
    assert stalled({0: (5, 100.0)}, [0], 105.0, 10) is None
