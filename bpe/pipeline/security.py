"""Securing the local cluster that `bpe cluster up` starts: Dask over TLS with certificates made
for it, and the Prefect API behind an auth string; and the deployment's key that signs the count
cache's entries (`count_cache_key`).

The trust model: the cluster's processes trust each other and whoever holds the state directory
(its certificates and auth string are readable by its owner only). Nothing listens beyond
127.0.0.1; a Dask peer without the cluster's certificate cannot connect, and an API call without
the auth string is refused, so another local user can neither run code on the workers nor
trigger flow runs.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import ipaddress
import os
import secrets
import stat
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from bpe.errors import SettingsError
from bpe.storage import Checked, read_regular

CACHE_KEY_ENV = "BPE_CACHE_KEY"  # the count cache's key itself
CACHE_KEY_FILE_ENV = "BPE_CACHE_KEY_FILE"  # or a file holding it
CACHE_KEY_FILE = "bpe-cache-key"  # else this file in PREFECT_HOME, made on first use
MIN_KEY_CHARS = 32
# A key is a line of 64 hex digits (`openssl rand -hex 32`, or the one made here): 4 KiB holds any key
# one would write, and stops /dev/zero or a runaway file before it is read into memory.
KEY_FILE = Checked(SettingsError, ", so not a count cache key file", 4096, "4 KiB (a key is a line of 64 hex digits)")


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


def count_cache_key(environ: Mapping[str, str] | None = None, warn: Callable[[str], None] | None = None) -> bytes:
    """The secret that signs count cache entries (`bpe.pipeline.count_cache`): `BPE_CACHE_KEY`, else
    the file `BPE_CACHE_KEY_FILE` names, else `<PREFECT_HOME>/bpe-cache-key`, made on first use (64
    random hex digits, readable by its owner only). Only the processes that run the flow need it
    (they write and read the entries' records); it must never sit where the cache's writers can read.
    A key file that others may read is used, and said through `warn` (as ssh says of a private key)."""
    env = os.environ if environ is None else environ
    if env.get(CACHE_KEY_ENV):
        return _checked_key(env[CACHE_KEY_ENV], CACHE_KEY_ENV)
    if env.get(CACHE_KEY_FILE_ENV):
        return _key_file(Path(env[CACHE_KEY_FILE_ENV]), f"{CACHE_KEY_FILE_ENV}: ", warn)
    from prefect.settings import PREFECT_HOME

    path = Path(PREFECT_HOME.value()).expanduser() / CACHE_KEY_FILE
    if not os.path.lexists(path):
        _create_private_once(path, (secrets.token_hex(32) + "\n").encode())
    return _key_file(path, "", warn)


def _key_file(path: Path, named: str, warn: Callable[[str], None] | None) -> bytes:
    """The key a file holds, read as `KEY_FILE` says; errors are one line naming the file after `named`."""
    if path.is_symlink() and not path.exists():
        raise SettingsError(f"{named}{path}: a link to {os.readlink(path)}, which does not exist")
    try:
        text = read_regular(path, KEY_FILE).decode("utf-8")
    except SettingsError as exc:
        raise SettingsError(f"{named}{exc}") from None
    except UnicodeDecodeError:
        raise SettingsError(f"{named}{path}: not a count cache key (not UTF-8 text)") from None
    mode = stat.S_IMODE(os.stat(path).st_mode)
    if mode & 0o077 and warn is not None:
        warn(
            f"{named}{path}: the count cache key is open to other users (mode {mode:04o}), and whoever reads it can "
            f"sign count cache entries: chmod 600 {path}"
        )
    return _checked_key(text, f"{named}{path}")


def entry_signature(key: bytes, payload: bytes) -> str:
    """HMAC-SHA256 (hex) of `payload` under a key derived from the deployment's `key` for this use only."""
    derived = hmac.new(key, b"bpe count cache entry", hashlib.sha256).digest()
    return hmac.new(derived, payload, hashlib.sha256).hexdigest()


def _checked_key(text: str, where: str) -> bytes:
    key = text.strip()
    if len(key) < MIN_KEY_CHARS:
        raise SettingsError(
            f"{where}: the count cache key has {len(key)} characters; expected at least {MIN_KEY_CHARS} "
            "(e.g. the output of `openssl rand -hex 32`)"
        )
    return key.encode("utf-8")


def _create_private_once(path: Path, data: bytes) -> None:
    """Create `path` (readable by its owner only) holding `data`, unless another process made it
    first: the file appears whole (written under a temporary name, then linked into place)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        _write_private(tmp, data)
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass  # made by another process meanwhile: theirs is the key
    finally:
        tmp.unlink(missing_ok=True)
