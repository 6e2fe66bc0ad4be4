"""The jax and torch modes' plans (what jax.distributed, keras.distribution and a torchrun script read, exact
values), their worker sides, and the start-up pieces: tfdist's cluster first among JAX's, the framework's
rendezvous reported as the join."""

import os
import sys
import types

import numpy as np
import pytest

from cluster.shared.config import parse_config
from cluster.shared.modes import NodePlacement, Placement, planner
from tfdist.compat import jax_cluster, rendezvous
from tfdist.modes import startup, worker_mode
from tests.conftest import JAX_SITE


def cpu(host, slots, ports):
    return NodePlacement(host, host, slots, tuple(ports))


def gpu(host, slots, port, store=None):
    return NodePlacement(host, host, slots, (port,) if store is None else (port, store), gpu_node=True)


def plan(mode, nodes, cfg="", devices=None, attempt=0):
    return planner(mode).plan(Placement("j-1", tuple(nodes), attempt=attempt), parse_config(cfg),
                              devices or [()] * len(nodes))


def test_jax_one_node_coordinates_on_loopback_at_rank_0s_port_and_keras_reads_the_same():
    p = plan("jax", [cpu("10.1.0.5", 2, (7001, 7002, 7003))])
    assert [(w.rank, w.port) for w in p.processes] == [(0, 7001), (1, 7002)] and p.store == (0, 7003)
    for w in p.processes:
        env = w.env
        assert env["JAX_COORDINATOR_ADDRESS"] == env["KERAS_DISTRIBUTION_JOB_ADDRESSES"] == "127.0.0.1:7001"
        assert env["JAX_COORDINATOR_BIND_ADDRESS"] == "127.0.0.1:7001"  # not every interface
        assert (env["JAX_NUM_PROCESSES"], env["KERAS_DISTRIBUTION_NUM_PROCESSES"]) == ("2", "2")
        assert env["JAX_PROCESS_ID"] == env["KERAS_DISTRIBUTION_PROCESS_ID"] == str(w.rank)
        assert env["KERAS_BACKEND"] == "jax" and env["TFDIST_DISTRIBUTION"] == "jax" and "TF_CONFIG" not in env
        assert env["CUDA_VISIBLE_DEVICES"] == ""


def test_jax_gpu_nodes_run_one_process_each_over_their_gpus_and_a_dns_name_is_not_bound():
    p = plan("jax", [gpu("10.0.0.1", 4, 5000, 5009), gpu("10.0.0.2", 2, 5001)], devices=[(4, 5, 6, 7), (0, 1)])
    assert [(w.rank, w.node_rank, w.gpus, w.replicas) for w in p.processes] == [(0, 0, (4, 5, 6, 7), 4),
                                                                               (1, 1, (0, 1), 2)]
    assert p.processes[1].env["JAX_COORDINATOR_ADDRESS"] == "10.0.0.1:5000"
    assert p.processes[1].env["CUDA_VISIBLE_DEVICES"] == "0,1" and p.processes[1].env["TFDIST_SLOTS"] == "6"
    named = plan("jax", [cpu("pod-0.job", 1, (5000, 5001)), cpu("pod-1.job", 1, (5000,))])
    assert named.processes[0].env["JAX_COORDINATOR_ADDRESS"] == "pod-0.job:5000"
    assert "JAX_COORDINATOR_BIND_ADDRESS" not in named.processes[0].env  # a pod's name: JAX binds [::]


def test_jax_keeps_a_keras_backend_the_config_sets():
    p = plan("jax", [cpu("127.0.0.1", 1, (1, 2))], "environment: {variables: {KERAS_BACKEND: tensorflow}}")
    assert p.processes[0].env["KERAS_BACKEND"] == "tensorflow"


