#!/bin/sh
# A Temporal service in a container: bind to the container's own address (what the upstream
# image's entrypoint does), then `temporal-server start` with the arguments given (`--service
# history`). `make stack` runs the same binary with BIND_ON_IP=127.0.0.1, one process per service.
set -eu
: "${BIND_ON_IP:=$(getent hosts "$(hostname)" | awk '{print $1}')}"
export BIND_ON_IP
exec temporal-server start "$@"
