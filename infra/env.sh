# Defaults of the native stack: ports, folders and the URLs the services read.
# Sourced by every infra script and by the Makefile's shell; any variable already
# set in the environment wins. README's configuration table lists the same names.
# shellcheck shell=bash

# The checkout this file belongs to, always: an ASIDE_ROOT exported by a shell
# that sourced another checkout's env.sh must not send this one's commands there.
ASIDE_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ASIDE_RUN_DIR=${ASIDE_RUN_DIR:-$ASIDE_ROOT/.run}
ASIDE_BIN_DIR=${ASIDE_BIN_DIR:-$ASIDE_ROOT/bin}

# Ports: clear of the standard ones (5432, 6379, 8086, 9090, ...) so a system
# PostgreSQL or Redis can keep running beside the lab, and below the kernel's
# ephemeral range (32768-60999): a client socket took 58080 once and the core
# could not start.
ASIDE_PG_PORT=${ASIDE_PG_PORT:-25432}
ASIDE_REDIS_PORT=${ASIDE_REDIS_PORT:-26379}
ASIDE_INFLUX_PORT=${ASIDE_INFLUX_PORT:-28086}
ASIDE_INFLUX_RPC_PORT=${ASIDE_INFLUX_RPC_PORT:-28088}
ASIDE_PROM_PORT=${ASIDE_PROM_PORT:-29090}
ASIDE_NODE_EXPORTER_PORT=${ASIDE_NODE_EXPORTER_PORT:-29100}
ASIDE_REDIS_EXPORTER_PORT=${ASIDE_REDIS_EXPORTER_PORT:-29121}
ASIDE_PG_EXPORTER_PORT=${ASIDE_PG_EXPORTER_PORT:-29187}
ASIDE_CORE_PORT=${ASIDE_CORE_PORT:-28080}
ASIDE_GATEWAY_PORT=${ASIDE_GATEWAY_PORT:-28000}
# toxiproxy: its API, and the proxies on the services' hops (infra/conf/toxiproxy.json).
# Nothing goes through them unless the bench asks for a distance or a gray failure.
ASIDE_TOXIPROXY_PORT=${ASIDE_TOXIPROXY_PORT:-28474}
ASIDE_TOXIPROXY_REDIS_PORT=${ASIDE_TOXIPROXY_REDIS_PORT:-26479}
ASIDE_TOXIPROXY_POSTGRES_PORT=${ASIDE_TOXIPROXY_POSTGRES_PORT:-25532}
ASIDE_TOXIPROXY_CORE_PORT=${ASIDE_TOXIPROXY_CORE_PORT:-28180}
ASIDE_TOXIPROXY_CORE_REDIS_PORT=${ASIDE_TOXIPROXY_CORE_REDIS_PORT:-26480}
ASIDE_TOXIPROXY_CORE_POSTGRES_PORT=${ASIDE_TOXIPROXY_CORE_POSTGRES_PORT:-25533}
# The optional Redis Cluster's three primaries and their replicas, one each in
# the same order (ASIDE_REDIS_CLUSTER=1: infra/cluster.sh).
ASIDE_REDIS_CLUSTER=${ASIDE_REDIS_CLUSTER:-0}
ASIDE_REDIS_CLUSTER_PORTS=${ASIDE_REDIS_CLUSTER_PORTS:-26381 26382 26383}
ASIDE_REDIS_CLUSTER_REPLICA_PORTS=${ASIDE_REDIS_CLUSTER_REPLICA_PORTS:-26384 26385 26386}

# Run as root, the scripts start every service but PostgreSQL as this system
# user (infra/install.sh creates it); run as anyone else, as that user.
ASIDE_SERVICE_USER=${ASIDE_SERVICE_USER:-aside}
# A log in .run/logs above this size is renamed to .1 when its service starts.
ASIDE_LOG_MAX_BYTES=${ASIDE_LOG_MAX_BYTES:-52428800}

