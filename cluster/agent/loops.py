"""The agent's helper threads besides the heartbeat loop: the work long poll (for agents without beacons)
and the shipping of the workers' output, exits and metric rows; and the heartbeat loop's jitter."""

from __future__ import annotations

import logging
import random
import threading
from typing import Callable

from cluster.agent.edge import CoordinatorLink
from cluster.agent.metrics_tail import MetricsTail
from cluster.agent.outbox import Outbox
from cluster.shared.rpc import ClientError

log = logging.getLogger("tfdist.agent")
WATCH_WAIT = 10.0  # seconds one WaitForWork long poll may be held by the coordinator
WATCH_BACKOFF = 30.0  # seconds of heartbeats alone when the coordinator had no waiting slot
HEARTBEAT_JITTER = 0.2  # each wait is up to this fraction shorter than the interval, at random


def jittered(interval: float, draw: Callable[[], float] = random.random) -> float:
    """The wait before the next heartbeat: the interval, less up to a fifth at random. Agents that registered
    together (a cluster's start, a coordinator's restart) drift apart instead of heartbeating in waves of
    thousands; never longer than the interval, so a node on heartbeats alone still fits three in lost_after."""
    return interval * (1.0 - HEARTBEAT_JITTER * draw())


def watch_loop(link: CoordinatorLink, stop: threading.Event, wake: threading.Event,
               interval: Callable[[], float], beaconing: Callable[[], bool] = lambda: False) -> None:
    """Long polls WaitForWork and wakes the heartbeat loop as soon as the coordinator has new work for this
    node (a job placed here, its peers ready, a stop): a multi-node job's start takes round trips, not
    heartbeat intervals. Heartbeats alone still do everything, a little later. Not while `beaconing()`:
    the coordinator's pokes bring the news then, without a call held per agent."""
    seen = 0
    while not stop.is_set():
        if beaconing():
            stop.wait(WATCH_WAIT)
            continue
        try:
            notice = link.wait_for_work(seen, WATCH_WAIT)
        except ClientError:
            stop.wait(max(interval(), 1.0))
            continue
        if notice.version != seen:
            seen = notice.version
            wake.set()
        if not notice.held:
            stop.wait(WATCH_BACKOFF)


def ship_loop(outbox: Outbox, metrics: MetricsTail, stop: threading.Event) -> None:
    """Sends the workers' lines, exits and metric rows to the coordinator as they come; while the outbox backs
    off (the coordinator's disk full, the coordinator away) it waits, and nothing is sent meanwhile anyway."""
    while not stop.is_set():
        try:
            metrics.read()
            outbox.ship_once()
        except ClientError as e:
            log.debug("shipping deferred: %s", e)
            stop.wait(1.0)
            continue
        held = outbox.backing_off()
        if held > 0:
            stop.wait(held)
            continue
        outbox.wake.wait(0.1)
        outbox.wake.clear()
