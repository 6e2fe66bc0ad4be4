"""Metrics to look at: the digits example, launched through a coordinator, reports a curve (dozens of rows
that `tfdist metrics --plot` draws as lines) and TensorBoard event files, which `tfdist tensorboard ID` finds
from the job's record and serves behind a login link until SIGTERM stops it (real TensorBoard, real HTTP):
without the link's session TensorBoard answers nothing."""

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from tests.conftest import REPO, WITH_PLOT, cli_env, run_cli, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
DIGITS = os.path.join(REPO, "examples", "digits", "train.py")


def get(url: str, cookie: str = ""):
    request = urllib.request.Request(url, headers={"Cookie": cookie} if cookie else {})
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.loads(answer.read())


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def log_in(link: str) -> tuple[str, str]:
    """(the session cookie the login link gives, where it leads)."""
    try:
        urllib.request.build_opener(NoRedirect).open(link, timeout=10)
    except urllib.error.HTTPError as e:
        assert e.code == 303, e.code
        return e.headers["Set-Cookie"].split(";")[0], e.headers["Location"]
    raise AssertionError(f"{link} did not redirect")


def test_an_example_reports_curves_that_tensorboard_serves(tmp_path, local_cluster, marker):
    cluster = local_cluster()
    cluster.start_agent("n1", "--slots", "2")
    cluster.wait_agents("n1")
    (tmp_path / "c.yaml").write_text("resources: {slots_per_trial: 2}\nenvironment: {variables: {TF_CPP_MIN_LOG_LEVEL: 2}}"
                                     "\nhyperparameters: {global_batch_size: 64, learning_rate: 0.003, epochs: 6}\n")
    # Launched from tmp_path: the job's working directory, under which its event files go.
    launch = run_cli(["launch", "--config", str(tmp_path / "c.yaml"), "--", DIGITS, "--save", str(tmp_path / "m.keras")],
                     marker, timeout=240, cwd=str(tmp_path), **cluster.env)
    assert launch.returncode == 0, launch.stderr[-3000:]
    job_id = cluster.json("jobs")["jobs"][0]["id"]
    events = tmp_path / "tfdist-tensorboard" / job_id
    assert f"tfdist: TensorBoard event files go to {events} (`tfdist tensorboard {job_id}` serves them)" in \
        launch.stdout + launch.stderr

    rows = [json.loads(line) for line in cluster.cli("metrics", job_id, "--json").stdout.splitlines()]
    losses = [r["step"] for r in rows if "loss" in r["metrics"]]
    assert len(losses) >= 24 and losses == sorted(losses), rows  # 22 batches an epoch, a report every 4 (<= 50/s)
    assert [r["metrics"]["epoch"] for r in rows if "epoch" in r["metrics"]] == [1, 2, 3, 4, 5, 6]
    assert rows[-1]["step"] == 6 * 22 and {"test_loss", "test_accuracy"} <= set(rows[-1]["metrics"])
    plot = cluster.cli("metrics", job_id, "--plot", str(tmp_path / "m.png"), **WITH_PLOT)
    assert plot.returncode == 0 and (tmp_path / "m.png").read_bytes()[:4] == b"\x89PNG", plot.stderr

    server = subprocess.Popen([sys.executable, "-m", "cluster.client.cli", "tensorboard", job_id, "--port", "0"],
                              env=cli_env(marker, **cluster.env), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    try:
        banner = server.stdout.readline()  # bounded by the test's timeout; empty if it exited
        assert banner.startswith(f"TensorBoard for job {job_id} at http://127.0.0.1:"), (banner, server.stderr.read())
        url = banner.split(" at ")[1].split()[0]
        assert url.endswith(f"/tensorboard/{job_id}/") and f"(event files: {events})" in banner
        login = server.stdout.readline()
        assert login.startswith("log in with http://127.0.0.1:"), login
        with pytest.raises(urllib.error.HTTPError) as refused:  # TensorBoard has no login; this one does
            get(url + "data/runs")
        assert refused.value.code == 401
        cookie, home = log_in(login.split()[3])
        assert url.endswith(home)
        tags = {}
        wait_for(lambda: tags.update(get(url + "data/plugin/scalars/tags", cookie)) or tags.get("."),
                 "TensorBoard to load the job's event files", timeout=60)
        assert get(url + "data/runs", cookie) == ["."]
        assert {"loss", "accuracy", "epoch"} <= set(tags["."])
        served = get(url + "data/plugin/scalars/scalars?run=.&tag=loss", cookie)
        assert sorted({int(step) for _, step, _ in served}) == sorted(set(losses))  # what `tfdist metrics` shows
    finally:
        server.send_signal(signal.SIGTERM)
        out, err = server.communicate(timeout=10)  # stops within seconds
    assert server.returncode == 0 and err.endswith(f"tfdist: TensorBoard for job {job_id} stopped\n"), err
