#!/usr/bin/env bash
# Valkey's own tests, run against servers that load echomq: a check that the
# module harms nothing in the server around it. For each Valkey version that
# scripts/valkey-matrix.sh cached with its source tree (8.1 and 9.x), runs a
# chosen set of Valkey's test units (tests/unit/..., from that same source
# tree, with its own `runtest`) on the cached binaries, every server started
# with `--config loadmodule <abs path of libechomq.so>`.
#
#   scripts/valkey-tests.sh              every cached version with a source tree
#   scripts/valkey-tests.sh 9.1.2        one version (or several)
#
# Settings (environment; `make valkey-tests` passes its own):
#   VALKEY_TESTS_VERSIONS  versions to run when none are named (default: all cached)
#   VALKEY_TESTS_UNITS     units to run instead of the default set below
#   VALKEY_TESTS_CLIENTS   runtest's --clients (default 1: one unit at a time)
#   VALKEY_TESTS_TIMEOUT   runtest's --timeout per test, in seconds (default 600)
#   VALKEY_TESTS_BASELINE  1 (default): a unit with failures runs again without
#                          the module, so a failure that happens anyway on this
#                          machine is told apart from one the module causes
#   VALKEY_TESTS_ARGS      more arguments of runtest, for both runs (split on
#                          spaces), e.g. "--only /^ZADD" or "--force-failure"
#   VALKEY_TESTS_AUTO_PROMOTE  "<schedule> <pending>": every server with the
#                          module also arms its timer (echomq.auto-promote) on
#                          that queue, so the module works under every test
#   ECHOMQ_MODULE          the module (default target/release/libechomq.so)
#   ECHOMQ_VALKEY_CACHE    the cache of scripts/valkey-matrix.sh (/var/cache/echomq)
#
# The cache is only read: each version's `runtest` and `tests/` are copied to
# target/valkey-tests/<version>/, where src/valkey-server and src/valkey-cli
# are links to the cached binaries (runtest looks for them there). The output
# of every run stays in target/valkey-tests/<version>/logs/, with the server
# logs of a unit that failed with the module (<unit>.with-module.servers/).
#
# One runtest process runs at a time, one unit per process, so each unit's
# counts are its own. Per unit it prints the tests passed, failed and skipped;
# then a table of every version. Exits 1 if a test failed with the module that
# did not also fail without it (or a unit could not run), 0 otherwise.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cache=${ECHOMQ_VALKEY_CACHE:-/var/cache/echomq}
module=${ECHOMQ_MODULE:-$root/target/release/libechomq.so}
clients=${VALKEY_TESTS_CLIENTS:-1}
timeout=${VALKEY_TESTS_TIMEOUT:-600}
baseline=${VALKEY_TESTS_BASELINE:-1}
read -r -a extra <<<"${VALKEY_TESTS_ARGS:-}"
with_module=()
if [ -n "${VALKEY_TESTS_AUTO_PROMOTE:-}" ]; then
  # Quoted for the config file runtest writes: one value with a space.
  with_module=(--config echomq.auto-promote "\"$VALKEY_TESTS_AUTO_PROMOTE\"")
fi
out=$root/target/valkey-tests

# The default units: the data types echomq writes (sorted sets, lists,
# streams and consumer groups), keys, expiry, DUMP/RESTORE/MIGRATE and
# MULTI; what it plugs into or sits next to (INFO and its own section, the
# latency monitor, Lua scripts and functions, COMMAND/CONFIG/CLIENT
# introspection and its module configs, ACL and its command categories,
# pub/sub, maxmemory and eviction, DEBUG RELOAD and the rest of unit/other);
# replication; cluster slot migration by MIGRATE, and on Valkey 9 the atomic
# slot migration the module declares it handles. None needs valkey-benchmark,
# valkey-check-aof/rdb or the test modules. Both versions together take
# about 15 minutes on 2 busy cores.
units_common=(
  unit/type/zset
  unit/type/list
  unit/type/stream
  unit/type/stream-cgroups
  unit/expire
  unit/keyspace
  unit/dump
  unit/multi
  unit/info
  unit/info-command
  unit/latency-monitor
  unit/scripting
  unit/functions
  unit/introspection
  unit/introspection-2
  unit/acl
  unit/pubsub
  unit/maxmemory
  unit/other
  integration/replication-4
  unit/cluster/slot-migration
)
units_9=(unit/cluster/cluster-migrateslots)

