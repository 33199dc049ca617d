"""Real Kubernetes control planes on this machine: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and KWOK, built by `components.build`, for tests, benchmarks, the simulator's real
world and the dev tooling.

    with Etcd.start(tmp / "etcd") as etcd:              # one etcd, shared
        management = ControlPlane.start(tmp / "mgmt", etcd=etcd, name="mgmt")
        child = ControlPlane.start(tmp / "child", etcd=etcd, name="child")   # its own prefix
        child.add_node("gpu-0", capacity={"nvidia.com/gpu": "8"})
        token = management.service_account_token("colony-system", "colony-worker")
        ...
        child.stop(); management.stop()

What a control plane is:
- kube-apiserver with the flags controller-runtime's envtest passes (RBAC authorization, client
  certificates from the control plane's CA, service-account issuer and keys), with the default
  admission plugins (ServiceAccount included: a pod's namespace needs its `default`
  ServiceAccount, which kube-controller-manager makes, as in every real cluster); its objects
  live in etcd under `/colony/<name>`, so several control planes share one etcd;
- kube-controller-manager (every default controller: namespaces, garbage collection, ReplicaSets,
  Deployments, DaemonSets, the disruption controller that writes PodDisruptionBudget status,
  node lifecycle, service accounts), under one identity (kubeadm gives each controller a
  service account of its own: three times the start-up, the same behaviour), no leader election;
- kube-scheduler;
- KWOK in place of kubelets: it keeps the Nodes annotated `kwok.x-k8s.io/node: fake` Ready
  (status and Leases) and plays their pods' lives (Running with an IP; on deletion, gone), with
  the stages kwokctl uses.

Access: `admin_kubeconfig` (a client certificate in `system:masters`), `service_account_token`
(TokenRequest, as `kubectl create token`), `token_kubeconfig`; `add_node` makes a KWOK Node.

Processes: each runs in a process group of its own behind a guard (`components.process`), so
`stop()` leaves nothing behind, and neither does an owner that dies without stopping (a test
worker killed by a timeout). Logs go to `<directory>/logs/<component>.log`; a component that
exits during start-up raises `ControlPlaneError` with its log's tail. Ports come from
`infra.ports.free_port`.

Figures: `ControlPlane.figures()` answers the start-up time (per step) and resident memory (per
process); `bench/controlplane.py` records them.
"""

from __future__ import annotations

import base64
import functools
import json
import ssl
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import httpx
import yaml

from components import build
from components.pki import CertificateAuthority, KeyPair, service_account_keys
from components.process import GuardedProcess, ProcessError, log_tail
from infra.ports import free_port

HOST = "127.0.0.1"
SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
"""envtest's (controller-runtime pkg/internal/testing/controlplane/apiserver.go)."""
POD_CIDR = "10.244.0.1/16"
"""KWOK's pod addresses (its default, 10.0.0.1/24, overlaps the service range above)."""
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
"""Nodes with this annotation set to `fake` are KWOK's (kwokctl's selector)."""
KWOK_NODE_LEASE_SECONDS = 40
"""kwokctl's default for real binaries: KWOK renews each Node's Lease in kube-node-lease."""
START_TIMEOUT = 180.0
"""Seconds a control plane may take to answer: about 5 s alone, a minute on two loaded cores."""
POLL = 0.05
DEFAULT_NODE_CAPACITY = {"cpu": "32", "memory": "256Gi", "pods": "110"}
ADMIN_USER = "colony-admin"
AUDIT_LOG = "audit.log"
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [{"level": "Metadata"}],
}
"""Who asked for what and what they were answered, for every request (no bodies)."""


class ControlPlaneError(RuntimeError):
    """A control plane could not start (the message names the component and its log)."""


