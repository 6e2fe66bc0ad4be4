"""The Kubernetes engine (issue 32), being built: one pod per whole node of a gang, pinned so that the
scheduler and kubelets still account for its GPUs, a headless Service per job, pods watched through the API.
Not registered in cluster/engines.ENGINES until it runs a job end to end (it lands as engine.py).

    offers.py      what the cluster offers: each node's slots (free allocatable GPUs, or CPUs), or why not
    manifests.py   a gang's objects: pods pinned by node affinity, the headless Service, the owning Secret
    rbac.py        the coordinator's least rights: its namespace's job objects, reading nodes and pods
"""
