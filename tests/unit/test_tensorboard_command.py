"""`tfdist tensorboard ID`'s decisions: where a job's event files are, the one line when they are not on
this machine or TensorBoard is not installed."""

import importlib.util

import pytest

from cluster.client import tensorboard_app
from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb
from tfdist.errors import NotFoundError, UserError


def job(state="SUCCEEDED", storage="", working_dir="/w") -> pb.Job:
    return pb.Job(id="3-ab12", state=state, spec=pb.JobSpec(working_dir=working_dir, config=pb.JobConfig(
        checkpoint_storage=storage)), placement=[pb.Placement(agent="a2", node_rank=1), pb.Placement(agent="a1")])


def test_the_event_files_are_found_from_the_jobs_record(tmp_path):
    (tmp_path / "tfdist-tensorboard" / "3-ab12").mkdir(parents=True)
    assert tensorboard_app.event_dir(job(working_dir=str(tmp_path))) == str(tmp_path / "tfdist-tensorboard" /
                                                                                 "3-ab12")
    (tmp_path / "ckpt" / "3-ab12" / "tensorboard").mkdir(parents=True)
    assert tensorboard_app.event_dir(job(storage=str(tmp_path / "ckpt"), working_dir=str(tmp_path))) == \
        str(tmp_path / "ckpt" / "3-ab12" / "tensorboard")


def test_missing_event_files_are_one_line_saying_where_they_would_be(tmp_path):
    where = tmp_path / "tfdist-tensorboard" / "3-ab12"
    with pytest.raises(NotFoundError) as e:
        tensorboard_app.event_dir(job(working_dir=str(tmp_path)))
    assert str(e.value) == (
        f"job 3-ab12: no TensorBoard event files in {where} on this machine; the job's chief writes them there with "
        "MetricsReporter(tensorboard=True) on node a1. Without a filesystem shared with that node, run `tfdist "
        "tensorboard` there, or give the job a checkpoint_storage every node and this machine share")
    with pytest.raises(NotFoundError, match=f"job 3-ab12 is QUEUED: no TensorBoard event files yet \\(they go to "
                                            f"{where}\\)"):
        tensorboard_app.event_dir(job("QUEUED", working_dir=str(tmp_path)))
    with pytest.raises(NotFoundError, match="records neither a checkpoint_storage nor a working directory"):
        tensorboard_app.event_dir(job(working_dir=""))


def test_without_tensorboard_it_names_the_extra(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "tensorboard" else real(name, *a))
    with pytest.raises(UserError, match=r"tfdist tensorboard needs TensorBoard, which is not installed for \S+: "
                                        r"pip install 'tfdist\[tensorboard\]'$"):
        tensorboard_app.check_installed()
