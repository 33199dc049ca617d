"""The deployable stack agrees with the code: docker-compose.yml (and its sim overlay), the
Dockerfile, the collector's configuration and the RBAC in deploy/.

No Docker engine runs here, so the files are loaded and checked against what the programs read:
every Colony variable set is one the code reads (`infra.config`, the watcher, the API's
`COLONY_API_*`), what each program needs is set, addresses point at services on their ports, the
images Colony runs are built from this repository, and every search attribute gets registered.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.config import ColonySettings
from workflows.search_attributes import ALL as SEARCH_ATTRIBUTES

ROOT = Path(__file__).resolve().parents[1]
COLONY_SERVICES = ("worker", "watcher", "api", "sim", "colonyctl")
PROGRAMS = {
    "worker": ["python", "worker.py"],
    "watcher": ["python", "watcher.py"],
    "api": ["python", "-m", "api"],
    "sim": ["python", "-m", "sim", "--state-dir", "/colony/sim"],
}
TEMPORAL_ENV = {"TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE", "TEMPORAL_API_KEY", "TEMPORAL_PROFILE"}
"""Temporal's own environment configuration (`temporalio.envconfig`), read by Colony's clients."""


class _ComposeLoader(yaml.SafeLoader):
    """PyYAML with compose's `!reset` / `!override` tags (the value is kept as it is)."""


def _tagged(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node)
    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node)
    return loader.construct_scalar(node)  # type: ignore[arg-type]


_ComposeLoader.add_constructor("!reset", _tagged)
_ComposeLoader.add_constructor("!override", _tagged)


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.load((ROOT / name).read_text(), Loader=_ComposeLoader)
    return data


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return load("docker-compose.yml")


def env_read_by_the_code() -> set[str]:
    """Every `COLONY_*` / `OTEL_*` name the product code reads or documents reading."""
    names: set[str] = set()
    files = [
        *ROOT.glob("activities/**/*.py"),
        *ROOT.glob("infra/*.py"),
        *ROOT.glob("watching/*.py"),
        *ROOT.rglob("starter/**/*.py"),
        *ROOT.glob("api/*.py"),
        *ROOT.glob("infra/*.py"),
        ROOT / "worker.py",
        ROOT / "watcher.py",
    ]
    for path in files:
        names |= set(re.findall(r"\b((?:COLONY|OTEL)_[A-Z0-9_]+)\b", path.read_text()))
    return names


def service_env(compose: dict[str, Any], name: str) -> dict[str, str]:
    return {k: str(v) for k, v in (compose["services"][name].get("environment") or {}).items()}


