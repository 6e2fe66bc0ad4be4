"""Experiments: hyperparameter searches whose trials are gang jobs on the coordinator's queue.

searcher config (cluster/shared/searcher.py) -> search.py (pure: what the search does next, as values; ASHA's
rungs in halving.py, values drawn in sampling.py) -> runner.py (applies it to the trials' jobs inside the
core's events, in their store transaction)."""
