#!/usr/bin/env bash
# The native stack: up, down, status, logs, clean.
#
#   infra/stack.sh up [SERVICE ...]     install what is missing, start, wait until healthy
#   infra/stack.sh down                 stop exactly what `up` started (by pid files)
#   infra/stack.sh stop SERVICE ...     stop only these services (the fault suite's verb)
#   infra/stack.sh status [SERVICE ...] health of every service; exit 1 if one is down
#   infra/stack.sh logs [SERVICE]       follow the logs
#   infra/stack.sh clean                down, then remove all state (.run/)
#
# ASIDE_REDIS_CLUSTER=1 adds a three-primary Redis Cluster to a whole `up`
# (infra/cluster.sh); `down` stops it whenever it runs.
# ASIDE_SKIP_INSTALL=1 skips the install step (tests that know it was done).
set -Eeuo pipefail
source "$(dirname "$0")/env.sh"
source "$ASIDE_ROOT/infra/lib.sh"
# An unexpected failure still says where, in one line, instead of exiting silently.
trap 'printf "aside: %s failed at line %s: %s\n" "${BASH_SOURCE[0]##*/}" "$LINENO" "$BASH_COMMAND" >&2' ERR
source "$ASIDE_ROOT/infra/services.sh"
source "$ASIDE_ROOT/infra/cluster.sh"

READY_TIMEOUT=${ASIDE_READY_TIMEOUT:-60}

known_service() {
    local s
    for s in "${ALL_SERVICES[@]}"; do [ "$s" = "$1" ] && return 0; done
    return 1
}

# wait_ready NAME: poll until NAME answers; give up at the deadline or as soon
# as its process has exited (no point waiting a minute for a dead process).
# A process caught in the middle of an exec (setpriv becoming the service) has
# no command line for a moment, so it counts as gone only when three polls in a
# row miss it (seen: "node-exporter exited during start-up", with an empty log).
wait_ready() {
    local name=$1 deadline=$((SECONDS + READY_TIMEOUT)) missed=0
    until service_ready "$name" >/dev/null 2>&1; do
        if pid_of "$name" >/dev/null; then
            missed=0
        elif [ $((missed += 1)) -ge 3 ]; then
            printf '%saside: %s exited during start-up%s\n' "$C_RED" "$name" "$C_OFF" >&2
            return 1
        fi
        if [ "$SECONDS" -ge "$deadline" ]; then
            printf '%saside: %s not ready after %ss%s\n' "$C_RED" "$name" "$READY_TIMEOUT" "$C_OFF" >&2
            return 1
        fi
        sleep 0.2
    done
}

print_table() {
    local s state pid
    printf '%-18s %-8s %-8s %s\n' SERVICE STATE PID ADDRESS
    for s in "$@"; do
        if pid=$(pid_of "$s"); then
            if service_ready "$s" >/dev/null 2>&1; then state="${C_GRN}healthy${C_OFF} "; else state="${C_RED}starting${C_OFF}"; fi
        else
            pid="-"; state="${C_RED}down${C_OFF}    "
        fi
        printf '%-18s %s %-8s %s\n' "$s" "$state" "$pid" "$(service_url "$s")"
    done
}

