"""docker-compose.yml's production shape, made local: what `make stack` runs, read from the files
docker compose reads, so the two cannot drift.

`ComposeStack.read()` loads `docker-compose.yml` and its simulator overlay (`docker-compose.sim.yml`)
with compose's rules for what this needs (`${VAR}` and `${VAR:-default}` from the environment,
`$$`, YAML merge keys, the overlay's environment and mounts added to the base's). `local_plan`
then turns each service into a local process, changing only what a single machine without
containers must change, each by one rule:

- an address of another service (`temporal-frontend:7233`, `postgresql`) becomes 127.0.0.1 and
  that service's local port; a wildcard bind address (`0.0.0.0`) becomes 127.0.0.1 (a developer's
  machine serves no network);
- a path inside a container becomes the host path its mount or its image's copy comes from
  (`/colony/sim/...` -> `.colony/stack/sim/...`);
- a published port becomes the local port given for it (one per replica for a range, as the API's
  `8000-8001:8000`); an exposed-only port (the workers' metrics), which replicas on one host
  cannot share, becomes 0 (any free port, in the process's log);
- the settings of services `make stack` does not run (the OpenTelemetry collector, Jaeger) are
  dropped and tracing is off.

Everything else (every other variable, the commands, the replicas, the PostgreSQL major version,
the scripts that make the schema and register the namespace) is taken as the file says.
`tests/test_stack_config.py` holds the two together: a change to the file changes the plan, and
a setting the rules cannot place stops it with one line naming it.

Used by `starter.dev.stack` (`make stack`), the reliability suite's production-shaped stack and
the benchmarks' (`bench.stack`).
"""

from __future__ import annotations

import itertools
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.yml"
SIM_OVERLAY = REPO / "docker-compose.sim.yml"
LOOPBACK = "127.0.0.1"
WILDCARD = "0.0.0.0"

TEMPORAL_GRPC_PORTS = {"frontend": 7233, "history": 7234, "matching": 7235, "worker": 7239}
"""The Temporal server's services, one process each (`temporal-server start --service NAME`), and
the gRPC port each listens on in its container (the defaults of the configuration template the
binary embeds: docker/config_template.yaml of go.temporal.io/server)."""
TEMPORAL_SERVICES = tuple(TEMPORAL_GRPC_PORTS)
TEMPORAL_IMAGE_COPY = ("deploy/temporal/", "/etc/temporal/colony/")
"""What deploy/temporal/Dockerfile copies into the Temporal image (source in the repository,
target in the image): paths under the target are that file of the repository locally."""
COLONY_PROGRAMS = ("worker", "watcher", "api")
"""Colony's long-running services, as compose names them."""


class ComposeError(Exception):
    """docker-compose.yml says something `make stack` cannot run locally; one line naming it."""


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


def load_compose_file(path: Path) -> dict[str, Any]:
    """A compose file as YAML reads it (merge keys resolved, nothing interpolated)."""
    data = yaml.load(path.read_text(encoding="utf-8"), Loader=_ComposeLoader)
    if not isinstance(data, dict):
        raise ComposeError(f"{path}: not a compose file")
    return data


_VARIABLE = re.compile(r"\$\$|\$\{(?P<name>\w+)(?::-(?P<default>[^}]*))?\}")


def interpolate(value: str, environ: Mapping[str, str]) -> str:
    """Compose's interpolation of `${VAR}` and `${VAR:-default}` (`$$` is a literal `$`)."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        found = environ.get(match.group("name"), "")
        default = match.group("default")
        return found if found or default is None else default

    return _VARIABLE.sub(replace, value)


def _interpolated(value: Any, environ: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        return interpolate(value, environ)
    if isinstance(value, list):
        return [_interpolated(item, environ) for item in value]
    if isinstance(value, dict):
        return {key: _interpolated(item, environ) for key, item in value.items()}
    return value


@dataclass(frozen=True)
class Mount:
    """A service's volume: `source` is a host path or a named volume, `target` a container path."""

    source: str
    target: str

    @classmethod
    def parse(cls, text: str) -> Mount:
        parts = text.split(":")
        if len(parts) < 2:
            raise ComposeError(f"volume {text!r}: expected SOURCE:TARGET[:MODE]")
        return cls(parts[0], parts[1])

    @property
    def named(self) -> bool:
        return not self.source.startswith((".", "/", "~"))


