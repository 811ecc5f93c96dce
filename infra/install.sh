#!/usr/bin/env bash
# Installs whatever the native stack lacks, idempotently: Debian packages, the
# Python environment (uv, from uv.lock), the core's Go build and the bench's
# load driver (bench/driver, built into bin/aside-load). A second run finds
# everything and returns quickly. helm, built from its Go module, is for the
# chart's tests only (infra/test.sh asks for it), and go-licenses for the
# licence check of `make lint` (which asks for it); the native stack needs
# neither. toxiproxy, built from its Go module too, sits on every hop between the
# services when the bench asks for network distance or a gray failure.
#
# usage: infra/install.sh [packages|user|python|core|driver|toxiproxy|browser|helm|licences ...]
#        (default: all but browser, helm and licences, which only the checks need)
set -Eeuo pipefail
source "$(dirname "$0")/env.sh"
source "$ASIDE_ROOT/infra/lib.sh"
# An unexpected failure still says where, in one line, instead of exiting silently.
trap 'printf "aside: %s failed at line %s: %s\n" "${BASH_SOURCE[0]##*/}" "$LINENO" "$BASH_COMMAND" >&2' ERR

HELM_VERSION=${HELM_VERSION:-v3.22.0}
UV_VERSION=${UV_VERSION:-0.13.9}
# The Go packages' licences (infra/licences.py), from the Go module proxy.
GO_LICENSES_MODULE=github.com/google/go-licenses
GO_LICENSES_VERSION=v1.6.0
# The proxy on the services' hops (MIT; docs/stack.md), pinned in bench/proxy/go.mod.
TOXIPROXY_MODULE=github.com/Shopify/toxiproxy/v2
APT_PACKAGES=(postgresql postgresql-contrib redis-server influxdb prometheus
    prometheus-node-exporter prometheus-redis-exporter prometheus-postgres-exporter
    curl jq iproute2 util-linux)
# Extra packages, e.g. for a test of the failure path.
read -r -a EXTRA_PACKAGES <<<"${ASIDE_EXTRA_APT_PACKAGES:-}"
APT_PACKAGES+=("${EXTRA_PACKAGES[@]}")
# The report's browser test opens report.html in headless Chromium through
# WebDriver; Debian builds chromium-driver from chromium's own source, so the two
# always come in the same version.
BROWSER_PACKAGES=(chromium chromium-driver)

# missing_packages NAME...: those of NAME not installed, space-separated.
missing_packages() {
    local p
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || printf '%s ' "$p"
    done
}

# install_packages NAME...: apt-get install those of NAME not installed yet.
install_packages() {
    local missing sudo=""
    missing=$(missing_packages "$@")
    [ -z "$missing" ] && return 0
    command -v apt-get >/dev/null || die "missing packages: $missing; this script needs Debian's apt-get to install them (or install them yourself)"
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null && sudo -n true 2>/dev/null ||
            die "missing packages: $missing; run as root, give this user passwordless sudo, or run: sudo apt-get install -y $missing"
        sudo="sudo -n"
    fi
    info "installing Debian packages: $missing"
    # Services must not start on their standard ports: we run our own copies.
    local policy=/usr/sbin/policy-rc.d added_policy=""
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null
        $sudo chmod +x "$policy"
        added_policy=1
    fi
    local rc=0
    {
        [ -n "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' 2>/dev/null | head -n1)" ] ||
            $sudo apt-get update -qq
        # shellcheck disable=SC2086
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends $missing ||
            { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends $missing; }
    } >"$ASIDE_RUN_DIR/logs/apt.log" 2>&1 || rc=$?
    [ -n "$added_policy" ] && $sudo rm -f "$policy"
    [ "$rc" -eq 0 ] || die "apt-get could not install: $missing (see .run/logs/apt.log)"
    missing=$(missing_packages "$@")
    [ -z "$missing" ] || die "still missing after apt-get: $missing (see .run/logs/apt.log)"
}

