"""The dashboard's diagnose view, its pure parts: variant jobs grouped by their run, each variant rebuilt from
its job's metric rows as the runner reads them, the verdict the CLI gives (diagnosis.diagnose and to_json),
a run still going shown as far as it has measured, and the chart's numbers. The view against a real
coordinator, its HTTP route and the page: tests/integration/test_dashboard_diagnose.py."""

import grpc

from cluster.client.dashboard.api import Api
from cluster.client.dashboard.diagnoses import Diagnoses, Read, grouped, run_document, variant_run
from cluster.client.diagnose_run import why_from_lines
from cluster.shared import diagnosis, jobspec
from cluster.shared.credentials import Principal
from cluster.shared.diagnosis import RankTiming, VariantRun
from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb
from cluster.shared.rpc import ClientError, JobList
from tests.specs import flat_spec
from tfdist import diagnose as worker_side

RUN = "a1b2c3d4e5f6"


def job(number, variant, state="CANCELED", run=RUN, slots=2):
    spec = flat_spec(["python", "w.py"], slots, name=f"w (diagnose: {variant})",
                     diagnose={"variant": variant, "steps": 3, "warmup": 1, "run": run})
    return pb.Job(id=f"{number}-ab", spec=jobspec.to_pb(spec), state=state, owner="alice", submitted_at=100.0 + number,
                  ended_at=0.0 if state in ("QUEUED", "RUNNING") else 110.0 + number,
                  placement=[pb.Placement(agent="n1", node_rank=0, slots=slots)])


def rows(times_by_rank, size=2, applied=1.0, batch=64):
    """The rows tfdist/diagnose.py's `send` makes: a step_s row per timed step, then the rank's facts."""
    made = []
    for rank, times in times_by_rank.items():
        made += [pb.Metric(rank=rank, step=i, name=worker_side.STEP_RECORD, value=t) for i, t in enumerate(times)]
        made += [pb.Metric(rank=rank, step=9, name=worker_side.RECORD + name, value=value) for name, value in
                 (("node_rank", 0.0), ("applied", applied), ("size", float(size)), ("batch", float(batch)))]
    return tuple(made)


BASE = {0: [0.06, 0.06, 0.06], 1: [0.06, 0.06, 0.06]}
APART = {0: [0.02, 0.02, 0.02], 1: [0.05, 0.05, 0.05]}
FED = {0: [0.055, 0.055, 0.055], 1: [0.055, 0.055, 0.055]}


def test_jobs_are_grouped_by_run_in_variant_order():
    ordinary = pb.Job(id="1-aa", spec=jobspec.to_pb(flat_spec(["true"], 1)), state="SUCCEEDED")
    jobs = [job(4, "synthetic_input"), job(2, "baseline"), ordinary, job(3, "no_communication"),
            job(5, "baseline", run="other"), job(3, "no_communication")]  # listed twice: active, then finished
    runs = grouped(jobs)
    assert {run: [j.id for j in found] for run, found in runs.items()} == {
        RUN: ["2-ab", "3-ab", "4-ab"], "other": ["5-ab"]}
    spoof = job(6, "baseline")  # another user's job naming alice's run afterwards: not taken into it
    spoof.owner = "mallory"
    assert [j.id for j in grouped([*jobs, spoof])[RUN]] == ["2-ab", "3-ab", "4-ab"]


def test_a_variant_is_what_the_runner_would_have_read():
    measured, pending = variant_run(Read(job(2, "baseline"), rows(BASE)))
    assert pending is None and measured.measured and measured.ranks == 2 and measured.nodes == ("n1",)
    assert measured.timings[1] == RankTiming(1, "n1", (0.06, 0.06, 0.06), batch=64)
    half = rows({0: BASE[0]})
    assert variant_run(Read(job(2, "baseline", state="RUNNING"), half))[1] == 1  # one rank so far: pending
    ended, pending = variant_run(Read(job(2, "baseline", state="FAILED"), half))
    assert pending is None and not ended.measured
    assert ended.skipped == "job 2-ab ended FAILED before ranks other than 0 sent their timing"
    refused = variant_run(Read(job(2, "baseline"), problem="job 2-ab belongs to user bob"))[0]
    assert refused.skipped == "job 2-ab belongs to user bob" and not refused.measured