@dataclass(frozen=True)
class Service:
    """One service of the compose files, interpolated, the overlay's additions merged in."""

    name: str
    spec: dict[str, Any]

    @property
    def environment(self) -> dict[str, str]:
        raw = self.spec.get("environment") or {}
        if isinstance(raw, list):
            raw = dict(item.split("=", 1) for item in raw)
        return {str(key): "" if value is None else str(value) for key, value in raw.items()}

    @property
    def command(self) -> list[str]:
        return [str(word) for word in self.spec.get("command") or []]

    @property
    def entrypoint(self) -> list[str]:
        return [str(word) for word in self.spec.get("entrypoint") or []]

    @property
    def replicas(self) -> int:
        return int((self.spec.get("deploy") or {}).get("replicas", 1))

    @property
    def mounts(self) -> list[Mount]:
        return [Mount.parse(str(volume)) for volume in self.spec.get("volumes") or []]

    @property
    def image(self) -> str:
        return str(self.spec.get("image") or "")

    @property
    def published(self) -> list[tuple[list[int], int]]:
        """Each published port: the host ports (several for a range) and the container port."""
        found: list[tuple[list[int], int]] = []
        for entry in self.spec.get("ports") or []:
            host, _, container = str(entry).rpartition(":")
            first, _, last = host.partition("-")
            found.append((list(range(int(first), int(last or first) + 1)), int(container)))
        return found

    @property
    def exposed(self) -> list[int]:
        return [int(port) for port in self.spec.get("expose") or []]


@dataclass(frozen=True)
class ComposeStack:
    """What docker-compose.yml, with its simulator overlay, runs: every service by name."""

    services: dict[str, Service]

    @classmethod
    def read(
        cls,
        environ: Mapping[str, str] | None = None,
        files: tuple[Path, Path] = (COMPOSE_FILE, SIM_OVERLAY),
    ) -> ComposeStack:
        """The base file with the overlay's environment and mounts merged into its services
        (the overlay's replicas and network namespace are Docker's concern, not a host's:
        `make stack` keeps the base file's replicas), interpolated from `environ`."""
        base, overlay = (load_compose_file(path) for path in files)
        given = os.environ if environ is None else environ
        services: dict[str, Service] = {}
        for name, raw in (base.get("services") or {}).items():
            spec = dict(raw)
            extra = (overlay.get("services") or {}).get(name) or {}
            if extra.get("environment"):
                spec["environment"] = {**(spec.get("environment") or {}), **extra["environment"]}
            if extra.get("volumes"):
                targets = {Mount.parse(str(v)).target for v in extra["volumes"]}
                kept = [
                    v
                    for v in spec.get("volumes") or []
                    if Mount.parse(str(v)).target not in targets
                ]
                spec["volumes"] = [*kept, *extra["volumes"]]
            services[name] = Service(name, _interpolated(spec, given))
        return cls(services)

    def service(self, name: str) -> Service:
        try:
            return self.services[name]
        except KeyError:
            raise ComposeError(f"docker-compose.yml has no service {name!r}") from None

    @property
    def postgres_major(self) -> int:
        """The PostgreSQL major version of the `postgresql` service's image (`postgres:15`)."""
        image = self.service("postgresql").image
        tag = image.partition(":")[2].split(".")[0]
        if not tag.isdigit():
            raise ComposeError(f"postgresql: image {image!r} names no major version")
        return int(tag)

    @property
    def postgres_user(self) -> tuple[str, str]:
        """The database superuser and its password (`POSTGRES_USER`, `POSTGRES_PASSWORD`)."""
        env = self.service("postgresql").environment
        return env["POSTGRES_USER"], env["POSTGRES_PASSWORD"]

    @property
    def postgres_settings(self) -> tuple[str, ...]:
        """The `-c name=value` settings of the `postgresql` service's command."""
        words = self.service("postgresql").command
        return tuple(value for flag, value in itertools.pairwise(words) if flag == "-c")

    def temporal_services(self) -> dict[str, Service]:
        """The Temporal server's services by their name (`frontend`...), from the compose services
        that run `--service NAME` on the Temporal image."""
        found: dict[str, Service] = {}
        for service in self.services.values():
            words = service.command
            if words[:1] == ["--service"] and len(words) == 2:
                found[words[1]] = service
        missing = [name for name in TEMPORAL_SERVICES if name not in found]
        if missing:
            raise ComposeError(f"docker-compose.yml runs no Temporal {', '.join(missing)} service")
        images = {service.image for service in found.values()}
        if len(images) != 1:
            raise ComposeError(f"the Temporal services run different images: {sorted(images)}")
        return {name: found[name] for name in TEMPORAL_SERVICES}

    def temporal_environment(self) -> dict[str, str]:
        """The Temporal server's variables (the same for every one of its services)."""
        envs = {name: s.environment for name, s in self.temporal_services().items()}
        first = envs["frontend"]
        for name, env in envs.items():
            if env != first:
                raise ComposeError(f"temporal {name}: its environment differs from the frontend's")
        return first

    def script(self, service: str) -> Path:
        """The repository's script a one-shot service runs (`entrypoint: [sh, <path>]`)."""
        entry = self.service(service).entrypoint
        if entry[:1] != ["sh"] or len(entry) != 2:
            raise ComposeError(f"{service}: expected `entrypoint: [sh, <script>]`, got {entry}")
        return self.host_path(service, entry[1])

    def host_path(
        self, service: str, container_path: str, volumes: Mapping[str, Path] = {}
    ) -> Path:
        """Where `container_path` of `service` comes from on this machine: under one of its
        mounts (a named volume: where `volumes` puts it), or under what the Temporal image copies
        from the repository.

        Raises:
            ComposeError: the path comes from nowhere this machine has.
        """
        for mount in sorted(self.service(service).mounts, key=lambda m: -len(m.target)):
            if container_path == mount.target or container_path.startswith(mount.target + "/"):
                rest = container_path[len(mount.target) :].lstrip("/")
                if mount.named:
                    if mount.source not in volumes:
                        raise ComposeError(f"{service}: no local place for volume {mount.source!r}")
                    root = volumes[mount.source]
                else:
                    root = Path(mount.source).expanduser()
                    root = root if root.is_absolute() else REPO / root
                return root / rest if rest else root
        source, target = TEMPORAL_IMAGE_COPY
        if container_path.startswith(target):
            return REPO / source / container_path[len(target) :]
        raise ComposeError(f"{service}: {container_path} is in no mount this machine has")