def _wait(
    what: str,
    checks: Mapping[str, Callable[[], bool]],
    deadline: float,
    watched: Sequence[GuardedProcess],
) -> None:
    """Poll `checks` until all hold; fail naming those that do not when `deadline` passes, or
    at once when a watched process exits."""
    pending = dict(checks)
    while True:
        for process in watched:
            try:
                process.check()
            except ProcessError as error:
                raise ControlPlaneError(f"{what}: {error}") from None
        pending = {name: check for name, check in pending.items() if not check()}
        if not pending:
            return
        if time.monotonic() > deadline:
            logs = "\n".join(f"--- {p.log}\n{log_tail(p.log, 15)}" for p in watched)
            raise ControlPlaneError(
                f"{what}: not ready in time (waiting for {', '.join(pending)})\n{logs}"
            )
        time.sleep(POLL)


def _get_ok(client: httpx.Client, url: str) -> bool:
    try:
        return client.get(url).status_code == 200
    except httpx.HTTPError:
        return False


def _stop_all(processes: Sequence[GuardedProcess]) -> None:
    """Stop several processes at once: every guard is told first, then each is waited for."""
    for process in processes:
        process.request_stop()
    for process in processes:
        process.stop()


@dataclass
class Etcd:
    """One etcd server (v3.6), shareable by several control planes under different prefixes.

    Attributes:
        url: its client URL (`http://127.0.0.1:<port>`).
        start_seconds: from the call to its first healthy answer.
    """

    url: str
    directory: Path
    process: GuardedProcess
    start_seconds: float

    @classmethod
    def start(cls, directory: Path, *, timeout: float = START_TIMEOUT) -> Etcd:
        """Start etcd with its data in `directory/data` and its log in `directory/etcd.log`;
        builds it first if needed."""
        began = time.monotonic()
        binary = build.binary("etcd", "etcd")
        directory.mkdir(parents=True, exist_ok=True)
        client_port, peer_port = free_port(), free_port()
        url, peer = f"http://{HOST}:{client_port}", f"http://{HOST}:{peer_port}"
        process = GuardedProcess.start(
            "etcd",
            [
                binary,
                "--name=colony",
                f"--data-dir={directory / 'data'}",
                f"--listen-client-urls={url}",
                f"--advertise-client-urls={url}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=colony={peer}",
                "--unsafe-no-fsync=true",  # envtest's: tests need no durability
                "--log-level=warn",
            ],
            directory / "etcd.log",
        )
        with httpx.Client(timeout=2) as probe:
            try:
                _wait(
                    "etcd",
                    {"/health": lambda: _get_ok(probe, f"{url}/health")},
                    began + timeout,
                    [process],
                )
            except BaseException:
                process.stop()
                raise
        return cls(url, directory, process, time.monotonic() - began)

    def rss(self) -> int:
        """etcd's resident memory in bytes."""
        return self.process.rss()

    def stop(self) -> None:
        self.process.stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


@dataclass(frozen=True)
class ControlPlaneFigures:
    """How long a control plane took to start and how much memory it holds.

    Attributes:
        start_seconds: steps in order ("certificates", "etcd" when it started its own,
            "kube-apiserver" until /readyz, "controllers" until kube-controller-manager,
            kube-scheduler and KWOK are healthy and the `default` ServiceAccount exists) and
            "total".
        rss_bytes: resident memory per process (etcd only when the control plane owns it).
    """

    start_seconds: dict[str, float]
    rss_bytes: dict[str, int]

    @property
    def rss_total(self) -> int:
        return sum(self.rss_bytes.values())


