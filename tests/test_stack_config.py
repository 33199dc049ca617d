"""`make stack` and docker-compose.yml read one configuration (`starter.dev.compose`): what the
local plan runs is what the compose files say, changed only by the documented local rules; a
change to the file changes the plan; a setting no rule can make local stops it; and the pinned
versions the two build or pull agree (the Temporal server, its UI, PostgreSQL's major version).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.build import COMPONENTS
from starter.dev.compose import (
    COMPOSE_FILE,
    SIM_OVERLAY,
    TEMPORAL_IMAGE_COPY,
    TEMPORAL_SERVICES,
    ComposeError,
    ComposeStack,
    LocalMachine,
    LocalPlan,
    LocalPorts,
    TemporalPorts,
    load_compose_file,
    local_plan,
)

ROOT = Path(__file__).resolve().parents[1]
STATE = Path("/srv/stack-state")
PORTS = LocalPorts(
    postgresql=40001,
    temporal={
        name: TemporalPorts(41000 + i, 42000 + i) for i, name in enumerate(TEMPORAL_SERVICES)
    },
    frontend_http=43000,
    ui=44000,
    api=[45000, 45001],
)
SERVER = Path("/opt/temporal/temporal-server")
UI_SERVER = Path("/opt/temporal-ui/temporal-ui-server")
ENVIRON = {"COLONY_SEALING_DIR": "/srv/keys"}

TEMPORAL_LOCAL = {
    "POSTGRES_SEEDS": "127.0.0.1",
    "DB_PORT": str(PORTS.postgresql),
    "VISIBILITY_DB_PORT": str(PORTS.postgresql),
    "DYNAMIC_CONFIG_FILE_PATH": str(ROOT / "deploy/temporal/dynamicconfig.yaml"),
}
"""The Temporal settings make local changes, and how."""
COLONY_LOCAL = {
    "TEMPORAL_ADDRESS": f"127.0.0.1:{PORTS.temporal['frontend'].grpc}",
    "COLONY_MANAGEMENT_KUBECONFIG": f"{STATE}/sim/management.kubeconfig",
    "COLONY_HOST_PROVIDER_CONFIG": f"{STATE}/sim/hostprovider.json",
    "COLONY_SEALING_PUBLIC_KEY_FILE": "/srv/keys/public.pem",
    "COLONY_SEALING_PRIVATE_KEY_FILE": "/srv/keys/private.pem",
    "COLONY_WEB_UI": f"http://127.0.0.1:{PORTS.ui}",
    "COLONY_METRICS_PORT": "0",
    "COLONY_WATCHER_METRICS_PORT": "0",
    "COLONY_TRACE_EXPORT": "",
    "COLONY_API_HOST": "127.0.0.1",
}
"""The Colony settings make local changes, and how (the API's port: each replica its own)."""
DROPPED = {"OTEL_EXPORTER_OTLP_ENDPOINT"}


def plan_of(compose: ComposeStack) -> LocalPlan:
    return local_plan(
        compose,
        LocalMachine(PORTS, STATE, SERVER, UI_SERVER, volumes={"sim-state": STATE}),
    )


@pytest.fixture(scope="module")
def compose() -> ComposeStack:
    return ComposeStack.read(ENVIRON)


@pytest.fixture(scope="module")
def plan(compose: ComposeStack) -> LocalPlan:
    return plan_of(compose)


def test_temporal_runs_as_compose_says(compose: ComposeStack, plan: LocalPlan) -> None:
    services = compose.temporal_services()
    assert list(plan.temporal) == list(TEMPORAL_SERVICES)
    for name, service in services.items():
        assert plan.temporal[name].argv == [str(SERVER), "start", "--service", name]
        assert service.command == ["--service", name]
    composed = compose.temporal_environment()
    for key, value in composed.items():
        assert plan.temporal_env[key] == TEMPORAL_LOCAL.get(key, value), key
    added = set(plan.temporal_env) - set(composed)
    assert added == {
        "BIND_ON_IP",
        "FRONTEND_HTTP_PORT",
        *(
            f"{name.upper()}_{kind}_PORT"
            for name in TEMPORAL_SERVICES
            for kind in ("GRPC", "MEMBERSHIP")
        ),
    }
    assert plan.temporal_env["BIND_ON_IP"] == "127.0.0.1"
    for name, ports in PORTS.temporal.items():
        assert plan.temporal_env[f"{name.upper()}_GRPC_PORT"] == str(ports.grpc)
    assert plan.schema_script == ROOT / "deploy/temporal/schema.sh"
    assert plan.setup_script == ROOT / "deploy/temporal/setup.sh"
    assert plan.setup_env["TEMPORAL_ADDRESS"] == COLONY_LOCAL["TEMPORAL_ADDRESS"]


def test_colony_runs_as_compose_says(compose: ComposeStack, plan: LocalPlan) -> None:
    for kind, replicas in plan.colony.items():
        service = compose.service(kind)
        assert len(replicas) == service.replicas > 1
        composed = service.environment
        for replica, process in enumerate(replicas):
            assert process.argv == [sys.executable, *service.command[1:]]
            assert service.command[0] == "python"
            for key, value in composed.items():
                if key in DROPPED:
                    assert key not in process.env
                elif key == "COLONY_API_PORT":
                    assert process.env[key] == str(PORTS.api[replica])
                else:
                    assert process.env[key] == COLONY_LOCAL.get(key, value), (kind, key)
            ours = {k for k in process.env if k.startswith(("COLONY_", "TEMPORAL_", "OTEL_"))}
            assert ours == set(composed) - DROPPED, kind
    sim = compose.service("sim")
    assert plan.sim.argv == [sys.executable, "-m", "sim", "--state-dir", f"{STATE}/sim"]
    assert sim.command[-1] == "/colony/sim"
    # colonyctl (the demo's) gets what compose's colonyctl service gets.
    assert (
        plan.colony_env["COLONY_MANAGEMENT_KUBECONFIG"]
        == COLONY_LOCAL["COLONY_MANAGEMENT_KUBECONFIG"]
    )
    assert plan.colony_env["TEMPORAL_ADDRESS"] == COLONY_LOCAL["TEMPORAL_ADDRESS"]


def test_the_ui_and_postgresql_are_compose_s(compose: ComposeStack, plan: LocalPlan) -> None:
    ui = compose.service("temporal-ui")
    assert plan.ui.env["TEMPORAL_ADDRESS"] == COLONY_LOCAL["TEMPORAL_ADDRESS"]
    assert ui.environment["TEMPORAL_ADDRESS"] == "temporal-frontend:7233"
    assert plan.ui.env["TEMPORAL_UI_PORT"] == str(PORTS.ui)
    assert plan.ui.argv == [
        str(UI_SERVER),
        "--root",
        str(UI_SERVER.parent),
        "--env",
        "docker",
        "start",
    ]
    assert plan.postgres_major == int(compose.service("postgresql").image.split(":")[1])
    assert (plan.postgres_user, plan.postgres_password) == ("temporal", "temporal")
    assert compose.postgres_settings == ("max_connections=200",)


def test_the_pins_agree() -> None:
    """compose's images are the versions make stack builds or installs."""
    services = load_compose_file(COMPOSE_FILE)["services"]
    server = COMPONENTS["temporal"].version.removeprefix("v")
    assert services["temporal-frontend"]["image"] == f"colony-temporal-server:{server}"
    ui = COMPONENTS["temporal-ui"].version.removeprefix("v")
    assert services["temporal-ui"]["image"] == f"temporalio/ui:{ui}"
    dockerfile = (ROOT / "deploy/temporal/Dockerfile").read_text()
    assert "COPY components/go/temporal/ ." in dockerfile
    source, target = TEMPORAL_IMAGE_COPY
    assert f"COPY {source} {target}" in dockerfile
    for package in COMPONENTS["temporal"].commands.values():
        assert package in dockerfile
    go = re.search(r"^go (\S+)", (ROOT / "components/go/temporal/go.mod").read_text(), re.M)
    assert go is not None
    assert f"FROM golang:{go.group(1)}-" in dockerfile


def mutated(tmp_path: Path, change: Any) -> ComposeStack:
    """The plan's compose files, with `change(data)` applied to a copy of docker-compose.yml."""
    data = yaml.safe_load(COMPOSE_FILE.read_text())
    change(data)
    changed = tmp_path / "docker-compose.yml"
    changed.write_text(yaml.safe_dump(data))
    return ComposeStack.read(ENVIRON, files=(changed, SIM_OVERLAY))


def _set(path: list[str], value: Any) -> Any:
    def change(data: dict[str, Any]) -> None:
        node = data
        for key in path[:-1]:
            # A copy: YAML's anchors share one mapping among the services that merge it.
            node[key] = dict(node.get(key) or {})
            node = node[key]
        node[path[-1]] = value

    return change


def _every_temporal(key: str, value: str) -> Any:
    def change(data: dict[str, Any]) -> None:
        for name in TEMPORAL_SERVICES:
            data["services"][f"temporal-{name}"]["environment"][key] = value

    return change


@pytest.mark.parametrize(
    ("change", "seen"),
    [
        pytest.param(
            _set(["services", "worker", "deploy", "replicas"], 3),
            lambda plan: len(plan.colony["worker"]) == 3,
            id="worker-replicas",
        ),
        pytest.param(
            _set(["services", "api", "environment", "COLONY_API_RATE"], "7"),
            lambda plan: all(p.env.get("COLONY_API_RATE") == "7" for p in plan.colony["api"]),
            id="api-variable",
        ),
        pytest.param(
            _every_temporal("NUM_HISTORY_SHARDS", "8"),
            lambda plan: plan.temporal_env["NUM_HISTORY_SHARDS"] == "8",
            id="history-shards",
        ),
        pytest.param(
            _set(["services", "postgresql", "image"], "postgres:16"),
            lambda plan: plan.postgres_major == 16,
            id="postgres-major",
        ),
        pytest.param(
            _set(["services", "watcher", "command"], ["python", "watcher.py", "--verbose"]),
            lambda plan: all(p.argv[-1] == "--verbose" for p in plan.colony["watcher"]),
            id="watcher-command",
        ),
    ],
)
def test_a_change_to_the_file_changes_the_plan(tmp_path: Path, change: Any, seen: Any) -> None:
    plan = plan_of(mutated(tmp_path, change))
    assert seen(plan)
    assert not seen(plan_of(ComposeStack.read(ENVIRON)))


def _drop_matching(data: dict[str, Any]) -> None:
    del data["services"]["temporal-matching"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        pytest.param(
            _set(["services", "worker", "environment", "COLONY_CACHE_DIR"], "/var/cache/colony"),
            "worker: /var/cache/colony is in no mount",
            id="unmounted-path",
        ),
        pytest.param(
            _set(["services", "api", "environment", "COLONY_TRACE_TO"], "jaeger:9999"),
            "api: COLONY_TRACE_TO=jaeger:9999: no local port for jaeger:9999",
            id="unplaced-address",
        ),
        pytest.param(_drop_matching, "runs no Temporal matching service", id="no-matching"),
        pytest.param(
            _set(["services", "temporal-history", "environment", "LOG_LEVEL"], "debug"),
            "temporal history: its environment differs",
            id="temporal-env-differs",
        ),
    ],
)
def test_what_no_rule_can_place_stops_the_plan(tmp_path: Path, change: Any, message: str) -> None:
    with pytest.raises(ComposeError, match=re.escape(message)):
        plan_of(mutated(tmp_path, change))


def test_compose_interpolation() -> None:
    from starter.dev.compose import interpolate

    assert interpolate("${A:-x}-${B}-$${C}", {"B": "b"}) == "x-b-${C}"
    assert interpolate("${A:-x}", {"A": "a"}) == "a"