@dataclass(frozen=True)
class TemporalPorts:
    """One Temporal service's ports on this machine."""

    grpc: int
    membership: int


@dataclass(frozen=True)
class LocalPorts:
    """Where each server of the local stack listens."""

    postgresql: int
    temporal: dict[str, TemporalPorts]
    frontend_http: int
    ui: int
    api: list[int]
    """One per API replica."""

    @property
    def temporal_address(self) -> str:
        return f"{LOOPBACK}:{self.temporal['frontend'].grpc}"


@dataclass(frozen=True)
class ProcessPlan:
    """One local process: what to run, with what environment, logging where."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log: Path
    replica: int = 1


@dataclass(frozen=True)
class LocalPlan:
    """The production shape on this machine (see the module docstring)."""

    compose: ComposeStack
    ports: LocalPorts
    state: Path
    postgres_major: int
    postgres_user: str
    postgres_password: str
    temporal_env: dict[str, str]
    """The Temporal server's variables, made local: the same for its four services and scripts."""
    temporal: dict[str, ProcessPlan]
    """By service name: frontend, history, matching, worker."""
    schema_script: Path
    setup_script: Path
    setup_env: dict[str, str]
    ui: ProcessPlan
    sim: ProcessPlan
    colony: dict[str, list[ProcessPlan]]
    """By compose service (worker, watcher, api): one plan per replica."""
    colony_env: dict[str, str]
    """The Colony environment as compose's `colonyctl` service gets it, made local."""

    @property
    def sim_dir(self) -> Path:
        return Path(self.sim.argv[self.sim.argv.index("--state-dir") + 1])


