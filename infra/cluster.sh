# The optional Redis Cluster of the stack: three primaries on
# ASIDE_REDIS_CLUSTER_PORTS and a replica of each on
# ASIDE_REDIS_CLUSTER_REPLICA_PORTS (the first replica port follows the first
# primary, and so on), state under .run/redis-cluster/<port>. Started by
# `infra/stack.sh up` when ASIDE_REDIS_CLUSTER=1 (infra/test.sh sets it, for
# the cluster tests), stopped by `down` whenever its nodes run. Sourced by
# infra/stack.sh after services.sh; the services read it at
# ASIDE_REDIS_CLUSTER_URL with REDIS_MODE=cluster. A replica takes over its
# primary's slots when the primary fails (the bench's cluster-failover case).
# shellcheck shell=bash

CLUSTER_MATCH=redis-server

# numbered_names PREFIX PORTS...: PREFIX-1:port ... one per port, in order.
numbered_names() {
    local prefix=$1 i=0 port
    shift
    for port in "$@"; do
        i=$((i + 1))
        printf '%s-%s:%s\n' "$prefix" "$i" "$port"
    done
}

# cluster_primary_names: redis-cluster-1 ... one per primary port, in order.
# shellcheck disable=SC2086 # the port lists split on spaces
cluster_primary_names() { numbered_names redis-cluster $ASIDE_REDIS_CLUSTER_PORTS; }

# cluster_replica_names: redis-replica-1 ... the replica of primary 1 first.
# shellcheck disable=SC2086
cluster_replica_names() { numbered_names redis-replica $ASIDE_REDIS_CLUSTER_REPLICA_PORTS; }

# cluster_node_names: every node, the primaries first.
cluster_node_names() {
    cluster_primary_names
    cluster_replica_names
}

# cluster_replicating PORT: the replica on PORT has its primary's data in sync.
cluster_replicating() { redis_cli -p "$1" info replication 2>/dev/null | tr -d '\r' | grep -qx 'master_link_status:up'; }

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
        [ "$SECONDS" -lt "$deadline" ] || die "Redis Cluster: $what not reached after ${limit}s (logs: $LOG_DIR/redis-cluster-*.log, redis-replica-*.log)"
        sleep 0.1
    done
}

# cluster_node_id PORT: the node's own id in the cluster.
cluster_node_id() { redis_cli -p "$1" cluster myid 2>/dev/null | tr -d '\r'; }

cluster_up() {
    local node name port bus addrs=() primaries replicas i
    [ "$(wc -w <<<"$ASIDE_REDIS_CLUSTER_PORTS")" -eq 3 ] ||
        die "ASIDE_REDIS_CLUSTER_PORTS must list three ports, got '$ASIDE_REDIS_CLUSTER_PORTS'"
    [ "$(wc -w <<<"$ASIDE_REDIS_CLUSTER_REPLICA_PORTS")" -eq 3 ] ||
        die "ASIDE_REDIS_CLUSTER_REPLICA_PORTS must list three ports, got '$ASIDE_REDIS_CLUSTER_REPLICA_PORTS'"
    if cluster_running; then return 0; fi
    cluster_down
    for node in $(cluster_node_names); do
        name=${node%%:*} port=${node##*:}
        port_in_use "$port" && die "port $port (Redis Cluster $name, ASIDE_REDIS_CLUSTER_PORTS or ASIDE_REDIS_CLUSTER_REPLICA_PORTS) is already in use; nothing was started"
        bus=$(cluster_bus_port "$port")
        [ "$bus" -lt 32768 ] || die "$name: port $port's cluster bus port $bus is in the ephemeral range; use ports below 31768"
        port_in_use "$bus" && die "port $bus (Redis Cluster bus of $port, its port + 1000) is already in use; nothing was started"
    done
    info "starting redis-cluster ($ASIDE_REDIS_CLUSTER_PORTS, replicas $ASIDE_REDIS_CLUSTER_REPLICA_PORTS)"
    for node in $(cluster_node_names); do
        start_cluster_node "${node%%:*}" "${node##*:}"
    done
    for node in $(cluster_node_names); do
        cluster_wait "$READY_TIMEOUT" "${node%%:*} answering" probe_redis_ping "${node##*:}"
    done
    for port in $ASIDE_REDIS_CLUSTER_PORTS; do addrs+=("127.0.0.1:$port"); done
    redis_cli --cluster create "${addrs[@]}" --cluster-replicas 0 --cluster-yes >"$LOG_DIR/redis-cluster-create.log" 2>&1 ||
        { cluster_down; die "redis-cli --cluster create failed (log: $LOG_DIR/redis-cluster-create.log)"; }
    for node in $(cluster_primary_names); do
        cluster_wait "$READY_TIMEOUT" "cluster_state:ok on ${node%%:*}" cluster_ok "${node##*:}"
    done
    # Each replica joins as the replica of its own primary, named by id: the
    # pairing is the ports' order, not redis-cli's choice.
    read -ra primaries <<<"$ASIDE_REDIS_CLUSTER_PORTS"
    read -ra replicas <<<"$ASIDE_REDIS_CLUSTER_REPLICA_PORTS"
    for i in 0 1 2; do
        redis_cli --cluster add-node "127.0.0.1:${replicas[i]}" "127.0.0.1:${primaries[i]}" \
            --cluster-slave --cluster-master-id "$(cluster_node_id "${primaries[i]}")" \
            >>"$LOG_DIR/redis-cluster-create.log" 2>&1 ||
            { cluster_down; die "redis-cli --cluster add-node ${replicas[i]} failed (log: $LOG_DIR/redis-cluster-create.log)"; }
    done
    for node in $(cluster_replica_names); do
        cluster_wait "$READY_TIMEOUT" "${node%%:*} in sync with its primary" cluster_replicating "${node##*:}"
    done
    for node in $(cluster_node_names); do
        cluster_wait "$READY_TIMEOUT" "cluster_state:ok on ${node%%:*}" cluster_ok "${node##*:}"
    done
}

# cluster_role PORT: master or slave, as the node says.
cluster_role() { redis_cli -p "$1" role 2>/dev/null | head -n 1 | tr -d '\r'; }

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
        printf '%-18s %s %-8s %s\n' "$name" "$state" "$pid" "redis://127.0.0.1:$port (cluster $(cluster_role "$port" | sed 's/^slave$/replica/; s/^master$/primary/'))"
    done
}