# PostgreSQL's and Redis's passwords, one pair per stack, made the first time
# this file is sourced for the stack (0600). Made here rather than by `up` so
# that a shell which sourced this file before the first `up` (the Makefile,
# infra/test.sh) already carries the passwords `up` sets. A folder this user
# cannot write leaves the URLs without passwords.
ASIDE_PASSWORD_FILE=$ASIDE_RUN_DIR/passwords
if [ ! -s "$ASIDE_PASSWORD_FILE" ] && mkdir -p "$ASIDE_RUN_DIR" 2>/dev/null; then
    (
        umask 077
        new=$ASIDE_PASSWORD_FILE.$$
        {
            echo "# PostgreSQL's (role aside) and Redis's passwords of this stack; read by infra/env.sh"
            echo "postgres=$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')"
            echo "redis=$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')"
        } >"$new" &&
            mv -n "$new" "$ASIDE_PASSWORD_FILE" # -n: a concurrent first source keeps its pair
        rm -f "$new"
    ) 2>/dev/null || true
fi
ASIDE_PG_PASSWORD="" ASIDE_REDIS_PASSWORD=""
if [ -r "$ASIDE_PASSWORD_FILE" ]; then
    while IFS='=' read -r key value; do
        case $key in
            postgres) ASIDE_PG_PASSWORD=$value ;;
            redis) ASIDE_REDIS_PASSWORD=$value ;;
        esac
    done <"$ASIDE_PASSWORD_FILE"
    unset key value
fi

# What the services read (one place each: gateway/src/aside_gateway/config/settings.py,
# core-go/internal/config).
DATABASE_URL=${DATABASE_URL:-postgresql://aside${ASIDE_PG_PASSWORD:+:$ASIDE_PG_PASSWORD}@127.0.0.1:$ASIDE_PG_PORT/aside}
REDIS_URL=${REDIS_URL:-redis://${ASIDE_REDIS_PASSWORD:+:$ASIDE_REDIS_PASSWORD@}127.0.0.1:$ASIDE_REDIS_PORT/0}
# A seed node of the optional cluster, for services run with REDIS_MODE=cluster.
ASIDE_REDIS_CLUSTER_URL=${ASIDE_REDIS_CLUSTER_URL:-redis://${ASIDE_REDIS_PASSWORD:+:$ASIDE_REDIS_PASSWORD@}127.0.0.1:${ASIDE_REDIS_CLUSTER_PORTS%% *}/0}
CORE_URL=${CORE_URL:-http://127.0.0.1:$ASIDE_CORE_PORT}
GATEWAY_URL=${GATEWAY_URL:-http://127.0.0.1:$ASIDE_GATEWAY_PORT}
INFLUXDB_URL=${INFLUXDB_URL:-http://127.0.0.1:$ASIDE_INFLUX_PORT/aside}
PROMETHEUS_URL=${PROMETHEUS_URL:-http://127.0.0.1:$ASIDE_PROM_PORT}
CORE_LISTEN_ADDR=${CORE_LISTEN_ADDR:-127.0.0.1:$ASIDE_CORE_PORT}
GATEWAY_BIND=${GATEWAY_BIND:-127.0.0.1:$ASIDE_GATEWAY_PORT}
# The native stack is a lab: it enables the cache-off arm and the Python compute
# arm. `ASIDE_PROFILE=production` turns every lab-only switch off.
ASIDE_PROFILE=${ASIDE_PROFILE:-lab}

export ASIDE_ROOT ASIDE_RUN_DIR ASIDE_BIN_DIR ASIDE_SERVICE_USER ASIDE_LOG_MAX_BYTES
export ASIDE_PG_PORT ASIDE_REDIS_PORT ASIDE_INFLUX_PORT ASIDE_INFLUX_RPC_PORT ASIDE_PROM_PORT
export ASIDE_NODE_EXPORTER_PORT ASIDE_REDIS_EXPORTER_PORT ASIDE_PG_EXPORTER_PORT
export ASIDE_CORE_PORT ASIDE_GATEWAY_PORT
export ASIDE_TOXIPROXY_PORT ASIDE_TOXIPROXY_REDIS_PORT ASIDE_TOXIPROXY_POSTGRES_PORT
export ASIDE_TOXIPROXY_CORE_PORT ASIDE_TOXIPROXY_CORE_REDIS_PORT ASIDE_TOXIPROXY_CORE_POSTGRES_PORT
export ASIDE_REDIS_CLUSTER ASIDE_REDIS_CLUSTER_PORTS ASIDE_REDIS_CLUSTER_REPLICA_PORTS ASIDE_REDIS_CLUSTER_URL
export DATABASE_URL REDIS_URL CORE_URL GATEWAY_URL INFLUXDB_URL PROMETHEUS_URL
export CORE_LISTEN_ADDR GATEWAY_BIND ASIDE_PROFILE
