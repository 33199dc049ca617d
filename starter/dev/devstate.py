"""The development state `make run` keeps in `.colony/`, and how its servers are told from others.

Used by `starter.devenv` (`make run`), `make reset` and `colonyctl dev reset`.

One development state is Temporal's database (`temporal.db`: the workflows) and the simulator's
world (`sim/state.json`: the clusters, hosts and classes those workflows made) together; one
without the other is incoherent (workflows of clusters that no longer exist, or clusters no
workflow knows). Both carry one id:

- `dev-state.json` beside `temporal.db`: `{"stateId": ...}`, written when the state is created;
- the simulated world's `stateId` (`python -m sim --persist --state-id ...`);
- while they serve: the data of Temporal's namespace (`colonyDevState`, kept in temporal.db), the simulator's
  `GET /sim/v1/identity` and the HTTP API's `GET /healthz` (`devStateId`, from
  `COLONY_DEV_STATE_ID`).

`check` says whether `make run` may go on (fresh, or both parts of one state) and otherwise the one
line that says what to do; `reset` removes the state (never `.venv`); the `*_holder` functions say
who holds a port: this state's server (reused), another state's, or a program that is not Colony's
(refused, naming the setting that moves ours).
"""

from __future__ import annotations

import enum
import json
import os
import shutil
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from infra.settings import SERVICE_NAME

NAMESPACE_MARK = "colonyDevState"
"""The key of Temporal's namespace data naming the development state its database belongs to."""
SIM_IDENTITY_PATH = "/sim/v1/identity"
SIM_IDENTITY_KIND = "ColonySimulator"
PROBE_SECONDS = 3.0
"""How long a port's holder has to say who it is: a local server answers in milliseconds."""
RESET_HINT = "run `make reset` (or `colonyctl dev reset`) to start both fresh"


class DevStateError(Exception):
    """The development state cannot be used as it is; the message is one line saying why and
    what to do."""


@dataclass(frozen=True)
class DevPaths:
    """Where a development state lives: `DevPaths.under(root)`, `root` being `.colony` for
    `make run`; `under` is the layout, in one place."""

    root: Path
    temporal_db: Path
    marker: Path
    """`dev-state.json`, beside temporal.db."""
    sim_dir: Path
    sim_state: Path
    """The simulated world (`sim.persistence`)."""
    world: Path
    """Where the running simulator says where it serves (`world.json`)."""
    processes: Path
    """The processes each running `make run` started, one `<its pid>.json` each."""

    @classmethod
    def under(cls, root: Path) -> DevPaths:
        sim_dir = root / "sim"
        return cls(
            root=root,
            temporal_db=root / "temporal.db",
            marker=root / "dev-state.json",
            sim_dir=sim_dir,
            sim_state=sim_dir / "state.json",
            world=sim_dir / "world.json",
            processes=root / "processes",
        )


@dataclass(frozen=True)
class DevState:
    """The state `make run` goes on with: its id, and whether it was just created."""

    id: str
    fresh: bool


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except ValueError as exc:
        raise DevStateError(f"{path} is unreadable ({exc}); {RESET_HINT}") from exc
    return data if isinstance(data, dict) else {}


def check(paths: DevPaths) -> DevState:
    """The state to go on with: a new one when neither part exists (its marker written now), the
    existing one when both parts carry the same id.

    Raises:
        DevStateError: one part without the other, or the two of different states.
    """
    database = paths.temporal_db.exists()
    world = _read_json(paths.sim_state)
    if not database and world is None:
        state = DevState(uuid.uuid4().hex, fresh=True)
        paths.root.mkdir(parents=True, exist_ok=True)
        paths.marker.write_text(json.dumps({"stateId": state.id}) + "\n", encoding="utf-8")
        return state
    if world is None:
        raise DevStateError(
            f"{paths.temporal_db} has no simulated world beside it ({paths.sim_state} is missing):"
            f" its workflows would speak of clusters that do not exist; {RESET_HINT}"
        )
    if not database:
        raise DevStateError(
            f"{paths.sim_state} has no Temporal database beside it ({paths.temporal_db} is "
            f"missing): no workflow would know its clusters; {RESET_HINT}"
        )
    marker = _read_json(paths.marker) or {}
    ours, theirs = marker.get("stateId"), world.get("stateId")
    if not ours:
        raise DevStateError(
            f"{paths.temporal_db} names no development state ({paths.marker} is missing: made "
            f"before markers?), so it cannot be matched with the simulated world; {RESET_HINT}"
        )
    if ours != theirs:
        raise DevStateError(
            f"{paths.temporal_db} belongs to development state {ours}, the simulated world to "
            f"{theirs}; {RESET_HINT}"
        )
    return DevState(str(ours), fresh=False)


# --------------------------------------------------------------------------- reset


def running(paths: DevPaths) -> list[str]:
    """Each process a `make run` of this state started that still runs, as "name (pid N)"."""
    alive = []
    for record in sorted(paths.processes.glob("*.json")):
        try:
            children = (_read_json(record) or {}).get("children") or ()
        except DevStateError:
            continue  # half written when its make run was killed: its pids cannot be known
        for child in children:
            pid, argv = int(child["pid"]), [str(a) for a in child["argv"]]
            if _runs(pid, argv):
                alive.append(f"{child['name']} (pid {pid})")
    return alive


