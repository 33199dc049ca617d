"""Transport security and bearer tokens for the emulated API servers.

`CertificateAuthority` is generated once per sim process (or restored with a persisted world) and
signs one serving certificate per cluster server (127.0.0.1, ::1 and localhost); kubeconfigs carry
its certificate. `TokenAuthority` belongs to one cluster store: it issues the admin token and
TokenRequest tokens, and answers whether a presented token is valid now (by the store's clock, so
tests can advance time).
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import secrets
import ssl
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# Ten years: long enough that no sim run sees a certificate expire.
_CERT_LIFETIME = dt.timedelta(days=3650)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


class CertificateAuthority:
    """A self-signed CA (EC P-256: fast to generate) that issues serving certificates.

    A persisted world keeps its CA (`pem()`, `CertificateAuthority(pem=...)`): the kubeconfigs
    handed out before a restart still trust the servers after it.
    """

    def __init__(
        self, common_name: str = "colony-sim-ca", *, pem: tuple[bytes, bytes] | None = None
    ) -> None:
        if pem is not None:
            cert_pem, key_pem = pem
            key = serialization.load_pem_private_key(key_pem, password=None)
            if not isinstance(key, ec.EllipticCurvePrivateKey):
                raise ValueError("the CA key is not an EC key")
            self._key = key
            self._cert = x509.load_pem_x509_certificate(cert_pem)
        else:
            self._key = ec.generate_private_key(ec.SECP256R1())
            self._cert = self._self_signed(common_name)
        self.cert_pem: bytes = self._cert.public_bytes(serialization.Encoding.PEM)
        self._workdir = tempfile.TemporaryDirectory(prefix="colony-sim-tls-")
        self.ca_file = Path(self._workdir.name) / "ca.crt"
        self.ca_file.write_bytes(self.cert_pem)

    def pem(self) -> tuple[bytes, bytes]:
        """(certificate, private key) in PEM, what `CertificateAuthority(pem=...)` takes back."""
        return self.cert_pem, _key_pem(self._key)

    def _self_signed(self, common_name: str) -> x509.Certificate:
        now = dt.datetime.now(dt.UTC)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        public = self._key.public_key()
        return (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + _CERT_LIFETIME)
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
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .sign(self._key, hashes.SHA256())
        )

    @property
    def cert_b64(self) -> str:
        """The CA certificate as kubeconfig `certificate-authority-data`."""
        return base64.b64encode(self.cert_pem).decode()

    def issue_server_cert(
        self, hosts: tuple[str, ...] = ("127.0.0.1", "::1", "localhost")
    ) -> tuple[bytes, bytes]:
        """A serving certificate for `hosts` (IP SANs for addresses): (cert_pem, key_pem)."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        sans: list[x509.GeneralName] = []
        for host in hosts:
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                sans.append(x509.DNSName(host))
        ca_ski = self._cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + _CERT_LIFETIME)
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski),
                critical=False,
            )
            .sign(self._key, hashes.SHA256())
        )
        return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)

    def server_ssl_context(self) -> ssl.SSLContext:
        """A TLS server context with a fresh certificate for the loopback names."""
        cert_pem, key_pem = self.issue_server_cert()
        # ssl only loads certificates from files; they live in the CA's private temp directory.
        with tempfile.NamedTemporaryFile(dir=self._workdir.name, suffix=".pem", delete=False) as f:
            f.write(cert_pem + key_pem)
            path = f.name
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(path)
        Path(path).unlink()
        return context


API_AUDIENCE = "https://kubernetes.default.svc.cluster.local"
"""The API server's own audience (kubeadm's default --service-account-issuer, which
--api-audiences defaults to): a TokenRequest without audiences gets it, and only a token for it
authenticates against the API."""


@dataclass(frozen=True)
class TokenInfo:
    """Who a token authenticates and until when (None: never expires)."""

    username: str
    expires_at: dt.datetime | None
    audiences: tuple[str, ...] = ()


class TokenAuthority:
    """Bearer tokens of one cluster: opaque random strings, checked against the store clock."""

    def __init__(self, clock: Callable[[], dt.datetime]) -> None:
        self._clock = clock
        self._tokens: dict[str, TokenInfo] = {}

    def issue(
        self,
        username: str,
        *,
        expiration_seconds: int | None = None,
        audiences: tuple[str, ...] = (),
    ) -> tuple[str, dt.datetime | None]:
        """A new token for `username`, valid for `expiration_seconds` (None: forever)."""
        token = secrets.token_urlsafe(32)
        expires = (
            None
            if expiration_seconds is None
            else self._clock() + dt.timedelta(seconds=expiration_seconds)
        )
        self._tokens[token] = TokenInfo(username, expires, audiences)
        return token, expires

    def authenticate(self, token: str) -> TokenInfo | None:
        """The token's info if it was issued here and has not expired, else None."""
        info = self._tokens.get(token)
        if info is None:
            return None
        if info.expires_at is not None and self._clock() >= info.expires_at:
            del self._tokens[token]
            return None
        if info.audiences and API_AUDIENCE not in info.audiences:
            return None  # a token for something else (kube answers 401 for it too)
        return info

    def revoke(self, token: str) -> None:
        self._tokens.pop(token, None)

    def snapshot(self) -> list[dict[str, object]]:
        """The tokens still valid, JSON-shaped (a persisted world keeps them: `restore`)."""
        now = self._clock()
        return [
            {
                "token": token,
                "username": info.username,
                "expiresAt": None if info.expires_at is None else info.expires_at.isoformat(),
                "audiences": list(info.audiences),
            }
            for token, info in self._tokens.items()
            if info.expires_at is None or info.expires_at > now
        ]

    def restore(self, tokens: Iterable[Mapping[str, Any]]) -> None:
        """Accept again the tokens of a `snapshot()` (added to those issued here)."""
        for entry in tokens:
            expires = entry.get("expiresAt")
            self._tokens[str(entry["token"])] = TokenInfo(
                str(entry["username"]),
                None if expires is None else dt.datetime.fromisoformat(str(expires)),
                tuple(str(a) for a in entry.get("audiences") or ()),
            )