@dataclass
class ControlPlane:
    """A started control plane; see the module docstring.

    Attributes:
        name: names its etcd prefix (`/colony/<name>`) and its kubeconfig's context.
        server: `https://127.0.0.1:<port>`.
        directory: its certificates, kubeconfigs and logs.
        admin_kubeconfig: a kubeconfig of a `system:masters` user (client certificate).
        admin_kubeconfig_path: the same, written to a file (for kubectl and the official client).
    """

    name: str
    server: str
    directory: Path
    authority: CertificateAuthority
    admin_kubeconfig: dict[str, Any]
    admin_kubeconfig_path: Path
    etcd: Etcd
    owns_etcd: bool
    processes: dict[str, GuardedProcess]
    start_seconds: dict[str, float]
    _admin: httpx.Client = field(repr=False)

    @classmethod
    def start(
        cls,
        directory: Path,
        *,
        name: str = "colony",
        etcd: Etcd | None = None,
        authority: CertificateAuthority | None = None,
        kwok: bool = True,
        audit: bool = False,
        timeout: float = START_TIMEOUT,
    ) -> ControlPlane:
        """Start a control plane in `directory` (created), on `etcd` (else an etcd of its own, in
        `directory/etcd`, stopped with it), its certificates signed by `authority` (else a CA of
        its own). Builds the components first where they are not built yet. With `audit`, the
        API server writes an audit log of every request (user, verb, URI, answer; `audit_events`).

        Raises:
            ControlPlaneError: a component exited or did not answer within `timeout` seconds
                (nothing is left running).
            components.build.BuildError: a component could not be built.
        """
        began = time.monotonic()
        deadline = began + timeout
        kubernetes = build.ensure("kubernetes")
        kwok_folder = build.ensure("kwok") if kwok else None
        steps: dict[str, float] = {}
        directory.mkdir(parents=True, exist_ok=True)

        mark = time.monotonic()
        authority = authority or CertificateAuthority(f"{name}-ca")
        port = free_port()
        server = f"https://{HOST}:{port}"
        files = _Files.write(directory, name, server, authority)
        steps["certificates"] = time.monotonic() - mark

        owns_etcd = etcd is None
        if etcd is None:
            etcd = Etcd.start(directory / "etcd", timeout=timeout)
            steps["etcd"] = etcd.start_seconds
        processes: dict[str, GuardedProcess] = {}
        logs = directory / "logs"
        tls = ssl.create_default_context(cafile=str(files.ca))
        # (httpx's own `cert=` is ignored when `verify` names a file: a context holds both.)
        tls.load_cert_chain(files.pki / "admin.crt", files.pki / "admin.key")
        admin = httpx.Client(base_url=server, verify=tls, timeout=10)
        try:
            mark = time.monotonic()
            processes["kube-apiserver"] = GuardedProcess.start(
                "kube-apiserver",
                [
                    kubernetes / "kube-apiserver",
                    *_apiserver_flags(files, name, etcd, port, server),
                    *(_audit_flags(directory) if audit else []),
                ],
                logs / "kube-apiserver.log",
            )
            _wait(
                "kube-apiserver",
                {"/readyz": lambda: _get_ok(admin, "/readyz")},
                deadline,
                list(processes.values()),
            )
            steps["kube-apiserver"] = time.monotonic() - mark

            mark = time.monotonic()
            health = _start_controllers(files, name, kubernetes, kwok_folder, processes, logs)
            with httpx.Client(verify=False, timeout=2) as probe:  # self-signed serving certs
                checks: dict[str, Callable[[], bool]] = {
                    f"{component} {url}": functools.partial(_get_ok, probe, url)
                    for component, url in health.items()
                }
                # The serviceaccount controller's first work: pods may be created from now on.
                checks["the default ServiceAccount"] = functools.partial(
                    _get_ok, admin, "/api/v1/namespaces/default/serviceaccounts/default"
                )
                _wait("the controllers", checks, deadline, list(processes.values()))
            steps["controllers"] = time.monotonic() - mark
        except BaseException:
            admin.close()
            _stop_all(list(reversed(processes.values())))
            if owns_etcd:
                etcd.stop()
            raise
        steps["total"] = time.monotonic() - began
        return cls(
            name=name,
            server=server,
            directory=directory,
            authority=authority,
            admin_kubeconfig=yaml.safe_load(files.kubeconfigs["admin"].read_text()),
            admin_kubeconfig_path=files.kubeconfigs["admin"],
            etcd=etcd,
            owns_etcd=owns_etcd,
            processes=processes,
            start_seconds=steps,
            _admin=admin,
        )

    # --- access ----------------------------------------------------------------------------

    @property
    def ca_file(self) -> Path:
        """The CA certificate's file (for `curl --cacert`, `ssl.create_default_context`)."""
        return self.directory / "pki" / "ca.crt"

    @property
    def ca_pem(self) -> bytes:
        """The CA that signed the API server's certificate (and every client certificate)."""
        return self.authority.cert_pem

    def request(
        self, method: str, path: str, body: Mapping[str, Any] | None = None
    ) -> httpx.Response:
        """One request as the admin (`system:masters`); the response, whatever its status."""
        return self._admin.request(method, path, json=body)

    def _ok(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> Any:
        response = self.request(method, path, body)
        if response.status_code >= 300:
            raise ControlPlaneError(f"{method} {path}: {response.status_code} {response.text}")
        return response.json()

    def ensure(self, path: str, body: Mapping[str, Any]) -> None:
        """Create the object at collection `path` unless it exists (409 is success)."""
        response = self.request("POST", path, body)
        if response.status_code not in (201, 200, 409):
            raise ControlPlaneError(f"POST {path}: {response.status_code} {response.text}")

    def service_account_token(
        self,
        namespace: str,
        name: str,
        *,
        seconds: int = 3600,
        audiences: Sequence[str] = (),
        create: bool = True,
    ) -> str:
        """A token of ServiceAccount `namespace/name` from TokenRequest (as `kubectl create
        token`); with `create`, the namespace and the ServiceAccount are made when missing."""
        if create:
            self.ensure("/api/v1/namespaces", {"metadata": {"name": namespace}})
            self.ensure(
                f"/api/v1/namespaces/{namespace}/serviceaccounts", {"metadata": {"name": name}}
            )
        spec: dict[str, Any] = {"expirationSeconds": seconds}
        if audiences:
            spec["audiences"] = list(audiences)
        answer = self._ok(
            "POST",
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec},
        )
        return str(answer["status"]["token"])

    def token_kubeconfig(self, token: str, user: str = "token") -> dict[str, Any]:
        """A kubeconfig that authenticates with a bearer token (a ServiceAccount's, say)."""
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": self.name, "cluster": self._cluster_entry()}],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": self.name, "context": {"cluster": self.name, "user": user}}],
            "current-context": self.name,
        }

    def service_account_kubeconfig(self, namespace: str, name: str) -> dict[str, Any]:
        """`token_kubeconfig` with a fresh token of ServiceAccount `namespace/name`."""
        return self.token_kubeconfig(
            self.service_account_token(namespace, name), f"{namespace}:{name}"
        )

    def _cluster_entry(self) -> dict[str, str]:
        return {
            "server": self.server,
            "certificate-authority-data": base64.b64encode(self.ca_pem).decode(),
        }

    def audit_events(self) -> list[dict[str, Any]]:
        """Every request the API server answered so far (needs `audit=True`), as audit.k8s.io/v1
        Events at level Metadata: `user.username`, `verb`, `requestURI`, `objectRef`,
        `responseStatus.code`, `annotations` (the authorization decision and its reason)."""
        path = self.directory / AUDIT_LOG
        if not path.exists():
            return []
        events = []
        for line in path.read_text().splitlines():
            if line.strip():
                events.append(json.loads(line))
        return events

    # --- KWOK nodes --------------------------------------------------------------------------

    def add_node(
        self,
        name: str,
        *,
        labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
        taints: Sequence[Mapping[str, str]] = (),
        capacity: Mapping[str, str] | None = None,
        wait: bool = True,
        timeout: float = 60.0,
    ) -> dict[str, Any]:
        """Create a Node KWOK keeps Ready (capacity defaults to 32 CPUs, 256Gi, 110 pods; add
        e.g. `{"nvidia.com/gpu": "8"}`); with `wait`, answer it once it is Ready.

        Raises:
            ControlPlaneError: the create was refused, or the Node was not Ready in time.
        """
        resources = {**DEFAULT_NODE_CAPACITY, **(capacity or {})}
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {
                    "kubernetes.io/hostname": name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    "type": "kwok",
                    **(labels or {}),
                },
                "annotations": {
                    KWOK_NODE_ANNOTATION: "fake",
                    "node.alpha.kubernetes.io/ttl": "0",
                    **(annotations or {}),
                },
            },
            "spec": {"taints": [dict(t) for t in taints]} if taints else {},
            "status": {"capacity": resources, "allocatable": resources},
        }
        node: dict[str, Any] = self._ok("POST", "/api/v1/nodes", body)
        if not wait:
            return node
        deadline = time.monotonic() + timeout
        while True:
            node = self._ok("GET", f"/api/v1/nodes/{name}")
            if node_ready(node):
                return node
            if time.monotonic() > deadline:
                raise ControlPlaneError(f"node {name} not Ready within {timeout}s: {node}")
            time.sleep(POLL)

    # --- figures and stop --------------------------------------------------------------------

    def rss(self) -> dict[str, int]:
        """Resident memory per process in bytes (etcd's when this control plane owns it)."""
        memory = {name: process.rss() for name, process in self.processes.items()}
        if self.owns_etcd:
            memory["etcd"] = self.etcd.rss()
        return memory

    def figures(self) -> ControlPlaneFigures:
        return ControlPlaneFigures(dict(self.start_seconds), self.rss())

    def pids(self) -> dict[str, int]:
        """Every server process of this control plane (for tests of the clean-up)."""
        pids = {name: process.pid for name, process in self.processes.items()}
        if self.owns_etcd:
            pids["etcd"] = self.etcd.process.pid
        return pids

    def stop(self) -> None:
        """Stop every process of this control plane (its etcd only when it started it); its
        objects stay in a shared etcd under its prefix. Idempotent."""
        self._admin.close()
        _stop_all(list(reversed(self.processes.values())))
        if self.owns_etcd:
            self.etcd.stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


