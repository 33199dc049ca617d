"""`colonyctl token`'s cache: one 0600 file per cluster, handed out until 5 minutes before expiry,
renewed when kubectl asks twice in one process (the token was refused), and a hit that never
touches the Kubernetes client.
"""

from __future__ import annotations

import json
import os
import stat
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from clients.errors import NotFoundError
from infra.config import DEFAULT_MANAGEMENT_KUBECONFIG
from models.cluster import DEFAULT_NAMESPACE
from starter import token_cache
from starter.commands import credentials as credential_commands

NOW = 1_800_000_000.0


def entry(**overrides: str) -> dict[str, str]:
    expires = int(NOW) + 3600
    base = {
        "cluster": "training",
        "namespace": "kcm-system",
        "management": "/m/kubeconfig",
        "token": "abc.def-ghi_jkl",
        "expirationTimestamp": "2027-01-15T08:00:00Z",
        "expires": str(expires),
        "handedTo": "",
    }
    return {**base, **overrides}


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {
        "COLONY_CACHE_DIR": str(tmp_path / "cache"),
        "COLONY_MANAGEMENT_KUBECONFIG": "/m/kubeconfig",
    }


def test_defaults_match_the_settings_and_models() -> None:
    # token_cache cannot import them (start-up cost): the copies must not drift.
    assert token_cache.DEFAULT_MANAGEMENT_KUBECONFIG == DEFAULT_MANAGEMENT_KUBECONFIG
    assert token_cache.DEFAULT_NAMESPACE == DEFAULT_NAMESPACE
    assert credential_commands.DEFAULT_NAMESPACE == DEFAULT_NAMESPACE


@pytest.mark.parametrize(
    ("argv", "parsed"),
    [
        pytest.param(["token", "--cluster", "a"], ("a", "kcm-system"), id="plain"),
        pytest.param(["token", "--cluster=a"], ("a", "kcm-system"), id="equals"),
        pytest.param(["token", "--cluster", "a", "--namespace", "ns"], ("a", "ns"), id="namespace"),
        pytest.param(["token", "--help"], None, id="help"),
        pytest.param(["token"], None, id="no-cluster"),
        pytest.param(["token", "--cluster"], None, id="no-value"),
        pytest.param(["token", "--cluster", "a", "--cluster", "b"], None, id="twice"),
        pytest.param(["token", "--cluster", "--namespace"], None, id="flag-as-value"),
        pytest.param(["cluster", "list"], None, id="other-command"),
    ],
)
def test_only_plain_token_calls_take_the_fast_path(
    argv: list[str], parsed: tuple[str, str] | None
) -> None:
    assert token_cache.parse_token_argv(argv) == parsed


@pytest.mark.parametrize(
    ("expires_in", "handed_to", "caller", "ok"),
    [
        pytest.param(3600, "", "", True, id="fresh"),
        pytest.param(301, "", "", True, id="just-outside-the-margin"),
        pytest.param(299, "", "", False, id="inside-the-margin"),
        pytest.param(-5, "", "", False, id="expired"),
        pytest.param(3600, "42:100", "43:100", True, id="another-kubectl"),
        pytest.param(3600, "42:100", "42:100", False, id="same-kubectl-asks-again"),
        pytest.param(3600, "42:100", "", True, id="outside-kubectl"),
    ],
)
def test_when_a_cached_token_is_handed_out(
    expires_in: int, handed_to: str, caller: str, ok: bool
) -> None:
    cached = entry(expires=str(int(NOW) + expires_in), handedTo=handed_to)
    assert token_cache.usable(cached, caller, NOW) is ok


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        pytest.param({"COLONY_CACHE_DIR": "/c", "XDG_CACHE_HOME": "/x"}, "/c", id="colony"),
        pytest.param({"XDG_CACHE_HOME": "/x", "HOME": "/h"}, "/x/colony", id="xdg"),
        pytest.param({"HOME": "/h"}, "/h/.cache/colony", id="home"),
    ],
)
def test_cache_directory(env: dict[str, str], expected: str) -> None:
    assert token_cache.cache_dir(env) == expected


