"""`python -m api`: Colony's HTTP API under uvicorn, configured from the environment.

Reads `infra.config.ColonySettings` (Temporal, the management cluster, the host provider)
and `infra.settings.ApiSettings` (`COLONY_API_HOST`, `COLONY_API_PORT`, `COLONY_API_RATE`, ...),
keeps API keys on the management cluster (`infra.keys.KubernetesKeyStore`), and serves until SIGINT
or SIGTERM. Started by `make run` (`starter.dev.devenv`) and by the `api` service of docker-compose.

uvicorn's access log is off: `api.app` logs each request itself, without query strings or headers.
"""

from __future__ import annotations

import asyncio
import logging
import sys

import uvicorn

from api.app import create_app
from clients.temporal import connect
from infra.config import ColonySettings, SettingsError
from infra.keys import KubernetesKeyStore
from infra.kube import api_client_from_file, close_client
from infra.settings import ApiSettings

log = logging.getLogger("colony.api")


async def serve(settings: ColonySettings, api_settings: ApiSettings) -> None:
    management = api_client_from_file(settings.require_management_kubeconfig())
    store = KubernetesKeyStore(
        management,
        api_settings.namespace,
        cache_seconds=api_settings.key_cache_seconds,
        hash_rate=api_settings.verify_rate,
    )

    app = create_app(settings, lambda: connect(settings, hint=""), store, api_settings=api_settings)
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host=api_settings.host,
            port=api_settings.port,
            access_log=False,
            log_config=None,
            proxy_headers=False,
        )
    )
    log.info(
        "Colony API on http://%s:%d (docs: /docs), Temporal %s, keys in namespace %s",
        api_settings.host,
        api_settings.port,
        settings.temporal_address,
        api_settings.namespace,
    )
    try:
        await server.serve()
    finally:
        await store.close()
        close_client(management)


def main() -> int:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        settings = ColonySettings.from_env()
        api_settings = ApiSettings.from_env()
        settings.require_management_kubeconfig()
    except SettingsError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    asyncio.run(serve(settings, api_settings))
    return 0


if __name__ == "__main__":
    sys.exit(main())
