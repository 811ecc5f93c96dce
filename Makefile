# Aside: the two commands are `make seed && make bench` and `make test`.
# Every target runs with the defaults of infra/env.sh (ports, URLs); any of
# them can be overridden from the environment or the make command line.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

ENV := source infra/env.sh &&
VENV := .venv/bin

# Seeder parameters (make seed ROWS=100000 INDEX=1 SEED=7)
ROWS ?= 1000000
SEED ?= 42
HOT_EMAILS ?= 100
HOT_RATIO ?= 0.8
INDEX ?= 0
# GPS tracks loaded beside the users, whatever ROWS (make seed TRACKS=500)
TRACKS ?= 2000
# Benchmark parameters (make bench RATES="30 100" DURATION=10s ARMS="nocache cache l1 hybrid tracking" WARM=both)
RATES ?= 30 50 75 100 150 300 500 1000
DURATION ?= 20s
ARMS ?= nocache coalesce cache
WARM ?= both
SCENARIO ?= read
# SCENARIO=expiry: reads held across the cache TTL's end per CACHE_EXPIRY mode
# (docs/bench/expiry.md; RATES default 1000 2000, CACHE_TTL one TTL, default 30; DURATION unused)
# SCENARIO=interference: cached reads/s beside the compute (default 500)
READ_RATE ?=
RUN ?=
# make bench-ceiling REFERENCE=0: no search of the bare scenario's ceiling after the arms
REFERENCE ?= 1
# Images (make images IMAGE_TAG=0.2.0); the tag defaults to the chart's appVersion.
DOCKER ?= docker
IMAGE_TAG ?= $(shell sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$$/\1/p' infra/helm/aside/Chart.yaml)
# Trustworthy figures (make bench REPEAT=2 LIVE=1; make compare A=<run> B=<run> NORMALISE=1)
CALIBRATE ?= 1
REPEAT ?= 1
# LIVE=1: a line per second from the driver, on the terminal
LIVE ?= 0
# SAMPLES_FILE=1: the raw per-request samples of every step to a file too
# (aside-bench run --samples-file). The figures come from the driver's summary
# either way, and InfluxDB always gets its per-second points.
SAMPLES_FILE ?= 0
# The reads' key popularity: DIST=hotset (the default), uniform or zipf (ALPHA,
# default 0.99) over the table's distinct emails (KEYS=N: the first N only);
# or TRACE=FILE, a key trace the reads replay in its order instead
# (bench/traces/sample.trace; bench/driver/README.md, "Key traces").
DIST ?= hotset
TRACE ?=
POPULARITY_FLAGS = --dist "$(DIST)" $(if $(ALPHA),--alpha "$(ALPHA)") $(if $(KEYS),--keys "$(KEYS)") \
	$(if $(TRACE),--trace "$(TRACE)")
# Redis bounds for the cache arm, one arm each (CACHE_MEMORY="2mb 4mb 8mb"),
# under CACHE_POLICY (allkeys-lru, allkeys-lfu, ...).
CACHE_MEMORY ?=
CACHE_POLICY ?= allkeys-lru
# Network distances, each arm once per distance, every hop through toxiproxy
# (DISTANCE="direct loopback same-zone cross-zone": presets of infra/conf/distance.json;
# or whole-millisecond DISTANCE_REDIS_MS=2-style values on their own, docs/stack.md).
DISTANCE ?=
# Each worker's L1 bounded in entries (L1_ENTRIES="1000 10000": the l1 and
# hybrid arms once each) and Redis's TTL (CACHE_TTL="5 60": the cache arm).
L1_ENTRIES ?=
CACHE_TTL ?=
BOUND_FLAGS = $(if $(CACHE_MEMORY),--cache-memory "$(CACHE_MEMORY)" --cache-policy "$(CACHE_POLICY)") \
	$(if $(L1_ENTRIES),--l1-entries "$(L1_ENTRIES)") $(if $(CACHE_TTL),--cache-ttl "$(CACHE_TTL)") \
	$(if $(DISTANCE),--distance "$(DISTANCE)")
A ?=
B ?=
NORMALISE ?= 0
IGNORE_CALIBRATION ?= 0
AS_MEASURED ?= 0
# Fault suite and soak (make chaos CASES="redis core" RATE=60 SHORT=1; make soak DURATION=2m)
CASES ?= all
SHORT ?= 0
RATE ?=
# Slow clients and a cold flood (make hardening RATE=500 SOCKETS=2000 EMAILS=20000 EXPERIMENTS=slow-heads)
SOCKETS ?=
EMAILS ?=
EXPERIMENTS ?= all
# Past the ceiling (make overload ARMS="cache hybrid" DURATION=15s CEILING="cache=3000 hybrid=4000");
# ARMS and DURATION default to the suite's own (cache hybrid, 15s) unless given here
CEILING ?=

.PHONY: help up down status logs clean install seed bench bench-ceiling bench-cost report compare screenshot chaos soak create-rate hardening overload test test-unit lint licences fmt images

help: ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

install: ## install packages, the Python env, the core and the load driver (idempotent)
	@$(ENV) infra/install.sh

up: ## start the native stack and wait until every service is healthy
	@$(ENV) infra/stack.sh up

down: ## stop exactly what `make up` started
	@$(ENV) infra/stack.sh down

status: ## health of every service (exit 1 if one is down)
	@$(ENV) infra/stack.sh status

logs: ## follow the stack's logs (make logs S=gateway for one)
	@$(ENV) infra/stack.sh logs $(S)

clean: ## stop the stack and remove all its state (.run/)
	@$(ENV) infra/stack.sh clean

seed: ## load ROWS users (default 1,000,000); brings the stack up if needed
	@$(ENV) infra/stack.sh status >/dev/null 2>&1 || infra/stack.sh up
	@$(ENV) $(VENV)/aside-seed --rows "$(ROWS)" --seed "$(SEED)" --hot-emails "$(HOT_EMAILS)" \
		--hot-ratio "$(HOT_RATIO)" --tracks "$(TRACKS)" --reset $(if $(filter 1 yes true,$(INDEX)),--index,)

# The calibration and the live line of both load commands.
TRUST_FLAGS = $(if $(filter 0 no false,$(CALIBRATE)),--no-calibrate,) \
	$(if $(filter 1 yes true,$(LIVE)),--live,)

bench: ## the cache off/on sweep (RATES, DURATION, ARMS, WARM, SCENARIO, DISTANCE, READ_RATE, REPEAT, DIST, ALPHA, KEYS, TRACE, CACHE_MEMORY, CACHE_POLICY, L1_ENTRIES, CACHE_TTL, CALIBRATE=0, LIVE=1, SAMPLES_FILE=1)
	@$(ENV) $(VENV)/aside-bench run --scenario "$(SCENARIO)" --duration "$(DURATION)" --warm "$(WARM)" \
		--repeat "$(REPEAT)" $(TRUST_FLAGS) $(if $(filter 1 yes true,$(SAMPLES_FILE)),--samples-file,) \
		$(POPULARITY_FLAGS) $(BOUND_FLAGS) \
		$(if $(filter-out file,$(origin RATES)),--rates "$(RATES)") \
		$(if $(filter-out file,$(origin ARMS)),--arms "$(ARMS)") \
		$(if $(READ_RATE),--read-rate "$(READ_RATE)")

bench-ceiling: ## highest rate held at p95 <= 10 ms, cache on against a trivial route and the bare scenario (ARMS, REFERENCE=0, CALIBRATE=0, LIVE=1)
	@$(ENV) $(VENV)/aside-bench ceiling $(TRUST_FLAGS) \
		$(if $(filter 0 no false,$(REFERENCE)),--no-reference,) \
		$(if $(filter-out file,$(origin ARMS)),--arms "$(ARMS)")

bench-cost: ## the driver's own CPU per request against a plain net/http loop, /healthz of the core (RATE=2000, DURATION=20s)
	@$(ENV) $(VENV)/aside-bench cost $(if $(RATE),--rate "$(RATE)",) \
		$(if $(filter-out file,$(origin DURATION)),--duration "$(DURATION)",)

report: ## rebuild reports/RUN/ from its run.json and Prometheus (make report RUN=<id>)
	@$(ENV) $(VENV)/aside-bench report --run "$(RUN)"

compare: ## every step two runs share, changes beyond their spread flagged (A=<run> B=<run>, NORMALISE=1, IGNORE_CALIBRATION=1, AS_MEASURED=1)
	@test -n "$(A)" -a -n "$(B)" || { echo "make compare: give both runs: make compare A=<run id> B=<run id>" >&2; exit 2; }
	@$(ENV) $(VENV)/aside-bench compare "$(A)" "$(B)" $(if $(filter 1 yes true,$(NORMALISE)),--normalise,) \
		$(if $(filter 1 yes true,$(IGNORE_CALIBRATION)),--ignore-calibration,) \
		$(if $(filter 1 yes true,$(AS_MEASURED)),--as-measured,)
screenshot: ## check reports/RUN/report.html in headless Chromium, save docs/report-screenshot.png
	@$(ENV) $(VENV)/python bench/tests/browser.py --run "$(RUN)"

chaos: ## faults under load: redis, core, postgres, a worker; gray failures through the proxies (CASES=gray); cluster-failover, cluster-reshard when named (CASES, RATE=60, SHORT=1)
	@$(ENV) $(VENV)/aside-bench chaos --cases "$(CASES)" \
		$(if $(filter 1 yes true,$(SHORT)),--short,) $(if $(RATE),--rate "$(RATE)",)

soak: ## steady load, memory and fds of every process, rows of idempotency_keys (DURATION=10m, RATE=100, WRITE_SHARE=0.2, WARMUP, VIA=gateway|core)
	@$(ENV) $(VENV)/aside-bench soak $(if $(RATE),--rate "$(RATE)",) \
		$(if $(filter-out file,$(origin DURATION)),--duration "$(DURATION)",) \
		$(if $(WRITE_SHARE),--write-share "$(WRITE_SHARE)",) $(if $(WARMUP),--warmup "$(WARMUP)",) \
		$(if $(VIA),--via "$(VIA)",)

create-rate: ## the highest rate of keyed creates the core holds (RATES="200 400 800 1600", DURATION=15s, VIA=core|gateway)
	@$(ENV) $(VENV)/aside-bench create-rate $(if $(filter-out file,$(origin RATES)),--rates "$(RATES)",) \
		$(if $(filter-out file,$(origin DURATION)),--duration "$(DURATION)",) $(if $(VIA),--via "$(VIA)",)

hardening: ## slow request heads and a cold flood under cached reads (RATE=500, SOCKETS, EMAILS)
	@$(ENV) $(VENV)/aside-bench hardening --experiments "$(EXPERIMENTS)" $(if $(RATE),--rate "$(RATE)",) \
		$(if $(SOCKETS),--sockets "$(SOCKETS)",) $(if $(EMAILS),--emails "$(EMAILS)",)

overload: ## goodput, sheds and recovery at 1.25x, 1.5x, 2x of each arm's ceiling, then 0.6x (ARMS, DURATION, CEILING="cache=RATE")
	@$(ENV) $(VENV)/aside-bench overload $(if $(filter-out file,$(origin ARMS)),--arms "$(ARMS)",) \
		$(if $(filter-out file,$(origin DURATION)),--duration "$(DURATION)",) \
		$(foreach c,$(CEILING),--ceiling "$(c)")

test: ## every suite against real services, started here and stopped afterwards
	@$(ENV) infra/test.sh

# The tests that need no service: pure logic of the gateway, the seeder and the core.
UNIT_PY := gateway/tests/test_unit.py $(wildcard gateway/tests/test_*_unit.py) seed/tests/test_datagen.py
UNIT_GO := ./internal/compute/... ./internal/tracks/... ./internal/validate/... ./internal/config/...

test-unit: ## the tests that need no running service (seconds; no stack)
	@$(VENV)/pytest --import-mode=importlib -q -p no:cacheprovider $(UNIT_PY) && \
		(cd core-go && go test -count=1 $(UNIT_GO)) && (cd bench/proxy && go test -count=1 ./...)

images: ## docker build of aside-gateway, aside-seed, aside-core and aside-load (IMAGE_TAG; needs docker)
	@command -v $(DOCKER) >/dev/null 2>&1 || { echo "aside: make images needs docker ($(DOCKER) not found); the native stack (make up) needs none" >&2; exit 1; }
	@$(DOCKER) info >/dev/null 2>&1 || { echo "aside: make images needs a running Docker engine ('$(DOCKER) info' failed); the native stack (make up) needs none" >&2; exit 1; }
	$(DOCKER) build -f gateway/Dockerfile --target gateway -t aside-gateway:$(IMAGE_TAG) .
	$(DOCKER) build -f gateway/Dockerfile --target seed -t aside-seed:$(IMAGE_TAG) .
	$(DOCKER) build -f infra/go.Dockerfile --target core -t aside-core:$(IMAGE_TAG) core-go
	$(DOCKER) build -f infra/go.Dockerfile --target load -t aside-load:$(IMAGE_TAG) bench/driver

lint: ## ruff, the import layers of the gateway, seed and bench (import-linter), gofmt, go vet, every dependency's licence
	@$(ENV) $(VENV)/ruff check . && $(VENV)/ruff format --check . && \
		(cd gateway && ../$(VENV)/lint-imports --no-cache --no-logo) && \
		(cd seed && ../$(VENV)/lint-imports --no-cache --no-logo) && \
		(cd bench && ../$(VENV)/lint-imports --no-cache --no-logo) && \
		test -z "$$(cd core-go && gofmt -l .)" && (cd core-go && go vet ./...) && \
		test -z "$$(cd bench/driver && gofmt -l .)" && (cd bench/driver && go vet ./...) && \
		test -z "$$(cd bench/proxy && gofmt -l .)" && (cd bench/proxy && go vet ./...) && \
		test -z "$$(cd infra/helm/validate && gofmt -l .)" && (cd infra/helm/validate && go vet ./...) && \
		infra/install.sh licences && $(VENV)/python infra/licences.py --go-licenses "$$ASIDE_BIN_DIR/go-licenses"

licences: ## check every dependency's licence (infra/licences.toml) and write docs/licences.md
	@$(ENV) infra/install.sh licences && \
		$(VENV)/python infra/licences.py --write --go-licenses "$$ASIDE_BIN_DIR/go-licenses"

fmt: ## format Python and Go
	@$(VENV)/ruff format . && $(VENV)/ruff check --fix . && (cd core-go && gofmt -w .) && \
		(cd bench/driver && gofmt -w .) && (cd bench/proxy && gofmt -w .) && \
		(cd infra/helm/validate && gofmt -w .)