def test_torch_gets_torchrun_s_environment_exactly():
    p = plan("torch", [cpu("10.0.0.1", 2, (6001, 6002, 6009)), cpu("10.0.0.2", 2, (6003, 6004))],
             "max_restarts: 3", attempt=2)
    env = p.processes[3].env
    assert {k: env[k] for k in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_NAME", "ROLE_RANK", "ROLE_WORLD_SIZE",
                                "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
                                "OMP_NUM_THREADS")} == {
        "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "6001", "RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1", "GROUP_WORLD_SIZE": "2", "ROLE_NAME": "default",
        "ROLE_RANK": "3", "ROLE_WORLD_SIZE": "4", "TORCHELASTIC_RUN_ID": "j-1", "TORCHELASTIC_RESTART_COUNT": "2",
        "TORCHELASTIC_MAX_RESTARTS": "3", "OMP_NUM_THREADS": "1"}
    assert p.store == (0, 6009) and env["TFDIST_RANK"] == "3"
    alone = plan("torch", [cpu("10.0.0.1", 1, (6001, 6002))]).processes[0].env
    assert alone["MASTER_ADDR"] == "127.0.0.1" and "OMP_NUM_THREADS" not in alone


def test_torch_on_gpus_each_process_sees_its_node_s_gpus_and_takes_its_local_rank_s():
    node = NodePlacement("g", "10.0.0.1", 2, (5000, 5001, 5002), gpu_node=True)
    p = plan("torch", [node], devices=[(3, 6)])
    assert [(w.rank, w.gpus) for w in p.processes] == [(0, (3,)), (1, (6,))]  # counted one each
    assert [w.env["CUDA_VISIBLE_DEVICES"] for w in p.processes] == ["3,6", "3,6"]  # cuda:LOCAL_RANK is its own


def test_the_modes_are_distribution_modes_with_their_worker_sides():
    for mode in ("jax", "torch"):
        assert parse_config(f"distribution: {{mode: {mode}}}").distribution_mode == mode
        assert worker_mode(mode).name == mode and worker_mode(mode).every_rank_runs_script
    assert planner("jax").worker_needs == ("jax",) and planner("torch").worker_needs == ("torch",)
    assert worker_mode("torch").make_strategy(None) is None  # the script's own init_process_group joins
    assert startup.startup_of("jax").jax_cluster and startup.startup_of("jax").ready_after == ("jax.distributed",
                                                                                              "initialize")
    assert startup.startup_of("torch").ready_after == ("torch.distributed", "init_process_group")
    assert "pip install" in startup.startup_of("torch").explain_missing[1]


def test_returning_from_the_framework_s_rendezvous_marks_the_worker_joined(tmp_path, monkeypatch):
    ready = tmp_path / "ready"
    monkeypatch.setenv("TFDIST_READY_FILE", str(ready))
    calls = []
    module = types.SimpleNamespace(init_process_group=lambda backend=None: calls.append(backend) or "group")
    rendezvous.ready_after(module, "init_process_group")
    rendezvous.ready_after(module, "init_process_group")  # once only
    assert not ready.exists()
    assert module.init_process_group(backend="gloo") == "group" and calls == ["gloo"]
    assert ready.read_text() == str(os.getpid())


def test_tfdist_s_cluster_is_the_first_jax_finds_even_inside_slurm(monkeypatch):
    if JAX_SITE not in sys.path:  # `make test` installs JAX there, beside the venv
        sys.path.append(JAX_SITE)
    import jax  # noqa: F401
    from jax._src.clusters import ClusterEnv

    for name, value in {"TFDIST_DISTRIBUTION": "jax", "TFDIST_RANK": "1", "TFDIST_SIZE": "3",
                        "JAX_COORDINATOR_ADDRESS": "10.0.0.1:5000", "SLURM_JOB_ID": "77", "SLURM_NTASKS": "9",
                        "TFDIST_NODE_ADDRESS": "198.18.0.2"}.items():
        monkeypatch.setenv(name, value)
    assert jax_cluster.register() and jax_cluster.register()
    ours = [kind for kind in ClusterEnv._cluster_types if kind.name == "tfdist"]
    assert len(ours) == 1 and ClusterEnv._cluster_types[0] is ours[0]
    found = ClusterEnv.auto_detect_unset_distributed_params(None, None, None, None, None, 10)
    assert found == ("10.0.0.1:5000", 3, 1, None)
    from jax._src import xla_bridge  # Gloo's transport on the node's address for the job, not the hostname's

    assert xla_bridge._jax.make_gloo_tcp_collectives._tfdist_address == "198.18.0.2"
    monkeypatch.delenv("JAX_COORDINATOR_ADDRESS")
    assert not jax_cluster.present()  # JAX's own detection then
    assert "jax" in sys.modules