def node_ready(node: Mapping[str, Any]) -> bool:
    """Whether a Node's Ready condition is True."""
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


@dataclass(frozen=True)
class _Files:
    """A control plane's certificates, keys and its components' kubeconfigs, on disk."""

    pki: Path
    ca: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    sa_public: Path
    sa_private: Path
    kubeconfigs: dict[str, Path]
    """admin, kube-controller-manager, kube-scheduler, kwok."""

    @classmethod
    def write(
        cls, directory: Path, name: str, server: str, authority: CertificateAuthority
    ) -> _Files:
        pki = directory / "pki"
        ca, ca_key = authority.pem.write(pki, "ca")
        serving_cert, serving_key = authority.serving(
            "kube-apiserver",
            [
                HOST,
                "localhost",
                "10.0.0.1",  # the `kubernetes` Service's address in SERVICE_CLUSTER_IP_RANGE
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ],
        ).write(pki, "apiserver")
        sa = service_account_keys()
        sa_public, sa_private = pki / "sa.pub", pki / "sa.key"
        sa_public.write_bytes(sa.cert)
        sa_private.touch(mode=0o600)
        sa_private.write_bytes(sa.key)
        users = {
            "admin": authority.client(ADMIN_USER, ("system:masters",)),
            # One identity for every controller (not --use-service-account-credentials, which
            # makes a ServiceAccount and token per controller and triples the start-up), so
            # it needs every controller's rights.
            "kube-controller-manager": authority.client(
                "system:kube-controller-manager", ("system:masters",)
            ),
            "kube-scheduler": authority.client("system:kube-scheduler"),
            # KWOK stands in for every kubelet: it writes Node and Pod status and Leases.
            "kwok": authority.client("kwok", ("system:masters",)),
        }
        kubeconfigs = {
            user: _write_kubeconfig(
                directory / f"{user}.kubeconfig",
                _certificate_kubeconfig(name, server, authority.cert_pem, user, pair),
            )
            for user, pair in users.items()
        }
        users["admin"].write(pki, "admin")
        return cls(pki, ca, ca_key, serving_cert, serving_key, sa_public, sa_private, kubeconfigs)


