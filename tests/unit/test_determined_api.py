"""tfdist's `determined` package (tfdist/compat/determined_api) over a worker's environment, in-process: what
get_cluster_info() says, where the Core API's metrics and checkpoints go, the searcher's length, the launcher
modules' command lines and what is not offered. The same calls run in real jobs in
tests/integration/test_determined.py."""

import importlib
import json
import os
import sys

import pytest

from tfdist import envvars

API = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "tfdist", "compat", "determined_api")


@pytest.fixture
def det(monkeypatch, tmp_path):
    """The package, imported fresh over an environment with no tfdist launcher in it."""
    for name in [m for m in sys.modules if m == "determined" or m.startswith("determined.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.syspath_prepend(os.path.abspath(API))
    for name in [k for k in os.environ if k.startswith("TFDIST_")]:
        monkeypatch.delenv(name)
    module = importlib.import_module("determined")
    assert module.__file__.startswith(os.path.abspath(API))
    yield module


def launched(monkeypatch, tmp_path, rank=1, **extra):
    """A worker's environment as tfdist's planners write it: 2 nodes of 2 GPUs, one process each."""
    cluster = {"job_id": "12-ab34", "attempt": 1, "checkpoint_dir": str(tmp_path / "ckpt" / "12-ab34"),
               "nodes": [{"node_rank": 0, "agent": "a1", "address": "10.0.0.1", "gpus": [0, 1], "ranks": [0]},
                         {"node_rank": 1, "agent": "a2", "address": "10.0.0.2", "gpus": [2, 3], "ranks": [1]}],
               "latest_checkpoint": {"path": str(tmp_path / "ckpt" / "12-ab34" / "0f0f-uuid"), "step": 30}}
    env = {envvars.JOB_ID: "12-ab34", envvars.RANK: str(rank), envvars.SIZE: "2", envvars.LOCAL_SLOTS: "2",
           envvars.SLOTS: "4", envvars.NODE_RANK: str(rank), envvars.NUM_NODES: "2", envvars.GPUS: "0,1",
           envvars.CLUSTER: json.dumps(cluster), envvars.ATTEMPT: "1",
           envvars.HPARAMS: json.dumps({"increment_by": 3, "global_batch_size": 32}),
           envvars.CHECKPOINT_DIR: str(tmp_path / "ckpt" / "12-ab34"),
           envvars.METRICS_FILE: str(tmp_path / "metrics.jsonl"), **extra}
    for key, value in env.items():
        monkeypatch.setenv(key, value)


def records(tmp_path):
    path = tmp_path / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_off_cluster_there_is_no_cluster_info(det):
    assert det.get_cluster_info() is None


def test_the_cluster_info_is_the_job_as_tfdist_placed_it(det, monkeypatch, tmp_path):
    launched(monkeypatch, tmp_path, **{"TFDIST_USER_DATA": json.dumps({"url": "x"}),
                                       "TFDIST_EXPERIMENT_CONFIG": json.dumps({"searcher": {"name": "single"}})})
    info = det.get_cluster_info()
    assert info.task_type == "TRIAL" and info.trial.trial_id == 12 and isinstance(info.trial.trial_id, int)
    assert info.trial.hparams == {"increment_by": 3, "global_batch_size": 32}
    assert info.container_addrs == ["10.0.0.1", "10.0.0.2"] and info.container_rank == 1
    assert info.slot_ids == [2, 3] and info.container_slot_counts == [2, 2]
    assert info.latest_checkpoint == "0f0f-uuid" and info.trial._steps_completed == 30
    assert info.user_data == {"url": "x"} and info.trial._config == {"searcher": {"name": "single"}}
    assert info.allocation_id == "12-ab34.1" and info.agent_id == "a2"


def test_metrics_groups_are_names_and_epochs_are_the_searchers(det, monkeypatch, tmp_path):
    launched(monkeypatch, tmp_path, rank=0)
    context = det.core.init(distributed=det.core.DummyDistributedContext())
    context.train.report_training_metrics(steps_completed=10, metrics={"loss": 0.5, "note": "text"})
    context.train.report_validation_metrics(steps_completed=10, metrics={"loss": 0.4, "epochs": 2})
    context.train.report_metrics("inference", 10, {"latency": 3})
    values = [r["values"] for r in records(tmp_path)]
    assert values == [{"train_loss": 0.5}, {"loss": 0.4, "epochs": 2.0, "epoch": 2.0}, {"inference_latency": 3.0}]
    with pytest.raises(ValueError):
        context.train.report_progress(1.5)


def test_a_checkpoint_is_a_directory_recorded_once_written(det, monkeypatch, tmp_path):
    launched(monkeypatch, tmp_path, rank=0)
    context = det.core.init(distributed=det.core.DummyDistributedContext())
    with context.checkpoint.store_path({"steps_completed": 40}) as (path, storage_id):
        (path / "state").write_text("7")
        assert not records(tmp_path)  # nothing recorded while it is being written
    (record,) = records(tmp_path)
    assert record["values"] == {"tfdist.checkpoint": 1.0} and record["step"] == 40 and record["note"] == str(path)
    assert json.loads((path / "metadata.json").read_text()) == {"steps_completed": 40}
    assert oct(os.stat(path).st_mode & 0o777) == "0o700"
    with context.checkpoint.restore_path(storage_id) as found:
        assert (found / "state").read_text() == "7"
    # Another trial's checkpoint under the same storage (a warm start), by its id alone.
    other = tmp_path / "ckpt" / "13-cd56" / "warm-id"
    other.mkdir(parents=True)
    with context.checkpoint.restore_path("warm-id") as found:
        assert found == other
    for bad in ("../13-cd56/warm-id", "missing-id", "*", "/etc", ""):
        with pytest.raises(FileNotFoundError):
            with context.checkpoint.restore_path(bad):
                pass
    assert context.checkpoint.get_metadata(storage_id)["steps_completed"] == 40
    # What a restart continues from, and another job's, are not this job's to delete; a bucket is not a directory.
    with pytest.raises(ValueError, match="latest"):
        context.checkpoint.delete(storage_id)
    with pytest.raises(ValueError, match="another job's"):
        context.checkpoint.delete("warm-id")
    with pytest.raises(FileNotFoundError):
        context.checkpoint.delete("*")
    assert other.is_dir() and path.is_dir()
    with pytest.raises(ValueError, match="bucket"):
        det.core.init(checkpoint_storage="s3://bucket/prefix")


def test_a_non_chief_cannot_store_alone(det, monkeypatch, tmp_path):
    launched(monkeypatch, tmp_path, rank=1, TFDIST_STORE="127.0.0.1:9")  # asked nothing: refused before
    context = det.core.init(distributed=det.core.DistributedContext(rank=1, size=2, local_rank=0, local_size=1,
                                                                    cross_rank=1, cross_size=2))
    with pytest.raises(RuntimeError, match="non-chief"):
        with context.checkpoint.store_path({"steps_completed": 1}):
            pass


@pytest.mark.parametrize("searcher,expected", [
    ({"max_length": {"batches": 100}}, ("BATCHES", 100)), ({"max_length": {"epochs": 3}}, ("EPOCHS", 3)),
    ({"max_length": 100}, (None, 100)), ({"time_metric": "batches", "max_time": 64}, ("BATCHES", 64)),
])
def test_the_searchers_one_operation_is_its_max_length(det, monkeypatch, tmp_path, searcher, expected):
    launched(monkeypatch, tmp_path, rank=0, TFDIST_EXPERIMENT_CONFIG=json.dumps({"searcher": {"metric": "x",
                                                                                             **searcher}}))
    context = det.core.init(distributed=det.core.DummyDistributedContext())
    op = next(context.searcher.operations())
    unit = context.searcher.get_configured_units()
    assert ((unit.name if unit else None), op.length) == expected


def test_the_launcher_modules_find_the_command(det, capsys):
    from determined.launch._run import command_of

    assert command_of("determined.launch.tensorflow", ["--port", "2222", "python3", "t.py", "--", "--epochs", "3"]) \
        == ["python3", "t.py", "--epochs", "3"]
    assert command_of("determined.launch.torch_distributed", ["--nproc_per_node", "2", "--", "python3", "t.py"]) == \
        ["python3", "t.py"]
    for argv in (["--autohorovod", "--trial", "model_def:T"], ["--nproc_per_node", "2", "python3", "t.py"]):
        with pytest.raises(SystemExit) as stopped:
            command_of("determined.launch.horovod", argv)
        assert stopped.value.code == 2 and capsys.readouterr().err.count("\n") == 1


def test_what_is_not_offered_stops_in_one_line_when_used_not_when_looked_up(det, capsys):
    from determined.keras import TFKerasTrial  # noqa: F401  (a lookup, as an import or hasattr is, is harmless)
    from determined.experimental import client

    assert hasattr(det.pytorch, "PyTorchTrial") and getattr(det.keras, "NotDeterminedsAtAll", None) is None
    for statement in ("class MyTrial(TFKerasTrial):\n    pass", "client.login()", "det.pytorch.Trainer(None)",
                      "det.TrialContext()"):
        with pytest.raises(SystemExit) as stopped:
            exec(statement, {"det": det, "TFKerasTrial": TFKerasTrial, "client": client})
        assert stopped.value.code == 2
        said = capsys.readouterr().err
        assert said.count("\n") == 1 and "tfdist does not offer" in said and "docs/determined.md" in said, said


@pytest.mark.parametrize("searcher,steps,metrics,reached", [
    ({"max_length": {"batches": 30}}, 30, {"x": 1}, True), ({"max_length": {"batches": 30}}, 25, {"x": 1}, False),
    ({"max_length": {"epochs": 3}}, 90, {"epochs": 3}, True), ({"max_length": {"epochs": 3}}, 90, {"epochs": 2}, False),
    ({"max_length": {"records": 640}}, 20, {}, True),  # 20 steps of 32 records
    ({"time_metric": "seen", "max_time": 100}, 5, {"seen": 100.0}, True), ({"time_metric": "seen", "max_time": 100},
                                                                          5, {"other": 1}, False),
    ({}, 10_000, {"batches": 10_000}, False),  # no search: never
])
def test_a_trial_at_its_searchers_length_stops_as_completed(det, monkeypatch, tmp_path, searcher, steps, metrics,
                                                             reached):
    launched(monkeypatch, tmp_path, rank=0, TFDIST_SEARCHER=json.dumps({"metric": "x", **searcher}))
    context = det.core.init(distributed=det.core.DummyDistributedContext())
    context.train.report_validation_metrics(steps_completed=steps, metrics=metrics)
    assert context.preempt.should_preempt() is reached
    assert not any("tfdist.preempted" in r["values"] for r in records(tmp_path))  # completed, not paused


def test_sharded_metadata_merges_as_determineds_does(det):
    from determined.core._checkpoint import merge_metadata

    parts = [{"steps_completed": 5, "shards": {"0": "a"}}, {"steps_completed": 5, "shards": {"1": "b"}}]
    assert merge_metadata(parts) == {"steps_completed": 5, "shards": {"0": "a", "1": "b"}}
    with pytest.raises(RuntimeError, match=r"/steps_completed \(ranks 1 differ"):
        merge_metadata([{"steps_completed": 5}, {"steps_completed": 6}])


def test_a_finished_trial_reaches_every_rank_that_asks_alone(det, monkeypatch, tmp_path):
    """PreemptMode.WorkersAskMaster: no collective; the chief's "reached its length" goes through the job's store."""
    from cluster.agent.job_store import JobStore

    store = JobStore("127.0.0.1", 0).start()
    try:
        launched(monkeypatch, tmp_path, rank=0, TFDIST_STORE=f"127.0.0.1:{store.port}",
                 TFDIST_STORE_SECRET=store.secret, TFDIST_SEARCHER=json.dumps({"max_length": {"batches": 10}}))
        mode = det.core.PreemptMode.WorkersAskMaster
        ranks = [det.core.DistributedContext(rank=r, size=2, local_rank=0, local_size=1, cross_rank=r, cross_size=2)
                 for r in (0, 1)]
        chief, other = (det.core.init(distributed=d, preempt_mode=mode) for d in ranks)
        assert not other.preempt.should_preempt()
        chief.train.report_validation_metrics(steps_completed=10, metrics={"x": 1})
        assert chief.preempt.should_preempt() and other.preempt.should_preempt()
    finally:
        store.stop()


def test_another_users_directory_is_never_a_warm_start(det, monkeypatch, tmp_path):
    """A shared checkpoint storage: a directory another user made under a storage id is not read as a checkpoint."""
    launched(monkeypatch, tmp_path, rank=0)
    context = det.core.init(distributed=det.core.DummyDistributedContext())
    planted = tmp_path / "ckpt" / "13-cd56" / "planted-id"
    planted.mkdir(parents=True)
    try:
        os.chown(planted, 65534, 65534)  # nobody's (root, where nobody's uid is mapped)
    except OSError:  # not root, or a sandbox's user namespace: this process stands for another user instead
        import determined.core._checkpoint as checkpoint_module
        monkeypatch.setattr(checkpoint_module.os, "getuid", lambda: os.stat(planted).st_uid + 1)
    with pytest.raises(FileNotFoundError):
        with context.checkpoint.restore_path("planted-id"):
            pass
