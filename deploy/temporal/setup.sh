#!/bin/sh
# Once the Temporal frontend answers: the namespace Colony runs in and Colony's search attributes
# (workflows/search_attributes.py: every key a Keyword; tests/test_deploy.py checks the list),
# each made only when missing, so a second run changes nothing. The namespace and the attributes
# take a moment to reach every frontend's cache, hence the bounded retries.
#
# Reads TEMPORAL_ADDRESS and TEMPORAL_NAMESPACE (default `default`); needs the `temporal` CLI.
# Run by the temporal-setup service of docker-compose.yml and by `make stack`.
set -eu
namespace=${TEMPORAL_NAMESPACE:-default}
SEARCH_ATTRIBUTES="ColonyKind ColonyCluster ColonyOrganization ColonyName ColonyGpuModel ColonyPhase"

until_ok() {  # <what> <command...>: again every second, for up to 120 s
    what=$1
    shift
    tries=0
    until "$@" >/dev/null 2>&1; do
        tries=$((tries + 1))
        if [ "$tries" -ge 120 ]; then
            echo "temporal setup: $what did not succeed within 120 s:" >&2
            "$@" >&2 || true
            exit 1
        fi
        sleep 1
    done
}

until_ok "the cluster's health check" temporal operator cluster health
if ! temporal operator namespace describe --namespace "$namespace" >/dev/null 2>&1; then
    until_ok "creating namespace $namespace" \
        temporal operator namespace create --namespace "$namespace" --retention 72h
fi
until_ok "describing namespace $namespace" temporal operator namespace describe --namespace "$namespace"
until_ok "listing search attributes" temporal operator search-attribute list --namespace "$namespace"
existing=$(temporal operator search-attribute list --namespace "$namespace")
for key in $SEARCH_ATTRIBUTES; do
    if ! echo "$existing" | grep -qw "$key"; then
        until_ok "creating search attribute $key" temporal operator search-attribute create \
            --namespace "$namespace" --name "$key" --type Keyword
    fi
done
echo "temporal setup: namespace $namespace with $SEARCH_ATTRIBUTES"