@dataclass(frozen=True)
class LocalMachine:
    """What `local_plan` needs to know of this machine."""

    ports: LocalPorts
    state: Path
    """Where the stack keeps its state and logs (`.colony/stack` for `make stack`)."""
    temporal_server: Path
    ui_server: Path
    """The UI server's binary; its root (with `config/docker.yaml`) is the folder holding it."""
    python: str = sys.executable
    volumes: dict[str, Path] = field(default_factory=dict)
    """Named volumes' local places (`sim-state`); default: `<state>/<volume name>`."""


PORT_SETTINGS = {"DB_PORT": "postgresql", "VISIBILITY_DB_PORT": "postgresql"}
"""Settings that hold only the port of another service (the Temporal template takes the database's
host and port apart), by the service whose port they hold."""
DROPPED_WITH_TRACING = ("OTEL_EXPORTER_OTLP_ENDPOINT",)
"""Settings of what `make stack` does not run (the collector, Jaeger): dropped, tracing off."""


def local_plan(compose: ComposeStack, machine: LocalMachine) -> LocalPlan:
    """Every process of the production shape, made local by the rules of the module docstring.

    Raises:
        ComposeError: a setting no rule can make local (it names the service and the setting).
    """
    ports, state = machine.ports, machine.state
    volumes = {
        name: machine.volumes.get(name, state / name)
        for name in {m.source for s in compose.services.values() for m in s.mounts if m.named}
    }
    logs = state / "logs"
    user, password = compose.postgres_user
    service_ports = _service_ports(compose, ports)

    temporal_env = {
        key: _local_value(compose, "temporal-frontend", key, value, service_ports, volumes)
        for key, value in compose.temporal_environment().items()
    }
    temporal_env["BIND_ON_IP"] = LOOPBACK
    for name, at in ports.temporal.items():
        temporal_env[f"{name.upper()}_GRPC_PORT"] = str(at.grpc)
        temporal_env[f"{name.upper()}_MEMBERSHIP_PORT"] = str(at.membership)
    temporal_env["FRONTEND_HTTP_PORT"] = str(ports.frontend_http)
    temporal = {
        name: ProcessPlan(
            f"temporal-{name}",
            [str(machine.temporal_server), "start", *service.command],
            temporal_env,
            logs / f"temporal-{name}.log",
        )
        for name, service in compose.temporal_services().items()
    }

    setup = compose.service("temporal-setup")
    setup_env = {
        key: _local_value(compose, setup.name, key, value, service_ports, volumes)
        for key, value in setup.environment.items()
    }
    ui_service = compose.service("temporal-ui")
    ui_env = {
        key: _local_value(compose, ui_service.name, key, value, service_ports, volumes)
        for key, value in ui_service.environment.items()
    }
    ui_env["TEMPORAL_UI_PORT"] = str(ports.ui)
    ui_env.setdefault("TEMPORAL_CORS_ORIGINS", f"http://{LOOPBACK}:{ports.ui}")
    ui = ProcessPlan(
        "temporal-ui",
        [
            str(machine.ui_server),
            "--root",
            str(machine.ui_server.parent),
            "--env",
            "docker",
            "start",
        ],
        ui_env,
        logs / "temporal-ui.log",
    )

    sim_service = compose.service("sim")
    sim_argv = _python(
        [_host_argument(compose, "sim", word, volumes) for word in sim_service.command], machine
    )
    sim = ProcessPlan("sim", sim_argv, _base_env(), logs / "sim.log")

    colony: dict[str, list[ProcessPlan]] = {}
    for name in COLONY_PROGRAMS:
        service = compose.service(name)
        plans = []
        for replica in range(1, service.replicas + 1):
            api_port = ports.api[replica - 1] if name == "api" else None
            env = _colony_env(compose, name, service_ports, volumes, api_port)
            label = name if service.replicas == 1 else f"{name}-{replica}"
            plans.append(
                ProcessPlan(
                    label, _python(service.command, machine), env, logs / f"{label}.log", replica
                )
            )
        colony[name] = plans
    return LocalPlan(
        compose=compose,
        ports=ports,
        state=state,
        postgres_major=compose.postgres_major,
        postgres_user=user,
        postgres_password=password,
        temporal_env=temporal_env,
        temporal=temporal,
        schema_script=compose.script("temporal-schema"),
        setup_script=compose.script("temporal-setup"),
        setup_env=setup_env,
        ui=ui,
        sim=sim,
        colony=colony,
        colony_env=_colony_env(compose, "colonyctl", service_ports, volumes, None),
    )


