"""The node protocol, on the job side: how a node reports (what it runs and holds, its port checks and peer
probes, its workers' exits and output) and the verbs it gets back (its `Work`), whichever engine offers it.
How a report travels is its engine's: the agents engine's AgentService (cluster/engines/agents/), or the
engine's own call in-process (the local engine).

    events.py        a node registers, reports, is seen and goes silent, applied to the job side (NodeEvents)
    reconcile.py     what a node's report or silence means (pure)
    work.py          what a node must do now, from the durable state (pure): its verbs
    port_checks.py   what a port check's or a peer probe's answer means (pure); handshake.py applies it
"""
