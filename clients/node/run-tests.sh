#!/bin/sh
# The Node.js client's test suite against a real valkey-server with the echomq module.
# Outside CI a missing tool prints SKIPPED and exits 0; with CI=true it fails.
set -eu
cd "$(dirname -- "$0" 2>/dev/null || echo "${0%/*}")"

skip() {
  if [ "${CI:-}" = "true" ]; then
    echo "FAILED: $1 (CI=true)" >&2
    exit 1
  fi
  echo "SKIPPED: $1"
  exit 0
}

command -v node >/dev/null 2>&1 || skip "node is not installed (Node.js >= 18 is needed)"
command -v npm >/dev/null 2>&1 || skip "npm is not installed"
major=$(node -p 'process.versions.node.split(".")[0]')
[ "$major" -ge 18 ] || skip "node $(node --version) is older than 18"
server=${ECHOMQ_SERVER:-valkey-server}
command -v "$server" >/dev/null 2>&1 || skip "$server is not installed (set ECHOMQ_SERVER or install valkey-server)"

# --prepare installs and stops; ECHOMQ_PREPARED=1 skips the install, for make
# test's pool, where other suites run this package's programs meanwhile.
[ "${ECHOMQ_PREPARED:-}" = 1 ] || npm install --no-audit --no-fund
[ "${1:-}" = --prepare ] && exit 0
# The test files only: test/ also holds the server fixture and the crossworker program.
exec node --test test/*.test.mjs
