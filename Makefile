# echomq: `make run` and `make test` are all a fresh machine needs.
SHELL := /bin/bash
CARGO ?= $(shell command -v cargo 2>/dev/null || echo $(HOME)/.cargo/bin/cargo)
MODULE := target/release/libechomq.so

.PHONY: setup build run web test lint bench demo clean

# Installs Valkey 8 and libclang when missing, and for the tests of the web
# view and the Node.js worker, Node.js, npm, a headless Chromium and
# Prometheus's promtool (scripts/setup.sh says what to install by hand where
# it cannot).
setup:
	@bash scripts/setup.sh

# The module (target/release/libechomq.so) and echomq-web, which tests/web runs.
build: setup
	$(CARGO) build --release --workspace

# A local Valkey with the module, in the foreground, from valkey.conf.
run: build
	valkey-server valkey.conf

# The live web view on http://127.0.0.1:8080/ (WEB_LISTEN to change it) of the
# server `make run` starts (the port of valkey.conf), showing the examples'
# queues (and any in the server's echomq.auto-promote config).
WEB_LISTEN ?= 127.0.0.1:8080
WEB_QUEUES ?= jobs orders
VALKEY_PORT := $(shell awk '$$1 == "port" { print $$2 }' valkey.conf)
web: build
	./target/release/echomq-web --url redis://127.0.0.1:$(VALKEY_PORT)/ --listen $(WEB_LISTEN) \
	  $(foreach q,$(WEB_QUEUES),--queue $(q))

# Unit and property tests, then integration tests against real servers; then
# the core suites again against Redis 7 when redis-server is installed (CI
# installs it).
REDIS_SUITES := --test commands --test bad_input --test replication --test reliability --test retry_options --test auto_promote --test streams --test eviction
test: build
	$(CARGO) test --release --workspace
	@if command -v redis-server >/dev/null 2>&1; then \
	  echo "== Redis compatibility: core suites against $$(redis-server --version | cut -d' ' -f3)"; \
	  ECHOMQ_SERVER=redis-server $(CARGO) test --release $(REDIS_SUITES); \
	else \
	  echo "== Redis compatibility: SKIPPED (redis-server not installed: apt-get install redis-server)"; \
	fi

# Side-by-side throughput, server time and memory against native commands and
# Lua; prints one table (see BENCHMARKS.md). Starts its own server.
bench: build
	bash scripts/bench.sh

# The herd made visible: a cohort without and with jitter, drawn in the
# terminal and as an SVG. Starts its own server.
demo: build
	bash scripts/demo.sh

lint:
	$(CARGO) fmt --check
	$(CARGO) clippy --release --workspace --all-targets -- -D warnings

clean:
	$(CARGO) clean
