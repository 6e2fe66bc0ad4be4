"""Stage 1: a Core API context and metrics (training every 5 steps, progress, one validation at the end)."""

import logging

import determined as det


def main(core_context, increment_by: int, steps: int) -> None:
    x = 0
    for batch in range(steps):
        x += increment_by
        done = batch + 1
        logging.info("x is now %d", x)
        if done % 5 == 0:
            core_context.train.report_training_metrics(steps_completed=done, metrics={"x": x})
            core_context.train.report_progress(done / float(steps))
    core_context.train.report_validation_metrics(steps_completed=done, metrics={"x": x})


if __name__ == "__main__":
    logging.basicConfig(level=logging.DEBUG, format=det.LOG_FORMAT)
    logging.debug("a debug line")
    logging.warning("a warning line")
    with det.core.init() as core_context:
        main(core_context, increment_by=1, steps=20)
