"""The device check's verdict (benchmarks/keras_jax_fit.py): where each run trained, given the machine's GPUs."""

import importlib.util
import os

from cluster.shared.model import Gpu

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(os.path.dirname(os.path.dirname(HERE)), "benchmarks", "keras_jax_fit.py")
spec = importlib.util.spec_from_file_location("keras_jax_fit", SCRIPT)
keras_jax_fit = importlib.util.module_from_spec(spec)
spec.loader.exec_module(keras_jax_fit)
problems = keras_jax_fit.pinning_problems
ONE = [Gpu(0, "GPU-aaaa", "NVIDIA H200")]
TWO = [Gpu(0, "GPU-aaaa", "NVIDIA H100"), Gpu(1, "GPU-bbbb", "NVIDIA H100")]


def report(backend="gpu", devices=("cuda:0",), visible="0"):
    return {"backend": backend, "local_devices": list(devices), "cuda_visible_devices": visible}


def test_a_pinned_gpu_that_jax_sees_alone_is_no_problem():
    assert problems(report(visible=None), report(), ONE) == []
    assert problems(report(visible=None), report(visible="GPU-aaaa"), ONE) == []
    assert problems(report(devices=("cuda:0", "cuda:1"), visible=None), report(visible="1"), TWO) == []


def test_each_way_of_training_elsewhere_is_named():
    assert problems(report(), report(), []) == [
        "no GPU on this machine (nvidia-smi and NVML found none): the runs trained on the CPU"]
    assert problems(report(visible=None), report(backend="cpu", devices=("cpu:0",), visible=""), ONE) == [
        "tfdist launch: JAX trained on cpu, not the GPU",
        "tfdist launch: CUDA_VISIBLE_DEVICES is '', not one of this machine's GPUs (0) given to the job's one slot"]
    unpinned = report(devices=("cuda:0", "cuda:1"), visible="0,1")
    assert problems(report(devices=("cuda:0", "cuda:1"), visible=None), unpinned, TWO) == [
        "tfdist launch: CUDA_VISIBLE_DEVICES is '0,1', not one of this machine's GPUs (0, 1) given to the job's "
        "one slot"]
    assert problems(report(devices=("cuda:0", "cuda:1"), visible=None), report(devices=("cuda:0", "cuda:1")),
                    TWO) == ["tfdist launch: JAX sees ['cuda:0', 'cuda:1'] with CUDA_VISIBLE_DEVICES=0, not exactly "
                             "the one GPU pinned"]
    assert problems(report(visible=None), report(), TWO) == ["by hand: JAX sees ['cuda:0'], not the machine's 2 GPUs"]
