"""The coordinator's book of credentials (cluster/coordinator/credential_book.py): revoking a name refuses exactly
that name's tokens issued until then, kept in a private file beside the authority's secret across restarts;
issuing records who asked."""

import os
import stat

import pytest

from cluster.coordinator.credential_book import BOOK_FILE, CredentialBook
from cluster.shared.credentials import DAY, Authority
from tfdist.errors import UserError


class Clock:
    def __init__(self, now: float = 1_000_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def authority(tmp_path):
    """One kept in a credentials directory, as `tfdist coordinator` loads it: its book is kept there too."""
    return Authority.load_or_create(str(tmp_path / "credentials"))[0]


def test_revoking_a_name_refuses_its_earlier_tokens_and_nothing_else(authority, tmp_path):
    clock = Clock()
    book = CredentialBook(authority, clock)
    alice = book.issue("user", "alice", None, "admin root").token
    offline = authority.issue("user", "alice", now=clock.now - 10).token  # `tfdist credentials DIR`'s
    bob = book.issue("user", "bob", None, "admin root").token
    node = authority.issue("node", "alice", now=clock.now - 10).token  # the same name, another kind
    clock.now += 5
    assert book.revoke("user", "alice", "admin root") == 1  # one of them issued here
    assert book.verify(alice) is None and book.verify(offline) is None
    assert "user credential alice was revoked" in book.problem(alice)
    assert book.verify(bob).name == "bob" and book.verify(node).kind == "node"
    again = book.issue("user", "alice", None, "admin root").token  # the same second: issued after it still
    assert book.verify(again).name == "alice"
    issued, revoked = book.listing()
    assert [(i.kind, i.name, i.issued_by) for i in issued] == [("user", "alice", "admin root"),
                                                               ("user", "bob", "admin root"),
                                                               ("user", "alice", "admin root")]
    assert set(revoked) == {("user", "alice")}


def test_the_book_survives_a_restart_in_a_private_file(authority, tmp_path):
    clock = Clock()
    book = CredentialBook(authority, clock)
    alice = book.issue("user", "alice", 30, "admin root").token
    clock.now += 1
    book.revoke("user", "alice", "admin root")
    path = tmp_path / "credentials" / BOOK_FILE
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    restarted = CredentialBook(authority, clock)
    assert restarted.verify(alice) is None and [i.name for i in restarted.listing()[0]] == ["alice"]
    clock.now += 31 * DAY  # expired entries leave the list; the revocation stays as long as a token could hold
    restarted.issue("user", "bob", None, "admin root")
    assert [i.name for i in CredentialBook(authority, clock).listing()[0]] == ["bob"]
    assert CredentialBook(authority, clock).revoked_at("user", "alice") > 0


def test_what_cannot_be_issued_or_revoked_is_said_in_one_line(authority, tmp_path):
    book = CredentialBook(authority, Clock())
    for kind, name in (("run", "n1@1-a+0"), ("root", "x"), ("user", "a b")):
        with pytest.raises(UserError):
            book.issue(kind, name, None, "admin root")
    assert book.issue("run", "n1@1-a+0", None, "").kind == "run"  # the coordinator's own (an engine's pods)
    with pytest.raises(UserError, match="1 to 3650 days"):
        book.issue("user", "alice", 4_000, "admin root")
    with pytest.raises(UserError, match="cannot revoke a 'run' credential"):
        book.revoke("run", "n1@1-a+0", "admin root")
    (tmp_path / "credentials" / BOOK_FILE).write_text("not json")
    os.chmod(tmp_path / "credentials" / BOOK_FILE, 0o600)
    with pytest.raises(UserError, match="is not tfdist's book of credentials"):
        CredentialBook(authority, Clock())


def test_an_authority_made_in_memory_keeps_its_book_in_memory(tmp_path):
    book = CredentialBook(Authority.create(), Clock())  # a local launch's: its tokens die with it
    token = book.issue("admin", "me", None, "").token
    book.revoke("admin", "me", "")
    assert book.verify(token) is None and not os.listdir(tmp_path)
