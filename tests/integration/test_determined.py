"""Scripts written for Determined run unchanged under `tfdist launch --config` with Determined-style configs
(issue 46): the Core API tutorial's five stages (tests/integration/workers/determined/: the project's own scripts
using every call those stages use), its Keras callback under `determined.launch.tensorflow`, its other
launchers, on 2 workers, with metrics, checkpoints, a search, preemption and resume; and what tfdist does not
offer is one line. `import determined` is tfdist's implementation (tfdist/compat/determined_api)."""

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import REPO, cli_env, run_cli, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]
SCRIPTS = os.path.join(REPO, "tests", "integration", "workers", "determined")


class Terminal:
    """A user's terminal: their own state (XDG_STATE_HOME), no coordinator, in the scripts' directory (a
    Determined user's checkout, where `det experiment create const.yaml .` ran)."""

    def __init__(self, tmp_path, marker):
        self.tmp_path, self.marker = tmp_path, marker
        self.env = {"XDG_STATE_HOME": str(tmp_path / "state"), "TFDIST_COORDINATOR": ""}

    def config(self, name: str, text: str) -> str:
        path = self.tmp_path / name
        path.write_text(textwrap.dedent(text))
        return str(path)

    def cli(self, *args, timeout=240, **env):
        return run_cli(list(args), self.marker, timeout=timeout, cwd=SCRIPTS, **{**self.env, **env})

    def start(self, *args, **env) -> subprocess.Popen:
        """A launch in the background. Its output goes to files, read once it ended (`output`): a pipe nobody
        reads while the test waits fills up with the workers' lines and stops the launch mid-job."""
        self.out, self.err = self.tmp_path / "launch.out", self.tmp_path / "launch.err"
        with open(self.out, "w") as out, open(self.err, "w") as err:
            return subprocess.Popen([sys.executable, "-m", "cluster.client.cli", *args], cwd=SCRIPTS, text=True,
                                    env=cli_env(self.marker, **{**self.env, **env}), stdout=out, stderr=err)

    def output(self, launch: subprocess.Popen, timeout: float) -> tuple[str, str]:
        """The launch's stdout and stderr once it ended (within `timeout` seconds)."""
        launch.wait(timeout=timeout)
        return self.out.read_text(), self.err.read_text()

    def job(self, job_id: str) -> dict:
        return json.loads(self.cli("job", job_id, "--json").stdout)

    def metrics(self, job_id: str) -> list[dict]:
        return [json.loads(line) for line in self.cli("metrics", job_id, "--json").stdout.splitlines()]

    def series(self, job_id: str, name: str) -> list[tuple[int, float]]:
        return [(m["step"], m["metrics"][name]) for m in self.metrics(job_id) if name in m["metrics"]]

    def logs(self, job_id: str) -> str:
        return self.cli("logs", job_id).stdout


def submitted(result) -> str:
    return re.search(r"tfdist: job (\S+) submitted", result.stderr).group(1)


def test_the_core_api_stages_0_and_1_run_and_report(tmp_path, marker):
    me = Terminal(tmp_path, marker)
    plain = me.cli("launch", "--config", me.config("0_start.yaml", """\
        name: core-api-stage-0
        entrypoint: python3 count_plain.py
        searcher:
           name: single
           metric: x
        max_restarts: 0
        """))
    assert plain.returncode == 0, plain.stderr[-3000:]
    assert "[rank=0] x is now 20" in plain.stdout

    metrics = me.cli("launch", "--config", me.config("1_metrics.yaml", """\
        name: core-api-stage-1
        entrypoint: python3 count_metrics.py
        searcher:
           name: single
           metric: x
        max_restarts: 0
        """))
    assert metrics.returncode == 0, metrics.stderr[-3000:]
    job = submitted(metrics)
    # det.LOG_FORMAT, as Determined's scripts log; training metrics every 5 steps, the validation one at the end.
    assert re.search(r"\[rank=0\] WARNING: \[\d+\] root: a warning line", metrics.stdout + metrics.stderr)
    assert me.series(job, "train_x") == [(5, 5.0), (10, 10.0), (15, 15.0), (20, 20.0)]
    assert me.series(job, "x") == [(20, 20.0)]
    assert me.job(job)["distribution"]["mode"] == "per_node"  # it imports determined and names no launcher


def test_stage_2_checkpoints_pause_at_a_preemption_and_resume_from_them(tmp_path, marker):
    me = Terminal(tmp_path, marker)
    config = me.config("2_checkpoints.yaml", """\
        name: core-api-stage-2
        entrypoint: python3 count_checkpoints.py
        searcher:
           name: single
           metric: x
        max_restarts: 0
        environment:
          environment_variables:
            - HOLD_AT=20
        """)
    launch = me.start("launch", "--config", config)
    try:
        wait_for(lambda: (20, 20.0) in me.series("1", "x"), "the trial's report at step 20",
                 alive=lambda: launch.poll() is None)
        assert me.cli("preempt", "1").returncode == 0
        out, err = me.output(launch, timeout=120)
    finally:
        launch.kill()
        launch.wait()
    assert launch.returncode == 75, err[-3000:]  # paused
    job = submitted(subprocess.CompletedProcess([], 0, out, err))
    assert "paused at step 20" in err

    resumed = me.cli("resume", job)
    assert resumed.returncode == 0, resumed.stderr
    wait_for(lambda: me.job(job)["state"] == "SUCCEEDED", "the resumed job to succeed")
    logs = me.logs(job)
    # Its trial id (an integer, as Determined's) matched the checkpoint's: the batch count carried on.
    assert re.search(r"restored x=20 at step 20 from [0-9a-f-]{36}", logs), logs[-3000:]
    assert "done: x=40 steps=40" in logs
    assert [s for s, _ in me.series(job, "x")] == [5, 10, 15, 20, 25, 30, 35, 40]


