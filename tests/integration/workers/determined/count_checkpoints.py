"""Stages 2 and 3: checkpoints (store_path/restore_path, the trial id kept in them), preemption checks, the
trial's hyperparameters and the searcher's metric, read through get_cluster_info(). With `--ops` it asks the
searcher how long to train (core_context.searcher.operations(), Determined before 0.38) instead of a fixed
length. HOLD_AT=N (the tests' hook): a first run without a checkpoint waits at step N until it is preempted,
so that a test can preempt it there without racing it."""

import logging
import os
import pathlib
import sys
import time

import determined as det

LENGTH = 40


def save_state(x, steps_completed, trial_id, checkpoint_directory):
    with checkpoint_directory.joinpath("state").open("w") as f:
        f.write(f"{x},{steps_completed},{trial_id}")


def load_state(trial_id, checkpoint_directory):
    checkpoint_directory = pathlib.Path(checkpoint_directory)
    with checkpoint_directory.joinpath("state").open("r") as f:
        x, steps_completed, ckpt_trial_id = [int(field) for field in f.read().split(",")]
    return (x, steps_completed) if ckpt_trial_id == trial_id else (x, 0)


def train(core_context, x, start, stop, trial_id, increment_by, hold_at):
    """Steps start..stop; returns (x, steps, preempted)."""
    steps_completed = start
    for batch in range(start, stop):
        x += increment_by
        steps_completed = batch + 1
        time.sleep(0.01)
        if steps_completed % 5 == 0:
            core_context.train.report_training_metrics(steps_completed=steps_completed, metrics={"x": x})
            core_context.train.report_validation_metrics(steps_completed=steps_completed,
                                                         metrics={"x": x, "batches": steps_completed})
            with core_context.checkpoint.store_path({"steps_completed": steps_completed}) as (path, uuid):
                save_state(x, steps_completed, trial_id, path)
            while steps_completed == hold_at and not core_context.preempt.should_preempt():
                time.sleep(0.1)
            if core_context.preempt.should_preempt():
                logging.info("preempted at %d", steps_completed)
                return x, steps_completed, True
    return x, steps_completed, False


def main(core_context, latest_checkpoint, trial_id, increment_by, use_ops):
    x, start = 0, 0
    if latest_checkpoint is not None:
        with core_context.checkpoint.restore_path(latest_checkpoint) as path:
            x, start = load_state(trial_id, path)
        print(f"restored x={x} at step {start} from {latest_checkpoint}", flush=True)
    hold_at = int(os.environ.get("HOLD_AT", "0")) if latest_checkpoint is None else 0
    if use_ops:
        for op in core_context.searcher.operations():
            x, steps, preempted = train(core_context, x, start, op.length, trial_id, increment_by, hold_at)
            if preempted:
                return
            op.report_progress(steps)
            op.report_completed(x)
            start = steps
    else:
        x, steps, preempted = train(core_context, x, start, LENGTH, trial_id, increment_by, hold_at)
        if preempted:
            return
    print(f"done: x={x} steps={steps}", flush=True)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    info = det.get_cluster_info()
    assert info is not None, "this example only runs on-cluster"
    with det.core.init() as core_context:
        main(core_context, info.latest_checkpoint, info.trial.trial_id,
             info.trial.hparams.get("increment_by", 1), "--ops" in sys.argv)
