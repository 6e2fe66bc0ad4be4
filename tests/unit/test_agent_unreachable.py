"""An agent whose coordinator is down says so at once, then less and less often (it logged a line a second,
issue 18 Measured 11), with how long it has been, and once when the coordinator answers again."""

from cluster.agent.unreachable import Unreachable


def test_unreachable_is_said_at_once_then_at_growing_intervals_then_when_back():
    said = Unreachable(first_gap=5, max_gap=60)
    lines = {t: said.failed(100.0 + t, "connection refused") for t in range(0, 400)}  # one retry a second
    spoken = {t: line for t, line in lines.items() if line}
    assert list(spoken) == [0, 5, 15, 35, 75, 135, 195, 255, 315, 375]  # the gaps double, up to a minute
    assert spoken[0] == "coordinator unreachable (connection refused); workers keep running; retrying"
    assert spoken[35] == "coordinator still unreachable after 35 s (connection refused); retrying"
    assert said.answered(500.0) == "coordinator reachable again after 400 s"
    assert said.answered(501.0) is None  # said once
    assert said.failed(600.0, "refused").startswith("coordinator unreachable (refused)")  # a new outage: at once
    assert said.failed(601.0, "refused") is None


def test_heartbeat_waits_are_jittered_below_the_interval():
    """Agents that registered together drift apart; none waits longer than its interval (three heartbeats
    still fit in lost_after for a node on heartbeats alone)."""
    from cluster.agent.loops import HEARTBEAT_JITTER, jittered

    assert jittered(10.0, draw=lambda: 0.0) == 10.0
    assert jittered(10.0, draw=lambda: 0.999) > 10.0 * (1 - HEARTBEAT_JITTER)
    waits = [jittered(10.0) for _ in range(1000)]
    assert all(8.0 < w <= 10.0 for w in waits) and len(set(waits)) > 900
