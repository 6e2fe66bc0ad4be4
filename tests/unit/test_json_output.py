"""Issue 18, Measured 6 and 7: `--json` was a protobuf dump (a SUCCEEDED job had no `exit_code`, numbers came as
strings: `"latest_checkpoint": {"step": "-1"}`, JSON sat inside strings: `"hyperparameters_json": "{}"`), and
`tfdist metrics 3 | head -5` printed `tfdist: error: [Errno 32] Broken pipe` while `tfdist launch ... | head -3`
exited 1. Here docs/json.md's tables are the schema: every example there and the real output of each command
(built from values here, and through a real launch and coordinator) must match them, key for key and type
for type, so the documentation and the output cannot drift."""

from __future__ import annotations

import json
import math
import os
import pathlib
import re
import subprocess
import sys

import pytest

from cluster.client import json_output, tables
from cluster.shared import jobspec
from cluster.shared.config import parse_config
from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb
from tests.conftest import REPO, cli_env

DOC = pathlib.Path(REPO, "docs", "json.md")
JOB, JOBS, SLURM, AGENTS, METRICS = ("tfdist job ID --json", "tfdist jobs --json", "tfdist jobs --slurm --json",
                                     "tfdist agents --json", "tfdist metrics ID --json")
TYPES = {"string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,), "object": (dict,),
         "array": (list,), "null": (type(None),)}


def documented() -> dict[str, tuple[dict[str, tuple[str, ...]], list]]:
    """docs/json.md: for each `## `COMMAND`` section, its table (key path -> type names) and its examples."""
    sections: dict[str, tuple[dict[str, tuple[str, ...]], list]] = {}
    for heading, body in re.findall(r"^## `([^`]+)`\n(.*?)(?=^## |\Z)", DOC.read_text(), re.S | re.M):
        rows = {m.group(1): tuple(t.strip() for t in m.group(2).split(" or "))
                for m in re.finditer(r"^\| `([^`]+)` \| ([^|]+?) \|", body, re.M)}
        for path, types in rows.items():
            assert set(types) <= set(TYPES), f"docs/json.md, {heading}: `{path}` has an unknown type {types}"
        examples = []
        for kind, text in re.findall(r"^```(jsonl|json)\n(.*?)^```", body, re.S | re.M):
            examples += [json.loads(l) for l in text.splitlines()] if kind == "jsonl" else [json.loads(text)]
        sections[heading] = (rows, examples)
    # A listing's items are the documented objects themselves: one schema, stated once.
    job_rows = sections[JOB][0]
    sections[JOBS][0].update({f"jobs[].{path}": types for path, types in job_rows.items()})
    return sections


DOCUMENTED = documented()


def schema(command: str) -> dict[str, tuple[str, ...]]:
    return DOCUMENTED[command][0]


def problems(document, rows: dict[str, tuple[str, ...]]) -> list[str]:
    """How `document` departs from the documented rows: an undocumented or missing key, a wrong type."""
    found: list[str] = []

    def children(path: str) -> set[str]:
        prefix = f"{path}." if path else ""
        return {p[len(prefix):] for p in rows if p.startswith(prefix) and re.fullmatch(r"[a-z_0-9*]+", p[len(prefix):])}

    def walk(value, path: str) -> None:
        if path:
            types = rows.get(path) or ("object",)  # `a[]` with rows for `a[].x` only: objects
            if not any(isinstance(value, TYPES[t]) and not (isinstance(value, bool) and t in ("integer", "number"))
                       for t in types):
                found.append(f"`{path}` is {type(value).__name__} {value!r:.60}, documented as {' or '.join(types)}")
                return
        if isinstance(value, dict):
            keys = children(path)
            if path and not keys:
                return  # a free-form object (hyperparameters): any JSON
            for key, item in value.items():
                named = f"{path}.{key}" if path else key
                if "*" in keys:
                    walk(item, f"{path}.*")
                elif named in rows:
                    walk(item, named)
                else:
                    found.append(f"`{named}` is not documented in docs/json.md (add a row for it)")
            found.extend(f"`{f'{path}.{k}' if path else k}` is missing (documented keys are always present)"
                         for k in keys - set(value) - {"*"})
        elif isinstance(value, list):
            if value and f"{path}[]" not in rows and not children(f"{path}[]"):
                found.append(f"`{path}[]`: items are not documented")
            for item in value:
                walk(item, f"{path}[]")

    walk(document, "")
    return found