def test_the_verdict_is_the_clis():
    reads = [Read(job(2, "baseline"), rows(BASE)), Read(job(3, "no_communication"), rows(APART)),
             Read(job(4, "synthetic_input"), rows(FED))]
    document = run_document(RUN, reads)
    expected = diagnosis.to_json(diagnosis.diagnose("mwms", [variant_run(r)[0] for r in reads]))
    assert {k: document[k] for k in expected} == {**expected, "variants": document["variants"]}
    assert [{k: v[k] for k in expected["variants"][0]} for v in document["variants"]] == expected["variants"]
    assert document["verdict"] == "straggler" and document["straggler"]["rank"] == 1
    assert document["final"] and document["state"] == "ENDED" and document["name"] == "w"
    assert document["chart"] == {
        "step_time": [{"variant": "baseline", "job": "2-ab", "seconds": 0.06, "note": ""},
                      {"variant": "no_communication", "job": "3-ab", "seconds": 0.05, "note": ""},
                      {"variant": "synthetic_input", "job": "4-ab", "seconds": 0.055, "note": ""}],
        "rank_variant": "no_communication",
        "rank_step_time": [{"rank": 0, "node": "n1", "seconds": 0.02, "straggler": False},
                           {"rank": 1, "node": "n1", "seconds": 0.05, "straggler": True}]}


def test_a_run_still_going_shows_what_it_measured_so_far():
    measuring = run_document(RUN, [Read(job(2, "baseline", state="RUNNING"), rows({1: BASE[1]}))])
    assert measuring["verdict"] is None and not measuring["final"] and measuring["state"] == "RUNNING"
    assert measuring["summary"] == "measuring the baseline: job 2-ab RUNNING, 1 rank(s) sent their timing so far"
    assert measuring["variants"][0]["pending"] and measuring["variants"][0]["reported"] == 1
    assert measuring["chart"]["step_time"][0]["seconds"] is None

    so_far = run_document(RUN, [Read(job(2, "baseline"), rows(BASE)), Read(job(3, "no_communication"), rows(APART)),
                                Read(job(4, "synthetic_input", state="RUNNING"), ())])
    assert so_far["verdict"] == "straggler" and not so_far["final"] and so_far["state"] == "RUNNING"
    assert so_far["shares"]["input"] is None  # not measured yet
    assert [(v["name"], v["state"], v["pending"]) for v in so_far["variants"]] == [
        ("baseline", "CANCELED", False), ("no_communication", "CANCELED", False), ("synthetic_input", "RUNNING", True)]
    assert so_far["chart"]["step_time"][2] == {"variant": "synthetic_input", "job": "4-ab", "seconds": None,
                                               "note": "running: 0 rank(s) timed so far"}


def test_a_baseline_that_was_not_measured_is_said_and_no_verdict_given():
    failed = run_document(RUN, [Read(job(2, "baseline", state="FAILED"), ())])
    assert failed["verdict"] is None and failed["fixes"] == [] and not failed["final"]
    assert failed["summary"] == "the baseline was not measured: job 2-ab ended FAILED before any rank sent its timing"
    alone = run_document(RUN, [Read(job(3, "no_communication"), rows(APART))])
    assert alone["verdict"] is None and "the baseline's job is not among" in alone["summary"]
    assert [r["straggler"] for r in alone["chart"]["rank_step_time"]] == [False, False]  # drawn, none named


def test_a_rank_says_why_its_variant_was_not_applied():
    lines = [pb.LogLine(rank=1, text="tfdist: diagnose: synthetic_input was not applied: fit's input is a list"),
             pb.LogLine(rank=0, text="epoch 1")]
    assert why_from_lines(lines) == {1: "fit's input is a list"}
    read = Read(job(4, "synthetic_input"), rows(FED, applied=0.0), why={1: "fit's input is a list"})
    run = variant_run(read)[0]
    assert run.not_applied() == "rank 0: " and run.timings[1].why == "fit's input is a list"
    assert isinstance(run, VariantRun)


