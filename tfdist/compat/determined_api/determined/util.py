"""Determined's helpers a script may call."""

import pathlib


def write_user_code(path: pathlib.Path, on_cluster: bool) -> None:
    """Determined copies the model's code into each checkpoint; tfdist's jobs run from the user's own directory."""