def valid(document, command: str):
    assert not problems(document, schema(command)), "\n".join(problems(document, schema(command)))
    json.dumps(document, allow_nan=False)  # real JSON: no NaN
    return document


# ---------------------------------------------------------------- the documentation itself

def test_every_command_is_documented_with_an_example_that_matches():
    assert {JOB, JOBS, SLURM, AGENTS, METRICS} <= set(DOCUMENTED)
    for command, (rows, examples) in DOCUMENTED.items():
        assert rows and examples, f"docs/json.md, {command}: a table and an example"
        for example in examples:
            assert not problems(example, rows), (command, problems(example, rows))


def test_the_checker_catches_what_the_dump_did():
    """The protobuf dump of a SUCCEEDED job: no exit_code, numbers as strings, JSON in a string."""
    dumped = valid(json_output.job(_job("SUCCEEDED", exit_code=-1)), JOB)
    del dumped["exit_code"]
    dumped["latest_checkpoint"]["step"] = "-1"
    dumped["hyperparameters_json"] = "{}"
    found = problems(dumped, schema(JOB))
    assert any("`latest_checkpoint.step` is str" in p for p in found)
    assert any("`hyperparameters_json` is not documented" in p for p in found)
    assert any("`exit_code` is missing" in p for p in found)


# ---------------------------------------------------------------- each shape from values

def _spec(text: str = "entrypoint: python train.py\n") -> pb.JobSpec:
    return jobspec.to_pb(jobspec.job_spec(parse_config(text), priority=3, submission_id="s1"))


def _job(state: str, **fields) -> pb.Job:
    job = pb.Job(id="7-ab12", spec=_spec(), state=state, submitted_at=1795485307.5, owner="alice", exit_code=-1,
                 failed_rank=-1, latest_checkpoint=pb.Checkpoint(step=-1))
    for name, value in fields.items():
        if isinstance(value, list):
            getattr(job, name).extend(value)
        elif hasattr(value, "CopyFrom"):
            getattr(job, name).CopyFrom(value)
        else:
            setattr(job, name, value)
    return job


def test_a_queued_job_says_why_and_has_no_exit_code_yet():
    shown = valid(json_output.job(_job("QUEUED", waiting_reason="waiting for 2 slots")), JOB)
    assert (shown["exit_code"], shown["outcome"], shown["started_at"], shown["placement"]) == (None, None, None, [])
    assert (shown["waiting_reason"], shown["priority"], shown["latest_checkpoint"]) == \
        ("waiting for 2 slots", 3, {"step": None, "path": None, "time": None})


def test_a_placed_job_says_which_ranks_it_waits_for_and_an_ended_one_nothing(capsys):
    joining = "1 of 2 ranks joined; waiting for rank 1 (node a2) for 40 s (startup timeout 300 s)"
    assert valid(json_output.job(_job("RUNNING", waiting_reason=joining)), JOB)["waiting_reason"] == joining
    assert valid(json_output.job(_job("FAILED", waiting_reason=joining)), JOB)["waiting_reason"] is None
    tables.print_job(_job("RUNNING", waiting_reason=joining), as_json=False)
    tables.print_jobs([_job("STARTING", waiting_reason=joining)], as_json=False)
    assert capsys.readouterr().out.count(joining) == 2


def test_a_ps_job_on_two_gpu_nodes_shows_each_nodes_ranks_and_roles():
    spec = _spec("entrypoint: python train.py\nresources: {slots_per_trial: 4}\ndistribution: {mode: ps, num_ps: 1}\n"
                 "hyperparameters: {lr: 0.5, layers: [3, 4]}\nenvironment: {variables: {A: '1'}}\n")
    job = _job("RUNNING", spec=spec, started_at=1795485310.0, placement=[
        pb.Placement(agent="g1", node_rank=0, slots=2, address="10.0.0.1", ports=[29500, 29501, 29502, 29503, 29504],
                     gpus=[0, 1], state="STARTED"),  # chief, 2 workers, ps, the job store (as ps mode asks)
        pb.Placement(agent="g2", node_rank=1, slots=2, address="10.0.0.2", ports=[29500, 29501], gpus=[2, 3],
                     state="STARTED")])
    job.spec.config.environment_variables["A"] = "(hidden)"  # as the coordinator sends it
    shown = valid(json_output.job(job), JOB)
    assert shown["exit_code"] is None and shown["placement"][0]["state"] == "STARTED"
    ranks = [(r["rank"], r["role"]) for node in shown["placement"] for r in node["ranks"]]
    assert sorted(ranks) == [(0, "chief"), (1, "worker"), (2, "worker"), (3, "worker"), (4, "worker"), (5, "ps")]
    assert [r["port"] for r in shown["placement"][1]["ranks"]] == [29500, 29501]
    assert (shown["hyperparameters"], shown["environment"]) == ({"lr": 0.5, "layers": [3, 4]}, ["A"])
    assert shown["distribution"]["mode"] == "ps" and shown["config"]["num_ps"] == 1


