"""The job store's scopes: the contract between the store the agent serves (cluster/agent/job_store*.py)
and the worker library's users of it (collectives, preemption). Imports nothing, so the agent names them
without importing the workers' HTTP client."""

COLLECTIVES = "tfdist"  # tfdist/collectives.py's keys (read ones are deleted; the store counts them apart)
PREEMPT = "tfdist-preempt"  # tfdist/preemption.py's request and the ranks' stop steps