# The system user the services run as when the scripts run as root (no home, no
# login shell). Without root, the services run as the caller and there is
# nothing to make.
install_user() {
    as_root || return 0
    id -u "$ASIDE_SERVICE_USER" >/dev/null 2>&1 && return 0
    info "creating system user $ASIDE_SERVICE_USER"
    useradd --system --user-group --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin "$ASIDE_SERVICE_USER" ||
        die "could not create user '$ASIDE_SERVICE_USER' (useradd failed)"
}

uv_bin() {
    command -v uv 2>/dev/null && return 0
    [ -x "$HOME/.local/bin/uv" ] && { printf '%s' "$HOME/.local/bin/uv"; return 0; }
    return 1
}

install_python() {
    local uv
    if ! uv=$(uv_bin); then
        info "installing uv $UV_VERSION from PyPI"
        python3 -m pip install --quiet --user "uv==$UV_VERSION" >/dev/null 2>&1 ||
            python3 -m pip install --quiet "uv==$UV_VERSION" >/dev/null 2>&1 ||
            die "could not install uv with pip; install it (pip install uv==$UV_VERSION) and retry"
        uv=$(uv_bin) || die "uv installed but not on PATH; add ~/.local/bin to PATH"
    fi
    # --frozen: exactly what uv.lock says; no interpreter downloads, only PyPI.
    UV_PYTHON_DOWNLOADS=never "$uv" sync --frozen --quiet --project "$ASIDE_ROOT" ||
        die "uv sync failed; run 'uv sync --frozen' in $ASIDE_ROOT to see why"
    # The gateway runs from it as the service user, whatever root's umask was.
    as_root && chmod -R a+rX "$ASIDE_ROOT/.venv"
    return 0
}

# build_go <module folder> <command> <what it is>: a Go module's command into
# $ASIDE_BIN_DIR. go build is itself incremental: a second run with no change
# takes a second.
build_go() {
    local module=$1 cmd=$2 what=$3
    command -v go >/dev/null || die "go is not installed; install Go 1.26 or newer"
    [ -f "$ASIDE_ROOT/$module/go.mod" ] || return 0
    mkdir -p "$ASIDE_BIN_DIR"
    (cd "$ASIDE_ROOT/$module" && go build -trimpath -o "$ASIDE_BIN_DIR/$cmd" "./cmd/$cmd") ||
        die "$what did not build; run 'cd $module && go build ./...' to see why"
    chmod a+rx "$ASIDE_BIN_DIR/$cmd" # run as the service user
}

install_core() { build_go core-go aside-core "the core"; }

# The bench's load driver, with the core's toolchain: the same go, the same
# incremental build (bench/driver/README.md).
install_driver() { build_go bench/driver aside-load "the load driver"; }

install_helm() {
    local helm=$ASIDE_BIN_DIR/helm
    if [ -x "$helm" ] && "$helm" version --template '{{.Version}}' 2>/dev/null | grep -qx "$HELM_VERSION"; then
        return 0
    fi
    command -v go >/dev/null || die "go is not installed; helm is built from its Go module"
    info "building helm $HELM_VERSION from its Go module (a few minutes, once)"
    mkdir -p "$ASIDE_BIN_DIR"
    # Stamped as helm's own release build does: its version, and the Kubernetes
    # version `helm template` assumes without a cluster (that of its client-go;
    # unstamped it says 1.20, which the chart's kubeVersion refuses).
    local gomod minor
    gomod=$(go mod download -json "helm.sh/helm/v3@$HELM_VERSION" 2>>"$ASIDE_RUN_DIR/logs/helm-build.log" | jq -r .GoMod) &&
        minor=$(sed -n 's|^[[:space:]]*k8s.io/client-go v0\.\([0-9]*\)\..*|\1|p' "$gomod") && [ -n "$minor" ] ||
        die "could not read helm $HELM_VERSION's go.mod from the Go module proxy (see .run/logs/helm-build.log)"
    local x=helm.sh/helm/v3
    GOBIN=$ASIDE_BIN_DIR go install -ldflags "-X $x/internal/version.version=$HELM_VERSION \
        -X $x/pkg/chartutil.k8sVersionMajor=1 -X $x/pkg/chartutil.k8sVersionMinor=$minor \
        -X $x/pkg/lint/rules.k8sVersionMajor=1 -X $x/pkg/lint/rules.k8sVersionMinor=$minor" \
        "$x/cmd/helm@$HELM_VERSION" >>"$ASIDE_RUN_DIR/logs/helm-build.log" 2>&1 ||
        die "building helm failed (see .run/logs/helm-build.log)"
}