def test_the_stack_has_every_service(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert {
        "postgresql", "temporal-schema", "temporal-frontend", "temporal-history",
        "temporal-matching", "temporal-worker", "temporal-setup", "temporal-ui", "worker",
        "watcher", "api", "otel-collector", "jaeger", "sim",
    } <= set(services)  # fmt: skip
    for service in ("frontend", "history", "matching", "worker"):
        temporal = services[f"temporal-{service}"]
        assert temporal["build"]["dockerfile"] == "deploy/temporal/Dockerfile"
        assert temporal["command"] == ["--service", service]
        assert temporal["environment"]["DB"] == "postgres12"
        assert temporal["environment"]["POSTGRES_SEEDS"] == "postgresql"
    assert services["sim"]["profiles"] == ["sim"], "the simulator is opt-in"
    # Scaling is shown: more than one worker, watcher and API replica.
    assert services["worker"]["deploy"]["replicas"] > 1
    assert services["watcher"]["deploy"]["replicas"] > 1
    assert services["api"]["deploy"]["replicas"] > 1


@pytest.mark.parametrize("service", [pytest.param(s, id=s) for s in PROGRAMS])
def test_colony_services_are_built_from_this_repository(
    compose: dict[str, Any], service: str
) -> None:
    spec = compose["services"][service]
    assert spec["build"] == ".", "built from the repository's Dockerfile"
    assert "image" not in spec
    assert spec["command"] == PROGRAMS[service]
    program = PROGRAMS[service]
    if program[1].endswith(".py"):
        assert (ROOT / program[1]).is_file()
    elif program[2] != "api":  # the HTTP API comes from its own branch
        assert (ROOT / program[2] / "__main__.py").is_file()


def test_the_image_carries_every_package() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "COPY . ." in dockerfile
    assert "pip install --no-cache-dir ." in dockerfile
    ignored = {
        line.strip().rstrip("/")
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    packages = ["models", "workflows", "activities", "infra", "starter", "sim", "watching"]
    for needed in [*packages, "catalog"]:
        assert needed not in ignored
        assert (ROOT / needed).is_dir()
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert '"watching*"' in pyproject
    assert '"infra*"' in pyproject
    assert 'py-modules = ["worker", "watcher"]' in pyproject


@pytest.mark.parametrize("service", [pytest.param(s, id=s) for s in ("worker", "watcher", "api")])
def test_every_variable_set_is_read_by_the_code(compose: dict[str, Any], service: str) -> None:
    env = service_env(compose, service)
    read = env_read_by_the_code()
    for name in env:
        if name in TEMPORAL_ENV:
            continue
        if name.startswith("COLONY_API_") and not (ROOT / "api").is_dir():
            continue  # the HTTP API's own settings (infra/settings.py, another branch)
        assert name in read, f"{service}: {name} is set but no program reads it"


@pytest.mark.parametrize("service", [pytest.param(s, id=s) for s in ("worker", "watcher", "api")])
def test_what_the_programs_need_is_set(compose: dict[str, Any], service: str) -> None:
    env = service_env(compose, service)
    services = compose["services"]
    # Temporal: its frontend service, on the port it serves.
    host, port = env["TEMPORAL_ADDRESS"].split(":")
    assert host == "temporal-frontend"
    assert f"{port}:{port}" in services["temporal-frontend"]["ports"]
    settings = ColonySettings.from_env({**env, "COLONY_HOST_PROVIDER_CONFIG": "/nonexistent"})
    assert settings.task_queue == "colony"
    assert settings.system_namespace == "colony-system"
    assert settings.trace_export == "otlp"
    # The kubeconfig the settings name is the file mounted into the container.
    # ("${COLONY_KUBECONFIG:-/dev/null}:/etc/colony/...:ro": the target is the second-last part.)
    mounts = [str(v).rsplit(":", 2)[-2] for v in services[service]["volumes"]]
    assert str(settings.management_kubeconfig) in mounts
    # Traces go to the collector's OTLP/HTTP port; metrics are served on an exposed port.
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel-collector:4318"
    assert "4318" in services["otel-collector"]["expose"]
    metrics_port = {"worker": settings.metrics_port, "watcher": settings.watcher_metrics_port}
    if service in metrics_port:
        assert str(metrics_port[service]) in services[service]["expose"]
    # The Web UI links colonyctl and the API print lead to the temporal-ui service.
    ui_port = settings.web_ui.rsplit(":", 1)[1]
    assert f"{ui_port}:8080" in services["temporal-ui"]["ports"]
    assert services["temporal-ui"]["environment"]["TEMPORAL_ADDRESS"] == env["TEMPORAL_ADDRESS"]


def test_the_api_listens_where_it_is_published(compose: dict[str, Any]) -> None:
    env = service_env(compose, "api")
    assert env["COLONY_API_HOST"] == "0.0.0.0"
    # One host port per replica, each to the port the replica listens on.
    port = env["COLONY_API_PORT"]
    replicas = compose["services"]["api"]["deploy"]["replicas"]
    last = int(port) + replicas - 1
    assert f"{port}-{last}:{port}" in compose["services"]["api"]["ports"]


def test_every_search_attribute_is_registered(compose: dict[str, Any]) -> None:
    setup = compose["services"]["temporal-setup"]
    assert setup["entrypoint"] == ["sh", "/etc/temporal/colony/setup.sh"]
    assert "./deploy/temporal/setup.sh:/etc/temporal/colony/setup.sh:ro" in setup["volumes"]
    script = (ROOT / "deploy" / "temporal" / "setup.sh").read_text()
    listed = re.search(r'SEARCH_ATTRIBUTES="([A-Za-z ]+)"', script)
    assert listed is not None
    assert set(listed.group(1).split()) == {key.name for key in SEARCH_ATTRIBUTES}
    assert (
        "--type Keyword" in script
    )  # every Colony key is a Keyword (worker.py registers the same)


def test_traces_flow_from_the_collector_to_jaeger(compose: dict[str, Any]) -> None:
    collector = yaml.safe_load((ROOT / "deploy" / "otel-collector.yaml").read_text())
    assert collector["receivers"]["otlp"]["protocols"]["http"]["endpoint"].endswith(":4318")
    jaeger = collector["exporters"]["otlp/jaeger"]["endpoint"]
    host, port = jaeger.split(":")
    assert host == "jaeger"
    assert port in compose["services"]["jaeger"]["expose"]
    assert "otlp/jaeger" in collector["service"]["pipelines"]["traces"]["exporters"]
    mounted = compose["services"]["otel-collector"]["volumes"][0]
    assert mounted.startswith("./deploy/otel-collector.yaml:")


def test_the_sim_overlay_shares_the_sims_network_and_files() -> None:
    overlay = load("docker-compose.sim.yml")
    for service in ("worker", "watcher", "api"):
        spec = overlay["services"][service]
        assert spec["network_mode"] == "service:sim"
        settings = ColonySettings.from_env({k: str(v) for k, v in spec["environment"].items()})
        assert str(settings.management_kubeconfig).startswith("/colony/sim/")
    # One network namespace: the worker's and the watcher's endpoints must not share a port.
    merged = {
        service: ColonySettings.from_env(
            {
                **service_env(load("docker-compose.yml"), service),
                **{k: str(v) for k, v in overlay["services"][service]["environment"].items()},
                "COLONY_HOST_PROVIDER_CONFIG": "/nonexistent",
            }
        )
        for service in ("worker", "watcher")
    }
    worker_port = merged["worker"].metrics_port
    watcher_port = merged["watcher"].watcher_metrics_port
    assert worker_port is not None
    assert watcher_port is not None
    assert worker_port != watcher_port


def rules(kind: str, name: str) -> list[dict[str, Any]]:
    documents = list(yaml.safe_load_all((ROOT / "deploy" / "rbac.yaml").read_text()))
    found = next(d for d in documents if d["kind"] == kind and d["metadata"]["name"] == name)
    return list(found["rules"])


def allowed(rule_list: list[dict[str, Any]], group: str, resource: str) -> set[str]:
    return {
        verb
        for rule in rule_list
        if group in rule["apiGroups"] and resource in rule["resources"]
        for verb in rule["verbs"]
    }


@pytest.mark.parametrize(
    ("kind", "name", "group", "resource", "verbs"),
    [
        pytest.param("ClusterRole", "colony-watcher", "k0rdent.mirantis.com", "clusterdeployments", {"list", "watch"}, id="watcher-cds"),
        pytest.param("ClusterRole", "colony-watcher", "", "secrets", {"get"}, id="watcher-kubeconfigs"),
        pytest.param("Role", "colony-watcher-state", "coordination.k8s.io", "leases", {"get", "create", "update"}, id="watcher-lease"),
        pytest.param("Role", "colony-watcher-state", "", "configmaps", {"get", "create", "update"}, id="watcher-state"),
        pytest.param("Role", "colony-worker", "k0rdent.mirantis.com", "clusterdeployments", {"get", "create", "patch", "delete", "list"}, id="worker-cds"),
        pytest.param("Role", "colony-worker", "", "secrets", {"get"}, id="worker-kubeconfigs"),
    ],
)  # fmt: skip
def test_rbac_grants_what_the_code_does(
    kind: str, name: str, group: str, resource: str, verbs: set[str]
) -> None:
    assert verbs <= allowed(rules(kind, name), group, resource)
