#!/usr/bin/env bash
# `make bench`: starts its own valkey-server with the module on a free
# 127.0.0.1 port (own temp dir, no persistence), runs the scripts/bench package
# (python3 -m bench) against it, prints one table, and stops the server by pid,
# also on error or Ctrl-C.
#
# Environment: CARGO_TARGET_DIR (where the defaults below are, default target),
# ECHOMQ_MODULE (default target/release/libechomq.so),
# ECHOMQ_SERVER (the server binary, default valkey-server; the versions
# section starts its own servers, one per --servers binary and --modules build),
# ECHOMQ_WORKER (default target/release/examples/crossworker, echomq-client's,
# built if stale, with examples/list_worker), ECHOMQ_EXAMPLE_WORKER (unset: the
# worker_layouts section compares the library's worker with the list worker;
# a binary of the old examples/worker.rs adds it as a reference),
# BENCH_ARGS (extra arguments of python3 -m bench, e.g. "--quick", "--rounds 7"
# or "--only retry_options,spread": scripts/bench/__main__.py lists the sections;
# "--only clients" is BullMQ's worker against the client libraries' workers, which
# installs its Node.js packages into target/bench-node and a Python venv into
# target/pyenv-clients, and builds echomq-client's bench example; "--only cluster"
# starts a 3-primary cluster of its own beside this server and runs clients/node's
# crossworker, npm-installing clients/node when it has no node_modules).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# where cargo builds (and so where the defaults below are found): CARGO_TARGET_DIR
# when set (a relative one is cargo's, from $root, where it is run here), else target/
target=${CARGO_TARGET_DIR:-target}
case $target in /*) ;; *) target=$root/$target ;; esac
module=${ECHOMQ_MODULE:-$target/release/libechomq.so}
[ -f "$module" ] || { echo "bench: $module not found; run cargo build --release" >&2; exit 1; }
export ECHOMQ_MODULE=$module
server_bin=${ECHOMQ_SERVER:-valkey-server}
for tool in "$server_bin" valkey-cli valkey-benchmark python3; do
  command -v "$tool" >/dev/null || { echo "bench: $tool not found (make setup)" >&2; exit 1; }
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/echomq-bench.XXXXXX")
server_pid=""
driver_pid=""
cleanup() {
  local rc=$?
  # the measuring script first (it stops its valkey-benchmark on SIGTERM), then the server
  if [ -n "$driver_pid" ] && kill -0 "$driver_pid" 2>/dev/null; then
    kill -TERM "$driver_pid" 2>/dev/null || true
    wait "$driver_pid" 2>/dev/null || true
  fi
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null || true
    for _ in $(seq 1 100); do
      kill -0 "$server_pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -0 "$server_pid" 2>/dev/null && kill -KILL "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  if [ "$rc" -ne 0 ] && [ -f "$tmp/valkey.log" ]; then
    echo "bench: failed (exit $rc); last server log lines:" >&2
    tail -n 20 "$tmp/valkey.log" >&2 || true
  fi
  rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# A free port: bind to port 0 and read what the kernel chose. Retry if another
# process takes it before the server binds.
start_server() {
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
  "$server_bin" --bind 127.0.0.1 --port "$port" --dir "$tmp" \
    --save "" --appendonly no --daemonize no \
    --logfile "$tmp/valkey.log" --enable-debug-command local \
    --loadmodule "$module" &
  server_pid=$!
  for _ in $(seq 1 100); do
    if valkey-cli -h 127.0.0.1 -p "$port" PING 2>/dev/null | grep -q PONG; then
      return 0
    fi
    kill -0 "$server_pid" 2>/dev/null || { wait "$server_pid" 2>/dev/null || true; server_pid=""; return 1; }
    sleep 0.1
  done
  return 1
}
started=0
for _ in 1 2 3; do
  if start_server; then started=1; break; fi
done
[ "$started" = 1 ] || { echo "bench: could not start valkey-server" >&2; exit 1; }
valkey-cli -h 127.0.0.1 -p "$port" MODULE LIST | grep -q echomq \
  || { echo "bench: module not loaded" >&2; exit 1; }

# The worker_layouts section's workers: the Rust library's (its crossworker
# example: ECHOMQ_WORKER, or built here) and the list layout's
# (examples/list_worker.rs), built here (a no-op when fresh; `make bench`
# builds the module and echomq-web only).
worker=${ECHOMQ_WORKER:-$target/release/examples/crossworker}
cargo=${CARGO:-$(command -v cargo || echo "$HOME/.cargo/bin/cargo")}
if [ -z "${ECHOMQ_WORKER:-}" ]; then
  (cd "$root" && "$cargo" build --release --quiet -p echomq-client --example crossworker) \
    || { echo "bench: cannot build echomq-client's crossworker example" >&2; exit 1; }
fi
list_worker=$target/release/examples/list_worker
(cd "$root" && "$cargo" build --release --quiet -p echomq --example list_worker) \
  || { echo "bench: cannot build examples/list_worker" >&2; exit 1; }

echo "# echomq benchmark"
echo
echo "command:  bash scripts/bench.sh ${BENCH_ARGS:-}   (make bench)"
echo "machine:  $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(uname -sr), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "server:   $("$server_bin" --version)"
echo "          pid $server_pid on 127.0.0.1:$port, --save \"\" --appendonly no, module $module"
echo "client:   $(valkey-benchmark --version 2>/dev/null || echo valkey-benchmark), $(python3 --version)"
start=$(date +%s)
# In the background and waited for, so that a signal to this script acts at once;
# from scripts/, where the package is, and exec'd, so that the pid waited for and
# signalled is python3's own (-B: no __pycache__ left in the checkout).
# shellcheck disable=SC2086
(cd "$root/scripts" && exec python3 -B -m bench --port "$port" --worker "$worker" --list-worker "$list_worker" ${BENCH_ARGS:-}) &
driver_pid=$!
wait "$driver_pid"
driver_pid=""
echo "total wall time $(( $(date +%s) - start )) s; load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
