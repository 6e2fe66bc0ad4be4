"""TLS with a site's own certificates (host names verified as TLS does), and the warned plaintext opt-out."""

import datetime
import ipaddress
import os
import signal
import subprocess
import sys

import grpc
import pytest

from tests.agent_core import AgentsServer
from cluster.shared.credentials import Authority
from cluster.shared.rpc import Client, ClientError
from tests.conftest import REPO, cli_env

pytestmark = pytest.mark.timeout(120)


def site_pki(tmp_path, names):
    """A site CA and a server certificate it signs for `names` (what an organisation's PKI hands out)."""
    tmp_path.mkdir(exist_ok=True)
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Example Site CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(1).not_valid_before(now - datetime.timedelta(hours=1))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True).sign(ca_key, hashes.SHA256()))
    sans = [x509.IPAddress(ipaddress.ip_address(n)) if n[0].isdigit() else x509.DNSName(n) for n in names]
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(2)
            .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False).sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    paths = {"cert": tmp_path / "site.pem", "key": tmp_path / "site-key.pem", "ca": tmp_path / "site-ca.pem"}
    paths["cert"].write_bytes(cert.public_bytes(pem))
    paths["key"].write_bytes(key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    paths["ca"].write_bytes(ca.public_bytes(pem))
    return paths


def test_a_sites_own_certificates_are_used_and_host_names_checked(tmp_path):
    pki = site_pki(tmp_path, ["coordinator.example", "127.0.0.1"])  # not "localhost"
    directory = tmp_path / "creds"
    made = subprocess.run([sys.executable, "-m", "cluster.client.cli", "credentials", str(directory), "--site-cert",
                           str(pki["cert"]), "--site-key", str(pki["key"]), "--site-ca", str(pki["ca"]), "--user", "u"],
                          capture_output=True, text=True, cwd=REPO, timeout=60)
    assert made.returncode == 0, made.stderr
    authority = Authority.load(str(directory))
    assert authority.server_name == "" and authority.ca_pem == pki["ca"].read_bytes()
    server = AgentsServer(":memory:", "127.0.0.1:0", authority).start()
    try:
        credential = authority.issue("user", "u")
        good = Client(server.address, credential)
        assert good.jobs() == []  # 127.0.0.1 is in the certificate
        good.close()
    finally:
        server.stop(grace=0)
    # The same site CA, a certificate that does not name 127.0.0.1: the client refuses the server.
    other = site_pki(tmp_path / "other", ["coordinator.example"])
    mismatched = authority.with_site_tls(other["cert"].read_bytes(), other["key"].read_bytes(), other["ca"].read_bytes())
    server = AgentsServer(":memory:", "127.0.0.1:0", mismatched).start()
    try:
        client = Client(server.address, mismatched.issue("user", "u"), timeout=5)
        with pytest.raises(ClientError) as err:
            client.jobs()
        client.close()
        assert err.value.code == grpc.StatusCode.UNAUTHENTICATED and "did not prove" in str(err.value)
    finally:
        server.stop(grace=0)


def test_plaintext_is_an_explicit_warned_opt_out_and_still_needs_credentials(tmp_path, marker):
    state = tmp_path / "state"
    proc = subprocess.Popen([sys.executable, "-m", "cluster.client.cli", "coordinator", "--listen", "127.0.0.1:0",
                             "--state-dir", str(state), "--insecure-plaintext"], env=cli_env(marker),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        banner = proc.stdout.readline()
        assert "(plaintext;" in banner
        address = banner.split(" listening on ")[1].split()[0]
        authority = Authority.load(os.path.join(state, "credentials"))
        plain = Client(address, authority.issue("user", "u", plaintext=True))
        assert plain.jobs() == []
        plain.close()
        forged = Client(address, Authority.create().issue("user", "u", plaintext=True))
        with pytest.raises(ClientError) as err:
            forged.jobs()
        forged.close()
        assert err.value.code == grpc.StatusCode.UNAUTHENTICATED
        tls = Client(address, authority.issue("user", "u"), timeout=5)  # expects TLS: refuses to send the token
        with pytest.raises(ClientError) as err:
            tls.jobs()
        tls.close()
        assert err.value.code == grpc.StatusCode.UNAUTHENTICATED
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert "warning: --insecure-plaintext: no TLS" in err


def test_a_server_closing_mid_handshake_is_unreachable_not_untrusted():
    """A coordinator killed or restarting while a client's TLS handshake is under way closes the socket: gRPC
    says "Handshake read failed (Socket closed)" (or "Connection reset by peer"). That is a server that is not there (retried by `logs -f`,
    submissions, agents), not one that failed to prove who it is (never retried)."""
    import socket
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    stop = threading.Event()

    def accept_and_close():
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            connection.close()

    threading.Thread(target=accept_and_close, daemon=True).start()
    server = AgentsServer(":memory:", "127.0.0.1:0").start()
    try:
        client = Client(f"127.0.0.1:{listener.getsockname()[1]}", server.authority.issue("user", "u"), timeout=5)
        with pytest.raises(ClientError) as err:
            client.jobs()
        client.close()
        assert err.value.code == grpc.StatusCode.UNAVAILABLE, str(err.value)
        assert "cannot reach the coordinator" in str(err.value)
    finally:
        stop.set()
        listener.shutdown(socket.SHUT_RDWR)  # wakes the thread's accept()
        listener.close()
        server.stop(grace=0)
