"""`tfdist launch --config` of a config whose searcher searches: the experiment is submitted and followed as a
table until it ends. Ctrl-C or SIGTERM cancels it (every trial) and keeps following until it has ended; a second
signal leaves at once. Exit status: 0 COMPLETED, 1 FAILED, 130 CANCELED (128 + the signal when one canceled it)."""

from __future__ import annotations

import signal
import sys
import threading

from cluster.client.experiment_view import follow_experiment, print_experiment

EXIT_CODES = {"COMPLETED": 0, "FAILED": 1, "CANCELED": 130}
CANCEL_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def cores_for_trials(slots_per_trial: int, max_concurrent: int, cores: int) -> int:
    """A local experiment's slots on this machine: as many trials at once as its cores (its GPUs, where the
    trials' slots are GPUs) hold, at least one."""
    return slots_per_trial * max(1, min(max_concurrent, cores // max(slots_per_trial, 1)))


def jobs_made(config) -> int:
    """The most jobs a launch of `config` (a JobConfig) makes: a search's trials (each a job), else its one job.
    A local run reserves a job number for each."""
    if not config.searcher:
        return 1
    from cluster.shared import searcher

    return searcher.most_trials(searcher.parse(config.searcher), config.hyperparameters)


def follow(client, experiment_id: str, where: str) -> int:
    sys.stderr.write(f"tfdist: experiment {experiment_id} submitted to {where}; `tfdist experiment {experiment_id}` "
                     "shows it, `tfdist cancel " f"{experiment_id}` stops every trial\n")
    signals: list[int] = []
    asked = threading.Event()

    def on_signal(signum, frame):
        signals.append(signum)
        if len(signals) > 1:
            sys.stderr.write(f"tfdist: {signal.Signals(signum).name} again: leaving; the coordinator ends "
                             f"experiment {experiment_id}'s trials\n")
            sys.stderr.flush()
            import os

            os._exit(128 + signals[0])
        asked.set()

    def cancel():
        asked.wait()
        sys.stderr.write(f"tfdist: {signal.Signals(signals[0]).name}: canceling experiment {experiment_id} "
                         "(again to stop waiting)\n")
        try:
            client.cancel(experiment_id)
        except Exception as e:  # noqa: BLE001 - the follower reports what happens next
            sys.stderr.write(f"tfdist: could not cancel experiment {experiment_id}: {e}\n")

    threading.Thread(target=cancel, daemon=True).start()
    previous = {s: signal.signal(s, on_signal) for s in CANCEL_SIGNALS}
    try:
        experiment = follow_experiment(client, experiment_id)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    print_experiment(experiment, as_json=False)
    if signals:
        return 128 + signals[0]
    return EXIT_CODES.get(experiment.state, 1)
