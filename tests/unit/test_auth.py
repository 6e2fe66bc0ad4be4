"""Credentials as values: tokens bound to kind and name, files kept private, the client's choice of a
credential, and the `tfdist credentials` command."""

import json
import os
import stat
import subprocess
import sys

import pytest

from cluster.shared import auth
from cluster.shared.credentials import (DAY, Authority, Credential, CredentialError, _signature, make_token,
                                        token_problem, verify_token)
from tests.conftest import REPO

SECRET = b"s" * 32


def test_a_token_names_its_kind_and_name_and_when_it_expires_and_nothing_else():
    token = make_token(SECRET, "node", "n1", days=2, now=1_000.0)
    principal = verify_token(SECRET, token, now=1_001.0)
    assert (principal.kind, principal.name, principal.issued_ms, principal.expires) == ("node", "n1", 1_000_000,
                                                                                         1_000 + 2 * DAY)
    version, kind, name, issued, expires, signature = token.split(":")
    later = str(int(expires) + DAY)
    for forged in (f"{version}:node:n2:{issued}:{expires}:{signature}", f"{version}:admin:n1:{issued}:{expires}:{signature}",
                   f"{version}:user:n1:{issued}:{expires}:{signature}", f"{version}:node:n1:{issued}:{later}:{signature}",
                   f"{version}:node:n1:{int(issued) + 1}:{expires}:{signature}",
                   token[:-1] + ("A" if token[-1] != "A" else "B"), "", "tfd2:node:n1", token + ":x", "Bearer " + token):
        assert verify_token(SECRET, forged, now=1_001.0) is None, forged
    assert verify_token(b"t" * 32, token, now=1_001.0) is None  # another cluster's secret


def test_every_token_expires_and_an_expired_one_says_so():
    token = make_token(SECRET, "user", "alice", now=1_000.0)  # a user's: 90 days
    assert verify_token(SECRET, token, now=1_000.0 + 90 * DAY - 1) is not None
    assert verify_token(SECRET, token, now=1_000.0 + 90 * DAY) is None
    said = token_problem(SECRET, token, now=1_000.0 + 90 * DAY)
    assert said.startswith("user credential alice expired on 1970-04-01") and "tfdist credentials --user alice" in said
    assert token_problem(SECRET, token, now=1_001.0) == ""  # it holds: nothing to say
    assert token_problem(b"t" * 32, token, now=1e12) == ""  # another cluster's, or forged: nothing is said
    for days in (0, -1, 3_651):
        with pytest.raises(CredentialError, match="1 to 3650 days"):
            make_token(SECRET, "user", "alice", days=days)


def test_an_earlier_tfdist_s_token_which_never_expired_is_refused_saying_how_to_get_a_new_one():
    old = f"tfd1:user:alice:{_signature(SECRET, 'tfd1', 'user', 'alice')}"
    assert verify_token(SECRET, old) is None
    assert "made by an earlier tfdist and never expires" in token_problem(SECRET, old)
    assert token_problem(SECRET, old.replace("alice", "bob")) == ""  # not one this secret signed


@pytest.mark.parametrize("kind,name", [("root", "x"), ("user", ""), ("user", "a:b"), ("node", "-x"),
                                       ("user", "x" * 129), ("user", "a b"), ("user", "a\0b")])
def test_bad_kinds_and_names_are_refused(kind, name):
    with pytest.raises(CredentialError):
        make_token(SECRET, kind, name)


