# Shared helpers of the infra scripts: messages, deadlines, pid files, ports.
# shellcheck shell=bash

if [ -t 1 ]; then C_RED=$'\e[31m'; C_GRN=$'\e[32m'; C_DIM=$'\e[2m'; C_OFF=$'\e[0m'
else C_RED=""; C_GRN=""; C_DIM=""; C_OFF=""; fi

say()  { printf '%s\n' "$*"; }
info() { printf '%s==>%s %s\n' "$C_DIM" "$C_OFF" "$*"; }
# die MESSAGE: one line saying what is wrong and what to do, then exit 1.
die()  { printf '%saside: %s%s\n' "$C_RED" "$*" "$C_OFF" >&2; exit 1; }

PID_DIR=$ASIDE_RUN_DIR/pids
LOG_DIR=$ASIDE_RUN_DIR/logs

pidfile() { printf '%s/%s.pid' "$PID_DIR" "$1"; }

# pid_of NAME: the live pid recorded for NAME, or nothing. A pid that is not
# this stack's process does not count: its command line must hold the recorded
# match (else the pid was recycled) and its environment this ASIDE_RUN_DIR. The
# lab and the test stack run the same programs from the same checkout, and
# gunicorn's or the core's command line is the same in both, so only the
# environment tells one stack's recycled pid from the other's process.
pid_of() {
    local f pid
    f=$(pidfile "$1")
    [ -s "$f" ] || return 1
    pid=$(head -n1 "$f")
    [ -n "$pid" ] && [ -d "/proc/$pid" ] || return 1
    if [ -s "$f.cmd" ] && ! cmdline_has "$pid" "$(cat "$f.cmd")"; then
        return 1
    fi
    environ_has "$pid" "ASIDE_RUN_DIR=$ASIDE_RUN_DIR" || return 1
    printf '%s' "$pid"
}

# cmdline_has PID TEXT: the command line of PID contains TEXT.
cmdline_has() { tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -qF "$2"; }

# environ_has PID ENTRY: the environment PID started with holds ENTRY
# (NAME=VALUE), whole. Root may read every process's, the postmaster's too
# (user postgres); without root, as_postgres runs it as the caller.
environ_has() {
    local environ
    environ=$(tr '\0' '\n' 2>/dev/null <"/proc/$1/environ") || return 1
    grep -qxF -- "$2" <<<"$environ"
}

# record_pid NAME PID MATCH: remember PID for NAME; MATCH is a piece of its
# command line used later to tell it from a recycled pid.
record_pid() {
    mkdir -p "$PID_DIR"
    printf '%s\n' "$2" >"$(pidfile "$1")"
    printf '%s' "$3" >"$(pidfile "$1").cmd"
}

forget_pid() { rm -f "$(pidfile "$1")" "$(pidfile "$1").cmd"; }