case $module in /*) ;; *) module=$PWD/$module ;; esac
[ -f "$module" ] || { echo "valkey-tests: no module at $module (make build first)" >&2; exit 1; }

# runtest needs tclsh 8.5 or later under a versioned name.
if ! command -v tclsh8.6 >/dev/null 2>&1 && ! command -v tclsh8.5 >/dev/null 2>&1 \
   && ! command -v tclsh9.0 >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "valkey-tests: installing tcl (Valkey's test harness is Tcl)" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q -o Dpkg::Use-Pty=0 --no-install-recommends tcl >&2
  else
    echo "valkey-tests: needs tclsh 8.5 or later (apt-get install tcl)" >&2
    exit 1
  fi
fi

# The cached versions that have a source tree: "<version> <bin dir> <tree>".
cached() {
  local version server tree
  while read -r version server; do
    tree=$cache/src/$version/valkey-$version
    [ -x "$tree/runtest" ] && [ -d "$tree/tests" ] || continue
    printf '%s %s %s\n' "$version" "$(dirname "$server")" "$tree"
  done < <(ECHOMQ_VALKEY_CACHE=$cache bash "$root/scripts/valkey-matrix.sh" --list)
}

if [ $# -gt 0 ]; then wanted=("$@")
else read -r -a wanted <<<"${VALKEY_TESTS_VERSIONS:-}"; fi
mapfile -t available < <(cached)
runs=()
for line in "${available[@]}"; do
  v=${line%% *}
  if [ ${#wanted[@]} -eq 0 ]; then runs+=("$line"); continue; fi
  for w in "${wanted[@]}"; do [ "$w" = "$v" ] && runs+=("$line"); done
done
if [ ${#runs[@]} -eq 0 ]; then
  echo "valkey-tests: no cached Valkey with a source tree${wanted[*]:+ among: ${wanted[*]}}; cached:" >&2
  printf '  %s\n' "${available[@]:-none (ECHOMQ_WITH_VALKEY_MATRIX=1 make setup builds them)}" >&2
  exit 1
fi

strip() { sed -e 's/\x1b\[[0-9;]*m//g' "$1"; }
# Test names of one log by status: ok, err, exception, skip.
names() { strip "$2" | sed -n "s/^\[$1\]: //p" | sed -e 's/ ([0-9]* ms)$//' -e 's/ in tests\/[^ ]*\.tcl$//'; }
count() { names "$1" "$2" | wc -l | tr -d ' '; }

# One unit, one runtest process. $1 dir, $2 unit, $3 log, then runtest's extra args.
run_unit() {
  local dir=$1 unit=$2 log=$3
  shift 3
  rm -rf "$dir/tests/tmp" && mkdir -p "$dir/tests/tmp"
  (cd "$dir" && ./runtest --single "$unit" --clients "$clients" --timeout "$timeout" \
     --tags -slow --dump-logs --dont-clean ${extra[@]+"${extra[@]}"} "$@") >"$log" 2>&1
}

# "<servers that loaded echomq>/<servers started>" of the last run (their
# logs are in tests/tmp/server*/stdout, kept by --dont-clean).
loaded_count() {
  local dir=$1 started loaded
  started=$(find "$dir/tests/tmp" -mindepth 2 -maxdepth 2 -path '*/server*/stdout' | wc -l)
  loaded=$(find "$dir/tests/tmp" -mindepth 2 -maxdepth 2 -path '*/server*/stdout' \
             -exec grep -l "Module 'echomq' loaded" {} + 2>/dev/null | wc -l)
  echo "$loaded/$started"
}

