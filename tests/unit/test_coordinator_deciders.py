"""The coordinator's pure deciders, on plain values: no gRPC, no store, time passed in."""

from cluster.coordinator import admission, exits, watchdogs
from cluster.coordinator.nodes import port_checks, reconcile
from cluster.coordinator.policy import Outcome
from cluster.coordinator.values import AgentLive, Lookup, Settings
from cluster.coordinator.nodes.work import work_for
from cluster.shared.config import ExperimentConfig
from cluster.shared.model import (Address, AgentRecord, Allocation, AllocState, Job, JobSpec, JobState,
                                  WorkerExit)
from cluster.shared.modes import JobPlan, ProcessPlan, SuccessRule
from cluster.shared.work import ProbeFailure

S = AllocState
SETTINGS = Settings()


def job(state=JobState.RUNNING, attempt=0, slots=4, mode="mwms", **fields):
    config = ExperimentConfig(name="t", entrypoint=("python", "train.py"), slots_per_trial=slots,
                              distribution_mode=mode, hyperparameters={"global_batch_size": 8})
    return Job("1-ab", 1, JobSpec(config, working_dir="/w"), state, 0.0, attempt=attempt, **fields)


def plan(size=4, per_node=2, success=SuccessRule.ALL_RANKS, store=None, expendable=()):
    return JobPlan(tuple(ProcessPlan(r, r // per_node, r % per_node, per_node, 29500 + r % per_node, (), 1, {},
                                     expendable=r in expendable) for r in range(size)), success, store)


def allocs(*states, job_id="1-ab"):
    return tuple(Allocation(job_id, f"a{i + 1}", i, 2, f"10.0.0.{i + 1}", (29500, 29501), state=s)
                 for i, s in enumerate(states))


def agent(name="a1", running=None, leased=(), attempts=None, last=0.0):
    return AgentLive(AgentRecord(name, 2, (Address("10.0.0.1", 24),)), last, running=dict(running or {}),
                     leased=set(leased), attempts=dict(attempts or {}))


# ---------------------------------------------------------------- work for an agent
def test_work_walks_an_allocation_through_its_start():
    j, p = job(), plan()
    leasing = work_for(agent(), {"1-ab": allocs(S.LEASING, S.LEASED)}, {"1-ab": j}, {}, SETTINGS)
    assert leasing.check_ports == [("1-ab", (29500, 29501))] and leasing.attempts == {"1-ab": 0}
    waiting = work_for(agent(leased={"1-ab"}), {"1-ab": allocs(S.LEASED, S.LEASING)}, {"1-ab": j}, {}, SETTINGS)
    assert not waiting.probes and not waiting.stop_jobs  # probes wait until every node holds its ports
    probing = work_for(agent(leased={"1-ab"}), {"1-ab": allocs(S.LEASED, S.REACHABLE)}, {"1-ab": j}, {}, SETTINGS)
    assert probing.probes[0].targets == (("a2", "10.0.0.2", 29500), ("a2", "10.0.0.2", 29501))
    start = work_for(agent(leased={"1-ab"}), {"1-ab": allocs(S.REACHABLE, S.STARTED)}, {"1-ab": j}, {"1-ab": p},
                     SETTINGS).start[0]
    assert [pr.rank for pr in start.processes] == [0, 1] and start.command == ("python", "train.py")
    assert start.working_dir == "/w" and start.failure_grace == SETTINGS.failure_grace and start.store_port == 0


def test_a_heartbeat_of_a_node_whose_run_goes_on_reads_no_job_row():
    """Every busy node's heartbeat derives its work: a run going on (STARTED, this node serving no store)
    and a node checking its ports or probing need no job read beyond the attempt a port check carries."""
    read = []
    jobs = Lookup(lambda job_id: read.append(job_id) or job())
    running = agent(running={"1-ab": {0, 1}}, leased={"1-ab"})
    work = work_for(running, {"1-ab": allocs(S.STARTED, S.STARTED)}, jobs, {"1-ab": plan()}, SETTINGS)
    assert not work.start and not work.stop_jobs and not work.preempt and read == []
    probing = work_for(agent(leased={"1-ab"}), {"1-ab": allocs(S.LEASED, S.LEASED)}, jobs, {}, SETTINGS)
    assert probing.probes and read == []


