"""How a client reaches a coordinator safely, and how it finds its own local coordinators.

Every channel is TLS, verified against the CA in the caller's credential, and the token rides in each
call's metadata. gRPC sends no call before the handshake has verified the server, and a TLS credential
never gets anything but a TLS channel, so a token never reaches a server that failed verification
(tests/unit/test_access_matrix.py). Not gRPC's call-credentials plugin: it starts a thread per call, most
of what TLS cost (benchmarks/tls_breakdown.py). Plaintext exists only as the explicit, warned
`--insecure-plaintext`.

A coordinator its user starts on this machine (`tfdist coordinator`, `tfdist launch`'s embedded one)
publishes an admin credential for that user in the user's runtime directory (0700, checked): `tfdist
jobs` and friends find it there by themselves, and nobody else can read it.
"""

from __future__ import annotations

import getpass
import ipaddress
import os
import re
import socket
from typing import TYPE_CHECKING

from cluster.shared.credentials import Credential, CredentialError
from cluster.shared.user_dirs import RUNTIME_ENV, runtime_dir  # noqa: F401 (RUNTIME_ENV: this module's name too)
from tfdist.private_files import private_dir, read_private

if TYPE_CHECKING:
    import grpc

METADATA_KEY = "authorization"
CREDENTIALS_ENV = "TFDIST_CREDENTIALS"
PUBLISHED = re.compile(r"^coordinator-(\d+)-(\d+)\.json$")  # coordinator-PORT-PID.json


def user_name() -> str:
    """This process's user, as a credential name."""
    try:
        name = getpass.getuser()
    except (KeyError, OSError):
        name = f"uid{os.geteuid()}"
    return re.sub(r"[^A-Za-z0-9._@+-]", "_", name)[:128] or f"uid{os.geteuid()}"


def is_loopback_listen(address: str) -> bool:
    host = address.rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name or a wildcard: reachable from outside


# ---------------------------------------------------------------- channels

def channel(address: str, credential: Credential, options: list) -> "grpc.Channel":
    """A channel to `address`: TLS trusting only `credential`'s CA (plaintext only for a plaintext credential).
    Calls on it carry call_metadata(credential). gRPC is imported here, by what connects: a local launch
    talks to its own coordinator in-process."""
    import grpc

    if credential.plaintext:
        return grpc.insecure_channel(address, options=options)
    if not credential.ca_pem:
        raise CredentialError(f"the credential for {credential} has no CA certificate to verify the coordinator "
                              "with; make it again with `tfdist credentials DIR --user NAME`")
    tls = grpc.ssl_channel_credentials(root_certificates=credential.ca_pem.encode())
    if credential.server_name:
        options = [*options, ("grpc.ssl_target_name_override", credential.server_name)]
    return grpc.secure_channel(address, tls, options=options)


def call_metadata(credential: Credential) -> tuple:
    """The metadata every call on `channel(address, credential)` carries: the token."""
    return ((METADATA_KEY, f"Bearer {credential.token}"),)


def bearer_token(metadata) -> str:
    """The token in an incoming call's metadata ("" if none)."""
    for key, value in metadata or ():
        if key == METADATA_KEY and isinstance(value, str) and value.startswith("Bearer "):
            return value[len("Bearer "):]
    return ""


# ---------------------------------------------------------------- local coordinators

def publish_local(credential: Credential, port: int) -> str:
    """Writes `credential` where this user's `tfdist` commands look; returns the path (remove it on stop)."""
    directory = private_dir(runtime_dir())
    return credential.save(os.path.join(directory, f"coordinator-{port}-{os.getpid()}.json"))


def unpublish_local(path: str | None) -> None:
    if path:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def process_alive(pid: int) -> bool:
    """Whether process `pid` runs on this machine (another user's counts: it cannot be told apart)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _this_host(host: str) -> bool:
    if is_loopback_listen(f"{host}:0") or host in (socket.gethostname(), socket.getfqdn()):
        return True
    try:
        return host in {a[4][0] for a in socket.getaddrinfo(socket.gethostname(), None)}
    except OSError:
        return False


def published() -> list[tuple[int, Credential]]:
    """(pid, credential) of this user's coordinators running on this machine, each published by the
    process `pid` (stale files are removed)."""
    directory = runtime_dir()
    if not os.path.isdir(directory):
        return []
    private_dir(directory)  # a runtime dir someone else made is refused, never read
    found = []
    for entry in sorted(os.listdir(directory)):
        match = PUBLISHED.match(entry)
        if not match:
            continue
        path = os.path.join(directory, entry)
        if not process_alive(int(match.group(2))):
            unpublish_local(path)
            continue
        try:
            found.append((int(match.group(2)),
                          Credential.from_json(read_private(path, 1 << 16).decode("utf-8", "replace"), path)))
        except (OSError, CredentialError):
            continue
    return found


def local_credentials() -> list[Credential]:
    """The credentials of this user's coordinators running on this machine (stale files are removed)."""
    return [credential for _, credential in published()]


def find_credential(address: str | None, path: str | None) -> tuple[str, Credential]:
    """(address, credential) for a client: the file given (--credentials / $TFDIST_CREDENTIALS), else one
    of this user's local coordinators (the one at `address`, or the only one running)."""
    if path:
        credential = Credential.load(path)
        target = address or credential.coordinator
        if not target:
            raise CredentialError(f"{path} names no coordinator; pass --coordinator HOST:PORT")
        return target, credential
    local = local_credentials()
    if address:
        host, _, port = address.rpartition(":")
        matches = [c for c in local if c.coordinator.rpartition(":")[2] == port
                   and (c.coordinator == address or _this_host(host.strip("[]")))]
        if matches:
            return address, matches[-1]
        raise CredentialError(
            f"no credential for the coordinator at {address}: pass --credentials FILE (or set {CREDENTIALS_ENV}); "
            f"an administrator issues one (`tfdist credentials --user NAME`). (Coordinators you run on this "
            f"machine are found by themselves in {runtime_dir()}.)")
    if len(local) == 1:
        return local[0].coordinator, local[0]
    if local:
        raise CredentialError("several of your coordinators run on this machine ("
                                   f"{', '.join(c.coordinator for c in local)}); choose one with --coordinator")
    raise CredentialError(f"no coordinator given and none of yours runs on this machine: pass --coordinator "
                               f"HOST:PORT and --credentials FILE (or set TFDIST_COORDINATOR and {CREDENTIALS_ENV})")
