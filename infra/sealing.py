"""Sealing secret values with Colony's public key, and unsealing them in the worker only.

Like Bitnami's sealed secrets: clients (`colonyctl`, the HTTP API) hold only Colony's public key and
seal every secret prompt answer before a request leaves them; workflow inputs, histories, activity
payloads, queries and the Web UI carry `models.sealed.SealedValue`s. The worker holds the private
key and unseals inside the one activity that writes a workspace's values Secret on the management
cluster (the ServiceSet reads it through `valuesFrom`), so plaintext exists only in that activity's
memory and in the Secret.

The scheme is ECIES over X25519: per value, an ephemeral X25519 key agrees a shared secret with
Colony's public key; HKDF-SHA256 (salted with both public keys) derives an AES-256-GCM key; the
value is encrypted with the value's scope (the workspace's workflow id and the path,
`workspace/[<organization>/]<name>/<path>`) as associated data, so a sealed value cannot be moved
to another workspace, another organization's or another prompt. Only the `cryptography` package is
used; no IO happens here except reading and writing key files.

Environment:
    COLONY_SEALING_PUBLIC_KEY_FILE: the public key (PEM) clients seal with; default
        `.colony/sealing/public.pem`.
    COLONY_SEALING_PRIVATE_KEY_FILE: the private key (PEM, mode 0600) the worker unseals with;
        default `.colony/sealing/private.pem`.
"""

from __future__ import annotations

import base64
import hashlib
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from models.sealed import SEALING_ALGORITHM, SealedValue
from models.value_paths import nest_values
from models.values import split_plaintext_secrets
from models.workspace import WorkspaceSpec, workspace_workflow_id
from models.workspace_class import WorkspaceClassSpec

DEFAULT_PUBLIC_KEY_FILE = ".colony/sealing/public.pem"
DEFAULT_PRIVATE_KEY_FILE = ".colony/sealing/private.pem"
PUBLIC_KEY_ENV = "COLONY_SEALING_PUBLIC_KEY_FILE"
PRIVATE_KEY_ENV = "COLONY_SEALING_PRIVATE_KEY_FILE"

_HKDF_INFO = b"colony sealed value v1"
"""Domain separation: keys derived for sealed values are never valid for anything else."""
_NONCE_BYTES = 12
"""96 bits: the AES-GCM nonce size NIST SP 800-38D recommends (random per value, one use per key)."""
KEY_ID_LENGTH = 16
"""Hex digits of the public key's SHA-256 that name a key pair (64 bits: collisions are not a
concern among the few keys a deployment ever has)."""


class SealingError(Exception):
    """A value cannot be sealed or unsealed; the message says why (never what the value is)."""


def key_id(public_key: X25519PublicKey) -> str:
    """The id of a key pair: the start of its public key's SHA-256."""
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:KEY_ID_LENGTH]


def workspace_scope(workspace: str, path: str, organization: str = "") -> str:
    """The scope a workspace's secret prompt answer is sealed for: its workflow id and the path
    (`workspace/<name>/<path>`, `workspace/<organization>/<name>/<path>`), so a value sealed for
    one organization's workspace opens for no other organization's of the same name."""
    return f"{workspace_workflow_id(workspace, organization)}/{path}"


def _derive(shared: bytes, ephemeral: bytes, recipient: bytes) -> bytes:
    return HKDF(
        algorithm=hashes.SHA256(), length=32, salt=ephemeral + recipient, info=_HKDF_INFO
    ).derive(shared)


def _raw(public_key: X25519PublicKey) -> bytes:
    return public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except ValueError as exc:
        raise SealingError(f"sealed value's {what} is not base64") from exc


@dataclass(frozen=True)
class Sealer:
    """Seals values for Colony: what clients hold (the public key only)."""

    public_key: X25519PublicKey

    @property
    def key_id(self) -> str:
        return key_id(self.public_key)

    def seal(self, plaintext: str, scope: str) -> SealedValue:
        """Seal one value for `scope` (e.g. `workspace_scope("nb", "notebookPassword")`)."""
        ephemeral = X25519PrivateKey.generate()
        ephemeral_raw = _raw(ephemeral.public_key())
        key = _derive(ephemeral.exchange(self.public_key), ephemeral_raw, _raw(self.public_key))
        nonce = secrets.token_bytes(_NONCE_BYTES)
        ciphertext = AESGCM(key).encrypt(nonce, plaintext.encode("utf-8"), scope.encode("utf-8"))
        return SealedValue(
            algorithm=SEALING_ALGORITHM,
            key_id=self.key_id,
            scope=scope,
            ephemeral_key=_b64(ephemeral_raw),
            nonce=_b64(nonce),
            ciphertext=_b64(ciphertext),
        )