def _apiserver_flags(files: _Files, name: str, etcd: Etcd, port: int, server: str) -> list[str]:
    return [
        f"--etcd-servers={etcd.url}",
        f"--etcd-prefix=/colony/{name}",
        f"--bind-address={HOST}",
        # Endpoints may not name a loopback address, and nothing in these clusters reaches the
        # API through the `kubernetes` Service.
        "--endpoint-reconciler-type=none",
        f"--secure-port={port}",
        f"--tls-cert-file={files.serving_cert}",
        f"--tls-private-key-file={files.serving_key}",
        f"--cert-dir={files.pki}",
        f"--client-ca-file={files.ca}",
        "--authorization-mode=RBAC",
        f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
        "--allow-privileged=true",
        f"--service-account-issuer={server}",
        f"--service-account-key-file={files.sa_public}",
        f"--service-account-signing-key-file={files.sa_private}",
        "--profiling=false",
    ]


def _audit_flags(directory: Path) -> list[str]:
    """An audit log of every request (`ControlPlane.audit_events`)."""
    policy = directory / "audit-policy.yaml"
    policy.write_text(yaml.safe_dump(AUDIT_POLICY))
    return [
        f"--audit-policy-file={policy}",
        f"--audit-log-path={directory / AUDIT_LOG}",
        "--audit-log-mode=blocking",  # written before the answer: tests read at once
        "--audit-log-maxsize=0",
    ]