def test_work_without_a_plan_starts_nothing():
    work = work_for(agent(), {"1-ab": allocs(S.REACHABLE, S.REACHABLE)}, {"1-ab": job()}, {}, SETTINGS)
    assert work.start == []


def test_work_stops_what_the_agent_holds_without_a_live_allocation():
    running = {"1-ab": {0, 1}, "2-cd": {0}}
    ended = job(state=JobState.FAILED)
    work = work_for(agent(running=running), {"1-ab": allocs(S.RELEASING)}, {"1-ab": ended, "2-cd": job()}, {},
                    SETTINGS, dump_stacks=["3-ef"])
    assert work.stop_jobs == ["1-ab", "2-cd"] and work.dump_stacks == ["3-ef"]
    assert work.stop_grace == {"1-ab": SETTINGS.failure_grace, "2-cd": SETTINGS.stop_grace}


def test_work_carries_a_preemption_to_the_node_serving_the_store():
    j = job(preempt_requested=True)
    held = {"1-ab": allocs(S.STARTED, S.STARTED)}
    assert work_for(agent(running={"1-ab": {0}}), held, {"1-ab": j}, {"1-ab": plan(store=(0, 29600))},
                    SETTINGS).preempt == ["1-ab"]
    assert work_for(agent(running={"1-ab": {0}}), held, {"1-ab": j}, {"1-ab": plan(store=(1, 29600))},
                    SETTINGS).preempt == []


def test_lookup_computes_each_key_once_and_only_when_asked():
    asked = []
    table = Lookup(lambda k: asked.append(k) or (None if k == "gone" else k.upper()))
    assert table.get("a") == "A" and table.get("a") == "A" and table.get("gone", 7) == 7 and "gone" not in table
    assert asked == ["a", "gone"]


# ---------------------------------------------------------------- admission
def test_admission_refuses_with_the_message_users_see():
    spec = job(slots=3).spec
    refused = admission.admit(spec, {2: 2})  # two nodes of 2 slots
    assert not refused.admitted and "slots_per_trial=3 can never be scheduled" in refused.refusal
    assert "(2 nodes of 2 slots)" in refused.refusal
    assert "no agents are registered" in admission.admit(spec, {}).refusal
    assert "no agents are registered" in admission.admit(spec, {4: 0}).refusal
    single = admission.admit(job(slots=4, mode="mirrored").spec, {2: 2})
    assert single.refusal.startswith("distribution mode mirrored runs one process on one node, but slots_per_trial=4")
    assert admission.admit(job(slots=4).spec, {2: 2}).admitted


def test_admissions_follow_the_node_sizes_not_the_node_count():
    admissions = admission.Admissions()
    three = job(slots=3).spec
    assert "can never be scheduled" in admissions.refusal(three, {2: 2})
    assert admissions.refusal(three, {2: 2, 1: 1}) == ""  # a 1-slot node joined: 2+1 fits now
    assert "can never be scheduled" in admissions.refusal(three, {2: 10_000})  # only the sizes count
    assert admissions.refusal(job(slots=20_000).spec, {2: 10_000}) == ""


def test_admission_returns_a_retried_submission_as_it_is():
    known = job(state=JobState.QUEUED)
    decision = admission.admit(job().spec, [], known_submission=known)
    assert decision.known is known and not decision.admitted and not decision.refusal