def _runs(pid: int, argv: list[str]) -> bool:
    """Whether `pid` is alive and still the program started (not a later process given the pid)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive, and not ours to judge
    if not Path("/proc/self").exists():  # no /proc (macOS): the pid is all there is to go by
        return True
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False  # ended meanwhile
    return cmdline.split(b"\0")[:-1] == [a.encode() for a in argv]


def reset(paths: DevPaths) -> bool:
    """Remove the development state in `paths.root` (Temporal's database, the simulated world,
    the development API key, the sealing keys, the logs); `.venv` is elsewhere and stays.

    Returns:
        Whether there was a state to remove.

    Raises:
        DevStateError: a `make run` of this state still runs (its database is open).
    """
    alive = running(paths)
    if alive:
        raise DevStateError(
            f"make run still serves this development state ({', '.join(alive)}): "
            "stop it (Ctrl-C) before resetting"
        )
    known = (paths.temporal_db, paths.marker, paths.sim_dir)
    if not any(p.exists() for p in known):
        return False
    shutil.rmtree(paths.root)
    return True


# --------------------------------------------------------------------------- who holds a port


class Holder(enum.Enum):
    """Who answers on a port."""

    OURS = "this development state's"
    OTHER_STATE = "another development state's"
    FOREIGN = "a program that is not Colony's"


def _get_json(url: str) -> dict[str, Any] | None:
    """The JSON object `url` answers with (200 only), or None (nothing, not 200, not JSON)."""
    try:
        # verify=False: the simulator's servers present its own CA's certificates, on loopback.
        answer = httpx.get(url, timeout=PROBE_SECONDS, verify=False)
        body = answer.json() if answer.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
    return body if isinstance(body, dict) else None


def _holder(body: dict[str, Any] | None, is_ours: bool, state_key: str, state_id: str) -> Holder:
    if body is None or not is_ours:
        return Holder.FOREIGN
    return Holder.OURS if body.get(state_key) == state_id else Holder.OTHER_STATE


def sim_holder(base_url: str, state_id: str) -> Holder:
    """Who serves at `base_url` (a simulator's management cluster or host provider)."""
    body = _get_json(base_url.rstrip("/") + SIM_IDENTITY_PATH)
    is_sim = body is not None and body.get("kind") == SIM_IDENTITY_KIND
    return _holder(body, is_sim, "stateId", state_id)


def api_holder(base_url: str, state_id: str) -> Holder:
    """Who serves at `base_url`: Colony's HTTP API answers /healthz with its service name."""
    body = _get_json(base_url.rstrip("/") + "/healthz")
    is_api = body is not None and body.get("service") == SERVICE_NAME
    return _holder(body, is_api, "devStateId", state_id)


def temporal_holder(temporal: Path, address: str, namespace: str, state_id: str) -> Holder:
    """Who serves Temporal's frontend at `address` (asked with the `temporal` CLI binary): a
    Temporal server whose `namespace` is marked with a state (`mark_temporal`), one that is not
    (not started by `make run`), or something else."""
    data = _namespace_data(temporal, address, namespace)
    if data is None:
        return Holder.FOREIGN  # no gRPC, or no Temporal, behind the port
    if NAMESPACE_MARK not in data:
        return Holder.FOREIGN
    return Holder.OURS if _mark_of(data) == state_id else Holder.OTHER_STATE


def mark_temporal(temporal: Path, address: str, namespace: str, state_id: str) -> None:
    """Write the state's id into the data of the Temporal `namespace` (kept in temporal.db).

    Raises:
        DevStateError: the database is marked with another state, or the server cannot be asked.
    """
    data = _namespace_data(temporal, address, namespace)
    if data is None:
        raise DevStateError(f"the Temporal server at {address} did not describe {namespace}")
    if NAMESPACE_MARK in data:
        current = _mark_of(data)
        if current == state_id:
            return
        raise DevStateError(
            f"Temporal's database belongs to development state {current}, not {state_id}; "
            f"{RESET_HINT}"
        )
    _temporal(
        temporal, "operator", "namespace", "update", "--namespace", namespace,
        "--address", address, "--data", f"{NAMESPACE_MARK}={json.dumps(state_id)}",
    )  # fmt: skip


def _mark_of(data: dict[str, str]) -> object:
    """The state id in namespace data (the CLI keeps each value as JSON text)."""
    try:
        return json.loads(data[NAMESPACE_MARK])
    except ValueError:
        return data[NAMESPACE_MARK]


def _namespace_data(temporal: Path, address: str, namespace: str) -> dict[str, str] | None:
    """The data of `namespace` at `address`, or None when no Temporal server answers there."""
    done = _temporal(
        temporal, "operator", "namespace", "describe", "--namespace", namespace,
        "--address", address, "--output", "json", check=False,
    )  # fmt: skip
    if done.returncode != 0:
        return None
    try:
        info = json.loads(done.stdout)["namespaceInfo"]
    except (ValueError, KeyError, TypeError):
        return None
    return {str(k): str(v) for k, v in (info.get("data") or {}).items()}


def _temporal(temporal: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """The `temporal` CLI (fast, and no Temporal client runtime in this process)."""
    argv = [str(temporal), *args, "--command-timeout", f"{PROBE_SECONDS:.0f}s"]
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, check=False, timeout=PROBE_SECONDS * 3
        )
    except subprocess.TimeoutExpired:
        done = subprocess.CompletedProcess(argv, 124, "", "no answer")
    if check and done.returncode != 0:
        raise DevStateError(f"temporal {' '.join(args[:3])}: {done.stderr.strip()}")
    return done
