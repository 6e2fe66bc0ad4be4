"""The node protocol, on the job side: how a node reports (what it runs and holds, its port checks and peer
probes, its workers' exits and output) and the verbs it gets back (its `Work`), whichever engine offers it.

    events.py        a node registers, heartbeats and goes silent, applied to the job side (NodeEvents)
    reconcile.py     what a node's report or silence means (pure); heartbeat intervals
    work.py          what a node must do now, from the durable state (pure): its verbs
    port_checks.py   what a port check's or a peer probe's answer means (pure); handshake.py applies it
    liveness.py      heartbeats or beacons: which proves each node alive, and how often it heartbeats
    service.py       the AgentService gRPC edge of nodes that run `tfdist agent`; certificates.py signs
                     their /metrics certificates
"""
