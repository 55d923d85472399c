#!/usr/bin/env bash
# Runs integration-test suites of one workspace package from the release
# build `cargo test --release --workspace` made (scripts/test-binaries.sh says
# why not `cargo test -p`): each named suite's binary in turn, in the package's
# directory as cargo runs it, with the arguments after `--` (e.g. `--skip X`).
# Runs every suite even when one fails; fails if any did, naming them.
#   scripts/run-suites.sh PACKAGE_DIR SUITE... [-- TEST_ARGS...]
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
package=${1:?usage: run-suites.sh PACKAGE_DIR SUITE... [-- TEST_ARGS...]}
shift
suites=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do suites+=("$1"); shift; done
[ "${1:-}" = -- ] && shift
binaries=$(bash "$repo/scripts/test-binaries.sh" "$package") || exit 1
failed=()
for suite in "${suites[@]}"; do
  bin=$(awk -v s="$suite" '$1 == s { print $2 }' <<<"$binaries")
  if [ -z "$bin" ]; then
    echo "run-suites: no test suite $suite in $package" >&2
    failed+=("$suite")
    continue
  fi
  echo "     Running $package: $suite ($bin)"
  TIMEFORMAT="     Ran $package: $suite in %1R s (CPU %1U s user, %1S s system)"
  time { (cd "$repo/$package" && "$bin" "$@") || failed+=("$suite"); }
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "run-suites: FAILED in $package: ${failed[*]}" >&2
  exit 1
fi
