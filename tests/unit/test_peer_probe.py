"""The agent's probe of a job's peers (cluster/agent/ports.py): a real listener and a real refused port, and a
peer's name that resolves only after some seconds (issue 45, Measured 8: a pod's DNS name not yet served by the
cluster's DNS failed the job at its one connect). The late name is a pure-logic stand-in here (a clock and a
resolver that answers from the third ask); tests/kubernetes/test_real_node.py has CoreDNS serving it late."""

import socket

from cluster.agent import ports
from cluster.shared.work import ProbeTask


def test_a_listening_peer_passes_and_a_closed_port_fails_at_once():
    with socket.socket() as listener, socket.socket() as closed:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        closed.bind(("127.0.0.1", 0))  # bound, never listening: refused
        task = ProbeTask("7", (("n1", "127.0.0.1", listener.getsockname()[1]),
                               ("n2", "127.0.0.1", closed.getsockname()[1])), 2.0)
        failures = ports.probe(task)
    assert [(f.peer, f.error) for f in failures] == [("n2", "Connection refused")]


class LateName:
    """Resolves from the `answers_from`-th ask; a clock that the probe's sleeps move."""

    def __init__(self, answers_from: int):
        self.asked, self.answers_from, self.now, self.slept = 0, answers_from, 0.0, []

    def connect(self, address, port, timeout):
        self.asked += 1
        if self.asked < self.answers_from:
            return "its name does not resolve (Name or service not known)", True
        return "", False

    def sleep(self, seconds):
        self.slept.append(seconds)
        self.now += seconds


def test_a_name_served_late_is_asked_again_with_a_backoff():
    late = LateName(answers_from=4)
    task = ProbeTask("7", (("n1", "n1.tfdist-7-a0.ml.svc", 29500),), 2.0)
    assert ports.probe(task, late.connect, lambda: late.now, late.sleep) == ()
    assert late.asked == 4 and late.slept == [0.25, 0.5, 1.0]


def test_a_name_that_never_resolves_fails_after_the_bound_naming_it():
    late = LateName(answers_from=10**6)
    task = ProbeTask("7", (("n1", "n1.tfdist-7-a0.ml.svc", 29500),), 2.0)
    failure, = ports.probe(task, late.connect, lambda: late.now, late.sleep)
    assert failure.peer == "n1" and failure.error == f"its name does not resolve (Name or service not known) after " \
                                                      f"{ports.NAME_WAIT:g}s"
    assert ports.NAME_WAIT - 5.0 <= late.now <= ports.NAME_WAIT
