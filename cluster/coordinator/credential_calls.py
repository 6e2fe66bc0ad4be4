"""An administrator's credential RPCs (IssueCredential, ListCredentials, RevokeCredential): typed calls on the
credential book, their answers as the wire's messages. Who may call them is access.RULES' (admins only)."""

from __future__ import annotations

from typing import Callable

from cluster.coordinator.credential_book import CredentialBook
from cluster.shared.credentials import Principal
from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb


class CredentialCalls:
    def __init__(self, book: CredentialBook, address: Callable[[], str], plaintext: bool):
        """`address()`: where the coordinator is reached (written into each credential issued)."""
        self.book, self.address, self.plaintext = book, address, plaintext

    def issue(self, request: pb.IssueCredentialRequest, principal: Principal) -> pb.IssueCredentialResponse:
        credential = self.book.issue(request.kind, request.name, request.days or None, str(principal), self.address(),
                                     self.plaintext)
        return pb.IssueCredentialResponse(credential_json=credential.to_json())

    def listing(self) -> pb.ListCredentialsResponse:
        issued, revoked = self.book.listing()
        return pb.ListCredentialsResponse(
            issued=[pb.IssuedCredential(kind=i.kind, name=i.name, issued_at=i.issued_ms / 1000, expires_at=i.expires,
                                        issued_by=i.issued_by, revoked=i.issued_ms <= revoked.get((i.kind, i.name), -1))
                    for i in issued],
            revoked=[pb.RevokedName(kind=kind, name=name, revoked_at=at / 1000)
                     for (kind, name), at in sorted(revoked.items())])

    def revoke(self, request: pb.RevokeCredentialRequest, principal: Principal) -> pb.RevokeCredentialResponse:
        count = self.book.revoke(request.kind, request.name, str(principal))
        return pb.RevokeCredentialResponse(revoked=count, revoked_at=self.book.revoked_at(request.kind, request.name) / 1000)
