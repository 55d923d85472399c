#!/usr/bin/env bash
# Runs the jobs of a test plan (scripts/test-plan.sh) side by side, as many at
# once as their weights fit in the pool: most suites spend their time waiting
# (timers, leases, a worker's pace), a few less than a fifth of it on the CPU,
# so on two cores several run in the time of one. Each job's output is kept
# and printed whole when it ends, so logs do not interleave. Plan lines:
#   <name> TAB <weight> TAB <directory> TAB <command>
# in the order to start them (the longest first). Fails if any job failed,
# after all ran; prints each job's time, longest first.
#   scripts/test-pool.sh [-j CAPACITY] < plan
set -uo pipefail
capacity=4
[ "${1:-}" = -j ] && { capacity=${2:?-j needs a number}; shift 2; }
repo=$(cd "$(dirname "$0")/.." && pwd)
logs=$(mktemp -d "${TMPDIR:-/tmp}/echomq-test-pool.XXXXXX")
trap 'rm -rf "$logs"' EXIT

names=() weights=() dirs=() commands=()
while IFS=$'\t' read -r name weight dir command; do
  [ -n "$name" ] || continue
  names+=("$name") weights+=("$weight") dirs+=("$dir") commands+=("$command")
done

pool_started=$(date +%s)
declare -A running=() started=() job_of=()
used=0 next=0 failed=() times=()
finish() {
  local pid=$1 status=$2 i=${job_of[$1]}
  local took=$(( $(date +%s) - started[$pid] ))
  local result=passed
  [ "$status" = 0 ] || { result=FAILED; failed+=("${names[$i]}"); }
  echo "== ${names[$i]}: $result in ${took}s"
  cat "$logs/$i.log"
  times+=("$took ${names[$i]} $result")
  used=$(( used - weights[i] ))
  unset "running[$pid]"
}
while [ $next -lt ${#names[@]} ] || [ ${#running[@]} -gt 0 ]; do
  # Start the next job when it fits (or when nothing runs: a job heavier
  # than the pool runs alone).
  if [ $next -lt ${#names[@]} ] && { [ $(( used + weights[next] )) -le "$capacity" ] || [ ${#running[@]} -eq 0 ]; }; then
    i=$next; next=$(( next + 1 ))
    (cd "$repo/${dirs[$i]}" && exec bash -c "${commands[$i]}") > "$logs/$i.log" 2>&1 &
    running[$!]=1 started[$!]=$(date +%s) job_of[$!]=$i
    used=$(( used + weights[i] ))
    continue
  fi
  wait -n -p done_pid "${!running[@]}"
  finish "$done_pid" $?
done
echo "== test-pool: ${#names[@]} jobs in $(( $(date +%s) - pool_started ))s, capacity $capacity; by time:"
printf '%s\n' "${times[@]}" | sort -rn | awk '{ printf "  %5ss  %-40s %s\n", $1, $2, $3 }'
if [ ${#failed[@]} -gt 0 ]; then
  echo "test-pool: FAILED: ${failed[*]}"
  exit 1
fi
