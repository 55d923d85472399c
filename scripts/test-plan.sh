#!/usr/bin/env bash
# Prints make test's plan for scripts/test-pool.sh, one job a line:
#   <name> TAB <weight> TAB <directory> TAB <command>
# Every integration suite of the workspace (the binaries of the one release
# build, scripts/test-binaries.sh), the Python and Node.js libraries' suites,
# and, when redis-server is installed, the core suites again on Redis 7
# (`redis:<suite>`, with the arguments in REDIS_SKIP). Longest first, so the
# pool ends with short jobs; a job that keeps the CPU busy (three languages'
# workers, a browser, a compile) weighs 2. Run scripts/test-prepare.sh first:
# the jobs share the Python venv and clients/node's packages.
# With ONLY set (names as printed: `.:add clients/tests:failover`), only
# those suites, without the libraries' suites or the Redis ones: make
# test-matrix's plan for one server (ECHOMQ_SERVER, which the jobs inherit).
#   REDIS_SUITES="commands add ..." REDIS_SKIP="--skip x" scripts/test-plan.sh
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"

# Measured wall times of a clean run order the start; anything not named
# here starts after these, in the order listed by cargo.
longest=(clients/tests:clients web:web .:docs_sessions python clients/tests:failover node
  .:release .:cluster clients/tests:repeat redis:release clients/tests:on_cluster .:groups
  .:repeat redis:repeat redis:groups .:auto_promote redis:auto_promote clients/rust:client)
heavy=" clients/tests:clients web:web .:docs_sessions python node clients/tests:failover clients/tests:on_cluster clients/tests:repeat "

declare -A line=()
order=()
add() { # name dir command
  local weight=1
  [[ "$heavy" == *" $1 "* ]] && weight=2
  line[$1]=$(printf '%s\t%s\t%s\t%s' "$1" "$weight" "$2" "$3")
  order+=("$1")
}
q() { printf '%q' "$1"; }

declare -A binaries=()
for package in . web clients/rust clients/tests; do
  # A failed build fails the plan (cargo's errors on stderr).
  binaries[$package]=$(bash scripts/test-binaries.sh "$package" 2> >(grep -v '^ *\(Finished\|Compiling\)' >&2))
  while read -r suite bin; do
    [ -n "$suite" ] || continue
    name="$package:$suite"
    [ "$package" = web ] && name="web:$suite"
    add "$name" "$package" "$(q "$bin")"
  done <<<"${binaries[$package]}"
done
if [ -n "${ONLY:-}" ]; then
  for name in $ONLY; do
    [ -n "${line[$name]:-}" ] || { echo "test-plan: no suite $name" >&2; exit 1; }
  done
elif ! command -v redis-server >/dev/null 2>&1; then
  add redis . "echo 'Redis compatibility: SKIPPED (redis-server not installed: apt-get install redis-server)'"
fi
[ -n "${ONLY:-}" ] || add python . "ECHOMQ_PREPARED=1 bash clients/python/run-tests.sh"
[ -n "${ONLY:-}" ] || add node . "ECHOMQ_PREPARED=1 sh clients/node/run-tests.sh"
if [ -z "${ONLY:-}" ] && command -v redis-server >/dev/null 2>&1; then
  while read -r suite bin; do
    for want in ${REDIS_SUITES:-}; do
      [ "$suite" = "$want" ] && add "redis:$suite" . "ECHOMQ_SERVER=redis-server $(q "$bin") ${REDIS_SKIP:-}"
    done
  done <<<"${binaries[.]}"
fi

declare -A printed=() wanted=()
for name in ${ONLY:-}; do wanted[$name]=1; done
for name in "${longest[@]}" "${order[@]}"; do
  [ -n "${line[$name]:-}" ] && [ -z "${printed[$name]:-}" ] || continue
  [ -z "${ONLY:-}" ] || [ -n "${wanted[$name]:-}" ] || continue
  echo "${line[$name]}"
  printed[$name]=1
done