def test_the_cache_file_is_private_and_round_trips(env: dict[str, str]) -> None:
    path = token_cache.cache_path(env, "training", "kcm-system")
    token_cache.write(path, entry())
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
    assert token_cache.read(path, env, "training", "kcm-system") == entry()
    # Another management cluster's (or cluster's) entry is never handed out.
    other = {**env, "COLONY_MANAGEMENT_KUBECONFIG": "/other/kubeconfig"}
    assert token_cache.read(path, other, "training", "kcm-system") is None
    assert token_cache.read(path, env, "inference", "kcm-system") is None
    Path(path).write_text("garbage")
    assert token_cache.read(path, env, "training", "kcm-system") is None


@pytest.mark.parametrize(
    "token",
    [
        pytest.param("eyJhbGciOi.eyJzdWIiOi.c2lnbmF0dXJl", id="jwt"),
        pytest.param('we"ird\\token', id="needs-escaping"),
    ],
)
def test_the_exec_credential_is_json(token: str) -> None:
    credential = json.loads(token_cache.exec_credential(entry(token=token)))
    assert credential == {
        "apiVersion": "client.authentication.k8s.io/v1",
        "kind": "ExecCredential",
        "status": {"token": token, "expirationTimestamp": "2027-01-15T08:00:00Z"},
    }


def issued(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Replace the TokenRequest with a counter: each call issues token-<n>."""
    calls: list[str] = []

    def issue_token(management: object, cluster: str, namespace: str) -> tuple[str, datetime]:
        calls.append(cluster)
        return f"token-{len(calls)}", datetime.now(UTC) + timedelta(hours=1)

    monkeypatch.setattr("clients.credentials.issue_token", issue_token)
    return calls


def printed_token(capsys: pytest.CaptureFixture[str]) -> str:
    token: str = json.loads(capsys.readouterr().out)["status"]["token"]
    return token


def test_a_miss_issues_and_caches_then_hits_reuse(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls = issued(monkeypatch)
    argv = ["token", "--cluster", "training"]
    assert token_cache.token_command(argv, env) == 0
    assert printed_token(capsys) == "token-1"
    for _ in range(3):
        assert token_cache.token_command(argv, env) == 0
        assert printed_token(capsys) == "token-1"
    assert calls == ["training"]


def test_a_token_refused_inside_one_kubectl_is_renewed(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls = issued(monkeypatch)
    kubectl = {**env, "KUBERNETES_EXEC_INFO": '{"kind":"ExecCredential"}'}
    argv = ["token", "--cluster", "training"]
    token_cache.token_command(argv, kubectl)
    assert printed_token(capsys) == "token-1"
    # The same kubectl process (this test's process is the parent either way) runs the plugin
    # again: it got a 401 with token-1, which must not be handed out again.
    token_cache.token_command(argv, kubectl)
    assert printed_token(capsys) == "token-2"
    assert len(calls) == 2


def test_a_token_due_for_renewal_is_renewed(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls = issued(monkeypatch)
    path = token_cache.cache_path(env, "training", "kcm-system")
    token_cache.write(
        path,
        entry(management="/m/kubeconfig", token="old", expires=str(int(time.time()) + 60)),
    )
    token_cache.token_command(["token", "--cluster", "training"], env)
    assert printed_token(capsys) == "token-1"
    assert calls == ["training"]


def test_a_failed_issue_is_one_line_with_its_exit_code(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def issue_token(*_: object) -> tuple[str, datetime]:
        raise NotFoundError("cluster: cluster 'training' has no kubeconfig")

    monkeypatch.setattr("clients.credentials.issue_token", issue_token)
    assert token_cache.token_command(["token", "--cluster", "training"], env) == 3
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == "error: cluster: cluster 'training' has no kubeconfig\n"
