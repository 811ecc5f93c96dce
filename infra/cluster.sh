# The optional Redis Cluster of the stack: three primaries (no replicas) on
# ASIDE_REDIS_CLUSTER_PORTS, state under .run/redis-cluster/<port>. Started by
# `infra/stack.sh up` when ASIDE_REDIS_CLUSTER=1 (infra/test.sh sets it, for
# the cluster tests), stopped by `down` whenever its nodes run. Sourced by
# infra/stack.sh after services.sh; the services read it at
# ASIDE_REDIS_CLUSTER_URL with REDIS_MODE=cluster.
# shellcheck shell=bash

CLUSTER_MATCH=redis-server

# cluster_node_names: redis-cluster-1 ... one per port, in port order.
cluster_node_names() {
    local i=0 port
    for port in $ASIDE_REDIS_CLUSTER_PORTS; do
        i=$((i + 1))
        printf 'redis-cluster-%s:%s\n' "$i" "$port"
    done
}

# cluster_ok PORT: the node on PORT says cluster_state:ok.
cluster_ok() { redis_cli -p "$1" cluster info 2>/dev/null | tr -d '\r' | grep -qx 'cluster_state:ok'; }

cluster_running() {
    local node
    for node in $(cluster_node_names); do
        pid_of "${node%%:*}" >/dev/null && cluster_ok "${node##*:}" || return 1
    done
}

# cluster_bus_port PORT: the node's cluster bus port. Redis's default, PORT +
# 10000, falls in the kernel's ephemeral range (32768-60999), where a client
# socket can hold it and the node cannot start; PORT + 1000 stays below it.
cluster_bus_port() {
    echo $(($1 + 1000))
}

start_cluster_node() {
    local name=$1 port=$2 dir=$ASIDE_RUN_DIR/redis-cluster/$2
    own_state "$dir"
    # A fresh cluster every start: a cache keeps nothing worth a node's old
    # slot map, and a stale nodes.conf would make `--cluster create` refuse.
    rm -f "$dir/nodes.conf" "$dir/dump.rdb"
    (
        umask 077
        {
            cat "$ASIDE_ROOT/infra/conf/redis.conf"
            printf 'cluster-enabled yes\ncluster-config-file nodes.conf\ncluster-node-timeout 5000\n'
            printf 'cluster-port %s\n' "$(cluster_bus_port "$port")"
            [ -z "$ASIDE_REDIS_PASSWORD" ] ||
                printf 'requirepass %s\nmasterauth %s\n' "$ASIDE_REDIS_PASSWORD" "$ASIDE_REDIS_PASSWORD"
        } >"$dir/redis.conf"
    )
    as_root && chown "$ASIDE_SERVICE_USER:" "$dir/redis.conf"
    launch "$name" "$CLUSTER_MATCH" "${AS_SERVICE[@]}" redis-server "$dir/redis.conf" \
        --port "$port" --dir "$dir" --set-proc-title no
}

# cluster_wait SECONDS WHAT CMD...: poll CMD until it succeeds; die after SECONDS.
cluster_wait() {
    local limit=$1 deadline=$((SECONDS + $1)) what=$2
    shift 2
    until "$@"; do
        [ "$SECONDS" -lt "$deadline" ] || die "Redis Cluster: $what not reached after ${limit}s (logs: $LOG_DIR/redis-cluster-*.log)"
        sleep 0.1
    done
}

cluster_up() {
    local node name port bus addrs=()
    [ "$(wc -w <<<"$ASIDE_REDIS_CLUSTER_PORTS")" -eq 3 ] ||
        die "ASIDE_REDIS_CLUSTER_PORTS must list three ports, got '$ASIDE_REDIS_CLUSTER_PORTS'"
    if cluster_running; then return 0; fi
    cluster_down
    for node in $(cluster_node_names); do
        name=${node%%:*} port=${node##*:}
        port_in_use "$port" && die "port $port (Redis Cluster, ASIDE_REDIS_CLUSTER_PORTS) is already in use; nothing was started"
        bus=$(cluster_bus_port "$port")
        [ "$bus" -lt 32768 ] || die "ASIDE_REDIS_CLUSTER_PORTS: $port's cluster bus port $bus is in the ephemeral range; use ports below 31768"
        port_in_use "$bus" && die "port $bus (Redis Cluster bus of $port, ASIDE_REDIS_CLUSTER_PORTS + 1000) is already in use; nothing was started"
    done
    info "starting redis-cluster ($ASIDE_REDIS_CLUSTER_PORTS)"
    for node in $(cluster_node_names); do
        name=${node%%:*} port=${node##*:}
        start_cluster_node "$name" "$port"
        addrs+=("127.0.0.1:$port")
    done
    for node in $(cluster_node_names); do
        cluster_wait "$READY_TIMEOUT" "${node%%:*} answering" probe_redis_ping "${node##*:}"
    done
    redis_cli --cluster create "${addrs[@]}" --cluster-replicas 0 --cluster-yes >"$LOG_DIR/redis-cluster-create.log" 2>&1 ||
        { cluster_down; die "redis-cli --cluster create failed (log: $LOG_DIR/redis-cluster-create.log)"; }
    for node in $(cluster_node_names); do
        cluster_wait "$READY_TIMEOUT" "cluster_state:ok on ${node%%:*}" cluster_ok "${node##*:}"
    done
}

cluster_down() {
    local node
    for node in $(cluster_node_names); do
        if pid_of "${node%%:*}" >/dev/null; then
            info "stopping ${node%%:*}"
        fi
        stop_pid "${node%%:*}"
    done
}

cluster_status() {
    local node name port state pid
    for node in $(cluster_node_names); do
        name=${node%%:*} port=${node##*:}
        if pid=$(pid_of "$name"); then
            if cluster_ok "$port"; then state="${C_GRN}healthy${C_OFF} "; else state="${C_RED}starting${C_OFF}"; fi
        else
            pid="-" state="${C_RED}down${C_OFF}    "
        fi
        printf '%-18s %s %-8s %s\n' "$name" "$state" "$pid" "redis://127.0.0.1:$port (cluster)"
    done
}