def test_a_worker_killed_by_a_signal_is_128_plus_n_and_a_paused_job_75():
    killed = _job("FAILED", exit_code=137, failed_rank=1, message="rank 1 on node a was killed by signal SIGKILL",
                  exits=[pb.WorkerExit(rank=1, agent="a", exit_code=-9, last_lines=["step 3"])])
    shown = valid(json_output.job(killed), JOB)
    assert (shown["exit_code"], shown["failed_rank"], shown["outcome"]) == (137, 1, killed.message)
    assert (shown["exits"][0]["exit_code"], shown["exits"][0]["signal"]) == (137, "SIGKILL")
    paused = _job("PAUSED", message="paused at step 20", placement=[pb.Placement(agent="a", slots=1, state="LEASING")],
                  latest_checkpoint=pb.Checkpoint(step=20, path="/ck/ckpt-20", time=1795485400.0),
                  latest_metrics=[pb.Metric(name="loss", value=math.nan, step=20, time=1795485399.0)])
    shown = valid(json_output.job(paused), JOB)
    assert (shown["exit_code"], shown["latest_checkpoint"]["step"], shown["latest_metrics"][0]["value"]) == (75, 20, None)
    assert shown["placement"][0]["state"] is None  # a paused job holds no node
    for state, code in (("SUCCEEDED", 0), ("CANCELED", 130), ("STARTING", None), ("RUNNING", None)):
        assert valid(json_output.job(_job(state)), JOB)["exit_code"] == code, state


def test_every_config_field_is_documented():
    """A new config field lands in `config` by itself: this fails until docs/json.md has its row."""
    shown = json_output.job(_job("QUEUED"))
    missing = [f"config.{name}" for name in shown["config"] if f"config.{name}" not in schema(JOB)]
    assert not missing, f"add rows for {missing} to docs/json.md"


def test_listings_agents_slurm_and_metrics():
    listed = valid(json_output.jobs([_job("QUEUED"), _job("SUCCEEDED")], left_out=5), JOBS)
    assert (len(listed["jobs"]), listed["total"], listed["left_out"]) == (2, 7, 5)
    agent = pb.AgentInfo(name="g1", slots=2, gpu=True, state="ALIVE", last_heartbeat=1795485311.0, free_slots=1,
                         addresses=[pb.Address(ip="10.0.0.1", prefix_len=24)], jobs=["7-ab12"], free_gpus=[1],
                         gpus=[pb.Gpu(index=0, uuid="GPU-1", name="H100"), pb.Gpu(index=1, uuid="GPU-2", name="H100")])
    shown = valid(json_output.agents([agent]), AGENTS)["agents"][0]
    assert [g["free"] for g in shown["gpus"]] == [False, True] and shown["addresses"][0]["interface"] is None
    from cluster.client.slurm_submit import SlurmJob

    slurm = valid(json_output.slurm_jobs([SlurmJob("42", "d", "FAILED", "None", "0:9", "/o", "n1", 0),
                                          SlurmJob("43", "d", "PENDING", "Resources", "0:0", "/o", "(null)", 0)]), SLURM)
    assert [(j["exit_code"], j["reason"], j["nodes"]) for j in slurm["jobs"]] == [(137, None, "n1"),
                                                                                 (None, "Resources", None)]
    history = pb.GetMetricsResponse(job_id="7-ab12", metrics=[
        pb.Metric(rank=0, step=1, name="step", value=1.0), pb.Metric(rank=0, step=1, name="loss", value=math.inf)])
    rows = [valid(row, METRICS) for row in json_output.metric_rows(history)]
    assert rows == [{"step": 1, "rank": 0, "metrics": {"step": 1.0, "loss": None}}]  # a metric named step: its own


