"""The certificates a test control plane needs, made with `cryptography`: a cluster CA, the apiserver's serving
certificate, client certificates whose subject is the Kubernetes identity (CN the user, O the groups), and the
service-account signing key. All files 0600 in a 0700 folder of the test's own."""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID = datetime.timedelta(days=2)


@dataclass(frozen=True)
class Pair:
    cert: str  # PEM file paths
    key: str


def _write(path: str, data: bytes) -> str:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return path


def _key_pem(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


class ClusterPKI:
    def __init__(self, folder: str):
        os.makedirs(folder, mode=0o700, exist_ok=False)
        self.folder = folder
        self._ca_key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tfdist-test-cluster-ca")])
        now = datetime.datetime.now(datetime.timezone.utc)
        self._ca = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                    .public_key(self._ca_key.public_key()).serial_number(x509.random_serial_number())
                    .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + VALID)
                    .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                    .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                                 content_commitment=False, key_encipherment=False,
                                                 data_encipherment=False, key_agreement=False,
                                                 encipher_only=False, decipher_only=False), critical=True)
                    .sign(self._ca_key, hashes.SHA256()))
        self.ca = _write(os.path.join(folder, "ca.crt"), self._ca.public_bytes(serialization.Encoding.PEM))
        self.ca_key = _write(os.path.join(folder, "ca.key"), _key_pem(self._ca_key))
        sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.sa_key = _write(os.path.join(folder, "sa.key"), _key_pem(sa_key))
        self.sa_pub = _write(os.path.join(folder, "sa.pub"), sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))

    def serving(self, name: str, hosts: list[str]) -> Pair:
        sans = [x509.IPAddress(ipaddress.ip_address(h)) if _is_ip(h) else x509.DNSName(h) for h in hosts]
        return self._issue(name, x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]),
                           ExtendedKeyUsageOID.SERVER_AUTH, sans)

    def client(self, user: str, groups: tuple[str, ...] = ()) -> Pair:
        """A client certificate the apiserver reads as `user` in `groups` (O)."""
        attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]
        attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, user))
        return self._issue(user.replace(":", "-"), x509.Name(attributes), ExtendedKeyUsageOID.CLIENT_AUTH, [])

    def _issue(self, file_name: str, subject: x509.Name, usage, sans) -> Pair:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(self._ca.subject)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + VALID)
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage([usage]), critical=False))
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self._ca_key, hashes.SHA256())
        base = os.path.join(self.folder, file_name)
        return Pair(_write(base + ".crt", cert.public_bytes(serialization.Encoding.PEM)),
                    _write(base + ".key", _key_pem(key)))


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        return False