# port_in_use PORT: true when something accepts TCP connections on 127.0.0.1:PORT.
port_in_use() {
    ss -Htln "sport = :$1" 2>/dev/null | grep -q . && return 0
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# port_owner PORT: "name (pid N)" of the listener, when ss can tell.
port_owner() {
    { ss -Htlnp "sport = :$1" 2>/dev/null || true; } | { grep -o 'users:(("[^"]*",pid=[0-9]*' || true; } |
        head -n1 | sed -E 's/users:\(\("([^"]*)",pid=([0-9]*)/\1 (pid \2)/'
}

http_ok() { curl -fsS -o /dev/null --max-time 2 "$1"; }

# rotate_log FILE: a log above ASIDE_LOG_MAX_BYTES becomes FILE.1 (the one
# before is dropped). Called before a service starts, so no process still
# writes to the old file; a running service's log grows until its next start.
rotate_log() {
    local size
    size=$(stat -c %s "$1" 2>/dev/null) || return 0
    [ "$size" -gt "$ASIDE_LOG_MAX_BYTES" ] || return 0
    mv -f "$1" "$1.1"
}

# launch NAME MATCH CMD...: start CMD detached in its own session, log to
# .run/logs/NAME.log, and record its pid.
launch() {
    local name=$1 match=$2
    shift 2
    mkdir -p "$LOG_DIR"
    rotate_log "$LOG_DIR/$name.log"
    setsid nohup "$@" >>"$LOG_DIR/$name.log" 2>&1 </dev/null &
    local pid=$! deadline=$((SECONDS + 5))
    # Until the child has exec'd, its command line is this shell's, and pid_of
    # would take the starting service for a dead one (seen: "node-exporter
    # exited during start-up", with an empty log). Wait for the exec.
    while [ -d "/proc/$pid" ] && ! cmdline_has "$pid" "$match" && [ "$SECONDS" -lt "$deadline" ]; do
        sleep 0.02
    done
    record_pid "$name" "$pid" "$match"
}

# stop_pid NAME: TERM the process group of NAME, KILL it after 15 s.
stop_pid() {
    local name=$1 pid deadline
    pid=$(pid_of "$name") || { forget_pid "$name"; return 0; }
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null
    deadline=$((SECONDS + 15))
    while [ -d "/proc/$pid" ] && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.1; done
    if [ -d "/proc/$pid" ]; then
        kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null
    fi
    forget_pid "$name"
}

# as_postgres CMD...: PostgreSQL refuses to run as root, so run it as the
# 'postgres' user, keeping only the right to traverse folders (the repo may sit
# under a 0700 folder such as a mktemp directory).
as_postgres() {
    if [ "$(id -u)" -eq 0 ]; then
        setpriv --reuid=postgres --regid=postgres --init-groups \
            --inh-caps=+dac_read_search --ambient-caps=+dac_read_search "$@"
    else
        "$@"
    fi
}

# The services other than PostgreSQL run as ASIDE_SERVICE_USER when the scripts
# run as root, and as the caller otherwise.
as_root() { [ "$(id -u)" -eq 0 ]; }

# require_service_user: the user exists, or one line saying how to make it.
require_service_user() {
    as_root || return 0
    id -u "$ASIDE_SERVICE_USER" >/dev/null 2>&1 ||
        die "user '$ASIDE_SERVICE_USER' does not exist; run infra/install.sh user (creates it)"
}

# own_state DIR: DIR exists and belongs to the service user (recursively: a
# stack started by an older version left its state owned by root).
own_state() {
    mkdir -p "$1"
    as_root || return 0
    chown -R "$ASIDE_SERVICE_USER:$ASIDE_SERVICE_USER" "$1"
}

# service_reaches_checkout: the service user can read the config, run the core
# and the gateway's interpreter, and enter the run folder, with no capability.
service_reaches_checkout() {
    local checks=(-x "$ASIDE_RUN_DIR" -a -r "$ASIDE_ROOT/infra/conf/redis.conf") p
    for p in "$ASIDE_ROOT/.venv/bin/python" "$ASIDE_BIN_DIR/aside-core"; do
        [ -e "$p" ] && checks+=(-a -x "$p")
    done
    setpriv --reuid="$ASIDE_SERVICE_USER" --regid="$ASIDE_SERVICE_USER" --init-groups \
        test "${checks[@]}" 2>/dev/null
}

# AS_SERVICE: the command prefix that runs a service as the service user (empty
# without root). The right to traverse folders (CAP_DAC_READ_SEARCH, as
# as_postgres keeps) is kept only when the user cannot reach the checkout
# otherwise: it sits under a 0700 folder (a mktemp clone), or the venv's
# interpreter lives in root's home (pyenv, uv-managed Pythons).
AS_SERVICE=()
set_service_prefix() {
    AS_SERVICE=()
    as_root || return 0
    AS_SERVICE=(setpriv --reuid="$ASIDE_SERVICE_USER" --regid="$ASIDE_SERVICE_USER" --init-groups)
    service_reaches_checkout && return 0
    AS_SERVICE+=(--inh-caps=+dac_read_search --ambient-caps=+dac_read_search)
}
