"""Errors raised inside worker processes. Each message names the value and the fix."""


class TfdistError(Exception):
    """Base class of every error tfdist raises in a worker."""


class LaunchEnvironmentError(TfdistError):
    """The environment the launcher set is missing, malformed or inconsistent."""


class DownloadError(TfdistError):
    """A rank- or node-scoped download failed."""
