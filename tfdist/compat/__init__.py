"""Version-guarded fixes for upstream bugs that break distributed training."""
