"""Learning-rate warmup runs in both Keras. Training metrics reach the coordinator from tfdist's MetricsReporter (Keras 3 under Horovod, tf_keras
under parameter servers), averaged over ranks when asked, and `tfdist metrics` prints the history as a
table, JSON, CSV and a PNG; a coordinator restart loses none of it."""

import csv
import io
import json
import os
import re

import pytest

from tests.conftest import REPO, WITH_PLOT

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
WORKER = os.path.join(REPO, "tests", "integration", "workers", "metrics_fit.py")


def own_losses(stdout):
    return {r["rank"]: r["losses"] for r in (json.loads(m) for m in re.findall(r"OWN (\{.*\})", stdout))}


def test_metrics_from_every_mode_survive_a_coordinator_restart(tmp_path, local_cluster):
    cluster = local_cluster()
    cluster.start_agent("n1", "--slots", "2")
    cluster.wait_agents("n1")
    (tmp_path / "avg.yaml").write_text("optimizations: {average_training_metrics: true}\n")
    hvd = cluster.cli("launch", "--config", str(tmp_path / "avg.yaml"), "--slots", "2", "--distribution", "horovod",
                      "--", WORKER, str(tmp_path / "tb"), timeout=240)
    assert hvd.returncode == 0, hvd.stderr[-3000:]
    ps = cluster.cli("launch", "--slots", "2", "--distribution", "ps", "--", WORKER, str(tmp_path / "tb-ps"),
                     timeout=240)
    assert ps.returncode == 0, ps.stderr[-3000:]

    for job in (hvd, ps):  # warmup to lr x slots, per batch (Keras 3) and per epoch (tf_keras under PSS)
        assert "[rank=0] tfdist: learning-rate warmup from 0.1 to 0.2 over " in job.stdout
        assert "[rank=0] tfdist: learning-rate warmup done: 0.2" in job.stdout
    rows = [json.loads(l) for l in cluster.cli("metrics", "1", "--json").stdout.splitlines()]
    epochs = [r["metrics"] for r in rows if "epoch" in r["metrics"]]
    assert [m["epoch"] for m in epochs] == [1.0, 2.0, 3.0] and all(r["rank"] == 0 for r in rows)
    assert all("val_loss" in m for m in epochs)
    assert [r["step"] for r in rows] == sorted(r["step"] for r in rows)
    assert len(rows) > len(epochs)  # every_n_batches=4: batch reports between the epochs
    # Averaged over both ranks (each trains on its own data, so their own losses differ).
    own = own_losses(hvd.stdout)
    assert own[0] != own[1]
    for i, m in enumerate(epochs):
        assert m["loss"] == pytest.approx((own[0][i] + own[1][i]) / 2, rel=1e-6)

    ps_rows = [json.loads(l)["metrics"] for l in cluster.cli("metrics", "2", "--json").stdout.splitlines()]
    assert [m["epoch"] for m in ps_rows if "epoch" in m] == [1.0, 2.0, 3.0]  # tf_keras fit reports too
    assert [m["loss"] for m in ps_rows if "epoch" in m] == pytest.approx(own_losses(ps.stdout)[0])

    assert list((tmp_path / "tb").glob("events.out.tfevents.*"))  # TensorBoard, from the chief

    before = cluster.cli("metrics", "1", "--csv").stdout
    cluster.coordinator.kill()
    cluster.coordinator.wait(timeout=30)
    cluster.start_coordinator(cluster.address)
    after = cluster.cli("metrics", "1", "--csv").stdout
    assert after == before and len(after.splitlines()) == len(rows) + 1
    header = next(csv.reader(io.StringIO(after)))
    assert header[:2] == ["step", "rank"] and {"loss", "val_loss", "epoch"} <= set(header)

    table = cluster.cli("metrics", "1", "--name", "val_loss").stdout.splitlines()
    assert table[0].split() == ["STEP", "RANK", "val_loss"] and len(table) == 4
    plot = cluster.cli("metrics", "1", "--plot", str(tmp_path / "m.png"), **WITH_PLOT)
    assert plot.returncode == 0, plot.stderr
    assert (tmp_path / "m.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_metrics_requests_are_one_line(tmp_path, local_cluster):
    cluster = local_cluster()
    missing = cluster.cli("metrics", "7")
    assert missing.returncode == 1 and missing.stderr == \
        "tfdist: error: job 7 not found; `tfdist jobs` lists the jobs\n"
    bad = cluster.cli("metrics", "7", "--plot", str(tmp_path / "m.jpg"))
    assert bad.returncode == 2 and bad.stderr == f"tfdist: error: --plot {tmp_path}/m.jpg: give a .png file name\n"