def _base_env() -> dict[str, str]:
    """This process's environment without Colony's and Temporal's settings (each process gets
    its own from the plan, nothing leaks in from the caller's shell)."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("COLONY_", "TEMPORAL_"))}


def _python(command: list[str], machine: LocalMachine) -> list[str]:
    return [machine.python, *command[1:]] if command[:1] == ["python"] else command


def _service_ports(compose: ComposeStack, ports: LocalPorts) -> dict[tuple[str, int], int]:
    """(compose service, its container port) -> the local port."""
    found: dict[tuple[str, int], int] = {("postgresql", 5432): ports.postgresql}
    for name, service in compose.temporal_services().items():
        found[service.name, TEMPORAL_GRPC_PORTS[name]] = ports.temporal[name].grpc
    ui = compose.service("temporal-ui")
    for _, container in ui.published:
        found[ui.name, container] = ports.ui
    return found


def _published_ports(compose: ComposeStack) -> dict[int, tuple[str, int]]:
    """Host port -> (service, container port), for every port compose publishes."""
    found: dict[int, tuple[str, int]] = {}
    for service in compose.services.values():
        for hosts, container in service.published:
            for host in hosts:
                found[host] = (service.name, container)
    return found


_ADDRESS = re.compile(r"^(?P<scheme>[a-z]+://)?(?P<host>[\w.-]+)(?::(?P<port>\d+))?(?P<rest>/.*)?$")


def _local_value(
    compose: ComposeStack,
    service: str,
    key: str,
    value: str,
    service_ports: dict[tuple[str, int], int],
    volumes: Mapping[str, Path],
) -> str:
    """One setting of `service` made local: another service's address, a published port's, a
    container path; anything else as it is."""
    if value.startswith("/") and not value.startswith("//"):
        return str(compose.host_path(service, value, volumes))
    if key in PORT_SETTINGS:
        local = service_ports.get((PORT_SETTINGS[key], int(value)))
        if local is None:
            raise ComposeError(f"{service}: {key}={value}: no local port for {PORT_SETTINGS[key]}")
        return str(local)
    match = _ADDRESS.match(value)
    if match is None:
        return value
    host, port = match.group("host"), match.group("port")
    scheme, rest = match.group("scheme") or "", match.group("rest") or ""
    if host in compose.services and host != service:
        if port is None:
            return LOOPBACK
        local = service_ports.get((host, int(port)))
        if local is None:
            raise ComposeError(f"{service}: {key}={value}: no local port for {host}:{port}")
        return f"{scheme}{LOOPBACK}:{local}{rest}"
    if host == "localhost" and port is not None:
        target = _published_ports(compose).get(int(port))
        if target is None:
            return value  # not the stack's (a browser's origin): the same on this machine
        local = service_ports.get(target)
        if local is None:
            raise ComposeError(f"{service}: {key}={value}: no local port for {target}")
        return f"{scheme}{LOOPBACK}:{local}{rest}"
    return value


def _colony_env(
    compose: ComposeStack,
    name: str,
    service_ports: dict[tuple[str, int], int],
    volumes: Mapping[str, Path],
    api_port: int | None,
) -> dict[str, str]:
    """A Colony service's environment made local; `api_port`: an API replica's own port."""
    service = compose.service(name)
    env = _base_env()
    exposed = {str(port) for other in compose.services.values() for port in other.exposed}
    published = {str(container) for _, container in service.published}
    for key, value in service.environment.items():
        if key in DROPPED_WITH_TRACING:
            continue
        if key == "COLONY_TRACE_EXPORT":
            env[key] = ""
        elif value == WILDCARD:
            env[key] = LOOPBACK
        elif value in exposed and key.endswith("_PORT"):
            env[key] = "0"  # replicas on one host cannot share it: any free port, in the log
        elif value in published and key.endswith("_PORT") and api_port is not None:
            env[key] = str(api_port)
        else:
            env[key] = _local_value(compose, name, key, value, service_ports, volumes)
    return env


def _host_argument(
    compose: ComposeStack, service: str, word: str, volumes: Mapping[str, Path]
) -> str:
    if word.startswith("/"):
        return str(compose.host_path(service, word, volumes))
    return word
