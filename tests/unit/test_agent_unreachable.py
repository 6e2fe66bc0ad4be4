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