def _start_controllers(
    files: _Files,
    name: str,
    kubernetes: Path,
    kwok_folder: Path | None,
    processes: dict[str, GuardedProcess],
    logs: Path,
) -> dict[str, str]:
    """Start kube-controller-manager, kube-scheduler and KWOK (into `processes`); their health
    URLs."""
    health: dict[str, str] = {}
    kcm_port = free_port()
    processes["kube-controller-manager"] = GuardedProcess.start(
        "kube-controller-manager",
        [
            kubernetes / "kube-controller-manager",
            *_component_access(files.kubeconfigs["kube-controller-manager"]),
            f"--bind-address={HOST}",
            f"--secure-port={kcm_port}",
            f"--root-ca-file={files.ca}",
            f"--service-account-private-key-file={files.sa_private}",
            f"--cluster-signing-cert-file={files.ca}",
            f"--cluster-signing-key-file={files.ca_key}",
            f"--cluster-name={name}",
            "--leader-elect=false",
            "--profiling=false",
        ],
        logs / "kube-controller-manager.log",
    )
    health["kube-controller-manager"] = f"https://{HOST}:{kcm_port}/healthz"
    scheduler_port = free_port()
    processes["kube-scheduler"] = GuardedProcess.start(
        "kube-scheduler",
        [
            kubernetes / "kube-scheduler",
            *_component_access(files.kubeconfigs["kube-scheduler"]),
            f"--bind-address={HOST}",
            f"--secure-port={scheduler_port}",
            "--leader-elect=false",
            "--profiling=false",
        ],
        logs / "kube-scheduler.log",
    )
    health["kube-scheduler"] = f"https://{HOST}:{scheduler_port}/healthz"
    if kwok_folder is not None:
        kwok_port = free_port()
        processes["kwok"] = GuardedProcess.start(
            "kwok",
            [
                kwok_folder / "kwok",
                f"--kubeconfig={files.kubeconfigs['kwok']}",
                f"--config={kwok_folder / build.KWOK_STAGES}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake",
                f"--node-lease-duration-seconds={KWOK_NODE_LEASE_SECONDS}",
                f"--cidr={POD_CIDR}",
                f"--server-address={HOST}:{kwok_port}",
            ],
            logs / "kwok.log",
            # KWOK reads ~/.kwok/kwok.yaml when it exists: a HOME of its own.
            env={"HOME": str(logs.parent), "PATH": "/usr/bin:/bin"},
        )
        health["kwok"] = f"http://{HOST}:{kwok_port}/healthz"
    return health


def _certificate_kubeconfig(
    cluster: str, server: str, ca: bytes, user: str, pair: KeyPair
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": cluster,
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca).decode(),
                },
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": base64.b64encode(pair.cert).decode(),
                    "client-key-data": base64.b64encode(pair.key).decode(),
                },
            }
        ],
        "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": user}}],
        "current-context": cluster,
    }


def _write_kubeconfig(path: Path, kubeconfig: dict[str, Any]) -> Path:
    path.touch(mode=0o600)
    path.write_text(yaml.safe_dump(kubeconfig))
    return path


def _component_access(kubeconfig: Path) -> list[str]:
    """kube-controller-manager's and kube-scheduler's API access: one kubeconfig for their work,
    their delegated authentication and authorization (else they log that they cannot check who
    asks for anything but /healthz)."""
    return [
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
    ]
