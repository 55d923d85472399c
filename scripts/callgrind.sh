#!/usr/bin/env bash
# Instructions per command, immune to a noisy shared machine: starts its own
# valkey-server with the module under `valgrind --tool=callgrind` (127.0.0.1,
# free port, temp dir), collecting only inside the handler named by
# CALLGRIND_TOGGLE (default *echo_promote*), drives one workload at a time
# with `python3 -m bench --workload` (scripts/bench/workloads.py) for the
# given seconds (valgrind runs the server some 50x slower: a few calls), stops
# the server by pid so callgrind writes its file, and prints the instructions
# per call (total ÷ the calls INFO commandstats counted) and the top
# inclusive entries (callgrind_annotate). Needs valgrind. Not part of
# `make bench`. A build with line tables names inlined code better:
# CARGO_PROFILE_RELEASE_DEBUG=line-tables-only with a target dir of its own.
#
# usage: bash scripts/callgrind.sh [seconds] [workload...]
#   e.g. bash scripts/callgrind.sh 20 repeat-plain repeat-every repeat-cron repeat-crontz
# Output: target/callgrind/<workload>.out (PROFILE_OUT to change), for
# callgrind_annotate or kcachegrind.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
module=${ECHOMQ_MODULE:-$root/target/release/libechomq.so}
seconds=${1:-20}
shift || true
workloads=("$@")
[ ${#workloads[@]} -gt 0 ] || workloads=(repeat-plain repeat-every)
toggle=${CALLGRIND_TOGGLE:-*echo_promote*}
stat=${CALLGRIND_STAT:-echo.promote}
command -v valgrind >/dev/null || { echo "callgrind: valgrind not found (apt-get install valgrind)" >&2; exit 1; }

out=${PROFILE_OUT:-$root/target/callgrind}
mkdir -p "$out"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/echomq-callgrind.XXXXXX")
server_pid=""
stop_server() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null || true
    for _ in $(seq 1 600); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$server_pid" 2>/dev/null && kill -KILL "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  server_pid=""
}
cleanup() {
  local rc=$?
  stop_server
  rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

for w in "${workloads[@]}"; do
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
  rm -f "$out/$w.out"
  valgrind --tool=callgrind --collect-atstart=no "--toggle-collect=$toggle" \
    --callgrind-out-file="$out/$w.out" -q \
    valkey-server --bind 127.0.0.1 --port "$port" --dir "$tmp" --save "" --appendonly no \
    --daemonize no --logfile "$tmp/valkey.log" --loadmodule "$module" &
  server_pid=$!
  for _ in $(seq 1 300); do
    valkey-cli -h 127.0.0.1 -p "$port" PING 2>/dev/null | grep -q PONG && break
    sleep 0.1
  done
  (cd "$root/scripts" && exec python3 -B -m bench --port "$port" --workload "$w" \
     --seconds "$seconds") 2>&1 | sed 's/^/  /'
  calls=$(valkey-cli -h 127.0.0.1 -p "$port" INFO commandstats | tr -d '\r' \
          | awk -F'[:,=]' -v c="cmdstat_$stat" 'tolower($1) == c { print $3 }')
  stop_server
  total=$(callgrind_annotate "$out/$w.out" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }')
  echo "=== $w: $stat, $calls calls, $total Ir collected, $(( total / calls )) Ir/call ==="
  # through a file: head closing the pipe early would fail the script (pipefail)
  callgrind_annotate --inclusive=yes "$out/$w.out" >"$tmp/annotate.txt" 2>/dev/null || true
  sed -n '/^Ir/,$p' "$tmp/annotate.txt" | head -n "${CALLGRIND_TOP:-40}"
  echo
done