cmd_up() {
    local wanted=("$@") s p with_cluster=0
    if [ ${#wanted[@]} -eq 0 ]; then
        wanted=("${ALL_SERVICES[@]}")
        [ "${ASIDE_REDIS_CLUSTER:-0}" != 1 ] || with_cluster=1
    fi
    for s in "${wanted[@]}"; do known_service "$s" || die "unknown service '$s' (one of: ${ALL_SERVICES[*]})"; done
    mkdir -p "$LOG_DIR" "$PID_DIR"

    # Preflight, before anything starts: every port we are about to take must be
    # free. A clash names the port, the service and the process holding it.
    local clashes=() owner
    for s in "${wanted[@]}"; do
        pid_of "$s" >/dev/null && continue
        for p in $(service_port "$s"); do
            if port_in_use "$p"; then
                owner=$(port_owner "$p")
                clashes+=("port $p ($s) is already in use${owner:+ by $owner}")
            fi
        done
    done
    if [ "$with_cluster" = 1 ] && ! cluster_running; then
        # A node of ours still running is restarted by cluster_up, not a clash.
        for p in $(cluster_node_names); do
            pid_of "${p%%:*}" >/dev/null && continue
            p=${p##*:}
            if port_in_use "$p"; then
                owner=$(port_owner "$p")
                clashes+=("port $p (redis-cluster) is already in use${owner:+ by $owner}")
            fi
        done
    fi
    if [ ${#clashes[@]} -gt 0 ]; then
        local msg
        msg=$(printf '%s; ' "${clashes[@]}")
        die "${msg%; }. Stop that process, or move Aside with ASIDE_<SERVICE>_PORT (see README); nothing was started"
    fi

    [ "${ASIDE_SKIP_INSTALL:-0}" = 1 ] || "$ASIDE_ROOT/infra/install.sh"
    require_service_user
    set_service_prefix
    refuse_running_old_stack

    # Start in order; if one fails, stop what this call started and say why.
    local started=()
    for s in "${wanted[@]}"; do
        if pid_of "$s" >/dev/null; then continue; fi
        info "starting $s"
        "start_$s"
        started+=("$s")
        if ! wait_ready "$s" || ! setup_service "$s"; then
            say "last lines of .run/logs/$s.log:" >&2
            tail -n 15 "$LOG_DIR/$s.log" 2>/dev/null | sed 's/^/    /' >&2 || true
            local i
            for ((i = ${#started[@]} - 1; i >= 0; i--)); do stop_service "${started[i]}"; done
            die "$s did not become healthy; stopped what this run started (log: $LOG_DIR/$s.log)"
        fi
    done
    [ "$with_cluster" = 0 ] || cluster_up
    print_table "${wanted[@]}"
    [ "$with_cluster" = 0 ] || cluster_status
}

# A PostgreSQL or Redis started by a version without passwords still runs: the
# consumers started now would send passwords it does not know (or lack).
refuse_running_old_stack() {
    local old=()
    if pid_of redis >/dev/null && [ -n "$ASIDE_REDIS_PASSWORD" ] &&
        [ "$(redis-cli -h 127.0.0.1 -p "$ASIDE_REDIS_PORT" ping 2>/dev/null)" = PONG ]; then
        old+=(redis)
    fi
    if pid_of postgres >/dev/null && pg_trusts; then old+=(postgres); fi
    [ ${#old[@]} -eq 0 ] ||
        die "${old[*]} of this stack still run(s) without a password (started by an older version); run 'make down' (infra/stack.sh down), then 'make up'"
}

# stop_one NAME: stop it if it runs; else drop a stale pid file.
stop_one() {
    if pid_of "$1" >/dev/null; then
        info "stopping $1"
        stop_service "$1"
    else
        forget_pid "$1"
    fi
}

cmd_down() {
    local i
    cluster_down
    for ((i = ${#ALL_SERVICES[@]} - 1; i >= 0; i--)); do stop_one "${ALL_SERVICES[i]}"; done
}

# Stop only the named services, each as `down` would; the others keep running.
cmd_stop() {
    local s
    [ $# -gt 0 ] || die "usage: infra/stack.sh stop SERVICE... (one of: ${ALL_SERVICES[*]})"
    for s in "$@"; do known_service "$s" || die "unknown service '$s' (one of: ${ALL_SERVICES[*]})"; done
    for s in "$@"; do stop_one "$s"; done
}

cmd_status() {
    local wanted=("$@") s
    [ ${#wanted[@]} -gt 0 ] || wanted=("${ALL_SERVICES[@]}")
    for s in "${wanted[@]}"; do known_service "$s" || die "unknown service '$s' (one of: ${ALL_SERVICES[*]})"; done
    print_table "${wanted[@]}"
    if [ $# -eq 0 ] && [ "${ASIDE_REDIS_CLUSTER:-0}" = 1 ]; then
        cluster_status
        cluster_running || return 1
    fi
    for s in "${wanted[@]}"; do
        pid_of "$s" >/dev/null && service_ready "$s" >/dev/null 2>&1 || return 1
    done
}

cmd_logs() {
    mkdir -p "$LOG_DIR"
    if [ $# -gt 0 ]; then
        known_service "$1" || die "unknown service '$1' (one of: ${ALL_SERVICES[*]})"
        exec tail -n 50 -F "$LOG_DIR/$1.log"
    fi
    exec tail -n 20 -F "$LOG_DIR"/*.log
}

cmd_clean() {
    cmd_down
    case $ASIDE_RUN_DIR in
        "" | / | "$HOME") die "refusing to remove ASIDE_RUN_DIR=$ASIDE_RUN_DIR" ;;
    esac
    rm -rf "$ASIDE_RUN_DIR"
    info "removed $ASIDE_RUN_DIR"
}

case ${1:-} in
    up) shift; cmd_up "$@" ;;
    down) cmd_down ;;
    stop) shift; cmd_stop "$@" ;;
    status) shift; cmd_status "$@" || exit 1 ;;  # "down" is an answer, not a failure to report
    logs) shift; cmd_logs "$@" ;;
    clean) cmd_clean ;;
    *) die "usage: infra/stack.sh up [SERVICE...] | down | stop SERVICE... | status [SERVICE...] | logs [SERVICE] | clean" ;;
esac
