"""A secret value sealed with Colony's public key: what workflow history holds instead of a secret.

Secret-typed prompt answers (a notebook password, a model-hub token) are sealed by the client
(`colonyctl`, the HTTP API) with Colony's public key before anything is sent, like Bitnami's sealed
secrets: workflow inputs, histories, activity inputs and results, queries and the Web UI only ever
see a `SealedValue`. Only the worker holds the private key and unseals the value inside the
activity that writes the workspace's values Secret (`infra/sealing.py` owns the cryptography;
this module owns the shape, so `models/` stays free of it).
"""

from __future__ import annotations

from typing import Final, Literal

from pydantic import Field

from models.base import ColonyModel

SEALING_ALGORITHM: Final = "x25519-hkdf-sha256-aes256gcm"
"""ECIES over X25519: an ephemeral key agreement, HKDF-SHA256 into an AES-256-GCM key."""


class SealedValue(ColonyModel):
    """One sealed value: ciphertext and what is needed to open it with the right private key.

    The ciphertext is bound to `scope` (authenticated, not encrypted), so a value sealed for one
    workspace's prompt cannot be replayed into another workspace or another prompt.
    """

    algorithm: Literal["x25519-hkdf-sha256-aes256gcm"] = SEALING_ALGORITHM
    key_id: str
    """The id of the key pair it was sealed for (a digest of the public key)."""
    scope: str
    """What the value is for, e.g. `workspace/my-notebook/notebookPassword`."""
    ephemeral_key: str = Field(repr=False)
    """The sender's one-time X25519 public key, base64."""
    nonce: str = Field(repr=False)
    """The AES-GCM nonce, base64."""
    ciphertext: str = Field(repr=False)
    """The AES-GCM ciphertext and tag, base64."""

    def __repr__(self) -> str:
        # Only what identifies the value: logs and tracebacks never show even the ciphertext.
        return f"SealedValue(key_id={self.key_id!r}, scope={self.scope!r})"

    def __str__(self) -> str:
        return f"<sealed for key {self.key_id}: {self.scope}>"