@dataclass(frozen=True)
class Unsealer:
    """Opens sealed values: only the worker has one (the private key)."""

    private_key: X25519PrivateKey

    @property
    def key_id(self) -> str:
        return key_id(self.private_key.public_key())

    @property
    def sealer(self) -> Sealer:
        return Sealer(self.private_key.public_key())

    def unseal(self, sealed: SealedValue, scope: str | None = None) -> str:
        """The plaintext of a sealed value.

        Args:
            sealed: the value.
            scope: the scope the caller expects (the workspace and path it is writing); a value
                sealed for another scope is refused.

        Raises:
            SealingError: sealed for another key or scope, or altered since it was sealed.
        """
        if sealed.algorithm != SEALING_ALGORITHM:
            raise SealingError(f"sealed value uses {sealed.algorithm!r}, not {SEALING_ALGORITHM!r}")
        if sealed.key_id != self.key_id:
            raise SealingError(
                f"value for {sealed.scope} was sealed for key {sealed.key_id}, but this worker "
                f"holds key {self.key_id}: seal it again with this Colony's public key"
            )
        if scope is not None and sealed.scope != scope:
            raise SealingError(f"value sealed for {sealed.scope} cannot be used for {scope}")
        ephemeral_raw = _unb64(sealed.ephemeral_key, "ephemeral key")
        try:
            ephemeral = X25519PublicKey.from_public_bytes(ephemeral_raw)
        except ValueError as exc:
            raise SealingError(f"value for {sealed.scope} has a malformed ephemeral key") from exc
        own = _raw(self.private_key.public_key())
        key = _derive(self.private_key.exchange(ephemeral), ephemeral_raw, own)
        try:
            plaintext = AESGCM(key).decrypt(
                _unb64(sealed.nonce, "nonce"),
                _unb64(sealed.ciphertext, "ciphertext"),
                sealed.scope.encode("utf-8"),
            )
        except (InvalidTag, ValueError) as exc:
            raise SealingError(
                f"value for {sealed.scope} failed authentication: it was altered after sealing"
            ) from exc
        return plaintext.decode("utf-8")


# --- Keys -----------------------------------------------------------------------------------------


def load_public_key(path: Path) -> X25519PublicKey:
    """Colony's public key from a PEM file.

    Raises:
        SealingError: missing, unreadable or not an X25519 public key.
    """
    try:
        key = serialization.load_pem_public_key(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise SealingError(f"cannot read the sealing public key {path}: {exc}") from exc
    if not isinstance(key, X25519PublicKey):
        raise SealingError(f"{path} is not an X25519 public key")
    return key


def load_private_key(path: Path) -> X25519PrivateKey:
    """Colony's private key from a PEM file (unencrypted PKCS#8, as `create_key_pair` writes it).

    Raises:
        SealingError: missing, unreadable or not an X25519 private key.
    """
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise SealingError(f"cannot read the sealing private key {path}: {exc}") from exc
    if not isinstance(key, X25519PrivateKey):
        raise SealingError(f"{path} is not an X25519 private key")
    return key


@dataclass(frozen=True)
class SealingSettings:
    """Where the key files are (see the module docstring for the environment)."""

    public_key_file: Path
    private_key_file: Path

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> SealingSettings:
        environ = os.environ if env is None else env
        return cls(
            public_key_file=Path(environ.get(PUBLIC_KEY_ENV, DEFAULT_PUBLIC_KEY_FILE)),
            private_key_file=Path(environ.get(PRIVATE_KEY_ENV, DEFAULT_PRIVATE_KEY_FILE)),
        )

    def sealer(self) -> Sealer:
        """For clients: seals with the public key."""
        return Sealer(load_public_key(self.public_key_file))

    def unsealer(self) -> Unsealer:
        """For the worker: unseals with the private key."""
        return Unsealer(load_private_key(self.private_key_file))


def create_key_pair(private_key_file: Path, public_key_file: Path) -> bool:
    """Create a key pair for a dev environment, unless the private key exists; True when created.

    The private key file is created with mode 0600 (never readable by others, not even briefly);
    the public key is written (again) from the private key, so the two always match.
    """
    created = False
    if not private_key_file.exists():
        private_key_file.parent.mkdir(parents=True, exist_ok=True)
        pem = X25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        descriptor = os.open(private_key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(pem)
        created = True
    public = load_private_key(private_key_file).public_key()
    public_key_file.parent.mkdir(parents=True, exist_ok=True)
    public_key_file.write_bytes(
        public.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return created


# --- Workspaces -----------------------------------------------------------------------------------


def seal_workspace_secrets(
    spec: WorkspaceSpec, workspace_class: WorkspaceClassSpec, sealer: Sealer
) -> WorkspaceSpec:
    """The request with every plaintext secret answer sealed (for clients, before sending).

    Secret prompt values found in `values` or `answers` (as exalsius manifests write them) move to
    `sealedAnswers`, sealed for this workspace and path.
    """
    stripped, plaintext = split_plaintext_secrets(spec, workspace_class)
    sealed = dict(stripped.sealed_answers)
    for path, value in plaintext.items():
        sealed[path] = sealer.seal(value, workspace_scope(spec.name, path, spec.organization))
    return stripped.model_copy(update={"sealed_answers": sealed})


def unseal_secret_values(
    workspace: str,
    secret_values: Mapping[str, SealedValue],
    unsealer: Unsealer,
    organization: str = "",
) -> dict[str, Any]:
    """The values tree of a workspace's secret values, for the activity writing its Secret.

    Each value must have been sealed for this workspace (of this organization) and its path.

    Raises:
        SealingError: a value sealed for another key, workspace or path, or altered.
    """
    flat = {
        path: unsealer.unseal(sealed, workspace_scope(workspace, path, organization))
        for path, sealed in secret_values.items()
    }
    return nest_values(flat)
