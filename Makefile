# echomq: `make run` and `make test` are all a fresh machine needs.
# `make` alone (or `make help`) lists the targets and settings.
SHELL := /bin/bash
CARGO ?= $(shell command -v cargo 2>/dev/null || echo $(HOME)/.cargo/bin/cargo)
# scripts/test-binaries.sh and the tests that build an example call the same cargo.
export CARGO
MODULE := target/release/libechomq.so
.DEFAULT_GOAL := help

.PHONY: help setup build run web test test-matrix valkey-tests lint fmt bench demo clean

# Prints each target's `## description` (on its rule line) and each setting's
# (a `## ` line right above its `?=` line, with the default).
help: ## This list
	@echo "usage: make TARGET [SETTING=value ...]"
	@echo
	@echo "targets:"
	@awk -F ':.*## ' '/^[a-z][a-z-]*:.*## / { printf "  %-8s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)
	@echo
	@echo "settings (make variables or environment):"
	@awk '/^## / { doc = substr($$0, 4); next } \
	  doc != "" && /^[A-Z_]+ \?=/ { v = $$0; sub(/^[A-Z_]+ \?= */, "", v); \
	    printf "  %-15s %s (default: %s)\n", $$1, doc, (v == "" ? "unset" : v) } { doc = "" }' \
	  $(MAKEFILE_LIST)

# Installs Valkey 8 and libclang when missing, and for the tests of the web
# view and the Node.js worker, Node.js, npm, a headless Chromium and
# Prometheus's promtool (scripts/setup.sh says what to install by hand where
# it cannot). Always runs; `make build` runs it once per stamp below.
setup: ## Install what building and testing need (CI=true: the optional tools too)
	@bash scripts/setup.sh

# build runs setup.sh once, not on every build: a stamp in target/ (so a fresh
# clone, and `make clean`, run it again), remade when setup.sh changes. What
# setup.sh installs depends on CI and the ECHOMQ_WITH_* switches, so each
# combination has its own stamp: one made without CI=true does not skip the CI
# install. `make setup` runs it again regardless.
SETUP_SWITCHES := $(foreach t,REDIS NODE BROWSER PROMTOOL OPENSSL PYTHON VALKEY_MATRIX,$(if $(ECHOMQ_WITH_$(t)),-$(t)$(ECHOMQ_WITH_$(t))))
space := $() $()
SETUP_STAMP := target/.setup-stamp$(if $(filter true,$(CI)),-ci)$(subst $(space),,$(SETUP_SWITCHES))
$(SETUP_STAMP): scripts/setup.sh
	@bash scripts/setup.sh
	@mkdir -p $(@D) && touch $@

# The module (target/release/libechomq.so) and echomq-web, which web/tests runs.
build: $(SETUP_STAMP) ## Build the module and echomq-web (release)
	$(CARGO) build --release --workspace

# A local Valkey with the module, in the foreground, from valkey.conf, on the
# port valkey.conf names (6379) or VALKEY_PORT, which make web follows.
## the port of make run's server, which make web connects to (unset: valkey.conf's)
VALKEY_PORT ?=
CONF_PORT := $(shell awk '$$1 == "port" { print $$2 }' valkey.conf)
SERVER_PORT := $(or $(VALKEY_PORT),$(CONF_PORT))
run: build ## Start valkey-server with the module (valkey.conf), in the foreground
	valkey-server valkey.conf$(if $(VALKEY_PORT), --port $(VALKEY_PORT))