def _bootstrapped_python(code, env):
    import subprocess

    bootstrap = os.path.join(os.path.dirname(rendezvous.__file__), "bootstrap")
    return subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": bootstrap, **env},
                          capture_output=True, text=True, timeout=120)


def test_a_one_process_job_counts_as_joined_at_start_a_larger_one_at_its_rendezvous(tmp_path):
    """A torchrun script alone may skip init_process_group (`if world_size > 1:`): it must not hit the startup
    timeout. With peers, only returning from the rendezvous joins."""
    for size, joined in (("1", True), ("2", False)):
        ready = tmp_path / f"ready-{size}"
        ran = _bootstrapped_python("pass", {"TFDIST_DISTRIBUTION": "torch", "TFDIST_SIZE": size,
                                            "TFDIST_READY_FILE": str(ready)})
        assert ran.returncode == 0, ran.stderr
        assert ready.exists() is joined


def test_a_mid_epoch_checkpoint_under_jax_holds_that_step_s_weights(tmp_path):
    """Keras 3 on JAX keeps the trained values off the model's variables until an epoch ends; the Checkpoint
    callback syncs them first, so the weights saved at step 2 of a 4-step epoch are step 2's."""
    script = '''
import json, os, numpy as np, keras
from tfdist.callbacks import Checkpoint

class Record(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if batch == 1:  # step 2; reading self.model syncs JAX's state into the variables
            np.savez(os.environ["OUT"] + "/seen.npz", *[np.asarray(w) for w in self.model.get_weights()])

x = np.random.RandomState(0).rand(32, 3).astype("float32"); y = x.sum(1, keepdims=True)
model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
model.compile(keras.optimizers.SGD(0.1), "mse")
model.fit(x, y, batch_size=8, epochs=1, verbose=0, callbacks=[Checkpoint(save_freq=2, directory=os.environ["OUT"]), Record()])
'''
    ran = _bootstrapped_python(script, {"KERAS_BACKEND": "jax", "OUT": str(tmp_path),
                                        "PYTHONPATH": os.pathsep.join([JAX_SITE, *sys.path])})
    assert ran.returncode == 0, ran.stderr[-3000:]
    seen = np.load(tmp_path / "seen.npz")
    saved = np.load(tmp_path / "ckpt-2.data.npz")
    np.testing.assert_array_equal(saved["v0"], seen["arr_0"])  # the kernel after step 2, not the epoch's start
    np.testing.assert_array_equal(saved["v1"], seen["arr_1"])


