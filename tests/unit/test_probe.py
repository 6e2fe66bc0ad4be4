"""Probing a job's peers: a listening port answers, a closed one is reported with why, results wait to be taken."""

import socket
import threading

from cluster.agent.ports import Prober, probe
from cluster.shared.work import ProbeFailure, ProbeTask


def test_a_closed_port_is_a_failure_and_a_listening_one_is_not():
    with socket.socket() as listening, socket.socket() as closed:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        closed.bind(("127.0.0.1", 0))  # bound, not listening: refused
        up, down = listening.getsockname()[1], closed.getsockname()[1]
        task = ProbeTask("j", (("n2", "127.0.0.1", up), ("n3", "127.0.0.1", down)), 2.0)
        assert probe(task) == (ProbeFailure("n3", "127.0.0.1", down, "Connection refused"),)

        done = threading.Event()
        prober = Prober(on_done=done.set)
        prober.start(task)
        assert done.wait(10)
        assert prober.take() == {"j": (ProbeFailure("n3", "127.0.0.1", down, "Connection refused"),)}
        assert prober.take() == {}