summary=()
harmed=()
for line in "${runs[@]}"; do
  read -r version bindir tree <<<"$line"
  dir=$out/$version
  echo "== Valkey $version: $tree's tests on $bindir, with --config loadmodule $module${with_module[*]:+ ${with_module[*]}}"
  # A fresh copy of the harness per run; the binaries are linked, not copied.
  rm -rf "$dir" && mkdir -p "$dir/src" "$dir/logs"
  cp "$tree/runtest" "$dir/"
  cp -R "$tree/tests" "$dir/tests"
  rm -rf "$dir/tests/tmp" && mkdir -p "$dir/tests/tmp"
  [ -f "$tree/src/valgrind.sup" ] && cp "$tree/src/valgrind.sup" "$dir/src/"
  ln -s "$bindir/valkey-server" "$dir/src/valkey-server"
  ln -s "$bindir/valkey-cli" "$dir/src/valkey-cli"

  # The module loads in this binary: a server on a unix socket only, asked
  # MODULE LIST, stopped by its pid.
  # (A unix socket's path must be short: under /tmp, not the clone.)
  sockdir=$(mktemp -d)
  sock=$sockdir/s.sock
  "$bindir/valkey-server" --port 0 --unixsocket "$sock" --save '' --appendonly no \
    --dir "$dir" --loadmodule "$module" >"$dir/logs/preflight.log" 2>&1 &
  pid=$!
  for _ in $(seq 50); do [ -S "$sock" ] && break; sleep 0.1; done
  loaded=$("$bindir/valkey-cli" -s "$sock" MODULE LIST 2>/dev/null | grep -c '^echomq$' || true)
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  rm -rf "$sockdir"
  if [ "$loaded" != 1 ]; then
    tail -n 20 "$dir/logs/preflight.log" >&2
    echo "valkey-tests: echomq does not load in Valkey $version (log: $dir/logs/preflight.log)" >&2
    summary+=("$(printf '%-8s %-40s %s' "$version" '(module load)' 'FAILED: does not load')")
    harmed+=("$version:module-load")
    continue
  fi

  units=()
  if [ -n "${VALKEY_TESTS_UNITS:-}" ]; then read -r -a units <<<"$VALKEY_TESTS_UNITS"
  else
    units=("${units_common[@]}")
    [ "${version%%.*}" -ge 9 ] && units+=("${units_9[@]}")
  fi
  started=$(date +%s)
  n_units=0 n_ok=0 n_failed=0 n_skip=0
  for unit in "${units[@]}"; do
    if [ ! -f "$dir/tests/$unit.tcl" ]; then
      printf '   %-40s not in Valkey %s\n' "$unit" "$version"
      summary+=("$(printf '%-8s %-40s %s' "$version" "$unit" 'ERROR: no such unit')")
      harmed+=("$version:$unit")
      continue
    fi
    log=$dir/logs/${unit//\//_}.with-module.log
    t0=$(date +%s)
    rc=0
    run_unit "$dir" "$unit" "$log" --config loadmodule "$module" ${with_module[@]+"${with_module[@]}"} || rc=$?
    secs=$(( $(date +%s) - t0 ))
    servers=$(loaded_count "$dir")
    ok=$(count ok "$log"); err=$(count err "$log"); exc=$(count exception "$log"); skip=$(( $(count skip "$log") + $(count ignore "$log") ))
    failed=$(( err + exc ))
    verdict=passed
    if [ "${servers%/*}" = 0 ]; then
      # No server of the unit loaded the module: the run tested nothing of it.
      failed=$(( failed + 1 )); verdict="ERROR (no server loaded echomq; see $log)"
      harmed+=("$version:$unit")
    elif [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then
      # runtest failed without a failed test: the unit did not run (or was cut short).
      failed=1; verdict="ERROR (runtest exit $rc, no test failed; see $log)"
      harmed+=("$version:$unit")
    elif [ "$failed" -gt 0 ]; then
      verdict=FAILED
      # Keep the servers' logs and configs of the failed run.
      mv "$dir/tests/tmp" "$dir/logs/${unit//\//_}.with-module.servers"
      if [ "$baseline" = 1 ]; then
        # The same unit on the same binary, without the module.
        blog=$dir/logs/${unit//\//_}.without-module.log
        run_unit "$dir" "$unit" "$blog" || true
        mod_only=$(comm -23 <({ names err "$log"; names exception "$log"; } | sort -u) \
                            <({ names err "$blog"; names exception "$blog"; } | sort -u))
        if [ -z "$mod_only" ]; then
          verdict="failed, and fails without the module too"
        else
          verdict="FAILED only with the module: $(printf '%s' "$mod_only" | paste -sd '|' -)"
          harmed+=("$version:$unit")
        fi
      else
        harmed+=("$version:$unit")
      fi
    fi
    printf '   %-40s %4s passed %3s failed %4s skipped  %4ss  servers with echomq %7s  %s\n' \
      "$unit" "$ok" "$failed" "$skip" "$secs" "$servers" "$verdict"
    if [ "$failed" -gt 0 ]; then
      { names err "$log"; names exception "$log"; } | sed 's/^/      with the module: /'
    fi
    summary+=("$(printf '%-8s %-40s %4s %4s %4s %5ss %7s  %s' "$version" "$unit" "$ok" "$failed" "$skip" "$secs" "$servers" "$verdict")")
    n_units=$(( n_units + 1 )); n_ok=$(( n_ok + ok )); n_failed=$(( n_failed + failed )); n_skip=$(( n_skip + skip ))
  done
  total="$n_units units, $n_ok passed, $n_failed failed, $n_skip skipped, in $(( $(date +%s) - started ))s"
  summary+=("$(printf '%-8s %s' "$version" "total: $total")")
  echo "   Valkey $version: $total (logs: $dir/logs)"
done

echo "== valkey-tests (with --config loadmodule $module${with_module[*]:+ ${with_module[*]}})"
printf '%-8s %-40s %4s %4s %4s %6s %7s  %s\n' version unit ok fail skip time servers result
printf '%s\n' "${summary[@]}"
if [ ${#harmed[@]} -gt 0 ]; then
  echo "valkey-tests: failed with the module only (or did not run): ${harmed[*]}" >&2
  exit 1
fi
echo "valkey-tests: no test failed because of the module"