def test_the_warmup_s_rates_are_the_ones_keras_on_jax_trains_with(tmp_path):
    """Keras 3 on JAX trains on a copy of the variables and writes it back at the epoch's end: a learning rate
    assigned between steps without syncing that copy first is used by no step and then overwritten. With
    nothing else touching the model (no other callback), each step's rate must be the ramp's: the kernel is
    checked against the same SGD steps done by hand."""
    script = '''
import os, numpy as np, keras
from tfdist.callbacks import LearningRateWarmup
x = np.random.RandomState(0).rand(16, 3).astype("float32"); y = x @ np.array([[1.0], [-2.0], [0.5]], "float32")
model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1, use_bias=False, kernel_initializer="zeros")])
model.compile(keras.optimizers.SGD(0.05), "mse")
model.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0,
          callbacks=[LearningRateWarmup(warmup_steps=4, multiplier=4)])
np.savez(os.environ["OUT"] + "/after.npz", kernel=np.asarray(model.get_weights()[0]),
         rate=np.asarray(model.optimizer.learning_rate))
'''
    ran = _bootstrapped_python(script, {"KERAS_BACKEND": "jax", "OUT": str(tmp_path),
                                        "PYTHONPATH": os.pathsep.join([JAX_SITE, *sys.path])})
    assert ran.returncode == 0, ran.stderr[-3000:]
    after = np.load(tmp_path / "after.npz")
    x = np.random.RandomState(0).rand(16, 3).astype("float32")
    y = x @ np.array([[1.0], [-2.0], [0.5]], "float32")
    kernel = np.zeros((3, 1), "float32")
    for step in range(8):  # 2 epochs of 4 batches; the rate climbs from 0.05 to 0.2 over the first 4 steps
        rate = 0.05 + (0.2 - 0.05) * min(1.0, step / 4)
        xb, yb = x[step % 4 * 4:step % 4 * 4 + 4], y[step % 4 * 4:step % 4 * 4 + 4]
        kernel = kernel - rate * 2 / 4 * xb.T @ (xb @ kernel - yb)
    assert float(after["rate"]) == pytest.approx(0.2)
    np.testing.assert_allclose(after["kernel"], kernel, rtol=1e-5)


def test_batch_sizes_follow_the_devices_each_process_drives():
    """A JAX process on a GPU node drives all of its GPUs: it feeds their share of the global batch; a torch
    process drives one device, a CPU JAX process one slot."""
    from tfdist.context import context_from_env

    def per_worker(p):
        return [context_from_env(w.env, {"global_batch_size": 48}).per_worker_batch_size for w in p.processes]

    jax_gpus = plan("jax", [gpu("10.0.0.1", 4, 5000, 5009), gpu("10.0.0.2", 2, 5001)], devices=[(4, 5, 6, 7), (0, 1)])
    assert per_worker(jax_gpus) == [32, 16]  # 8 a replica over 6 GPUs
    assert context_from_env(jax_gpus.processes[1].env, {"global_batch_size": 48}).per_replica_batch_size == 8
    torch_gpus = plan("torch", [NodePlacement("g", "10.0.0.1", 2, (5000, 5001, 5002), gpu_node=True)], devices=[(3, 6)])
    assert per_worker(torch_gpus) == [24, 24]
    assert per_worker(plan("jax", [cpu("10.1.0.5", 2, (7001, 7002, 7003))])) == [24, 24]


def test_a_torch_state_saved_again_at_a_step_is_never_complete_while_half_written(tmp_path):
    """A preemption's save right after a periodic one writes the same step again: its old index goes first, so
    a save cut short leaves no checkpoint of that step rather than an index beside a half-written file."""
    import torch

    from tfdist.torch_state import TorchState

    model = torch.nn.Linear(2, 1)
    prefix = str(tmp_path / "ckpt-5")
    assert TorchState(model=model).write(prefix) == prefix and os.path.exists(prefix + ".index")

    class Breaks:
        def state_dict(self):
            raise OSError("disk full")

        def load_state_dict(self, state):
            pass

    with pytest.raises(OSError):
        TorchState(model=model, other=Breaks()).write(prefix)
    assert not os.path.exists(prefix + ".index")
    TorchState(model=model).write(prefix)
    fresh = torch.nn.Linear(2, 1)
    TorchState(model=fresh).read(prefix)
    assert torch.equal(fresh.weight, model.weight)
    with pytest.raises(ValueError, match="pass the same names"):
        TorchState(net=fresh).read(prefix)
