"""Sealing: round trips, the wrong key and tampering are refused clearly, values are bound to their
scope, no plaintext in anything serialized, and key files for a dev environment."""

from __future__ import annotations

import base64
import stat
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from temporalio.contrib.pydantic import pydantic_data_converter

from infra.sealing import (
    PRIVATE_KEY_ENV,
    PUBLIC_KEY_ENV,
    Sealer,
    SealingError,
    SealingSettings,
    Unsealer,
    create_key_pair,
    load_private_key,
    seal_workspace_secrets,
    unseal_secret_values,
    workspace_scope,
)
from models.sealed import SealedValue
from models.values import merge_workspace
from models.workspace import WorkspaceSpec, WorkspaceWorkflowInput
from models.workspace_class import WorkspaceClassSpec

SECRET = "correct horse battery staple"
SCOPE = "workspace/nb/notebookPassword"


@pytest.fixture(scope="module")
def unsealer() -> Unsealer:
    return Unsealer(X25519PrivateKey.generate())


def test_round_trip(unsealer: Unsealer) -> None:
    sealed = unsealer.sealer.seal(SECRET, SCOPE)
    assert sealed.key_id == unsealer.key_id
    assert sealed.scope == SCOPE
    assert unsealer.unseal(sealed) == SECRET
    assert unsealer.unseal(sealed, SCOPE) == SECRET
    assert unsealer.unseal(unsealer.sealer.seal("", SCOPE)) == "", "empty values too"
    assert unsealer.unseal(unsealer.sealer.seal("pässwörd ✓", SCOPE)) == "pässwörd ✓"


def test_sealing_twice_gives_different_ciphertexts(unsealer: Unsealer) -> None:
    first, second = (unsealer.sealer.seal(SECRET, SCOPE) for _ in range(2))
    assert first.ciphertext != second.ciphertext
    assert first.ephemeral_key != second.ephemeral_key


def test_the_wrong_key_is_refused_clearly(unsealer: Unsealer) -> None:
    other = Unsealer(X25519PrivateKey.generate())
    sealed = other.sealer.seal(SECRET, SCOPE)
    with pytest.raises(SealingError) as caught:
        unsealer.unseal(sealed)
    assert str(caught.value) == (
        f"value for {SCOPE} was sealed for key {other.key_id}, but this worker holds key "
        f"{unsealer.key_id}: seal it again with this Colony's public key"
    )


def test_a_forged_key_id_still_fails_authentication(unsealer: Unsealer) -> None:
    other = Unsealer(X25519PrivateKey.generate())
    forged = other.sealer.seal(SECRET, SCOPE).model_copy(update={"key_id": unsealer.key_id})
    with pytest.raises(SealingError, match="failed authentication"):
        unsealer.unseal(forged)


