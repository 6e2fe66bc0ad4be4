"""Prints the hyperparameters this worker got, as JSON (no TensorFlow): test_hparams_launch.py reads them."""

import json
import os

import tfdist

ctx = tfdist.context_from_env(os.environ, {"epochs": 3})  # what tfdist.init() gives, without a strategy
print(f"rank {ctx.rank} hparams " + json.dumps(dict(ctx.hparams), sort_keys=True), flush=True)
