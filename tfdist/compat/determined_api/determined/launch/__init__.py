"""Determined's launchers. A config's entrypoint that names one is understood before the job starts (tfdist runs
the wrapped command in the matching mode: cluster/shared/determined_launchers.py); these modules are what runs
when a script starts one itself: the wrapped command, in the environment tfdist's mode already gave it."""
