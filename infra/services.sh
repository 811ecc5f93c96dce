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
probe_redis_ping() { [ "$(redis_cli -p "$1" ping 2>/dev/null)" = PONG ]; }

# redis_cli ARGS...: redis-cli on 127.0.0.1 with the stack's password, if any
# (from the environment: an argument would show in ps).
redis_cli() {
    if [ -n "$ASIDE_REDIS_PASSWORD" ]; then
        REDISCLI_AUTH=$ASIDE_REDIS_PASSWORD redis-cli -h 127.0.0.1 "$@"
    else
        redis-cli -h 127.0.0.1 "$@"
    fi
}

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
psql_admin() { PGPASSWORD=$ASIDE_PG_PASSWORD PGOPTIONS="-c client_min_messages=warning" psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$ASIDE_PG_PORT" -U aside "$@"; }

start_postgres() {
    local dir=$ASIDE_RUN_DIR/postgres
    local pg
    pg=$(pg_bin)
    [ -n "$pg" ] || die "PostgreSQL binaries not found under /usr/lib/postgresql; run infra/install.sh"
    mkdir -p "$dir"
    [ "$(id -u)" -eq 0 ] && chown postgres:postgres "$dir"
    if [ ! -s "$dir/data/PG_VERSION" ]; then
        [ -n "$ASIDE_PG_PASSWORD" ] || die "no PostgreSQL password in $ASIDE_PASSWORD_FILE (can this user write $ASIDE_RUN_DIR?)"
        # The superuser's password, for initdb only: readable by its owner alone.
        local pwfile=$dir/initdb-password rc=0
        (umask 077 && printf '%s\n' "$ASIDE_PG_PASSWORD" >"$pwfile")
        as_root && chown postgres:postgres "$pwfile"
        as_postgres "$pg/initdb" -D "$dir/data" -U aside --auth=scram-sha-256 --pwfile="$pwfile" \
            -E UTF8 --locale=C.UTF-8 >"$LOG_DIR/postgres-initdb.log" 2>&1 || rc=$?
        rm -f "$pwfile"
        [ "$rc" -eq 0 ] || die "initdb failed (see .run/logs/postgres-initdb.log)"
    fi
    pg_conf "$ASIDE_ROOT/infra/conf/postgresql.conf" "$dir/data/postgresql.auto.conf"
    # A cluster made before the passwords trusts every local user: it keeps its
    # pg_hba.conf until setup_postgres has given role aside its password.
    pg_trusts || pg_conf "$ASIDE_ROOT/infra/conf/pg_hba.conf" "$dir/data/pg_hba.conf"
    rotate_log "$dir/server.log"
    as_postgres "$pg/pg_ctl" -D "$dir/data" -l "$dir/server.log" -s \
        -o "-c listen_addresses=127.0.0.1 -p $ASIDE_PG_PORT -k $dir" start >/dev/null 2>&1 || true
    local pid deadline=$((SECONDS + 10))
    until pid=$(head -n1 "$dir/data/postmaster.pid" 2>/dev/null) && [ -n "$pid" ]; do
        [ "$SECONDS" -lt "$deadline" ] || die "PostgreSQL did not start (see .run/postgres/server.log)"
        sleep 0.1
    done
    record_pid postgres "$pid" "${SERVICE_MATCH[postgres]}"
}

# pg_conf SRC DEST: copy a configuration file into the cluster, owned by postgres.
pg_conf() {
    cp "$1" "$2"
    as_root && chown postgres:postgres "$2"
    return 0
}

# pg_trusts: the cluster's pg_hba.conf has a trust line (made before the passwords).
pg_trusts() {
    grep -v '^[[:space:]]*#' "$ASIDE_RUN_DIR/postgres/data/pg_hba.conf" 2>/dev/null | grep -qw trust
}

# A cluster made before the passwords: give role aside its password while trust
# still lets us in, then put our pg_hba.conf in place.
migrate_postgres() {
    local dir=$ASIDE_RUN_DIR/postgres
    info "PostgreSQL was made without a password: setting role aside's (from $ASIDE_PASSWORD_FILE)"
    # \getenv: the password never appears on a command line.
    ASIDE_PG_PW=$ASIDE_PG_PASSWORD psql_admin -d postgres <<'SQL'
\getenv pw ASIDE_PG_PW
ALTER ROLE aside PASSWORD :'pw';
SQL
    pg_conf "$ASIDE_ROOT/infra/conf/pg_hba.conf" "$dir/data/pg_hba.conf"
    as_postgres "$(pg_bin)/pg_ctl" -D "$dir/data" -s reload >/dev/null
}

# After PostgreSQL answers: the lab database, its schema and the statement stats.
setup_postgres() {
    [ -n "$ASIDE_PG_PASSWORD" ] || die "no PostgreSQL password in $ASIDE_PASSWORD_FILE (can this user write $ASIDE_RUN_DIR?)"
    if pg_trusts; then migrate_postgres; fi
    psql_admin -d postgres -tAc "SELECT 1" >/dev/null 2>&1 ||
        die "PostgreSQL in $ASIDE_RUN_DIR/postgres refuses the password in $ASIDE_PASSWORD_FILE; run 'make clean' (drops its data) and 'make up'"
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
    own_state "$dir"
    # infra/conf/redis.conf and the password, in a file only Redis's user reads.
    (
        umask 077
        rm -f "$dir/redis.conf" # made 0644 by an older version
        {
            cat "$ASIDE_ROOT/infra/conf/redis.conf"
            [ -z "$ASIDE_REDIS_PASSWORD" ] || printf 'requirepass %s\n' "$ASIDE_REDIS_PASSWORD"
        } >"$dir/redis.conf"
    )
    as_root && chown "$ASIDE_SERVICE_USER:" "$dir/redis.conf"
    # A pure cache: no persistence, LRU eviction when full. No process title:
    # Redis writes it over its environment, where pid_of looks for ASIDE_RUN_DIR.
    launch_service redis "${AS_SERVICE[@]}" redis-server "$dir/redis.conf" \
        --port "$ASIDE_REDIS_PORT" --dir "$dir" --set-proc-title no
}

start_influxdb() {
    local dir=$ASIDE_RUN_DIR/influxdb
    mkdir -p "$dir"
    sed -e "s#@DIR@#$dir#g" -e "s#@PORT@#$ASIDE_INFLUX_PORT#g" -e "s#@RPC_PORT@#$ASIDE_INFLUX_RPC_PORT#g" \
        "$ASIDE_ROOT/infra/conf/influxdb.conf" >"$dir/influxdb.conf"
    own_state "$dir"
    launch_service influxdb "${AS_SERVICE[@]}" influxd -config "$dir/influxdb.conf"
}

setup_influxdb() {
    curl -fsS --max-time 5 -XPOST "http://127.0.0.1:$ASIDE_INFLUX_PORT/query" \
        --data-urlencode "q=CREATE DATABASE aside" >/dev/null || die "could not create InfluxDB database aside"
}

start_node-exporter() {
    launch_service node-exporter "${AS_SERVICE[@]}" prometheus-node-exporter \
        --web.listen-address="127.0.0.1:$ASIDE_NODE_EXPORTER_PORT" \
        --collector.disable-defaults --collector.cpu --collector.meminfo --collector.loadavg \
        --collector.netdev --collector.filefd --collector.stat
}

start_redis-exporter() {
    # The password from the environment, not -redis.password: ps shows arguments.
    REDIS_PASSWORD=$ASIDE_REDIS_PASSWORD launch_service redis-exporter "${AS_SERVICE[@]}" prometheus-redis-exporter \
        -web.listen-address "127.0.0.1:$ASIDE_REDIS_EXPORTER_PORT" -redis.addr "redis://127.0.0.1:$ASIDE_REDIS_PORT"
}

start_postgres-exporter() {
    DATA_SOURCE_NAME="postgresql://aside:$ASIDE_PG_PASSWORD@127.0.0.1:$ASIDE_PG_PORT/aside?sslmode=disable" \
        launch_service postgres-exporter "${AS_SERVICE[@]}" prometheus-postgres-exporter \
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
    own_state "$dir"
    # No --web.enable-admin-api: nothing here deletes series or snapshots the TSDB.
    launch_service prometheus "${AS_SERVICE[@]}" prometheus --config.file="$dir/prometheus.yml" \
        --storage.tsdb.path="$dir/data" --storage.tsdb.retention.time=15d \
        --web.listen-address="127.0.0.1:$ASIDE_PROM_PORT" --web.enable-lifecycle
}

# The proxies of infra/conf/toxiproxy.json, made when it starts; with no toxic
# each passes bytes through unchanged. Its state is in memory: a restart comes
# back with every proxy and no toxic.
start_toxiproxy() {
    [ -x "$ASIDE_BIN_DIR/aside-proxy" ] || die "bin/aside-proxy is missing; run infra/install.sh toxiproxy"
    local dir=$ASIDE_RUN_DIR/toxiproxy
    mkdir -p "$dir"
    sed -e "s#@REDIS_PORT@#$ASIDE_REDIS_PORT#g" -e "s#@PG_PORT@#$ASIDE_PG_PORT#g" \
        -e "s#@CORE_PORT@#$ASIDE_CORE_PORT#g" \
        -e "s#@PROXY_REDIS_PORT@#$ASIDE_TOXIPROXY_REDIS_PORT#g" \
        -e "s#@PROXY_POSTGRES_PORT@#$ASIDE_TOXIPROXY_POSTGRES_PORT#g" \
        -e "s#@PROXY_CORE_PORT@#$ASIDE_TOXIPROXY_CORE_PORT#g" \
        -e "s#@PROXY_CORE_REDIS_PORT@#$ASIDE_TOXIPROXY_CORE_REDIS_PORT#g" \
        -e "s#@PROXY_CORE_POSTGRES_PORT@#$ASIDE_TOXIPROXY_CORE_POSTGRES_PORT#g" \
        "$ASIDE_ROOT/infra/conf/toxiproxy.json" >"$dir/proxies.json"
    own_state "$dir"
    # Its default level traces every connection: a load would fill the log.
    LOG_LEVEL=warn launch_service toxiproxy "${AS_SERVICE[@]}" "$ASIDE_BIN_DIR/aside-proxy" \
        -host 127.0.0.1 -port "$ASIDE_TOXIPROXY_PORT" -config "$dir/proxies.json"
}

start_core() {
    [ -x "$ASIDE_BIN_DIR/aside-core" ] || die "bin/aside-core is missing; run infra/install.sh core"
    launch_service core "${AS_SERVICE[@]}" "$ASIDE_BIN_DIR/aside-core"
}

start_gateway() {
    mkdir -p "$ASIDE_RUN_DIR/gateway/prometheus-multiproc"
    own_state "$ASIDE_RUN_DIR/gateway"
    PROMETHEUS_MULTIPROC_DIR=$ASIDE_RUN_DIR/gateway/prometheus-multiproc \
        launch_service gateway "${AS_SERVICE[@]}" "$ASIDE_ROOT/.venv/bin/gunicorn" \
        --config "$ASIDE_ROOT/gateway/gunicorn.conf.py" "aside_gateway.front.asgi:app"
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