class Coordinator:
    """The reads the diagnose view makes, answered from memory; counts them."""

    address = "10.0.0.1:7400"

    def __init__(self, jobs, metrics, error=None):
        self._jobs, self._metrics, self.error, self.calls = jobs, metrics, error, []

    def _answer(self, what, value):
        self.calls.append(what)
        if self.error is not None:
            raise self.error
        return value

    def jobs(self, states=(), limit=0, summary=False):
        found = [j for j in self._jobs if j.state in states]
        return self._answer("ListJobs", JobList(found[-limit:] if limit else found, len(found)))

    def job(self, job_id):
        return self._answer("GetJob", next(j for j in self._jobs if j.id == job_id))

    def metrics(self, job_id, name=""):
        return self._answer("GetMetrics", pb.GetMetricsResponse(job_id=job_id, metrics=self._metrics[job_id]))


def test_the_view_reads_with_the_users_rights_and_keeps_what_settled():
    now = [200.0]
    jobs = [job(2, "baseline"), job(3, "no_communication"), job(4, "synthetic_input", state="RUNNING")]
    coordinator = Coordinator(jobs, {"2-ab": rows(BASE), "3-ab": rows(APART), "4-ab": ()})
    view = Diagnoses(Api(coordinator, Principal("user", "alice"), clock=lambda: now[0]), clock=lambda: now[0])
    answer = view.answer("/api/diagnoses")
    assert answer.status == 200 and [d["run"] for d in answer.document["diagnoses"]] == [RUN]
    assert answer.document["diagnoses"][0]["verdict"] == "straggler"
    assert view.answer(f"/api/diagnoses/{RUN}").document["state"] == "RUNNING"
    assert view.answer("/api/diagnoses/nope").status == 404
    assert view.answer("/api/diagnoses/a/b").status == 404
    now[0] += 5  # past the shared reads' second: the ended variants' rows are kept, the running one read again
    coordinator.calls.clear()
    view.answer(f"/api/diagnoses/{RUN}")
    assert coordinator.calls == ["ListJobs", "ListJobs", "GetJob", "GetMetrics"]

    bob = Diagnoses(Api(coordinator, Principal("user", "bob")))  # alice's jobs: bob reads no metrics of them
    refused = bob.answer(f"/api/diagnoses/{RUN}").document
    assert refused["verdict"] is None and refused["summary"] == (
        "the baseline was not measured: job 2-ab belongs to user alice: only its owner or an admin reads its metrics")
    monitor = Diagnoses(Api(coordinator, Principal("monitor", "prometheus")))
    assert monitor.answer(f"/api/diagnoses/{RUN}").document["verdict"] == "straggler"


def test_a_coordinator_that_does_not_answer_is_one_line():
    error = ClientError("the coordinator at 10.0.0.1:7400 did not answer in time", grpc.StatusCode.UNAVAILABLE)
    view = Diagnoses(Api(Coordinator([], {}, error=error), Principal("user", "alice")))
    answer = view.answer("/api/diagnoses")
    assert (answer.status, answer.document) == (502, {"error": str(error)})


def test_a_final_verdict_is_never_made_of_rows_read_before_the_variant_ended():
    """The fresh-clone run's failure: the page called a run final while the synthetic variant's rows came from a
    shared read made before its job ended (its last rows missing): its summary was not the CLI's."""
    now = [200.0]
    jobs = [job(2, "baseline"), job(3, "no_communication"), job(4, "synthetic_input", state="RUNNING")]
    metrics = {"2-ab": rows(BASE), "3-ab": rows(APART), "4-ab": rows({0: [0.06], 1: [0.06]})}
    coordinator = Coordinator(jobs, metrics)
    view = Diagnoses(Api(coordinator, Principal("user", "alice"), clock=lambda: now[0]), clock=lambda: now[0])
    assert not view.answer(f"/api/diagnoses/{RUN}").document["final"]
    # Within the same second the variant's last rows land and its job ends: the job is read anew (ended), and
    # the rows read before it ended are not reused for a final answer.
    metrics["4-ab"] = rows(FED)
    jobs[2] = job(4, "synthetic_input")
    coordinator.calls.clear()
    view.api.shared.forget_key(("job", "4-ab"))
    document = view.answer(f"/api/diagnoses/{RUN}").document
    reads = [run_document(RUN, [Read(j, metrics[j.id]) for j in jobs])]
    assert document["final"] and document["summary"] == reads[0]["summary"], (document["summary"], reads)
