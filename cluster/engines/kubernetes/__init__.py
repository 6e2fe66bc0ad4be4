"""The Kubernetes engine (issue 32), being built: one pod per whole node of a gang, pinned so that the
scheduler and kubelets still account for its GPUs, a headless Service per job, pods watched through the API.
Not registered in cluster/engines.ENGINES until it runs a job end to end.

    offers.py   what the cluster offers: each node's slots (free allocatable GPUs, or CPUs), or why not (pure)
"""
