"""The one error hierarchy of tfdist, shared by the worker library and the control plane.

Each error knows how it leaves the process: `exit_code` for the CLI (2: the
user's mistake, nothing started; 1: something failed) and `grpc_code` (a
`grpc.StatusCode` name) for a coordinator answering an RPC. The CLI and the
gRPC servicers map errors in one place each, by these attributes. Messages
name the bad value and the fix. This module imports nothing.
"""


class TfdistError(Exception):
    """Base class of every error tfdist raises."""

    exit_code = 1
    grpc_code = "INTERNAL"


class UserError(TfdistError):
    """The user asked for something wrong: a bad flag, config value or request. Nothing was started."""

    exit_code = 2
    grpc_code = "INVALID_ARGUMENT"


class NotFoundError(TfdistError):
    """A job (or another named thing) does not exist."""

    grpc_code = "NOT_FOUND"


class UnavailableError(TfdistError):
    """Another process (coordinator, agent, peer node) did not answer in time; the message names it."""

    grpc_code = "UNAVAILABLE"


class LaunchEnvironmentError(TfdistError):
    """The environment the launcher set is missing, malformed or inconsistent."""


class DownloadError(TfdistError):
    """A rank- or node-scoped download failed."""
