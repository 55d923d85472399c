#!/usr/bin/env bash
# Where the server's time goes, per command: starts its own valkey-server with
# the module (127.0.0.1, free port, temp dir), drives one workload at a time
# with `python3 -m bench --workload` (scripts/bench/workloads.py), samples the server with
# `perf record -e cpu-clock --call-graph dwarf -p <pid>`, and prints the top
# self-time entries and the top inclusive entries of each workload.
# Needs linux-perf (apt-get install linux-perf). Not part of `make bench`.
#
# usage: bash scripts/profile.sh [seconds] [workload...]
#   workloads: retry (jittered), retry-fixed, zadd, promote, promote-lua,
#              promote-mix (ECHO.PROMOTE, Lua and native commands in turn), spread,
#              promote-g0, promote-g1, promote-g10 (a release of 1000 from 0, 1 or 10 groups),
#              promote-limited (releases of 1 through a limit that allows)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
module=${ECHOMQ_MODULE:-$root/target/release/libechomq.so}
seconds=${1:-8}
shift || true
workloads=("$@")
[ ${#workloads[@]} -gt 0 ] || workloads=(zadd retry-fixed retry promote-mix spread)
command -v perf >/dev/null || { echo "profile: perf not found (apt-get install linux-perf)" >&2; exit 1; }

out=${PROFILE_OUT:-$root/target/profile}
mkdir -p "$out"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/echomq-profile.XXXXXX")
server_pid=""
cleanup() {
  local rc=$?
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$server_pid" 2>/dev/null && kill -KILL "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
valkey-server --bind 127.0.0.1 --port "$port" --dir "$tmp" --save "" --appendonly no \
  --daemonize no --logfile "$tmp/valkey.log" --loadmodule "$module" &
server_pid=$!
for _ in $(seq 1 100); do
  valkey-cli -h 127.0.0.1 -p "$port" PING 2>/dev/null | grep -q PONG && break
  sleep 0.1
done

# workload -> "commandstats name:function call() runs:handler" for perf_fold.py
declare -A fold=(
  [zadd]="zadd:zaddGenericCommand:zaddGenericCommand"
  [retry]="echo.retry:ValkeyModuleCommandDispatcher:echo_retry"
  [retry-fixed]="echo.retry:ValkeyModuleCommandDispatcher:echo_retry"
  [promote]="echo.promote:ValkeyModuleCommandDispatcher:echo_promote"
  [promote-g0]="echo.promote:ValkeyModuleCommandDispatcher:echo_promote"
  [promote-g1]="echo.promote:ValkeyModuleCommandDispatcher:echo_promote"
  [promote-g10]="echo.promote:ValkeyModuleCommandDispatcher:echo_promote"
  [promote-limited]="echo.promote:ValkeyModuleCommandDispatcher:echo_promote"
  [promote-lua]="evalsha:evalGenericCommand:luaCallFunction"
  [spread]="echo.spread:ValkeyModuleCommandDispatcher:echo_spread"
  [promote-mix]="echo.promote:ValkeyModuleCommandDispatcher:echo_promote"
)
for w in "${workloads[@]}"; do
  valkey-cli -h 127.0.0.1 -p "$port" FLUSHALL SYNC >/dev/null
  (cd "$root/scripts" && exec python3 -B -m bench --port "$port" --workload "$w" \
     --seconds "$((seconds + 3))") &
  driver=$!
  sleep 1.5
  valkey-cli -h 127.0.0.1 -p "$port" CONFIG RESETSTAT >/dev/null
  perf record -q -e cpu-clock -F 999 --call-graph dwarf,8192 -p "$server_pid" \
    -o "$out/$w.data" -- sleep "$seconds" 2>/dev/null
  IFS=: read -r stat proc handler <<<"${fold[$w]}"
  upc=$(valkey-cli -h 127.0.0.1 -p "$port" INFO commandstats | tr -d '\r' \
        | awk -F'[:,=]' -v c="cmdstat_$stat" 'tolower($1) == c { print $5 / $3 }')
  wait "$driver"
  echo "=== $w: $stat, $upc µs/call (INFO commandstats while sampled) ==="
  perf script -i "$out/$w.data" -F ip,sym --no-inline 2>/dev/null >"$tmp/script.txt"
  if [ "$w" = promote-mix ]; then
    calls=$(valkey-cli -h 127.0.0.1 -p "$port" INFO commandstats | tr -d '\r' \
            | awk -F'[:,=]' 'tolower($1) == "cmdstat_echo.promote" { print $3 }')
    echo "--- each command's CPU per promotion of 1000 (sample counts; $calls promotions of each kind)"
    python3 "$root/scripts/perf_fold.py" --summary --calls "$calls" --sample-us 1001 <"$tmp/script.txt"
    for spec in "echo_promote ValkeyModuleCommandDispatcher" "luaCallFunction evalGenericCommand" \
                "zremrangeGenericCommand zremrangeGenericCommand" "pushGenericCommand pushGenericCommand" \
                "zrangebyscoreCommand zrangebyscoreCommand"; do
      set -- $spec
      echo "--- $1"
      python3 "$root/scripts/perf_fold.py" "$1" --proc "$2" --top 10 <"$tmp/script.txt" | tail -n +2
    done
  else
    python3 "$root/scripts/perf_fold.py" "$handler" --proc "$proc" --usec-per-call "$upc" <"$tmp/script.txt"
  fi
  echo
done