# The live web view on http://127.0.0.1:8080/ (WEB_LISTEN to change it) of the
# server `make run` starts (VALKEY_PORT, else the port of valkey.conf), showing the examples'
# queues (and any in the server's echomq.auto-promote config). With
# ECHOMQ_WEB_URL set, echomq-web takes the server from it instead (no --url
# is passed, so the URL, which may hold a password, is not echoed).
## where make web listens
WEB_LISTEN ?= 127.0.0.1:8080
## the queues make web shows
WEB_QUEUES ?= jobs orders
## the server make web shows, read by echomq-web (unset: make run's)
ECHOMQ_WEB_URL ?=
ifdef ECHOMQ_WEB_URL
export ECHOMQ_WEB_URL
endif
web: build ## Start echomq-web on make run's server (see WEB_LISTEN, ECHOMQ_WEB_URL, VALKEY_PORT)
	./target/release/echomq-web $(if $(ECHOMQ_WEB_URL),,--url redis://127.0.0.1:$(SERVER_PORT)/ )--listen $(WEB_LISTEN) \
	  $(foreach q,$(WEB_QUEUES),--queue $(q))

# Unit and property tests, then the integration tests against real servers
# side by side (scripts/test-pool.sh, TEST_JOBS at once, most of them waiting
# on timers, not the CPU): every crate's own (the module's tests/, echomq-web's
# web/tests, the Rust client library's clients/rust/tests, the three libraries
# together in clients/tests), the Python and Node.js client libraries' suites,
# and the core suites again against Redis 7 when redis-server is installed (CI
# installs it). On Redis the release suite leaves out its three paced runs
# (15-19 s each; its other nine tests run there): they follow the limiter's
# pacing for seconds, arithmetic no server changes, and run on every Valkey
# version. The pool prints each job's output whole as it ends, then every
# job's time; it fails if any job failed, after all ran.
REDIS_SUITES := commands add bad_input replication reliability retry_options auto_promote streams eviction hostile fuzz release groups repeat
REDIS_SKIP := --skip exactly_at_the_limit --skip follows_the_dependency_down
## how many test jobs make test runs at once (a browser or three languages' workers count 2)
TEST_JOBS ?= 4
test: build ## Run every test against real servers (and Redis 7 when installed)
	@echo "== make test on $$(valkey-server --version | sed -n 's/.* v=\([^ ]*\).*/Valkey \1/p') ($$(command -v valkey-server))"
	$(CARGO) test --release --workspace --no-run
	$(CARGO) test --release --workspace --lib --bins
	$(CARGO) test --release --workspace --doc
	bash scripts/test-prepare.sh
	REDIS_SUITES="$(REDIS_SUITES)" REDIS_SKIP="$(REDIS_SKIP)" bash scripts/test-plan.sh > target/test-plan.tsv
	bash scripts/test-pool.sh -j $(TEST_JOBS) < target/test-plan.tsv

# The module suite once per Valkey version: every integration test of the
# module (tests/*.rs, the root crate's own; echomq-web's web/tests, which needs
# a TLS build, and the clients' tests are their crates') on the packaged
# valkey-server (8.0 on Debian 12) and on each version scripts/valkey-matrix.sh
# cached (8.1 and the newest 9.x; `ECHOMQ_WITH_VALKEY_MATRIX=1 make setup`
# builds them, CI=true does by default). Prints each version and how long its
# run took; runs them all, then fails if any failed. In CI a missing 8.1 or
# 9.x fails the target. tests/docs_sessions.rs is left out: it checks the
# docs' sessions and installs the libraries (pip, npm, cargo), which one
# version's run in make test covers. Beside the module suite, each version
# runs the failover and workers suites of the client libraries' workers
# (clients/tests/failover.rs and workers.rs), counted in the same
# passed/FAILED line. A version's suites run side by side, as make test's do
# (scripts/test-pool.sh, TEST_JOBS at once), from the binaries of make test's
# build.
MODULE_SUITES := $(patsubst tests/%.rs,%,$(sort $(filter-out tests/docs_sessions.rs,$(wildcard tests/*.rs))))
## the suites make test-matrix runs on each version
MATRIX_SUITES ?= $(MODULE_SUITES)
## the suites of echomq-client-tests (clients/tests) make test-matrix runs on each version too
MATRIX_CLIENT_SUITES ?= failover workers
## the servers make test-matrix runs on (unset: the packaged one and every cached one)
MATRIX_SERVERS ?=
test-matrix: build ## Run the module suite and the libraries' failover and workers suites on every cached Valkey version, with timings
	@cached="$$(bash scripts/valkey-matrix.sh --list)"; \
	if [ "$(CI)" = true ]; then \
	  for series in 8.1 9; do \
	    grep -q "^$$series\." <<<"$$cached" || { echo "test-matrix: no Valkey $$series cached (make setup builds it)"; exit 1; }; \
	  done; \
	fi; \
	servers="$(MATRIX_SERVERS)"; \
	[ -n "$$servers" ] || servers="$$(command -v valkey-server || true) $$(awk '{ print $$2 }' <<<"$$cached")"; \
	failed=""; summary=""; \
	for server in $$servers; do \
	  version=$$($$server --version | sed -n 's/.* v=\([^ ]*\).*/\1/p'); \
	  cli=$$(dirname $$server)/valkey-cli; [ -x "$$cli" ] || cli=valkey-cli; \
	  echo "== Valkey $$version: $$server"; \
	  started=$$(date +%s); \
	  result=passed; \
	  ONLY="$(patsubst %,.:%,$(MATRIX_SUITES)) $(patsubst %,clients/tests:%,$(MATRIX_CLIENT_SUITES))" \
	    bash scripts/test-plan.sh > target/test-matrix-plan.tsv || exit 1; \
	  ECHOMQ_SERVER=$$server ECHOMQ_CLI=$$cli bash scripts/test-pool.sh -j $(TEST_JOBS) < target/test-matrix-plan.tsv || result=FAILED; \
	  [ $$result = passed ] || failed="$$failed $$version"; \
	  summary="$$summary$$(printf '\n  Valkey %-8s %-6s in %ss' $$version $$result $$(( $$(date +%s) - started )))"; \
	done; \
	echo "== test-matrix:$$summary"; \
	[ -z "$$failed" ] || { echo "test-matrix: failed on$$failed"; exit 1; }

# Valkey's own tests (a chosen set of units, from the source tree each cached
# version was built from) against servers that load the module: a check that
# it harms nothing around it. A unit that fails runs again without the module
# on the same binary; fails only on a test that fails with the module alone.
# One runtest at a time; about 15 minutes for 8.1 and 9.x. Needs the versions
# scripts/valkey-matrix.sh caches (not 8.0: it has no source tree here).
## the cached versions make valkey-tests runs, e.g. 9.1.2 (unset: all)
VALKEY_TESTS_VERSIONS ?=
## Valkey test units instead of the script's set, e.g. "unit/type/zset unit/info"
VALKEY_TESTS_UNITS ?=
export VALKEY_TESTS_VERSIONS VALKEY_TESTS_UNITS
valkey-tests: $(SETUP_STAMP) ## Run Valkey's own test units with the module loaded (cached 8.1, 9.x)
	$(CARGO) build --release -p echomq
	bash scripts/valkey-tests.sh

# Side-by-side throughput, server time and memory against native commands and
# Lua; prints one table (see BENCHMARKS.md). Starts its own server.
## extra arguments of make bench, e.g. "--only spread --quick"
BENCH_ARGS ?=
export BENCH_ARGS
bench: build ## Benchmark against native commands and Lua (starts its own server)
	bash scripts/bench.sh

# The herd made visible: a cohort without and with jitter, drawn in the
# terminal and as an SVG. Starts its own server.
demo: build ## Show the herd without and with jitter, and the calendar's herd of hourly jobs (starts its own server)
	bash scripts/demo.sh

lint: ## cargo fmt --check and clippy -D warnings, as CI runs them
	$(CARGO) fmt --check
	$(CARGO) clippy --release --workspace --all-targets -- -D warnings

fmt: ## Format the workspace (cargo fmt --all)
	$(CARGO) fmt --all

clean: ## Remove target/ (the build, and the setup stamps)
	$(CARGO) clean
