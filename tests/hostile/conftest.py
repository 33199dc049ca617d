"""The hostile-tenant suite's stacks: the HTTP API's (`tests.api.conftest`: the dev server, the
sim, the real worker, apps built around them), served over loopback for remote-mode `colonyctl`
(`tests.api.test_cli_remote`), for a tenant that sends what no well-behaved client would."""

from __future__ import annotations

from tests.api.conftest import api_stack, catalog
from tests.api.test_cli_remote import api_url

__all__ = ["api_stack", "api_url", "catalog"]
