"""`determined.pytorch`: the PyTorchTrial class API and its Trainer, which tfdist does not run (a PyTorch script
with the Core API runs: tfdist's torch mode, `determined.launch.torch_distributed`)."""

from determined._unoffered import unoffered_module

__getattr__ = unoffered_module("determined.pytorch", "Determined's Trial class API", (
    "PyTorchTrial", "PyTorchTrialContext", "PyTorchExperimentalContext", "Trainer", "init", "DataLoader",
    "LRScheduler", "PyTorchCallback", "MetricReducer", "Reducer", "load_trial_from_checkpoint_path", "to_device",
    "TorchData", "deepspeed", "samplers", "dsat"))
