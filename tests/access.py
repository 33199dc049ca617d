"""Reaching a workload as a user would, for tests: the real `kubectl port-forward`, and HTTPS to
a tenant gateway by name.

`kubectl_port_forward` runs kubectl as a subprocess on a local port kubectl picks, stopped (and
its output kept for assertions) when the test is done with it:

    async with kubectl_port_forward(kubeconfig, "svc/web", 8888, namespace="ws") as forward:
        response = await httpx.AsyncClient().get(f"http://127.0.0.1:{forward.port}/api")
    assert "error" not in forward.stderr

`gateway_get(url, address, ca)` fetches `https://<name>:<port>/...` from the gateway at
`address` (what `curl --cacert CA --resolve <name>:<port>:<address>` does: the name is sent as
SNI and Host and checked against the certificate). Both run while the sim serves on the test's
loop: kubectl is a child process, its output is read asynchronously.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import ssl
import sys
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx

KUBECTL = Path(sys.executable).parent / "kubectl"
_FORWARDING = re.compile(rb"Forwarding from 127\.0\.0\.1:(\d+) -> (\d+)")
READY_TIMEOUT = 30.0
"""kubectl resolves the target and upgrades in well under a second; this is the load margin."""


@dataclass
class Forward:
    """A running `kubectl port-forward`: its local port, and its stderr once it has stopped."""

    process: asyncio.subprocess.Process
    port: int
    stderr: str = ""

    async def exited(self, timeout: float = READY_TIMEOUT) -> int:
        """Wait for kubectl to exit by itself (it does when the pod side fails); its exit code."""
        code = await asyncio.wait_for(self.process.wait(), timeout)
        return code


@contextlib.asynccontextmanager
async def kubectl_port_forward(
    kubeconfig: Path,
    target: str,
    remote_port: int | str,
    *,
    namespace: str = "default",
    env: Mapping[str, str] | None = None,
) -> AsyncIterator[Forward]:
    """`kubectl port-forward -n NAMESPACE TARGET :REMOTE` until the block ends."""
    process = await asyncio.create_subprocess_exec(
        str(KUBECTL), "--kubeconfig", str(kubeconfig), "port-forward", "-n", namespace, target,
        f":{remote_port}",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **(env or {})},
    )  # fmt: skip
    assert process.stdout is not None
    assert process.stderr is not None
    errors = asyncio.create_task(process.stderr.read())
    rest: asyncio.Task[bytes] | None = None
    forward: Forward | None = None
    try:
        line = await asyncio.wait_for(process.stdout.readline(), READY_TIMEOUT)
        match = _FORWARDING.search(line)
        if match is None:
            await asyncio.wait_for(process.wait(), READY_TIMEOUT)
            raise AssertionError(
                f"kubectl port-forward {target} did not start: {line!r} {(await errors).decode()}"
            )
        forward = Forward(process, int(match.group(1)))
        # "Handling connection for ..." lines: read them, or a long test fills the pipe.
        rest = asyncio.create_task(process.stdout.read())
        yield forward
    finally:
        if process.returncode is None:
            process.terminate()
        with contextlib.suppress(ProcessLookupError):
            await asyncio.wait_for(process.wait(), READY_TIMEOUT)
        stderr = (await errors).decode()
        if rest is not None:
            await rest
        if forward is not None:
            forward.stderr = stderr


async def gateway_get(url: str, address: str, ca: Path, *, follow: bool = True) -> httpx.Response:
    """GET `url` (http or https, any port) from the gateway listening at `address`, as if the
    URL's host resolved there."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    target = f"{parts.scheme}://{address}:{port}{parts.path or '/'}"
    trust = ssl.create_default_context(cafile=str(ca))
    async with httpx.AsyncClient(verify=trust, follow_redirects=False, timeout=30) as http:
        response = await http.get(
            target, headers={"Host": parts.netloc}, extensions={"sni_hostname": host}
        )
        # Redirects stay on the same gateway and name (Jupyter's / -> /lab).
        if follow and response.is_redirect and response.headers["Location"].startswith("/"):
            response = await http.get(
                f"{parts.scheme}://{address}:{port}{response.headers['Location']}",
                headers={"Host": parts.netloc},
                extensions={"sni_hostname": host},
            )
        return response


async def local_get(port: int, path: str) -> httpx.Response:
    """GET http://127.0.0.1:PORT/PATH (a port-forward's local end)."""
    async with httpx.AsyncClient() as http:
        return await http.get(f"http://127.0.0.1:{port}{path}", timeout=30)


async def ssh_disconnect_message(address: str, port: int) -> str | None:
    """What the machine's `ssh` client prints about the server at address:port (None without an
    `ssh` binary): a simulated sshd identifies itself, then disconnects by application."""
    ssh = shutil.which("ssh")
    if ssh is None:
        return None
    process = await asyncio.create_subprocess_exec(
        ssh, "-p", str(port), "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
        "-o", "UserKnownHostsFile=/dev/null", "-o", "ConnectTimeout=10", f"colony@{address}", "true",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, stdin=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    _, err = await asyncio.wait_for(process.communicate(), READY_TIMEOUT)
    return err.decode()