# go-licenses, pinned, built into bin/ once: `go version -m` names the version a
# binary was built from, so a second run only reads it.
install_licences() {
    local tool=$ASIDE_BIN_DIR/go-licenses
    if [ -x "$tool" ] && go version -m "$tool" 2>/dev/null |
        grep -Eq "^[[:space:]]*mod[[:space:]]+$GO_LICENSES_MODULE[[:space:]]+$GO_LICENSES_VERSION([[:space:]]|$)"; then
        return 0
    fi
    command -v go >/dev/null || die "go is not installed; go-licenses is built from its Go module"
    info "building go-licenses $GO_LICENSES_VERSION from its Go module (a minute or two, once)"
    mkdir -p "$ASIDE_BIN_DIR"
    GOBIN=$ASIDE_BIN_DIR go install "$GO_LICENSES_MODULE@$GO_LICENSES_VERSION" \
        >>"$ASIDE_RUN_DIR/logs/go-licenses-build.log" 2>&1 ||
        die "building go-licenses failed (see .run/logs/go-licenses-build.log)"
}

# The proxy on the hops, bin/aside-proxy: toxiproxy's server at the version
# bench/proxy/go.mod pins, with the latency_us toxic (bench/proxy/README.md),
# stamped as toxiproxy's own release build is, so /version answers the pin.
install_toxiproxy() {
    local version
    version=$(toxiproxy_version) || die "bench/proxy/go.mod does not require $TOXIPROXY_MODULE"
    command -v go >/dev/null || die "go is not installed; install Go 1.26 or newer"
    mkdir -p "$ASIDE_BIN_DIR"
    (cd "$ASIDE_ROOT/bench/proxy" && go build -trimpath -ldflags "-X $TOXIPROXY_MODULE.Version=$version" \
        -o "$ASIDE_BIN_DIR/aside-proxy" ./cmd/aside-proxy) ||
        die "the proxy did not build; run 'cd bench/proxy && go build ./...' to see why"
    chmod a+rx "$ASIDE_BIN_DIR/aside-proxy" # run as the service user
}

toxiproxy_version() { awk -v m="$TOXIPROXY_MODULE" '$1 == m { print $2; found = 1 } END { exit !found }' "$ASIDE_ROOT/bench/proxy/go.mod"; }

main() {
    mkdir -p "$ASIDE_RUN_DIR/logs"
    local steps=("$@")
    [ ${#steps[@]} -gt 0 ] || steps=(packages user python core driver toxiproxy)
    local s
    for s in "${steps[@]}"; do
        case $s in
            packages) install_packages "${APT_PACKAGES[@]}" ;;
            browser) install_packages "${BROWSER_PACKAGES[@]}" ;;
            user) install_user ;;
            python) install_python ;;
            core) install_core ;;
            driver) install_driver ;;
            toxiproxy) install_toxiproxy ;;
            helm) install_helm ;;
            licences) install_licences ;;
            *) die "unknown install step '$s' (packages, user, python, core, driver, toxiproxy, browser, helm, licences)" ;;
        esac
    done
}

main "$@"
