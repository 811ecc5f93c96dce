#!/usr/bin/env bash
# `make test`: start a separate test stack (its own ports and .run/test, so a
# lab stack that is up keeps running), run every suite against it, and stop it
# afterwards even when a suite fails. Exit non-zero if any suite failed.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)

# The test stack sits ten ports above the lab's defaults.
unset DATABASE_URL REDIS_URL CORE_URL GATEWAY_URL INFLUXDB_URL PROMETHEUS_URL CORE_LISTEN_ADDR GATEWAY_BIND ASIDE_REDIS_CLUSTER_URL
# Nothing of a lab shell that sourced infra/env.sh (perhaps of another checkout).
unset ASIDE_BIN_DIR
export ASIDE_RUN_DIR=$ROOT/.run/test
export ASIDE_PG_PORT=25442 ASIDE_REDIS_PORT=26389 ASIDE_INFLUX_PORT=28096 ASIDE_INFLUX_RPC_PORT=28098
export ASIDE_PROM_PORT=29091 ASIDE_NODE_EXPORTER_PORT=29101 ASIDE_REDIS_EXPORTER_PORT=29122
export ASIDE_PG_EXPORTER_PORT=29188 ASIDE_CORE_PORT=28081 ASIDE_GATEWAY_PORT=28001
export ASIDE_TOXIPROXY_PORT=28484 ASIDE_TOXIPROXY_REDIS_PORT=26489 ASIDE_TOXIPROXY_POSTGRES_PORT=25542
export ASIDE_TOXIPROXY_CORE_PORT=28190 ASIDE_TOXIPROXY_CORE_REDIS_PORT=26490 ASIDE_TOXIPROXY_CORE_POSTGRES_PORT=25543
# A Redis Cluster of three primaries and their replicas beside it, for the cluster tests (infra/cluster.sh).
export ASIDE_REDIS_CLUSTER=1 ASIDE_REDIS_CLUSTER_PORTS="26391 26392 26393"
export ASIDE_REDIS_CLUSTER_REPLICA_PORTS="26394 26395 26396"
source "$ROOT/infra/env.sh"
source "$ROOT/infra/lib.sh"

trap '"$ROOT/infra/stack.sh" down' EXIT
# Headless Chromium for the report's browser test; `up` installs the rest. A
# machine where it cannot be installed still runs every other test.
if [ "${ASIDE_SKIP_INSTALL:-0}" != 1 ]; then
    if "$ROOT/infra/install.sh" browser; then
        export ASIDE_REQUIRE_BROWSER=1 # installed: a browser the test cannot find is a failure
    else
        say "the report's browser test will be skipped (see above)"
    fi
fi
"$ROOT/infra/stack.sh" up || die "the test stack did not start; see the message above"

failed=()
run_suite() {
    local name=$1
    shift
    info "suite: $name"
    "$@" || failed+=("$name")
}

cd "$ROOT"
# Every module's bytecode written once: the suites start hundreds of Python
# processes (aside-bench, aside-seed, gateway workers), and where
# PYTHONDONTWRITEBYTECODE is set each would compile all it imports anew.
# Speed only: a file that does not compile fails its own tests.
.venv/bin/python -m compileall -qq -j 0 .venv/lib gateway/src bench/src bench-plugins seed/src ||
    say "some modules did not compile ahead; their tests will say why"
# helm, for the chart's tests (infra/tests/test_helm.py and infra/helm/validate):
# built once from its Go module.
"$ROOT/infra/install.sh" helm || failed+=("helm-install")
# ruff, the bench's import layers, gofmt and go vet, as `make lint` runs them.
run_suite lint make -s lint
run_suite python .venv/bin/pytest --import-mode=importlib -q -p no:cacheprovider --durations=25 \
    infra/tests seed/tests gateway/tests bench/tests bench-plugins
run_suite go bash -c 'cd core-go && go test -count=1 ./...'
# The bench's load driver: its own Go module (bench/driver).
run_suite driver bash -c 'cd bench/driver && go test -count=1 ./...'
run_suite proxy bash -c 'cd bench/proxy && go test -count=1 ./...'
# Its own Go module, so the core does not depend on client-go.
run_suite helm bash -c 'cd infra/helm/validate && go test -count=1 ./...'

if [ ${#failed[@]} -gt 0 ]; then
    say "${C_RED}failed suites: ${failed[*]}${C_OFF}"
    exit 1
fi
say "${C_GRN}all suites passed${C_OFF}"