def flip(text: str) -> str:
    data = bytearray(base64.b64decode(text))
    data[len(data) // 2] ^= 0x01
    return base64.b64encode(bytes(data)).decode()


@pytest.mark.parametrize(
    ("field", "change", "message"),
    [
        pytest.param(
            "ciphertext",
            flip,
            "failed authentication: it was altered after sealing",
            id="ciphertext",
        ),
        pytest.param(
            "nonce", flip, "failed authentication: it was altered after sealing", id="nonce"
        ),
        pytest.param(
            "ephemeral_key",
            flip,
            "failed authentication: it was altered after sealing",
            id="ephemeral-key",
        ),
        pytest.param(
            "scope",
            lambda _: "workspace/other/notebookPassword",
            "failed authentication",
            id="scope",
        ),
        pytest.param(
            "ciphertext", lambda _: "not base64!", "ciphertext is not base64", id="garbage"
        ),
        pytest.param(
            "ephemeral_key",
            lambda _: base64.b64encode(b"short").decode(),
            "malformed ephemeral key",
            id="short-key",
        ),
    ],
)
def test_tampering_is_detected(
    unsealer: Unsealer, field: str, change: object, message: str
) -> None:
    sealed = unsealer.sealer.seal(SECRET, SCOPE)
    assert callable(change)
    tampered = sealed.model_copy(update={field: change(getattr(sealed, field))})
    with pytest.raises(SealingError, match=message):
        unsealer.unseal(tampered)


def test_a_value_is_bound_to_its_scope(unsealer: Unsealer) -> None:
    sealed = unsealer.sealer.seal(SECRET, SCOPE)
    with pytest.raises(SealingError) as caught:
        unsealer.unseal(sealed, "workspace/other/notebookPassword")
    assert str(caught.value) == (
        f"value sealed for {SCOPE} cannot be used for workspace/other/notebookPassword"
    )


def test_no_plaintext_in_the_model_its_json_or_its_repr(unsealer: Unsealer) -> None:
    sealed = unsealer.sealer.seal(SECRET, SCOPE)
    for text in (sealed.model_dump_json(), repr(sealed), str(sealed), repr([sealed]), f"{sealed}"):
        assert SECRET not in text
    assert sealed.ciphertext not in repr(sealed), "not even the ciphertext in logs"
    assert repr(sealed) == f"SealedValue(key_id='{unsealer.key_id}', scope='{SCOPE}')"
    again = SealedValue.model_validate_json(sealed.model_dump_json())
    assert unsealer.unseal(again) == SECRET


# --- Workspaces -----------------------------------------------------------------------------------

NOTEBOOK = WorkspaceClassSpec.model_validate(
    {
        "name": "nb-1-0-0",
        "displayName": "Notebook",
        "serviceTemplate": {"name": "nb-1-0-0"},
        "defaultResources": {"perReplica": {"cpu": "1"}},
        "userFacingConfig": [
            {
                "helmValuePath": "auth.password",
                "displayName": "Password",
                "type": "secret",
                "required": True,
            },
            {"helmValuePath": "hub.token", "displayName": "Token", "type": "secret"},
            {"helmValuePath": "ui", "displayName": "UI"},
        ],
    }
)


def test_a_workspace_request_is_sealed_before_it_is_sent(unsealer: Unsealer) -> None:
    request = WorkspaceSpec.model_validate(
        {
            "name": "nb",
            "class": "nb-1-0-0",
            "cluster": "training",
            "values": {"auth": {"password": SECRET}, "ui": "lab"},
            "answers": {"hub.token": "hf_token_123"},
        }
    )
    sealed = seal_workspace_secrets(request, NOTEBOOK, unsealer.sealer)
    assert set(sealed.sealed_answers) == {"auth.password", "hub.token"}
    assert sealed.values == {"ui": "lab"}
    assert sealed.answers == {}
    workflow_input = WorkspaceWorkflowInput(spec=sealed)
    (payload,) = pydantic_data_converter.payload_converter.to_payloads([workflow_input])
    for plaintext in (SECRET, "hf_token_123"):
        assert plaintext.encode() not in payload.data, "never in a workflow input or history"
        assert plaintext not in repr(workflow_input)
    merged = merge_workspace(NOTEBOOK, sealed)
    assert SECRET not in merged.model_dump_json()
    assert unseal_secret_values("nb", merged.secret_values, unsealer) == {
        "auth": {"password": SECRET},
        "hub": {"token": "hf_token_123"},
    }
    with pytest.raises(SealingError, match=r"cannot be used for workspace/other/auth\.password"):
        unseal_secret_values("other", merged.secret_values, unsealer)


def test_scope_names_the_workspace_and_path() -> None:
    assert workspace_scope("nb", "auth.password") == "workspace/nb/auth.password"


# --- Keys -----------------------------------------------------------------------------------------


def test_create_key_pair_for_a_dev_environment(tmp_path: Path) -> None:
    private, public = tmp_path / "keys" / "private.pem", tmp_path / "keys" / "public.pem"
    assert create_key_pair(private, public)
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    first = private.read_bytes()
    assert not create_key_pair(private, public), "an existing key is kept"
    assert private.read_bytes() == first
    settings = SealingSettings.from_env(
        {PRIVATE_KEY_ENV: str(private), PUBLIC_KEY_ENV: str(public)}
    )
    sealed = settings.sealer().seal(SECRET, SCOPE)
    assert settings.unsealer().unseal(sealed) == SECRET
    public.unlink()
    create_key_pair(private, public)
    assert settings.sealer().key_id == settings.unsealer().key_id, (
        "the public key follows the private"
    )


def test_settings_defaults() -> None:
    settings = SealingSettings.from_env({})
    assert settings.public_key_file == Path(".colony/sealing/public.pem")
    assert settings.private_key_file == Path(".colony/sealing/private.pem")


def test_unreadable_or_wrong_keys(tmp_path: Path) -> None:
    missing = SealingSettings(tmp_path / "nope.pem", tmp_path / "nope.pem")
    with pytest.raises(SealingError, match="cannot read the sealing public key"):
        missing.sealer()
    with pytest.raises(SealingError, match="cannot read the sealing private key"):
        missing.unsealer()
    other = tmp_path / "ed25519.pem"
    other.write_bytes(
        Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    with pytest.raises(SealingError, match="is not an X25519 private key"):
        load_private_key(other)


def test_sealer_from_public_key_only(unsealer: Unsealer) -> None:
    client = Sealer(unsealer.private_key.public_key())
    assert unsealer.unseal(client.seal(SECRET, SCOPE)) == SECRET
