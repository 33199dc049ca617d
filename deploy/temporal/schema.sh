#!/bin/sh
# Temporal's schema on PostgreSQL, with temporal-sql-tool (tools/sql/README.md of
# go.temporal.io/server): each database created once and set up at version 0.0, then updated to
# the schema the binary embeds (postgresql/v12/temporal, postgresql/v12/visibility). Safe to run
# again: an existing database is only updated (to the same version, a no-op).
#
# Reads the Temporal server's own variables (docker-compose.yml's x-temporal-env): DB, POSTGRES_SEEDS,
# DB_PORT, POSTGRES_USER, POSTGRES_PWD, DBNAME, VISIBILITY_DBNAME. Run by the temporal-schema
# service of docker-compose.yml and by `make stack` (starter/dev/stack.py).
set -eu

sql() {
    temporal-sql-tool --plugin "$DB" --endpoint "$POSTGRES_SEEDS" --port "$DB_PORT" \
        --user "$POSTGRES_USER" --password "$POSTGRES_PWD" "$@"
}

schema() {  # <database> <embedded schema>
    if created=$(sql --database "$1" create-database 2>&1); then
        sql --database "$1" setup-schema -v 0.0
    else
        case "$created" in
            *"already exists"*) ;;
            *) echo "$created" >&2; exit 1 ;;
        esac
    fi
    sql --database "$1" update-schema --schema-name "$2"
}

schema "$DBNAME" postgresql/v12/temporal
schema "$VISIBILITY_DBNAME" postgresql/v12/visibility
