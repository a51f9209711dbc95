"""Certificates, keys and tokens for a test control plane, made with `cryptography`.

Every key is ECDSA P-256: fast to generate on a small machine and accepted by every component
(TLS serving, service-account token signing, CSR signing).

Example:
    >>> import tempfile
    >>> from pathlib import Path
    >>> root = Path(tempfile.mkdtemp())
    >>> ca = write_ca(root / "ca")
    >>> serving = write_serving_cert(ca, root / "apiserver", ["127.0.0.1", "localhost"])
    >>> serving.cert.read_text().startswith("-----BEGIN CERTIFICATE-----")
    True
"""

from __future__ import annotations

import datetime
import ipaddress
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=7)  # a test run never lives longer


@dataclass(frozen=True)
class KeyPair:
    """A PEM certificate and its PEM private key on disk."""

    cert: Path
    key: Path


@dataclass(frozen=True)
class Identity:
    """One line of an apiserver `--token-auth-file`: a bearer token and who it stands for."""

    token: str
    user: str
    groups: tuple[str, ...] = ()

    def csv_line(self) -> str:
        """The token file line `token,user,uid,"group1,group2"` (the uid is the user name)."""
        return f'{self.token},{self.user},{self.user},"{",".join(self.groups)}"'


def new_identity(user: str, *groups: str) -> Identity:
    """An identity with a fresh random token."""
    return Identity(token=secrets.token_hex(24), user=user, groups=tuple(groups))


def write_token_file(path: Path, identities: Sequence[Identity]) -> Path:
    """Write a `--token-auth-file` readable only by its owner and return its path."""
    path.write_text("".join(identity.csv_line() + "\n" for identity in identities))
    path.chmod(0o600)
    return path


def write_private_key(path: Path) -> ec.EllipticCurvePrivateKey:
    """Write a new PKCS#8 PEM ECDSA key (mode 0600) and return it."""
    key = ec.generate_private_key(ec.SECP256R1())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)
    return key


def write_public_key(key: ec.EllipticCurvePrivateKey, path: Path) -> Path:
    """Write the PEM `PUBLIC KEY` of `key` (what `--service-account-key-file` reads)."""
    path.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return path


def _name(common_name: str, organizations: Sequence[str] = ()) -> x509.Name:
    groups = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, group) for group in organizations]
    return x509.Name([*groups, x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _builder(
    subject: str,
    issuer: x509.Name,
    public_key: ec.EllipticCurvePublicKey,
    groups: Sequence[str] = (),
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(_name(subject, groups))
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
    )


def write_ca(directory: Path, common_name: str = "k8s-ai-orchestrator-test-ca") -> KeyPair:
    """Create a self-signed CA as `ca.crt`/`ca.key` in `directory`."""
    key = write_private_key(directory / "ca.key")
    cert = (
        _builder(common_name, _name(common_name), key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    path = directory / "ca.crt"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return KeyPair(cert=path, key=directory / "ca.key")


def _load_ca(ca: KeyPair) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    cert = x509.load_pem_x509_certificate(ca.cert.read_bytes())
    key = serialization.load_pem_private_key(ca.key.read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise TypeError(f"{ca.key} is not an ECDSA key; make the CA with write_ca()")
    return cert, key


def _subject_alt_names(hosts: Sequence[str]) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(names)


def write_serving_cert(ca: KeyPair, directory: Path, hosts: Sequence[str]) -> KeyPair:
    """Create `tls.crt`/`tls.key` in `directory`, signed by `ca`, valid for `hosts`."""
    ca_cert, ca_key = _load_ca(ca)
    key = write_private_key(directory / "tls.key")
    cert = (
        _builder(hosts[0], ca_cert.subject, key.public_key())
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(_subject_alt_names(hosts), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    path = directory / "tls.crt"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return KeyPair(cert=path, key=directory / "tls.key")


def write_client_cert(
    ca: KeyPair, directory: Path, user: str, groups: Sequence[str] = ()
) -> KeyPair:
    """Create `client.crt`/`client.key` in `directory`: a client certificate for `user` (the
    subject's CN) in `groups` (its O attributes), e.g. "system:node:n1" in "system:nodes"."""
    ca_cert, ca_key = _load_ca(ca)
    key = write_private_key(directory / "client.key")
    cert = (
        _builder(user, ca_cert.subject, key.public_key(), groups)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    path = directory / "client.crt"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return KeyPair(cert=path, key=directory / "client.key")
