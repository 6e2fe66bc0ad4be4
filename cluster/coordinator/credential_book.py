"""Who may still use a credential: the coordinator's book of the credentials it issued through its API and of the
names it revoked, over the authority that signs them.

A token holds until it expires (cluster/shared/credentials.py); revoking a kind and name refuses every token of
that name issued until then, whoever issued it and however (the API, or `tfdist credentials DIR` on the
coordinator's host), and nothing else: no other user's token, no node's, no running job's run credential
changes, and the authority's secret is never re-keyed. A credential issued after the revocation is accepted
again. The book is one 0600 JSON file beside the secret that signs the tokens (the credentials directory: a
new state directory on the same authority keeps its revocations), replaced whole by rename (a `kill -9` leaves
the old one or the new one); memory alone for an authority made in memory (a local launch's, whose tokens die
with it).
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
import time

from cluster.shared.credentials import (DAY, KINDS, MAX_DAYS, RUN_KIND, Authority, Credential, CredentialError,
                                        Principal, check_name)
from tfdist.errors import UserError
from tfdist.private_files import read_private, write_private

BOOK_FILE = "book.json"  # beside the authority's secret, in its credentials directory
MAX_ISSUED = 10_000  # issued entries kept (the oldest expired ones go first)
ISSUABLE = ("user", "admin", "monitor", "node")  # a run's credential is its engine's alone


@dataclasses.dataclass(frozen=True)
class Issued:
    kind: str
    name: str
    issued_ms: int
    expires: int
    issued_by: str  # the principal that asked ("" for the coordinator's own)


class CredentialBook:
    def __init__(self, authority: Authority, clock=time.time):
        """Kept in the authority's directory where it has one, else in memory."""
        self.authority, self.clock = authority, clock
        self._path = os.path.join(authority.directory, BOOK_FILE) if authority.directory else ""
        self._lock = threading.Lock()
        self._revoked: dict[tuple[str, str], int] = {}  # (kind, name) -> revoked at (ms): tokens issued up to then
        self._issued: list[Issued] = []
        self._load()

    # ---------------------------------------------------------------- every call's check
    def verify(self, token: str) -> Principal | None:
        """The principal a token names, if the authority signed it, it has not expired and its name was not
        revoked after it was issued; None otherwise (a dict read: no lock, no I/O)."""
        principal = self.authority.verify(token, self.clock())
        if principal is None or principal.issued_ms <= self._revoked.get((principal.kind, principal.name), -1):
            return None
        return principal

    def holds(self, principal: Principal) -> bool:
        """Whether a credential accepted earlier still holds now (not expired, its name not revoked since): what
        a sign of life that carries no token (an agent's beacon) is judged by."""
        return principal.expires > self.clock() and \
            principal.issued_ms > self._revoked.get((principal.kind, principal.name), -1)

    def problem(self, token: str) -> str:
        """Why a signed token is refused, for the caller ("" if it is not one the authority signed)."""
        said = self.authority.problem(token, self.clock())
        if said:
            return said
        principal = self.authority.verify(token, self.clock())
        if principal is not None and principal.issued_ms <= self._revoked.get((principal.kind, principal.name), -1):
            return (f"{principal.kind} credential {principal.name} was revoked: ask an administrator for a new one "
                    f"(tfdist credentials --{principal.kind} {principal.name})")
        return ""

    # ---------------------------------------------------------------- an administrator's acts
    def issue(self, kind: str, name: str, days: float | None, by: str, coordinator: str = "",
              plaintext: bool = False) -> Credential:
        """`by`: who asked (an API caller's principal; "" for the coordinator's own, which may issue any kind)."""
        if by and kind not in ISSUABLE:
            raise UserError(f"cannot issue a {kind!r} credential: one of {', '.join(ISSUABLE)}")
        try:
            check_name(kind, name)
            with self._lock:
                now = max(self.clock(), (self._revoked.get((kind, name), 0) + 2) / 1000)  # after any revocation
                credential = self.authority.issue(kind, name, coordinator, plaintext, days, now)
                principal = self.authority.verify(credential.token, now)
                if principal is None:  # check_days keeps it from happening: never record what does not hold
                    raise UserError(f"the {kind} credential {name} issued would not hold (lifetime {days} days)")
                self._issued.append(Issued(kind, name, principal.issued_ms, principal.expires, by))
                self._save()
        except CredentialError as e:
            raise UserError(str(e)) from None
        return credential

    def revoke(self, kind: str, name: str, by: str) -> int:
        """Every token of `kind` `name` issued until now is refused from now on; how many of those this
        book issued and are still unexpired (tokens made elsewhere are refused too, but not counted)."""
        if kind not in KINDS or kind == RUN_KIND:
            raise UserError(f"cannot revoke a {kind!r} credential: one of {', '.join(ISSUABLE)}")
        try:
            check_name(kind, name)
        except CredentialError as e:
            raise UserError(str(e)) from None
        with self._lock:
            now = self.clock()
            # never earlier than a revocation before it (a clock stepped back must not bring tokens back)
            at = max(int(now * 1000), self._latest_issued(kind, name), self._revoked.get((kind, name), 0))
            self._revoked[(kind, name)] = at
            self._save()
            return sum(1 for i in self._issued if (i.kind, i.name) == (kind, name) and i.expires > now)

    def listing(self) -> tuple[list[Issued], dict[tuple[str, str], int]]:
        """The credentials it issued (unexpired), and each revoked name's time (ms)."""
        with self._lock:
            now = self.clock()
            return [i for i in self._issued if i.expires > now], dict(self._revoked)

    def revoked_at(self, kind: str, name: str) -> int:
        return self._revoked.get((kind, name), -1)

    # ---------------------------------------------------------------- the file
    def _latest_issued(self, kind: str, name: str) -> int:
        return max((i.issued_ms for i in self._issued if (i.kind, i.name) == (kind, name)), default=0)

    def _load(self) -> None:
        if not self._path:
            return
        try:
            raw = json.loads(read_private(self._path, 16 << 20))
            self._revoked = {(str(r["kind"]), str(r["name"])): int(r["at_ms"]) for r in raw["revoked"]}
            self._issued = [Issued(str(i["kind"]), str(i["name"]), int(i["issued_ms"]), int(i["expires"]),
                                   str(i["issued_by"])) for i in raw["issued"]]
        except FileNotFoundError:
            return
        except (ValueError, KeyError, TypeError, OverflowError) as e:
            raise UserError(f"{self._path} is not tfdist's book of credentials ({e}); move it away to start an empty "
                            "one (every credential's name then counts as never revoked)") from None

    def _save(self) -> None:
        """Under the lock: expired entries go (a revocation stays while a token it refuses could still hold)."""
        now = self.clock()
        self._issued = [i for i in self._issued if i.expires > now][-MAX_ISSUED:]
        self._revoked = {k: at for k, at in self._revoked.items() if at / 1000 + MAX_DAYS * DAY > now}
        if not self._path:
            return
        text = json.dumps({"revoked": [{"kind": k, "name": n, "at_ms": at} for (k, n), at in sorted(self._revoked.items())],
                           "issued": [dataclasses.asdict(i) for i in self._issued]}, indent=1)
        write_private(self._path, text.encode())
