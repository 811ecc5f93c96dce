# The native stack's services: how each starts, how we know it is ready, and
# how it stops. Every process listens on 127.0.0.1 and keeps its state under
# $ASIDE_RUN_DIR/<service>.
# shellcheck shell=bash

# Start order; `make down` stops in reverse.
ALL_SERVICES=(postgres redis influxdb node-exporter redis-exporter postgres-exporter prometheus core gateway)

# The newest installed PostgreSQL's binaries, or nothing. Looked up when used,
# not when this file is sourced: on a fresh machine the install step that
# brings PostgreSQL runs after sourcing.
pg_bin() { { find /usr/lib/postgresql -mindepth 2 -maxdepth 2 -name bin 2>/dev/null || true; } | sort -V | tail -n1; }

service_port() {
    case $1 in
        postgres) echo "$ASIDE_PG_PORT" ;;
        redis) echo "$ASIDE_REDIS_PORT" ;;
        influxdb) echo "$ASIDE_INFLUX_PORT $ASIDE_INFLUX_RPC_PORT" ;;
        node-exporter) echo "$ASIDE_NODE_EXPORTER_PORT" ;;
        redis-exporter) echo "$ASIDE_REDIS_EXPORTER_PORT" ;;
        postgres-exporter) echo "$ASIDE_PG_EXPORTER_PORT" ;;
        prometheus) echo "$ASIDE_PROM_PORT" ;;
        core) echo "$ASIDE_CORE_PORT" ;;
        gateway) echo "$ASIDE_GATEWAY_PORT" ;;
    esac
}

service_url() {
    case $1 in
        postgres) echo "postgresql://aside@127.0.0.1:$ASIDE_PG_PORT/aside" ;;
        redis) echo "redis://127.0.0.1:$ASIDE_REDIS_PORT" ;;
        influxdb) echo "http://127.0.0.1:$ASIDE_INFLUX_PORT (db k6)" ;;
        node-exporter) echo "http://127.0.0.1:$ASIDE_NODE_EXPORTER_PORT/metrics" ;;
        redis-exporter) echo "http://127.0.0.1:$ASIDE_REDIS_EXPORTER_PORT/metrics" ;;
        postgres-exporter) echo "http://127.0.0.1:$ASIDE_PG_EXPORTER_PORT/metrics" ;;
        prometheus) echo "http://127.0.0.1:$ASIDE_PROM_PORT" ;;
        core) echo "http://127.0.0.1:$ASIDE_CORE_PORT" ;;
        gateway) echo "http://127.0.0.1:$ASIDE_GATEWAY_PORT" ;;
    esac
}

# ---- readiness: each returns 0 when the service answers ----------------------
ready_postgres() { "$(pg_bin)/pg_isready" -q -h 127.0.0.1 -p "$ASIDE_PG_PORT" -t 2; }
ready_redis() { [ "$(redis-cli -h 127.0.0.1 -p "$ASIDE_REDIS_PORT" ping 2>/dev/null)" = PONG ]; }
ready_influxdb() { http_ok "http://127.0.0.1:$ASIDE_INFLUX_PORT/ping"; }
ready_node-exporter() { http_ok "http://127.0.0.1:$ASIDE_NODE_EXPORTER_PORT/metrics"; }
ready_redis-exporter() { http_ok "http://127.0.0.1:$ASIDE_REDIS_EXPORTER_PORT/metrics"; }
ready_postgres-exporter() { http_ok "http://127.0.0.1:$ASIDE_PG_EXPORTER_PORT/metrics"; }
ready_prometheus() { http_ok "http://127.0.0.1:$ASIDE_PROM_PORT/-/ready"; }
ready_core() { http_ok "http://127.0.0.1:$ASIDE_CORE_PORT/readyz"; }
ready_gateway() { http_ok "http://127.0.0.1:$ASIDE_GATEWAY_PORT/readyz"; }

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
    record_pid postgres "$pid" "postgres"
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
    # A pure cache: no persistence, LRU eviction when full.
    launch redis redis-server redis-server "$ASIDE_ROOT/infra/conf/redis.conf" \
        --port "$ASIDE_REDIS_PORT" --dir "$dir"
}

start_influxdb() {
    local dir=$ASIDE_RUN_DIR/influxdb
    mkdir -p "$dir"
    sed -e "s#@DIR@#$dir#g" -e "s#@PORT@#$ASIDE_INFLUX_PORT#g" -e "s#@RPC_PORT@#$ASIDE_INFLUX_RPC_PORT#g" \
        "$ASIDE_ROOT/infra/conf/influxdb.conf" >"$dir/influxdb.conf"
    launch influxdb influxd influxd -config "$dir/influxdb.conf"
}

setup_influxdb() {
    curl -fsS --max-time 5 -XPOST "http://127.0.0.1:$ASIDE_INFLUX_PORT/query" \
        --data-urlencode "q=CREATE DATABASE k6" >/dev/null || die "could not create InfluxDB database k6"
}

start_node-exporter() {
    launch node-exporter prometheus-node-exporter prometheus-node-exporter \
        --web.listen-address="127.0.0.1:$ASIDE_NODE_EXPORTER_PORT" \
        --collector.disable-defaults --collector.cpu --collector.meminfo --collector.loadavg \
        --collector.netdev --collector.filefd --collector.stat
}

start_redis-exporter() {
    launch redis-exporter prometheus-redis-exporter prometheus-redis-exporter \
        -web.listen-address "127.0.0.1:$ASIDE_REDIS_EXPORTER_PORT" -redis.addr "redis://127.0.0.1:$ASIDE_REDIS_PORT"
}

start_postgres-exporter() {
    DATA_SOURCE_NAME="postgresql://aside@127.0.0.1:$ASIDE_PG_PORT/aside?sslmode=disable" \
        launch postgres-exporter prometheus-postgres-exporter prometheus-postgres-exporter \
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
    launch prometheus prometheus prometheus --config.file="$dir/prometheus.yml" \
        --storage.tsdb.path="$dir/data" --storage.tsdb.retention.time=15d \
        --web.listen-address="127.0.0.1:$ASIDE_PROM_PORT" --web.enable-lifecycle --web.enable-admin-api
}

start_core() {
    [ -x "$ASIDE_BIN_DIR/aside-core" ] || die "bin/aside-core is missing; run infra/install.sh core"
    launch core aside-core "$ASIDE_BIN_DIR/aside-core"
}

start_gateway() {
    mkdir -p "$ASIDE_RUN_DIR/gateway/prometheus-multiproc"
    PROMETHEUS_MULTIPROC_DIR=$ASIDE_RUN_DIR/gateway/prometheus-multiproc \
        launch gateway gunicorn "$ASIDE_ROOT/.venv/bin/gunicorn" \
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
