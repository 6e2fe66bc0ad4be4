"""Horovod mode started by tfdist itself (no horovodrun, no ssh, no mpirun): Keras 3 through tfdist's
adapters, unchanged Horovod scripts (a tensorflow2_mnist.py-style and a tensorflow2_keras_mnist.py-style
one), identical final weights on every rank, auto's choice of Horovod, and a missing Horovod as one line
(real TensorFlow, real Horovod over Gloo)."""

import json
import os
import re
import shutil
import subprocess

import pytest

from tests.conftest import REPO, run_cli

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
WORKERS = os.path.join(REPO, "tests", "integration", "workers")
FIT = os.path.join(WORKERS, "horovod_fit.py")
TF2_SCRIPT = os.path.join(WORKERS, "horovod_tf2_script.py")
KERAS_SCRIPT = os.path.join(WORKERS, "horovod_keras_script.py")
OFFLINE_MNIST = os.path.join(WORKERS, "offline_mnist")  # tf.keras.datasets.mnist without the network


def weights(stdout):
    return {m.group(1): m.group(2) for m in re.finditer(r"\[rank=(\d+)\] .*weights=(\w+)", stdout)}


@pytest.mark.parametrize("size", [2, 3])
def test_keras_3_fit_through_tfdist_adapters_gives_identical_weights(marker, size):
    result = run_cli(["launch", "--slots", str(size), "--distribution", "horovod", "--", FIT], marker)
    assert result.returncode == 0, result.stderr[-3000:]
    per_rank = 24 // size  # a batch per rank
    steps = 3 * -(-(384 // size) // per_rank)
    for rank in range(size):
        assert (f"[rank={rank}] rank={rank} size={size} per_worker={per_rank} iterations={steps} loss_fell=True"
                in result.stdout)
    found = weights(result.stdout)
    assert len(found) == size and len(set(found.values())) == 1, result.stdout  # each rank started different
    losses = set(re.findall(r"final_loss=([\d.]+)", result.stdout))
    assert len(losses) == 1  # MetricAverageCallback: every rank logs the job's loss


def test_an_unchanged_horovod_script_runs(marker):
    result = run_cli(["launch", "--slots", "2", "--distribution", "horovod", "--", TF2_SCRIPT], marker)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "[rank=0] hvd rank=0 size=2 local_rank=0 cross_rank=0" in result.stdout
    assert "[rank=1] hvd rank=1 size=2 local_rank=1 cross_rank=0" in result.stdout
    found = weights(result.stdout)
    assert len(found) == 2 and len(set(found.values())) == 1


def test_an_unchanged_horovod_keras_script_runs(tmp_path, marker):
    """horovod.tensorflow.keras on Keras 3: without tfdist its DistributedOptimizer never all-reduces (Keras 3
    calls none of the methods it overrides), its callbacks fail on Keras 3 variables and backend, and
    compile refuses experimental_run_tf_function."""
    result = run_cli(["launch", "--slots", "2", "--distribution", "horovod", "--", KERAS_SCRIPT], marker,
                     cwd=str(tmp_path), PYTHONPATH=OFFLINE_MNIST + os.pathsep + REPO, OFFLINE_MNIST_SIDE="12")
    assert result.returncode == 0, result.stderr[-3000:]
    found = weights(result.stdout)
    assert len(found) == 2 and len(set(found.values())) == 1, result.stdout  # different starts, data, seeds
    assert len(set(re.findall(r"loss=([\d.]+)", result.stdout))) == 1  # MetricAverageCallback
    for rank in (0, 1):
        assert re.search(rf"\[rank={rank}\] hvd rank={rank} size=2 loss=\S+ lr=0.0020 optimizer_variables=\d+ ",
                         result.stdout), result.stdout  # warmup to 0.001 x 2
    assert "[rank=0] Epoch 2: finished gradual learning rate warmup to 0.002." in result.stdout
    assert sorted(p.name for p in tmp_path.glob("checkpoint-*.h5")) == [f"checkpoint-{e}.h5" for e in (1, 2, 3)]


def test_horovods_optimizer_arguments_on_keras_3(monkeypatch):
    """How hvd.DistributedOptimizer's arguments reach the all-reduce in a Keras 3 optimizer's update (no
    processes: the mapping)."""
    import horovod.tensorflow as hvd
    import keras

    from tfdist.compat import horovod_keras_api as api
    from tfdist.compat import horovod_update

    seen = {}
    monkeypatch.setattr(horovod_update, "allreduce_gradients",
                        lambda grads, compressor, **o: seen.update(compressor=compressor, **o) or grads)

    def reduced_at_once(optimizer, reduce):
        reduce(["g"])
        return optimizer

    monkeypatch.setattr(horovod_update, "reduce_in_update", reduced_at_once)
    opt = keras.optimizers.SGD(0.1)
    assert api.distributed_optimizer(opt, compression=hvd.Compression.fp16, backward_passes_per_step=4) is opt
    assert seen == {"compressor": hvd.Compression.fp16, "op": hvd.Average, "prescale_factor": 1.0,
                    "postscale_factor": 4.0}  # Horovod sums the 4 passes; Keras 3 accumulates their mean
    assert opt.gradient_accumulation_steps == 4
    api.distributed_optimizer(keras.optimizers.SGD(0.1), gradient_predivide_factor=2.0, backward_passes_per_step=4,
                              average_aggregated_gradients=True, device_dense="/gpu:0", groups=2, name="d")
    assert seen == {"compressor": hvd.Compression.none, "op": hvd.Average, "prescale_factor": 0.5,
                    "postscale_factor": 2.0}
    api.distributed_optimizer(keras.optimizers.SGD(0.1), op=hvd.Sum)
    assert seen["op"] == hvd.Sum and seen["postscale_factor"] == 1.0
    for bad, says in (({"op": hvd.Adasum}, "only hvd.Average and hvd.Sum"),
                      ({"process_set": hvd.ProcessSet([0])}, "reduces over every rank only")):
        with pytest.raises(api.UnsupportedHorovodArgument, match=says):
            api.distributed_optimizer(keras.optimizers.SGD(0.1), **bad)


def test_auto_chooses_horovod_for_its_optimizations_and_says_why(tmp_path, local_cluster, marker):
    cluster = local_cluster()
    cluster.start_agent("n1", "--slots", "2")
    cluster.wait_agents("n1")
    tuner_log = tmp_path / "autotune.csv"
    (tmp_path / "c.yaml").write_text(
        "optimizations: {gradient_compression: fp16, auto_tune_tensor_fusion: true}\n"
        f"resources: {{slots_per_trial: 2}}\nenvironment: {{variables: {{HOROVOD_AUTOTUNE_LOG: {tuner_log}}}}}\n")
    result = cluster.cli("launch", "--config", str(tmp_path / "c.yaml"), "--", FIT, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    reason = ("auto: optimizations.gradient_compression=fp16, optimizations.auto_tune_tensor_fusion=true are only "
              "provided by Horovod")
    assert f"distribution horovod ({reason})" in result.stderr
    found = weights(result.stdout)
    assert len(found) == 2 and len(set(found.values())) == 1  # fp16-compressed gradients, still in step
    assert result.stdout.count("compression=FP16Compressor") == 2
    assert tuner_log.read_text().startswith("hierarchical_allreduce,")  # Horovod's autotuner ran
    shown = cluster.cli("job", "1")
    assert f"mode: horovod ({reason})" in shown.stdout


def python_without_horovod():
    for candidate in ("/usr/local/bin/python3", "/usr/bin/python3"):
        if os.path.exists(candidate) and subprocess.run(
                [candidate, "-c", "import horovod"], capture_output=True).returncode != 0:
            return candidate
    pytest.fail("this test needs a Python without Horovod next to the venv's (the system python3)")


def test_a_missing_horovod_is_one_line_naming_the_install_command(tmp_path, marker):
    python = python_without_horovod()
    script = tmp_path / "train.py"
    script.write_text("import horovod.tensorflow\n")
    result = run_cli(["launch", "--slots", "2", "--distribution", "horovod", "--", python, str(script)], marker,
                     timeout=60)
    assert result.returncode == 125
    assert result.stderr == (f"tfdist: error: distribution mode horovod needs Horovod, which is not installed for "
                             f"{shutil.which(python)}; run `tfdist build-horovod` (it builds horovod 0.28.1 for this "
                             "TensorFlow, Gloo only; `make horovod` in a checkout)\n")


def test_a_worker_python_without_horovod_says_the_same_at_import(marker):
    """On a cluster the launcher cannot ask the nodes' Python: the worker's start-up says it."""
    python = python_without_horovod()
    bootstrap = os.path.join(REPO, "tfdist", "compat", "bootstrap")
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": bootstrap, "TFDIST_DISTRIBUTION": "horovod"}
    result = subprocess.run([python, "-c", "import horovod.tensorflow as hvd"], env=env, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        f"ModuleNotFoundError: No module named 'horovod': Horovod is not installed for {python}; run "
        "`tfdist build-horovod` (it builds horovod 0.28.1 for this TensorFlow, Gloo only; `make horovod` in a checkout)")


def allreduces(timeline):
    """Gloo all-reduces in Horovod's timeline (a JSON array, possibly left open)."""
    text = timeline.read_text().rstrip().rstrip(",")
    events = json.loads(text if text.endswith("]") else text + "]")
    return sum(1 for e in events if e.get("ph") == "B" and e.get("name") == "GLOO_ALLREDUCE")


def test_aggregation_frequency_cuts_the_collectives_k_fold(tmp_path, marker):
    worker = os.path.join(WORKERS, "aggregation.py")
    counts = {}
    for k in (1, 4):
        (tmp_path / f"k{k}.yaml").write_text(
            f"optimizations: {{aggregation_frequency: {k}}}\nresources: {{slots_per_trial: 2}}\n"
            f"environment: {{variables: {{HOROVOD_TIMELINE: {tmp_path}/timeline-{k}.json}}}}\n")
        result = run_cli(["launch", "--config", str(tmp_path / f"k{k}.yaml"), "--distribution", "horovod", "--",
                          worker], marker)
        assert result.returncode == 0, result.stderr[-3000:]
        assert f"rank=0 updates={32 // k} steps=32" in result.stdout  # 2 epochs x 16 steps of 2 x 16 examples
        assert len(set(weights(result.stdout).values())) == 1
        counts[k] = allreduces(tmp_path / f"timeline-{k}.json")
        if k > 1:
            assert f"effective batch {k} x 32 = {k * 32} examples per update" in result.stderr
    assert counts[1] == 4 * counts[4] > 0, counts


def test_the_opt_out_leaves_horovod_as_upstream_has_it(marker):
    """horovod#4290 as measured: without tfdist's start-up fix, Horovod's tape fails on Keras 3 variables.
    When this test starts failing, upstream fixed it."""
    result = run_cli(["launch", "--slots", "2", "--distribution", "horovod", "--", TF2_SCRIPT], marker,
                     TFDIST_KERAS_PATCH="0")
    assert result.returncode != 0
    assert "'Variable' object has no attribute 'ref'" in result.stderr