# ---------------------------------------------------------------- real processes: a launch, a coordinator, pipes

WORKER = """\
import os, sys, time, tfdist
for step in range(3000):  # enough rows that `tfdist metrics --json | head -1` outlives head
    tfdist.report_metrics(step, loss=1.0 / (step + 1))
print("first", flush=True)
deadline = time.monotonic() + 60
while not os.path.exists(sys.argv[1]):  # the test says when head has gone
    if time.monotonic() > deadline:
        sys.exit(99)
    time.sleep(0.05)
for i in range(50):
    print("after", i, flush=True)
sys.exit(3)
"""


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "cluster.client.cli", *args]


def _piped_to_head(command: list[str], marker: str, cwd: str) -> tuple[subprocess.Popen, bytes, subprocess.Popen]:
    """`COMMAND | head -1` as a shell runs it; returns the command (still running or not), head's output and
    head (exited)."""
    stderr = open(os.path.join(cwd, "stderr.txt"), "w+")
    writer = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, cwd=cwd, env=cli_env(marker))
    head = subprocess.Popen(["head", "-1"], stdin=writer.stdout, stdout=subprocess.PIPE)
    writer.stdout.close()  # head alone holds the pipe's reading end: when it exits, the pipe is closed
    out, _ = head.communicate(timeout=120)
    writer.stderr_file = stderr
    return writer, out, head


@pytest.mark.timeout(240)
def test_real_output_matches_the_documentation_and_closed_pipes_end_quietly(tmp_path, marker):
    (tmp_path / "worker.py").write_text(WORKER)
    go, state = tmp_path / "go", tmp_path / "state"
    launch, first, _ = _piped_to_head(_cli("launch", "--state-dir", str(state), "--slots", "1", "--", sys.executable,
                                           "worker.py", str(go)), marker, str(tmp_path))
    try:
        assert b"first" in first
        go.touch()  # head has exited: every line the worker prints now meets a closed pipe
        assert launch.wait(timeout=120) == 3  # the job's own code: it was followed to its end, not canceled
    finally:
        if launch.poll() is None:
            launch.kill()
            launch.wait(timeout=30)
    launch.stderr_file.seek(0)
    said = launch.stderr_file.read()
    assert "Broken pipe" not in said and "Traceback" not in said and "failed: rank 0" in said, said

    from tests.agent_core import AgentsServer

    server = AgentsServer(str(state), "127.0.0.1:0").start()  # the launch's state, read back
    try:
        credential = server.issue("admin", "tester").save(str(tmp_path / "admin.json"))
        client = ["--coordinator", server.address, "--credentials", credential]

        def shown(*args: str):
            result = subprocess.run(_cli(*args, *client), capture_output=True, text=True, timeout=60,
                                    env=cli_env(marker))
            assert result.returncode == 0 and result.stderr == "", result.stderr
            return result.stdout

        job = valid(json.loads(shown("job", "1", "--json")), JOB)
        assert (job["state"], job["exit_code"], job["failed_rank"]) == ("FAILED", 3, 0)
        assert job["exits"][0]["last_lines"][-1] == "after 49"  # the worker ran to its end after head left
        listed = valid(json.loads(shown("jobs", "--json")), JOBS)
        assert [j["id"] for j in listed["jobs"]] == [job["id"]] and listed["left_out"] == 0
        valid(json.loads(shown("agents", "--json")), AGENTS)
        rows = [json.loads(line) for line in shown("metrics", "1", "--json").splitlines()]
        assert len(rows) == 3000 and all(not problems(row, schema(METRICS)) for row in rows[:5])
        metrics, head_line, _ = _piped_to_head(_cli("metrics", "1", "--json", *client), marker, str(tmp_path))
        assert metrics.wait(timeout=60) == 0
        metrics.stderr_file.seek(0)
        assert metrics.stderr_file.read() == ""  # before: `tfdist: error: [Errno 32] Broken pipe`, exit 1
        valid(json.loads(head_line), METRICS)
    finally:
        server.stop()
