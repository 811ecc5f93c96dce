# The native stack's services: how each starts, how we know it is ready, and
# how it stops. Every process listens on 127.0.0.1 and keeps its state under
# $ASIDE_RUN_DIR/<service>.
# shellcheck shell=bash

# The newest installed PostgreSQL's binaries, or nothing. Looked up when used,
# not when this file is sourced: on a fresh machine the install step that
# brings PostgreSQL runs after sourcing.
pg_bin() { { find /usr/lib/postgresql -mindepth 2 -maxdepth 2 -name bin 2>/dev/null || true; } | sort -V | tail -n1; }

# ---- readiness: probe_<kind> PORT [ARG] returns 0 when the service answers ----
probe_http() { http_ok "http://127.0.0.1:$1$2"; }
probe_pg_isready() { "$(pg_bin)/pg_isready" -q -h 127.0.0.1 -p "$1" -t 2; }
probe_redis_ping() { [ "$(redis-cli -h 127.0.0.1 -p "$1" ping 2>/dev/null)" = PONG ]; }

# ---- the table: infra/services.tsv -------------------------------------------
# ALL_SERVICES is its start order; the other columns are kept by service name.
ALL_SERVICES=()
declare -gA SERVICE_PORTS=() SERVICE_URL=() SERVICE_PROBE=() SERVICE_MATCH=()

# expand_vars TEXT: TEXT with each ${VAR} replaced by that variable's value.
expand_vars() {
    local text=$1 out="" var re='^([^$]*)\$\{([A-Za-z_][A-Za-z0-9_]*)\}(.*)$'
    while [[ $text =~ $re ]]; do
        var=${BASH_REMATCH[2]}
        [ -n "${!var+set}" ] || die "infra/services.tsv names \${$var}, which infra/env.sh does not set"
        out+=${BASH_REMATCH[1]}${!var}
        text=${BASH_REMATCH[3]}
    done
    printf '%s' "$out$text"
}

read_service_table() {
    local name ports url probe match extra var
    while IFS=$'\t' read -r name ports url probe match extra || [ -n "$name" ]; do
        case $name in "#"* | "" | name) continue ;; esac
        if [ -z "$match" ] || [ -n "$extra" ]; then
            die "infra/services.tsv: '$name' needs 5 tab-separated columns"
        fi
        declare -F "probe_${probe%% *}" >/dev/null || die "infra/services.tsv: '$name' has unknown probe '$probe'"
        # A misspelt variable fails here, once, rather than as an empty port later.
        for var in $ports; do expand_vars "\${$var}" >/dev/null; done
        expand_vars "$url" >/dev/null
        ALL_SERVICES+=("$name")
        SERVICE_PORTS[$name]=$ports
        SERVICE_URL[$name]=$url
        SERVICE_PROBE[$name]=$probe
        SERVICE_MATCH[$name]=$match
    done <"$ASIDE_ROOT/infra/services.tsv"
}
read_service_table

# service_port NAME: the ports NAME listens on, space-separated, the main one first.
service_port() {
    local var ports=()
    for var in ${SERVICE_PORTS[$1]}; do ports+=("${!var}"); done
    echo "${ports[*]}"
}

service_url() { expand_vars "${SERVICE_URL[$1]}" && echo; }

# service_ready NAME: 0 when NAME answers its probe on its main port.
service_ready() {
    local kind arg var=${SERVICE_PORTS[$1]%% *}
    read -r kind arg <<<"${SERVICE_PROBE[$1]}"
    "probe_$kind" "${!var}" ${arg:+"$arg"}
}

# launch_service NAME CMD...: launch CMD, recorded with NAME's process match.
launch_service() { launch "$1" "${SERVICE_MATCH[$1]}" "${@:2}"; }