@pytest.mark.parametrize("generation,searcher,flags,length", [
    # The script trains 40 steps by itself: the searcher stops it at max_time, as Determined's 0.38 does.
    ("0.38", "time_metric: batches\n  max_time: 30", "", 30),
    ("0.37", "max_length: 40", " --ops", 40),  # core_context.searcher.operations()
])
def test_stage_3_an_adaptive_search_of_its_hyperparameter(tmp_path, marker, generation, searcher, flags, length):
    me = Terminal(tmp_path, marker)
    config = me.config("3_hpsearch.yaml", f"""\
name: core-api-stage-3
entrypoint: python3 count_checkpoints.py{flags}
hyperparameters:
  increment_by:
    type: int
    minval: 1
    maxval: 8
searcher:
  name: adaptive_asha
  metric: x
  smaller_is_better: false
  max_trials: 3
  max_concurrent_trials: 1
  {searcher}
reproducibility:
  experiment_seed: 5
max_restarts: 0
""")
    result = me.cli("launch", "--config", config, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "COMPLETED" in result.stdout
    # After the launch ended: the search is listed, shown with its trials, as JSON too.
    listed = json.loads(me.cli("experiments", "--json").stdout)["experiments"]
    assert [e["name"] for e in listed] == ["core-api-stage-3"] and listed[0]["state"] == "COMPLETED"
    shown = json.loads(me.cli("experiment", "e1", "--json").stdout)
    assert len(shown["trials"]) == 3
    values = [t["hyperparameters"]["increment_by"] for t in shown["trials"]]
    assert all(1 <= v <= 8 for v in values)
    assert {t["state"] for t in shown["trials"]} <= {"SUCCEEDED", "CANCELED"}, shown["trials"]  # none left paused
    best = max(shown["trials"], key=lambda t: t["best"] if t["best"] is not None else -1)
    assert best["state"] == "SUCCEEDED" and best["best"] == length * best["hyperparameters"]["increment_by"]


def test_stage_4_its_own_launcher_runs_once_per_node_and_its_workers_meet(tmp_path, marker):
    me = Terminal(tmp_path, marker)
    result = me.cli("launch", "--config", me.config("4_distributed.yaml", """\
        name: core-api-stage-4
        entrypoint: python3 count_launcher.py launcher
        resources:
          slots_per_trial: 2
        hyperparameters:
          increment_by: 3
        searcher:
           name: single
           metric: x
        max_restarts: 0
        """))
    assert result.returncode == 0, result.stderr[-3000:]
    job = submitted(result)
    logs = me.logs(job)
    assert len(re.findall(r"launcher on node 0 of 1: 2 workers", logs)) == 1, logs[-3000:]
    # Each worker added both workers' increment 30 times; wrap_rank marked each worker's lines.
    assert "[rank=0] worker 0 of 2 done: x=180" in logs and "[rank=1] worker 1 of 2 done: x=180" in logs
    assert me.series(job, "x") == [(10, 60.0), (20, 120.0), (30, 180.0)]
    assert me.job(job)["distribution"]["mode"] == "per_node"


@pytest.mark.parametrize("keras", ["keras3", "tf_keras"])
def test_the_keras_callback_under_the_tensorflow_launcher_on_two_workers_pauses_and_resumes(tmp_path, marker, keras):
    """Keras 3, and tf_keras (TF_USE_LEGACY_KERAS=1), which Determined's Keras examples were written for."""
    me = Terminal(tmp_path, marker)
    config = me.config("distributed.yaml", f"""\
        name: digits_tf_keras_distributed
        environment:
          image:
            cpu: determinedai/tensorflow-ngc-dev:0736b6d
            gpu: determinedai/tensorflow-ngc-dev:0736b6d
          environment_variables:
            - HOLD_AFTER_EPOCH=1
            - TF_USE_LEGACY_KERAS={int(keras == "tf_keras")}
        hyperparameters:
          learning_rate: 1.0e-3
          learning_rate_decay: 1.0e-6
          layer1_dense_size: 16
          global_batch_size: 32
        resources:
          slots_per_trial: 2
        searcher:
          name: single
          metric: categorical_accuracy
          smaller_is_better: false
        entrypoint: >-
          python3 -m determined.launch.tensorflow --
          python3 keras_digits.py --epochs 3
        """)
    launch = me.start("launch", "--config", config)
    try:
        wait_for(lambda: any(m["metrics"].get("epoch") == 1 for m in me.metrics("1")),
                 "the first epoch's validation", alive=lambda: launch.poll() is None)
        # The chief says it checks for preemption just after its epoch's report (DeterminedCallback.on_epoch_end):
        # a preempt between the two is refused, as documented; asked again until taken.
        wait_for(lambda: me.cli("preempt", "1").returncode == 0, "the preempt taken", timeout=60,
                 alive=lambda: launch.poll() is None)
        out, err = me.output(launch, timeout=180)
    finally:
        launch.kill()
        launch.wait()
    assert launch.returncode == 75, err[-3000:]
    job = submitted(subprocess.CompletedProcess([], 0, out, err))
    shown = me.job(job)
    assert shown["distribution"]["mode"] == "mwms" and "determined.launch.tensorflow" in shown["distribution"]["reason"]
    assert shown["command"][-2:] == ["--epochs", "3"] and "determined.launch.tensorflow" not in shown["command"]

    assert me.cli("resume", job).returncode == 0
    wait_for(lambda: me.job(job)["state"] == "SUCCEEDED", "the resumed job to succeed", timeout=300)
    logs = me.logs(job)
    assert re.search(r"DeterminedCallback resumed from checkpoint [0-9a-f-]{36} after epoch 2", logs), logs[-3000:]
    assert "Epoch 3/3" in logs and "Epoch 1/3" not in logs.split("resumed from checkpoint")[-1]
    epochs = [v for _, v in me.series(job, "epoch")]
    assert epochs == [1.0, 2.0, 3.0], epochs  # each epoch's validation once: none trained twice
    assert len(me.series(job, "categorical_accuracy")) == 3 and me.series(job, "train_loss")
    events = tmp_path / "state"  # det.keras.TensorBoard wrote where `tfdist tensorboard` serves them
    assert list(events.rglob(f"{job}/tensorboard/**/events.out.tfevents.*")), "no TensorBoard event files"


def test_what_tfdist_does_not_offer_is_one_line(tmp_path, marker):
    me = Terminal(tmp_path, marker)
    trial = me.cli("launch", "--config", me.config("const.yaml", """\
        name: iris_tf_keras_const
        hyperparameters:
          global_batch_size: 16
        searcher:
          name: single
          metric: val_categorical_accuracy
          smaller_is_better: false
        entrypoint: python3 -m determined.launch.horovod --autohorovod --trial model_def:IrisTrial
        """))
    assert trial.returncode != 0 and "Traceback" not in trial.stderr
    assert trial.stderr.strip().count("\n") == 0 and "model_def:IrisTrial" in trial.stderr and "Trial class" in \
        trial.stderr, trial.stderr

    script = tmp_path / "legacy.py"
    script.write_text("from determined.keras import TFKerasTrial\n\nclass MyTrial(TFKerasTrial):\n    pass\n")
    legacy = me.cli("launch", "--", sys.executable, str(script))
    assert legacy.returncode == 2 and "Traceback" not in legacy.stdout + legacy.stderr
    assert "determined.keras.TFKerasTrial is part of Determined's Trial class API, which tfdist does not offer" in \
        legacy.stdout + legacy.stderr  # at the class statement: importing it is harmless


def test_a_determined_installed_for_the_workers_is_never_shadowed(tmp_path, marker):
    me = Terminal(tmp_path, marker)
    (tmp_path / "site" / "determined").mkdir(parents=True)
    (tmp_path / "site" / "determined" / "__init__.py").write_text("ORIGIN = 'the real one'\n")
    script = tmp_path / "which.py"
    script.write_text("import determined\nprint('determined is', getattr(determined, 'ORIGIN', 'tfdist'))\n")
    result = me.cli("launch", "--", sys.executable, str(script), PYTHONPATH=f"{REPO}:{tmp_path / 'site'}")
    assert result.returncode == 0 and "[rank=0] determined is the real one" in result.stdout, result.stderr[-2000:]


@pytest.mark.parametrize("launcher,mode", [
    ("python3 -m determined.launch.torch_distributed python3 count_torch.py", "torch"),
    ("python3 -m determined.launch.horovod --autohorovod -- python3 count_horovod.py", "horovod"),
])
def test_the_torch_and_horovod_launchers_run_their_command_in_the_matching_mode(tmp_path, marker, launcher, mode):
    me = Terminal(tmp_path, marker)
    result = me.cli("launch", "--config", me.config("distributed.yaml", f"""\
        name: launched-{mode}
        resources:
          slots_per_trial: 2
        searcher:
          name: single
          metric: sum
        entrypoint: {launcher}
        """))
    assert result.returncode == 0, result.stderr[-3000:]
    job = submitted(result)
    for rank in (0, 1):
        assert f"[rank={rank}] rank {rank} of 2 (node 0): sum 3, ranks [0, 1]" in result.stdout, result.stdout[-3000:]
    shown = me.job(job)
    assert shown["distribution"]["mode"] == mode and "determined.launch" not in " ".join(shown["command"])
    assert me.series(job, "sum") == [(1, 3.0)]