# ---------------------------------------------------------------- a node's report
def test_reconcile_notes_joins_and_starts():
    node = agent(running={"1-ab": {0, 1}}, attempts={"1-ab": 1})
    [started] = reconcile.reconcile(node, {"1-ab": allocs(S.REACHABLE, S.REACHABLE)}, {"1-ab": 1}, {}, {}, False)
    assert started.action == reconcile.Action.STARTED and set(started.joined) == {0, 1}
    [joined] = reconcile.reconcile(node, {"1-ab": allocs(S.STARTED)}, {"1-ab": 1}, {}, {}, False)
    assert joined.action == reconcile.Action.JOINED
    assert reconcile.reconcile(node, {"1-ab": allocs(S.STARTED)}, {"1-ab": 2}, {}, {}, False) == []  # an old run


def test_reconcile_leases_again_or_fails_when_leases_are_lost():
    node = agent()
    [again] = reconcile.reconcile(node, {"1-ab": allocs(S.LEASED, S.LEASED)}, {}, {}, {}, True)
    assert again.action == reconcile.Action.LEASE_AGAIN and again.event == "node a1 lost its leased ports; leasing again"
    [fail] = reconcile.reconcile(node, {"1-ab": allocs(S.REACHABLE, S.STARTED)}, {}, {}, {"1-ab": [0, 1]}, True)
    assert fail.action == reconcile.Action.FAIL
    assert fail.outcome.message == (f"node a1 {reconcile.RESTARTED}: rank(s) 0, 1 are gone; the other workers "
                                    "were stopped")


def test_reconcile_fails_a_job_whose_workers_vanished_without_exits():
    [fail] = reconcile.reconcile(agent(), {"1-ab": allocs(S.STARTED)}, {"1-ab": 0}, {"1-ab": {0}},
                                 {"1-ab": [0, 1]}, False)
    assert "rank(s) 1 are gone" in fail.outcome.message and "never reported their exits" in fail.outcome.message
    assert reconcile.reconcile(agent(), {"1-ab": allocs(S.STARTED)}, {}, {"1-ab": {0, 1}}, {"1-ab": [0, 1]},
                               False) == []


def test_released_and_lost_agents():
    node = agent(running={"2-cd": {0}})
    held = [*allocs(S.RELEASING), *allocs(S.RELEASING, job_id="2-cd"), *allocs(S.STARTED, job_id="3-ef")]
    assert reconcile.released(node, held) == ["1-ab"]
    quiet, lost = agent("a1", last=10.0), agent("a2", last=0.0)
    lost_already = agent("a3", last=0.0)
    lost_already.lost = True
    assert reconcile.lost_agents([quiet, lost, lost_already], now=12.0, lost_after=6.0) == [("a2", 12.0)]
    # The scan ran without the lock: under it, an agent heard from meanwhile or registered again is not lost.
    silent = [("a2", 12.0), ("a4", 12.0), ("a5", 12.0), ("gone", 12.0)]
    heard, again = agent("a4", last=11.0), agent("a5", last=12.5)
    table = {"a2": lost, "a4": heard, "a5": again}
    assert reconcile.still_silent(table, silent, now=13.0, lost_after=6.0) == [("a2", 13.0)]


# ---------------------------------------------------------------- ports and probes
def test_port_answers():
    mine, = allocs(S.LEASING)
    assert port_checks.port_answer(mine, (mine,), [], set(), [], (29500, 29510)).state == S.REACHABLE
    two = allocs(S.LEASING, S.LEASING)
    assert port_checks.port_answer(two[0], two, [], set(), [], (29500, 29510)).state == S.LEASED
    assert port_checks.port_answer(two[0], two, [29500], {29500}, [29501], (29500, 29510)).ports == (29502, 29503)
    full = port_checks.port_answer(mine, (mine,), [29500], {29500}, [], (29500, 29501))
    assert full.outcome.message.startswith("cannot lease ports on a1: no 2 free ports left in 29500-29501")
    assert port_checks.port_answer(allocs(S.LEASED)[0], (), [], set(), [], (29500, 29510)) is None  # late answer


