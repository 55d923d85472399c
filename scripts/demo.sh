#!/usr/bin/env bash
# The herd made visible (`make demo`): starts its own valkey-server with the
# module on 127.0.0.1, fails a cohort of 100 jobs at attempt 3 with
# exponential:100:10000, once without jitter, once with full jitter and once
# with equal jitter, each cohort in one MULTI/EXEC, reads the fire times back
# with ECHO.SPREAD, and draws the three histograms in the terminal and as an
# SVG (target/demo/herd.svg).
# Then a second scene, from one real run of the benchmark's herd section
# (`make bench BENCH_ARGS="--only herd"`, which writes
# target/bench/herd-limits.json): the dependency's calls and failures per
# 100 ms under five retry strategies, one lane each, as an SVG
# (target/demo/herd-limits.svg; docs/herd-limits.svg is one such run). Without
# that file the scene says how to make it and the demo goes on.
# Then a third scene, the calendar's herd: 10,000 recurring definitions of
# `cron:0 * * * *` (ECHO.REPEAT), once without and once with `JITTER 300000`,
# read back with ECHO.SPREAD over the hour from the next full hour, drawn in
# the terminal and as an SVG (target/demo/calendar-herd.svg).
#
# ECHOMQ_DEMO_PORT=N: use port N. If a server with echomq already answers
# there, the demo uses it (and only writes, then deletes, its own keys);
# otherwise it starts its own server on that port.
# ECHOMQ_DEMO_SVG=path: where to write the SVG.
# ECHOMQ_DEMO_HERD_JSON=path, ECHOMQ_DEMO_HERD_SVG=path: the second scene's
# input and output. ECHOMQ_DEMO_CALENDAR_SVG=path: the third scene's SVG.
# The first scene ends with the line `peak without jitter: 100, peak with full
# jitter: N, peak with equal jitter: M`, the third with `calendar peak without
# jitter: 10000 in one ms; with JITTER 300000: at most N in one second`.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
cargo=${CARGO:-$(command -v cargo 2>/dev/null || echo "$HOME/.cargo/bin/cargo")}
module="$root/target/release/libechomq.so"
server_bin=${ECHOMQ_SERVER:-valkey-server}

[ -f "$module" ] || { echo "demo: $module is missing: run 'make build' (make demo does)" >&2; exit 1; }
command -v "$server_bin" >/dev/null || { echo "demo: $server_bin not found: run 'make setup'" >&2; exit 1; }

# Build the demo program first, so the server is not kept waiting on a compile.
"$cargo" build --release --quiet --example demo

server_pid=
workdir=
cleanup() {
  if [ -n "$server_pid" ]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  [ -n "$workdir" ] && rm -rf "$workdir"
  return 0
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Whether something answers a RESP PING on 127.0.0.1:$1.
answers_ping() {
  local reply
  reply=$( (exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
            printf 'PING\r\n' >&3
            IFS= read -r -t 2 line <&3 && printf '%s' "$line") 2>/dev/null ) || return 1
  [[ $reply == +PONG* ]]
}

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Starts valkey-server with the module on port $1; 0 once it answers PING.
start_server() {
  local port=$1
  "$server_bin" --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
    --daemonize no --dir "$workdir" --logfile "$workdir/valkey-$port.log" \
    --loadmodule "$module" </dev/null >/dev/null 2>&1 &
  server_pid=$!
  for _ in $(seq 1 200); do
    if ! kill -0 "$server_pid" 2>/dev/null; then
      wait "$server_pid" 2>/dev/null || true
      server_pid=
      return 1
    fi
    answers_ping "$port" && return 0
    sleep 0.05
  done
  return 1
}

workdir=$(mktemp -d "${TMPDIR:-/tmp}/echomq-demo.XXXXXX")
port=
if [ -n "${ECHOMQ_DEMO_PORT:-}" ]; then
  if answers_ping "$ECHOMQ_DEMO_PORT"; then
    port=$ECHOMQ_DEMO_PORT
    echo "Using the server already on 127.0.0.1:$port."
  elif port_in_use "$ECHOMQ_DEMO_PORT"; then
    echo "demo: 127.0.0.1:$ECHOMQ_DEMO_PORT is taken by something that is not a server" >&2
    exit 1
  else
    start_server "$ECHOMQ_DEMO_PORT" || {
      echo "demo: could not start $server_bin on port $ECHOMQ_DEMO_PORT" >&2
      cat "$workdir"/valkey-*.log >&2 2>/dev/null || true
      exit 1
    }
    port=$ECHOMQ_DEMO_PORT
  fi
else
  # A free port: pick one nobody answers on; retry if another process takes it first.
  for _ in $(seq 1 20); do
    candidate=$((20000 + RANDOM % 40000))
    port_in_use "$candidate" && continue
    if start_server "$candidate"; then port=$candidate; break; fi
  done
  [ -n "$port" ] || {
    echo "demo: could not start $server_bin" >&2
    cat "$workdir"/valkey-*.log >&2 2>/dev/null || true
    exit 1
  }
fi
if [ -n "$server_pid" ]; then
  echo "Started $("$server_bin" --version | cut -d' ' -f1-3) with echomq on 127.0.0.1:$port (pid $server_pid)."
fi

"$cargo" run --release --quiet --example demo -- --url "redis://127.0.0.1:$port/"

# Scene 3: the tenants' herd, from one real run of make bench BENCH_ARGS="--only tenants"
# (target/bench/tenants.json), drawn by scripts/demo_tenants.py as target/demo/tenants.svg.
python3 "$root/scripts/demo_tenants.py"