# ---- start: launch, then leave readiness to the caller -----------------------
psql_admin() { PGOPTIONS="-c client_min_messages=warning" psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$ASIDE_PG_PORT" -U aside "$@"; }

start_postgres() {
    local dir=$ASIDE_RUN_DIR/postgres
    local pg
    pg=$(pg_bin)
    [ -n "$pg" ] || die "PostgreSQL binaries not found under /usr/lib/postgresql; run infra/install.sh"
    mkdir -p "$dir"
    [ "$(id -u)" -eq 0 ] && chown postgres:postgres "$dir"
    if [ ! -s "$dir/data/PG_VERSION" ]; then
        # Trust on loopback only: a lab database with no secret to leak. The
        # compose stack uses a password from the environment instead.
        as_postgres "$pg/initdb" -D "$dir/data" -U aside --auth=trust -E UTF8 --locale=C.UTF-8 \
            >"$LOG_DIR/postgres-initdb.log" 2>&1 || die "initdb failed (see .run/logs/postgres-initdb.log)"
    fi
    cp "$ASIDE_ROOT/infra/conf/postgresql.conf" "$dir/data/postgresql.auto.conf"
    [ "$(id -u)" -eq 0 ] && chown postgres:postgres "$dir/data/postgresql.auto.conf"
    as_postgres "$pg/pg_ctl" -D "$dir/data" -l "$dir/server.log" -s \
        -o "-c listen_addresses=127.0.0.1 -p $ASIDE_PG_PORT -k $dir" start >/dev/null 2>&1 || true
    local pid deadline=$((SECONDS + 10))
    until pid=$(head -n1 "$dir/data/postmaster.pid" 2>/dev/null) && [ -n "$pid" ]; do
        [ "$SECONDS" -lt "$deadline" ] || die "PostgreSQL did not start (see .run/postgres/server.log)"
        sleep 0.1
    done
    record_pid postgres "$pid" "${SERVICE_MATCH[postgres]}"
}

# After PostgreSQL answers: the lab database, its schema and the statement stats.
setup_postgres() {
    psql_admin -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname = 'aside'" | grep -q 1 ||
        psql_admin -d postgres -c "CREATE DATABASE aside"
    psql_admin -d aside -f "$ASIDE_ROOT/contracts/schema.sql"
    psql_admin -d aside -c "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"
}

stop_postgres() {
    local dir=$ASIDE_RUN_DIR/postgres
    if pid_of postgres >/dev/null; then
        as_postgres "$(pg_bin)/pg_ctl" -D "$dir/data" -m fast -s -w -t 20 stop >/dev/null 2>&1 || true
    fi
    stop_pid postgres
}

start_redis() {
    local dir=$ASIDE_RUN_DIR/redis
    mkdir -p "$dir"
    # A pure cache: no persistence, LRU eviction when full. No process title:
    # Redis writes it over its environment, where pid_of looks for ASIDE_RUN_DIR.
    launch_service redis redis-server "$ASIDE_ROOT/infra/conf/redis.conf" \
        --port "$ASIDE_REDIS_PORT" --dir "$dir" --set-proc-title no
}

start_influxdb() {
    local dir=$ASIDE_RUN_DIR/influxdb
    mkdir -p "$dir"
    sed -e "s#@DIR@#$dir#g" -e "s#@PORT@#$ASIDE_INFLUX_PORT#g" -e "s#@RPC_PORT@#$ASIDE_INFLUX_RPC_PORT#g" \
        "$ASIDE_ROOT/infra/conf/influxdb.conf" >"$dir/influxdb.conf"
    launch_service influxdb influxd -config "$dir/influxdb.conf"
}

setup_influxdb() {
    curl -fsS --max-time 5 -XPOST "http://127.0.0.1:$ASIDE_INFLUX_PORT/query" \
        --data-urlencode "q=CREATE DATABASE k6" >/dev/null || die "could not create InfluxDB database k6"
}

start_node-exporter() {
    launch_service node-exporter prometheus-node-exporter \
        --web.listen-address="127.0.0.1:$ASIDE_NODE_EXPORTER_PORT" \
        --collector.disable-defaults --collector.cpu --collector.meminfo --collector.loadavg \
        --collector.netdev --collector.filefd --collector.stat
}

start_redis-exporter() {
    launch_service redis-exporter prometheus-redis-exporter \
        -web.listen-address "127.0.0.1:$ASIDE_REDIS_EXPORTER_PORT" -redis.addr "redis://127.0.0.1:$ASIDE_REDIS_PORT"
}

start_postgres-exporter() {
    DATA_SOURCE_NAME="postgresql://aside@127.0.0.1:$ASIDE_PG_PORT/aside?sslmode=disable" \
        launch_service postgres-exporter prometheus-postgres-exporter \
        --web.listen-address="127.0.0.1:$ASIDE_PG_EXPORTER_PORT"
}

start_prometheus() {
    local dir=$ASIDE_RUN_DIR/prometheus
    mkdir -p "$dir/targets" "$dir/data"
    cp "$ASIDE_ROOT/prometheus/prometheus.yml" "$ASIDE_ROOT/prometheus/rules.yml" "$dir/"
    local job port
    for job in gateway:$ASIDE_GATEWAY_PORT core:$ASIDE_CORE_PORT node:$ASIDE_NODE_EXPORTER_PORT \
        redis:$ASIDE_REDIS_EXPORTER_PORT postgres:$ASIDE_PG_EXPORTER_PORT; do
        port=${job#*:}
        printf '[{"targets": ["127.0.0.1:%s"], "labels": {"stack": "native"}}]\n' "$port" >"$dir/targets/${job%%:*}.json"
    done
    launch_service prometheus prometheus --config.file="$dir/prometheus.yml" \
        --storage.tsdb.path="$dir/data" --storage.tsdb.retention.time=15d \
        --web.listen-address="127.0.0.1:$ASIDE_PROM_PORT" --web.enable-lifecycle --web.enable-admin-api
}

start_core() {
    [ -x "$ASIDE_BIN_DIR/aside-core" ] || die "bin/aside-core is missing; run infra/install.sh core"
    launch_service core "$ASIDE_BIN_DIR/aside-core"
}

start_gateway() {
    mkdir -p "$ASIDE_RUN_DIR/gateway/prometheus-multiproc"
    PROMETHEUS_MULTIPROC_DIR=$ASIDE_RUN_DIR/gateway/prometheus-multiproc \
        launch_service gateway "$ASIDE_ROOT/.venv/bin/gunicorn" \
        --config "$ASIDE_ROOT/gateway/gunicorn.conf.py" "aside_gateway.asgi:app"
}

stop_service() {
    case $1 in
        postgres) stop_postgres ;;
        *) stop_pid "$1" ;;
    esac
}

# Services that need a step once they answer.
setup_service() {
    case $1 in
        postgres) setup_postgres ;;
        influxdb) setup_influxdb ;;
    esac
}