def test_probe_answers():
    two = allocs(S.LEASED, S.LEASED)
    assert port_checks.probe_answer(two[0], two, []) == S.REACHABLE
    assert port_checks.probe_answer(two[0], two, [ProbeFailure("a2", "10.0.0.2", 29999, "refused")]) == S.REACHABLE  # stale
    failed = port_checks.probe_answer(two[0], two, [ProbeFailure("a2", "10.0.0.2", 29500, "refused")])
    assert failed.message.startswith("node a1 cannot reach node a2 at 10.0.0.2:29500: refused.")
    assert port_checks.probe_answer(allocs(S.REACHABLE)[0], two, []) is None


# ---------------------------------------------------------------- a worker's exit
def test_exits_are_recorded_and_an_expendable_failure_tolerated():
    report = exits.read_exit("a2", WorkerExit(3, "", 1, tuple(map(str, range(30)))), job(),
                             plan(expendable={3}), now=5.0)
    assert report.recorded.tolerated and report.recorded.agent == "a2" and report.recorded.time == 5.0
    assert len(report.recorded.last_lines) == 20 and not report.history
    assert report.event == "rank 3 on node a2 exited with code 1; the job goes on without it"
    old = exits.read_exit("a2", WorkerExit(3, "", 1, attempt=0), job(attempt=1), plan(expendable={3}), now=5.0)
    assert old.history and not old.recorded.tolerated and old.event == ""


def test_what_the_exits_decide():
    done = [WorkerExit(r, "a1", 0, time=1.0) for r in range(4)]
    assert exits.decide(job(), plan(), done[:3]) is None
    assert exits.decide(job(), plan(), done).action == exits.JobAction.END
    assert exits.decide(job(preempted_step=7), plan(), done).action == exits.JobAction.PAUSE
    failed = exits.decide(job(), plan(), [WorkerExit(1, "a1", 3, time=1.0)])
    assert failed.action == exits.JobAction.FAIL and failed.outcome.rank == 1
    assert exits.decide(job(state=JobState.SUCCEEDED), plan(), done) is None


# ---------------------------------------------------------------- watchdogs
def test_startup_watchdog():
    started = allocs(S.STARTED, S.STARTED)
    assert watchdogs.startup(job(), plan(), {0, 1, 2}, {3}, started, 0.0, 1000.0, 300.0).done
    assert watchdogs.startup(None, plan(), (), (), started, 0.0, 1.0, 300.0).done
    waiting = watchdogs.startup(job(), plan(), {0, 1}, (), started, 0.0, 300.0, 300.0)
    assert not waiting.done and waiting.outcome is None
    late = watchdogs.startup(job(), plan(), {0, 1}, (), started, 0.0, 301.0, 300.0).outcome
    assert late.message.startswith("rank(s) 2, 3 did not join within the startup timeout of 300s")


def test_step_watchdog_asks_for_stacks_then_fails():
    config = ExperimentConfig(name="t", entrypoint=("x",), slots_per_trial=2, distribution_mode="mwms",
                              hyperparameters={"global_batch_size": 8}, step_timeout=60)
    running = Job("1-ab", 1, JobSpec(config), JobState.RUNNING, 0.0)
    two = plan(size=2)
    assert watchdogs.progress(running, two, {0: (5, 100.0), 1: (5, 100.0)}, None, 150.0, 3.0).outcome is None
    stall = watchdogs.progress(running, two, {0: (5, 100.0), 1: (4, 30.0)}, None, 150.0, 3.0)
    assert stall.outcome.rank == 1 and stall.fail_at == 153.0 and not stall.fail_now
    found = (Outcome(JobState.FAILED, "stalled", 1), 153.0)
    assert not watchdogs.progress(None, None, {}, found, 152.0, 3.0).fail_now
    assert watchdogs.progress(None, None, {}, found, 153.0, 3.0).fail_now