def test_credential_files_are_private_and_never_followed(tmp_path):
    authority = Authority.create()
    path = str(tmp_path / "alice.json")
    authority.issue("user", "alice", "127.0.0.1:7470").save(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    loaded = Credential.load(path)
    assert loaded.principal.name == "alice" and authority.verify(loaded.token) == loaded.principal
    os.chmod(path, 0o644)
    Credential.load(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600  # our own file, tightened on use
    link = tmp_path / "link.json"
    link.symlink_to(path)
    with pytest.raises(Exception, match="symlink"):
        Credential.load(str(link))
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(CredentialError, match="is not a tfdist credential file"):
        Credential.load(str(tmp_path / "bad.json"))


def test_the_authority_survives_a_save_and_load(tmp_path):
    directory = str(tmp_path / "creds")
    authority, made = Authority.load_or_create(directory, hosts=["10.0.0.1", "coord.example"])
    assert made and stat.S_IMODE(os.stat(directory).st_mode) == 0o700
    assert all(stat.S_IMODE(os.stat(os.path.join(directory, f)).st_mode) == 0o600 for f in os.listdir(directory))
    again, made = Authority.load_or_create(directory)
    assert not made and again == authority
    assert again.verify(authority.issue("node", "n1").token).name == "n1"
    assert again.derived_key("job store") == authority.derived_key("job store") != Authority.create().derived_key(
        "job store")


def test_a_client_finds_its_own_local_coordinator_and_only_that(tmp_path, monkeypatch):
    monkeypatch.setenv(auth.RUNTIME_ENV, str(tmp_path / "runtime"))
    with pytest.raises(Exception, match="none of yours runs on this machine"):
        auth.find_credential(None, None)
    authority = Authority.create()
    published = auth.publish_local(authority.issue("admin", "me", "127.0.0.1:7470"), 7470)
    assert stat.S_IMODE(os.stat(tmp_path / "runtime").st_mode) == 0o700
    address, credential = auth.find_credential(None, None)
    assert address == "127.0.0.1:7470" and credential.kind == "admin"
    assert auth.find_credential("localhost:7470", None)[1] == credential
    with pytest.raises(Exception, match="no credential for the coordinator at 127.0.0.1:7471"):
        auth.find_credential("127.0.0.1:7471", None)
    with pytest.raises(Exception, match="no credential for the coordinator at 192.0.2.9:7470"):
        auth.find_credential("192.0.2.9:7470", None)  # another host on the same port: not ours
    os.rename(published, tmp_path / "runtime" / "coordinator-7470-999999999.json")  # its process is gone
    with pytest.raises(Exception, match="none of yours runs on this machine"):
        auth.find_credential(None, None)
    assert os.listdir(tmp_path / "runtime") == []  # the stale file is removed


def test_the_credentials_command_makes_a_small_cluster(tmp_path):
    directory = tmp_path / "creds"
    result = subprocess.run([sys.executable, "-m", "cluster.client.cli", "credentials", str(directory), "--node", "n1",
                             "--node", "n2", "--user", "alice", "--monitor", "prom", "--coordinator", "10.0.0.1:7470"],
                            capture_output=True, text=True, cwd=REPO, timeout=60)
    assert result.returncode == 0, result.stderr
    issued = sorted(os.listdir(directory / "issued"))
    assert issued == ["monitor-prom.json", "node-n1.json", "node-n2.json", "user-alice.json"]
    authority = Authority.load(str(directory))
    for name in issued:
        credential = Credential.load(str(directory / "issued" / name))
        assert authority.verify(credential.token) == credential.principal
        assert credential.coordinator == "10.0.0.1:7470" and credential.ca_pem.startswith("-----BEGIN CERTIFICATE")
    again = subprocess.run([sys.executable, "-m", "cluster.client.cli", "credentials", str(directory), "--user", "bob",
                            "-o", str(tmp_path / "bob.json")], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert again.returncode == 0 and Authority.load(str(directory)) == authority  # the same authority, one more user
    assert json.loads((tmp_path / "bob.json").read_text())["name"] == "bob"
    bad = subprocess.run([sys.executable, "-m", "cluster.client.cli", "credentials", str(directory), "--user", "a:b"],
                         capture_output=True, text=True, cwd=REPO, timeout=60)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "bad user name 'a:b'" in bad.stderr
