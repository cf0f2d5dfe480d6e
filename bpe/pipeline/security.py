"""Securing the local cluster that `bpe cluster up` starts: Dask over TLS with certificates made
for it, and the Prefect API behind an auth string.

The trust model: the cluster's processes trust each other and whoever holds the state directory
(its certificates and auth string are readable by its owner only). Nothing listens beyond
127.0.0.1; a Dask peer without the cluster's certificate cannot connect, and an API call without
the auth string is refused, so another local user can neither run code on the workers nor
trigger flow runs.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import secrets
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class TLSFiles:
    """A CA certificate and the certificate and key every process of the cluster presents."""

    ca: Path
    cert: Path
    key: Path

    def dask_options(self) -> list[str]:
        """The `dask scheduler` / `dask worker` options that use them."""
        return ["--tls-ca-file", str(self.ca), "--tls-cert", str(self.cert), "--tls-key", str(self.key)]

    def dask_environment(self) -> dict[str, str]:
        """Dask configuration for clients (flow runs, `bpe train --scheduler`): TLS with these files,
        and no unencrypted connection at all."""
        env = {
            "DASK_DISTRIBUTED__COMM__TLS__CA_FILE": str(self.ca),
            "DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION": "True",
        }
        for role in ("SCHEDULER", "WORKER", "CLIENT"):
            env[f"DASK_DISTRIBUTED__COMM__TLS__{role}__CERT"] = str(self.cert)
            env[f"DASK_DISTRIBUTED__COMM__TLS__{role}__KEY"] = str(self.key)
        return env


def _write_private(path: Path, data: bytes) -> None:
    """Write a file only its owner can read."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def make_certificates(directory: Path, host: str = "127.0.0.1", days: int = 365) -> TLSFiles:
    """A new certificate authority and one certificate for `host` signed by it, in `directory`."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    now = datetime.datetime.now(datetime.UTC)

    def certificate(subject: str, key, issuer: str, issuer_key, is_ca: bool):
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=is_ca, path_length=None), critical=True)
        )
        if not is_ca:
            names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address(host))]
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        return builder.sign(issuer_key, hashes.SHA256())

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = certificate("bpe cluster CA", ca_key, "bpe cluster CA", ca_key, is_ca=True)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = certificate(host, key, "bpe cluster CA", ca_key, is_ca=False)
    files = TLSFiles(directory / "ca.pem", directory / "cluster.pem", directory / "cluster-key.pem")
    _write_private(files.ca, ca.public_bytes(serialization.Encoding.PEM))
    _write_private(files.cert, cert.public_bytes(serialization.Encoding.PEM))
    _write_private(
        files.key,
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
    )
    return files


def make_auth_string(path: Path) -> str:
    """A new Prefect API auth string (`bpe:<random>`), kept in `path` for its owner only."""
    auth = f"bpe:{secrets.token_urlsafe(24)}"
    _write_private(path, (auth + "\n").encode())
    return auth
