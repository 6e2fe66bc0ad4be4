"""The one error hierarchy of tfdist, shared by the worker library and the control plane.

Each error knows how it leaves the process: `exit_code` for the CLI (2: the
user's mistake, nothing started; 1: something failed) and `grpc_code` (a
`grpc.StatusCode` name) for a coordinator answering an RPC. The CLI (`main` in
cluster/client/cli.py) and the gRPC servicers map errors in one place each, by
these attributes. A command that follows a job (`tfdist launch`) exits
docker-style instead, so its job's own codes stay the job's: every error here is
125 there, but 126 and 127, which keep theirs (cluster/client/exit_codes.py,
docs/launch.md "Exit codes"). Messages name the bad value and the fix. This module imports
nothing (tests/unit/test_error_hierarchy.py checks that every error of
`cluster/` and `tfdist/` derives from TfdistError with a valid pair).

    class                    exit  gRPC code            when
    TfdistError                1   INTERNAL             base; anything not more specific
    UserError                  2   INVALID_ARGUMENT     a bad flag, config value or request; nothing started
    NotFoundError              1   NOT_FOUND            a job (or another named thing) does not exist
    UnavailableError           1   UNAVAILABLE          a coordinator, agent or peer did not answer in time
    InternalError              1   INTERNAL             an invariant of tfdist broke: a bug to report
    LaunchEnvironmentError     1   INTERNAL             the launcher's environment is missing or inconsistent
    DownloadError              1   INTERNAL             a rank- or node-scoped download failed
    UnauthenticatedError       1   UNAUTHENTICATED      no credential, a wrong one, or a server that failed verification
    PermissionDeniedError      1   PERMISSION_DENIED    a valid credential asking for what its role may not do
    ResourceExhaustedError     1   RESOURCE_EXHAUSTED   a limit was reached (disk full, a size or count cap)
    UnsafePathError            1   FAILED_PRECONDITION  a directory or file tfdist would use is not the user's own
                                                        (owner, mode, symlink): the message names it and its owner
    CommandNotFoundError     127   INVALID_ARGUMENT     the command a job runs does not exist (a script, a program)
    CommandNotExecutableError 126  INVALID_ARGUMENT     the command exists but cannot be executed (permissions)
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


class InternalError(TfdistError):
    """An invariant of tfdist itself broke (a bug, not the user's doing); the message names the values."""

    grpc_code = "INTERNAL"


class LaunchEnvironmentError(TfdistError):
    """The environment the launcher set is missing, malformed or inconsistent."""


class DownloadError(TfdistError):
    """A rank- or node-scoped download failed."""


class UnauthenticatedError(TfdistError):
    """No credential, a wrong one, or a server whose certificate did not verify."""

    grpc_code = "UNAUTHENTICATED"


class PermissionDeniedError(TfdistError):
    """A valid credential asked for something its role may not do (another user's job, a node's RPC)."""

    grpc_code = "PERMISSION_DENIED"


class ResourceExhaustedError(TfdistError):
    """A limit was reached: the disk is full, or a size or count cap; the message names which."""

    grpc_code = "RESOURCE_EXHAUSTED"


class UnsafePathError(TfdistError):
    """A directory or file tfdist would use is not private to the user (someone else's, group/world
    accessible, or a symlink): using it would let another user read or redirect tfdist's files."""

    grpc_code = "FAILED_PRECONDITION"


class CommandNotFoundError(UserError):
    """The command a job's workers run does not exist: 127, as a shell says, before or after submitting."""

    exit_code = 127


class CommandNotExecutableError(UserError):
    """The command exists but cannot be executed: 126, as a shell says."""

    exit_code = 126
