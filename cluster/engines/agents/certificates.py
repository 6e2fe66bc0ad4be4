"""Certificates for agents' /metrics endpoints, signed by the cluster CA at registration.

An agent sends a certificate request for a key it made in memory; the coordinator signs the request's
public key for the names it knows the agent by (its node name and the addresses it registered), never
for what else the request asks, as a server certificate that is not a CA, for CERT_DAYS days (every
registration gets a fresh one). Prometheus then verifies an agent with the same `ca_file` as the
coordinator. A cluster on its site's own certificates has no CA key here: no certificate (the agent
says so and serves no /metrics).
"""

from __future__ import annotations

import datetime
import ipaddress

from cluster.shared.credentials import Authority
from cluster.shared.model import AgentRecord
from tfdist.errors import UserError

CERT_DAYS = 30


def names_of(record: AgentRecord) -> list:
    """The subject alternative names an agent's certificate may carry: its addresses and its name."""
    from cryptography import x509

    names: list[x509.GeneralName] = []
    seen: set = set()
    for address in record.addresses:
        try:
            ip = ipaddress.ip_address(address.ip)
        except ValueError:
            continue
        if ip not in seen:
            seen.add(ip)
            names.append(x509.IPAddress(ip))
    try:
        names.append(x509.DNSName(record.name))
    except ValueError:
        pass
    return names


def sign(authority: Authority, csr_pem: bytes, record: AgentRecord) -> bytes:
    """A PEM certificate for the request's key and the agent's own names; b"" without the CA key."""
    if not authority.ca_key_pem:
        return b""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    try:
        request = x509.load_pem_x509_csr(csr_pem)
    except ValueError:
        raise UserError(f"agent {record.name}: metrics_csr is not a PEM certificate request") from None
    if not request.is_signature_valid:
        raise UserError(f"agent {record.name}: metrics_csr's signature does not match its key")
    ca = x509.load_pem_x509_certificate(authority.ca_pem)
    from cryptography.hazmat.primitives.asymmetric import ec

    ca_key = serialization.load_pem_private_key(authority.ca_key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):  # tfdist's own CA key (credentials._new_key)
        raise UserError("this cluster's CA key is not an elliptic-curve key; make the credentials again with "
                        "`tfdist credentials DIR`")
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"tfdist agent {record.name}"[:64])]))
        .issuer_name(ca.subject).public_key(request.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=CERT_DAYS))
        .add_extension(x509.SubjectAlternativeName(names_of(record)), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256()))
    return certificate.public_bytes(serialization.Encoding.PEM)

