"""Who may talk to a coordinator, and how a client knows it talks to the right one.

A cluster's `Authority` is a directory the coordinator reads: a CA (its key signs the coordinator's TLS
certificate and nothing else), that certificate and key, and a secret that signs credentials. A
`Credential` is one small JSON file a node or a user holds: its kind, its name, a token bound to both and to
when it was issued and until when it holds (HMAC-SHA256 under the secret, so a node's token cannot be used
under another node's name, nor past its expiry), the CA to verify the coordinator with, and, optionally, the
coordinator's address. Every token expires (DAYS: a kind's default lifetime); the coordinator also refuses
the tokens of a name revoked after they were issued (cluster/coordinator/credential_book.py), so one user is
revoked without re-keying anyone else.

Kinds: `node` (an agent: only agent RPCs, only as that node), `user` (submits jobs and acts on its
own), `admin` (a user who may act on every job), `monitor` (reads the cluster, changes nothing).

A site's own certificates replace the generated ones (`Authority.with_site_tls`): the CA key is then
absent, and clients check the coordinator's host name as TLS does instead of the fixed SERVER_NAME.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import hashlib
import hmac
import ipaddress
import json
import os
import re
import stat
import secrets
import time

from tfdist.errors import UserError
from tfdist.private_files import private_dir, read_mounted, read_private, write_private

RUN_KIND = "run"  # one run's agent on one node (run_name): a Kubernetes pod's
KINDS = ("node", "user", "admin", "monitor", RUN_KIND)
SERVER_NAME = "tfdist-coordinator"  # always in a generated certificate; clients verify against it
TOKEN_VERSION = "tfd2"  # tfd2:KIND:NAME:ISSUED_MS:EXPIRES:SIGNATURE (tfd1 tokens had no expiry: refused)
OLD_TOKEN_VERSION = "tfd1"
DAY = 86_400
DAYS = {"user": 90, "admin": 90, "monitor": 365, "node": 365, RUN_KIND: 365}  # a kind's default lifetime
MAX_DAYS = 3_650
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}\Z")  # \Z: no newline after it
MAX_FILE = 64 * 1024  # a credential or PEM file larger than this is not one tfdist wrote

CA_CERT, CA_KEY, CERT, KEY, SECRET = "ca.pem", "ca-key.pem", "coordinator.pem", "coordinator-key.pem", "secret"


class CredentialError(UserError):
    """A credential file or directory that cannot be used: the message names it and the fix."""


@dataclasses.dataclass(frozen=True)
class Principal:
    """Who made a call, as its credential says (`issued_ms`, `expires`: its token's, 0 where unknown)."""

    kind: str
    name: str
    issued_ms: int = dataclasses.field(default=0, compare=False)  # when the token was issued (ms since the epoch)
    expires: int = dataclasses.field(default=0, compare=False)  # until when it holds (s since the epoch)

    def __str__(self) -> str:
        return f"{self.kind} {self.name}"


def run_name(node: str, job_id: str, attempt: int) -> str:
    """The name of a run credential: what a Kubernetes pod's agent holds. It speaks for `node` only while
    that run of the job holds it, and only about that job (the coordinator checks both)."""
    return f"{node}@{job_id}+{attempt}"


def parse_run_name(name: str) -> tuple[str, str, int] | None:
    """(node, job id, attempt) of a run credential's name; None if it is not one."""
    node, at, rest = name.rpartition("@")
    job_id, plus, attempt = rest.rpartition("+")
    if not node or not at or not job_id or not plus or not attempt.isdigit():
        return None
    return node, job_id, int(attempt)


def check_name(kind: str, name: str) -> None:
    if kind not in KINDS:
        raise CredentialError(f"unknown credential kind {kind!r}; one of {', '.join(KINDS)}")
    if not NAME_PATTERN.match(name or ""):
        raise CredentialError(f"bad {kind} name {name!r}: 1-128 characters of letters, digits and . _ @ + -, "
                              "starting with a letter or digit")


def _signature(secret: bytes, *fields: str) -> str:
    digest = hmac.new(secret, "\0".join(fields).encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def check_days(days: float) -> None:
    if not 1 <= days <= MAX_DAYS:
        raise CredentialError(f"a credential's lifetime of {days:g} days is out of range: give 1 to {MAX_DAYS} days")


def make_token(secret: bytes, kind: str, name: str, days: float | None = None, now: float | None = None) -> str:
    """A token for `kind` `name`, valid for `days` (None: the kind's default) from `now`."""
    check_name(kind, name)
    days = DAYS[kind] if days is None else days
    check_days(days)
    now = time.time() if now is None else now
    issued, expires = str(int(now * 1000)), str(int(now + days * DAY))
    return f"{TOKEN_VERSION}:{kind}:{name}:{issued}:{expires}:{_signature(secret, TOKEN_VERSION, kind, name, issued, expires)}"


def _signed(secret: bytes, token: str) -> Principal | None:
    """The principal a token names if the secret signed it, expired or not; None for anything else (constant
    time in the signature)."""
    parts = token.split(":")
    if len(parts) != 6 or parts[0] != TOKEN_VERSION or parts[1] not in KINDS or not NAME_PATTERN.match(parts[2]) \
            or not parts[3].isdigit() or not parts[4].isdigit() or len(parts[3]) > 16 or len(parts[4]) > 13:
        return None
    if not hmac.compare_digest(parts[5].encode(), _signature(secret, *parts[:5]).encode()):
        return None
    return Principal(parts[1], parts[2], int(parts[3]), int(parts[4]))


def verify_token(secret: bytes, token: str, now: float | None = None) -> Principal | None:
    """The principal a token names, if the secret signed it and it has not expired; None for anything else."""
    principal = _signed(secret, token)
    if principal is None or principal.expires <= (time.time() if now is None else now):
        return None
    return principal


def token_problem(secret: bytes, token: str, now: float | None = None) -> str:
    """Why a token this secret signed is refused (it expired; it is of the earlier, unexpiring format), or ""
    (forged, or from another cluster: nothing more is said)."""
    principal = _signed(secret, token)
    now = time.time() if now is None else now
    if principal is not None and principal.expires <= now:
        when = datetime.datetime.fromtimestamp(principal.expires, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        return (f"{principal.kind} credential {principal.name} expired on {when}: ask an administrator for a new one "
                f"(tfdist credentials --{_flag(principal.kind)} {principal.name})")
    parts = token.split(":")
    if len(parts) == 4 and parts[0] == OLD_TOKEN_VERSION and parts[1] in KINDS and NAME_PATTERN.match(parts[2]) and \
            hmac.compare_digest(parts[3].encode(), _signature(secret, OLD_TOKEN_VERSION, parts[1], parts[2]).encode()):
        return (f"{parts[1]} credential {parts[2]} was made by an earlier tfdist and never expires, so it is no "
                f"longer accepted: ask an administrator for a new one (tfdist credentials --{_flag(parts[1])} "
                f"{parts[2]})")
    return ""


def _flag(kind: str) -> str:
    return kind if kind in ("node", "user", "admin", "monitor") else "user"


@dataclasses.dataclass(frozen=True)
class Credential:
    """What a client needs to reach a coordinator and be known by it; saved as one 0600 JSON file."""

    kind: str
    name: str
    token: str
    ca_pem: str = ""  # the CA the coordinator's certificate must chain to ("" only with plaintext)
    server_name: str = ""  # the name to verify the certificate against ("": the address's host)
    coordinator: str = ""  # HOST:PORT, when the file says where to go
    plaintext: bool = False  # the coordinator was started with --insecure-plaintext

    @property
    def principal(self) -> Principal:
        return Principal(self.kind, self.name)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=1) + "\n"

    @classmethod
    def from_json(cls, text: str, where: str) -> "Credential":
        fields = {f.name for f in dataclasses.fields(cls)}
        try:
            raw = json.loads(text)
            problem = "" if isinstance(raw, dict) and {"kind", "name", "token"} <= raw.keys() <= fields else \
                "not a credential's fields"
            cred = None if problem else cls(**raw)
            if cred is not None:
                check_name(cred.kind, cred.name)
        except (ValueError, TypeError, CredentialError) as e:
            problem = str(e)
        if problem or cred is None:
            raise CredentialError(f"{where} is not a tfdist credential file ({problem}); make one with "
                                  "`tfdist credentials DIR --user NAME`") from None
        return cred

    def save(self, path: str) -> str:
        write_private(path, self.to_json().encode())
        return path

    @classmethod
    def load(cls, path: str) -> "Credential":
        try:
            data = read_mounted(path, MAX_FILE)  # a Secret volume's key is a link inside it (a pod's credential)
        except FileNotFoundError:
            raise CredentialError(f"credential file {path} does not exist; an administrator issues one with "
                                  "`tfdist credentials --user NAME` (or --node NAME)") from None
        except OSError as e:
            raise CredentialError(f"cannot read credential file {path}: {e.strerror}") from None
        st = os.lstat(path)
        if stat.S_ISREG(st.st_mode) and st.st_mode & 0o077 and st.st_uid == os.geteuid():
            os.chmod(path, 0o600)  # our own file: nobody else should read it from now on
        return cls.from_json(data.decode("utf-8", "replace"), path)


# ---------------------------------------------------------------- certificates

def _new_key():
    from cryptography.hazmat.primitives.asymmetric import ec

    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _san(hosts) -> list:
    from cryptography import x509

    names, seen = [], set()
    for host in (SERVER_NAME, "localhost", "127.0.0.1", "::1", *hosts):
        if not host or host in seen:
            continue
        seen.add(host)
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


def _certificates(hosts) -> tuple[bytes, bytes, bytes, bytes]:
    """A fresh CA and a coordinator certificate it signs: (ca_cert, ca_key, cert, key) as PEM."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, key = _new_key(), _new_key()
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"tfdist cluster CA {secrets.token_hex(4)}")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
          .not_valid_after(now + datetime.timedelta(days=3650))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, SERVER_NAME)]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=825))
            .add_extension(x509.SubjectAlternativeName(_san(hosts)), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    return ca.public_bytes(pem), _pem_key(ca_key), cert.public_bytes(pem), _pem_key(key)


# ---------------------------------------------------------------- the authority

def new_secret() -> bytes:
    """An authority's credential secret: its tokens and derived keys come from it."""
    return secrets.token_bytes(32)


def derived_key(secret: bytes, purpose: str) -> bytes:
    """A key for `purpose` that only the holder of `secret` can compute (Authority.derived_key)."""
    return hmac.new(secret, f"tfdist {purpose}".encode(), hashlib.sha256).digest()


@dataclasses.dataclass(frozen=True)
class Authority:
    """A cluster's TLS material and credential secret (see the module docstring)."""

    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes
    secret: bytes
    ca_key_pem: bytes = b""  # absent with a site's own certificates
    server_name: str = SERVER_NAME  # "" with a site's certificates: clients check the host name
    directory: str = ""  # where it was loaded from or saved to ("": memory alone); its book of revocations too

    @classmethod
    def create(cls, hosts=(), secret: bytes | None = None) -> "Authority":
        """`secret`: one made before (new_secret), whose derived keys are already in use."""
        ca, ca_key, cert, key = _certificates(hosts)
        return cls(ca, cert, key, secret or new_secret(), ca_key)

    def with_site_tls(self, cert_pem: bytes, key_pem: bytes, ca_pem: bytes) -> "Authority":
        return dataclasses.replace(self, ca_pem=ca_pem, cert_pem=cert_pem, key_pem=key_pem, ca_key_pem=b"",
                                   server_name="")

    def issue(self, kind: str, name: str, coordinator: str = "", plaintext: bool = False, days: float | None = None,
              now: float | None = None) -> Credential:
        """`days`: how long it holds (None: the kind's default, DAYS)."""
        return Credential(kind, name, make_token(self.secret, kind, name, days, now), self.ca_pem.decode(),
                          self.server_name, coordinator, plaintext)

    def verify(self, token: str, now: float | None = None) -> Principal | None:
        return verify_token(self.secret, token, now)

    def problem(self, token: str, now: float | None = None) -> str:
        return token_problem(self.secret, token, now)

    def derived_key(self, purpose: str) -> bytes:
        """A key for `purpose` (e.g. the job stores' secrets) that only this authority can compute."""
        return derived_key(self.secret, purpose)

    # -------------------------------------------------------- on disk

    def save(self, directory: str) -> str:
        private_dir(directory)
        files = {CA_CERT: self.ca_pem, CERT: self.cert_pem, KEY: self.key_pem, SECRET: self.secret.hex().encode()}
        if self.ca_key_pem:
            files[CA_KEY] = self.ca_key_pem
        for name, data in files.items():
            write_private(os.path.join(directory, name), data)
        if not self.server_name:
            write_private(os.path.join(directory, "site-certificates"), b"clients verify the host name\n")
        return directory

    @classmethod
    def load(cls, directory: str) -> "Authority":
        from tfdist.private_files import check_private_dir

        check_private_dir(directory)

        def read(name: str, required: bool = True) -> bytes:
            path = os.path.join(directory, name)
            try:
                return read_private(path, MAX_FILE)
            except FileNotFoundError:
                if required:
                    raise CredentialError(f"{path} is missing: {directory} is not a complete tfdist credentials "
                                          "directory; make one with `tfdist credentials init DIR`") from None
                return b""
        try:
            secret = bytes.fromhex(read(SECRET).decode().strip())
        except ValueError:
            raise CredentialError(f"{os.path.join(directory, SECRET)} is not a tfdist secret") from None
        if len(secret) < 16:
            raise CredentialError(f"{os.path.join(directory, SECRET)} holds fewer than 16 bytes")
        site = os.path.exists(os.path.join(directory, "site-certificates"))
        return cls(read(CA_CERT), read(CERT), read(KEY), secret, read(CA_KEY, required=False),
                   "" if site else SERVER_NAME, directory)

    @classmethod
    def load_or_create(cls, directory: str, hosts=()) -> tuple["Authority", bool]:
        """The authority in `directory`, made and saved there first if it has none. (authority, made)."""
        if os.path.lexists(os.path.join(directory, SECRET)):
            return cls.load(directory), False
        made = cls.create(hosts)
        made.save(directory)
        return dataclasses.replace(made, directory=directory), True
