"""A light trial of a hyperparameter search (no TensorFlow where it runs alone): it trains "steps" of SLOW seconds up to the
searcher's max_length in batches, reports val_loss (a function of its learning_rate and step) at each, saves a
checkpoint every 2 steps and when preempted (through tfdist's own checkpoint calls, with a JSON stand-in for
tf.train.Checkpoint), and resumes from the latest. Each step it trains is appended to $OUT/steps-<job id> as
"attempt step", so a test can tell whether any step was trained twice."""

import json
import math
import os
import sys
import time

import tfdist

# A gang's ranks join through tfdist.init() (its mode's strategy: TensorFlow). A trial of one process has nobody
# to join: it reads its context alone, without TensorFlow's start (3.7 s of CPU a trial, most of the kill -9
# search test's).
ctx = tfdist.init() if int(os.environ.get("TFDIST_SIZE", "1")) > 1 else tfdist.context_from_env(os.environ)


class State:
    """What tfdist's checkpoint calls need of a tf.train.Checkpoint: write(prefix) -> path, read(path)."""
    step = 0

    def write(self, prefix):
        with open(prefix + ".index", "w") as f:
            json.dump({"step": self.step}, f)
        return prefix

    def read(self, path):
        with open(path + ".index") as f:
            self.step = json.load(f)["step"]
        return self

    def expect_partial(self):
        return self


state = State()
start = tfdist.restore_checkpoint(state)
length = ctx.searcher["max_length"]["batches"]
rate = ctx.hparams["learning_rate"]
with open(os.path.join(os.environ["OUT"], f"steps-{ctx.job_id}"), "a") as out:
    for step in range(start + 1, length + 1):
        time.sleep(float(os.environ.get("SLOW", "0.2")))
        if ctx.is_chief:
            out.write(f"{ctx.attempt} {step}\n")
            out.flush()
            tfdist.report_metrics(step, val_loss=(math.log10(rate) + 2.5) ** 2 + 1.0 / step)
        state.step = step
        if ctx.should_preempt(step):
            tfdist.save_checkpoint(state, step)
            sys.exit(0)
        if step % 2 == 0:
            tfdist.save_checkpoint(state, step)
sys.exit(0)
