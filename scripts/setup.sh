#!/usr/bin/env bash
# Installs what building and testing echomq needs, and only what is missing:
# Valkey 8 (valkey-server, valkey-cli, valkey-benchmark) and libclang for bindgen.
# Optional, each installed in CI (CI=true) and on request elsewhere:
#   ECHOMQ_WITH_REDIS=1    Redis 7 (the compatibility suites)
#   ECHOMQ_WITH_NODE=1     Node.js (18 or later) and npm (clients/node and the browser
#                          tests; the browser driver's packages go to target/web-node)
#   ECHOMQ_WITH_BROWSER=1  Debian's chromium-headless-shell (web/tests' page tests)
#   ECHOMQ_WITH_PROMTOOL=1 Prometheus's promtool, from Debian's prometheus package
#                          (web/tests checks echomq-web's /metrics with it)
#   ECHOMQ_WITH_OPENSSL=1  the openssl command (web/tests makes a CA and a server
#                          certificate with it for the rediss:// test)
#   ECHOMQ_WITH_PYTHON=1   python3 with venv and pip (the Python client library's
#                          tests and the Python worker; their packages go to a
#                          venv under target/)
#   ECHOMQ_WITH_VALKEY_MATRIX=1  Valkey 8.1 and the newest 9.x from Debian's source
#                          packages, built once per machine and cached
#                          (scripts/valkey-matrix.sh; `make test-matrix` runs on them,
#                          and CI runs it after `make test`)
# Without them those tests say SKIPPED and why; in CI they fail instead.
# On Debian 12 Valkey comes from bookworm-backports; on newer Debian/Ubuntu from the main suite.
set -euo pipefail

need=()
command -v valkey-server >/dev/null 2>&1 || need+=(valkey-server)
command -v valkey-cli >/dev/null 2>&1 || need+=(valkey-tools)
command -v valkey-benchmark >/dev/null 2>&1 || need+=(valkey-tools)
# bindgen loads libclang at build time and needs clang's own headers (stddef.h).
if ! ls /usr/lib/llvm-*/lib/libclang*.so* >/dev/null 2>&1 \
   || ! ls /usr/lib/llvm-*/lib/clang/*/include/stddef.h >/dev/null 2>&1; then
  need+=(libclang-dev)
fi
# Redis 7 only runs the compatibility suites; CI installs it, a developer's
# `make test` uses it when present.
[ "${CI:-}" = true ] && ECHOMQ_WITH_REDIS=${ECHOMQ_WITH_REDIS:-1}
[ "${CI:-}" = true ] && ECHOMQ_WITH_NODE=${ECHOMQ_WITH_NODE:-1}
[ "${CI:-}" = true ] && ECHOMQ_WITH_BROWSER=${ECHOMQ_WITH_BROWSER:-1}
[ "${CI:-}" = true ] && ECHOMQ_WITH_PROMTOOL=${ECHOMQ_WITH_PROMTOOL:-1}
[ "${CI:-}" = true ] && ECHOMQ_WITH_OPENSSL=${ECHOMQ_WITH_OPENSSL:-1}
[ "${CI:-}" = true ] && ECHOMQ_WITH_PYTHON=${ECHOMQ_WITH_PYTHON:-1}
[ "${CI:-}" = true ] && ECHOMQ_WITH_VALKEY_MATRIX=${ECHOMQ_WITH_VALKEY_MATRIX:-1}
# The matrix's servers come last, whatever else was missing: building them
# takes minutes the first time on a machine, nothing after.
finish() {
  if [ "${ECHOMQ_WITH_VALKEY_MATRIX:-0}" = 1 ]; then
    bash "$(dirname "$0")/valkey-matrix.sh" || {
      [ "${CI:-}" = true ] && exit 1
      echo "note: no Valkey matrix here; make test-matrix runs on the versions it finds" >&2
    }
  fi
  exit 0
}
optional=()
if [ "${ECHOMQ_WITH_OPENSSL:-0}" = 1 ] && ! command -v openssl >/dev/null 2>&1; then
  optional+=(openssl)
fi
# Debian's python3 makes a venv only with python3-venv (ensurepip) installed.
if [ "${ECHOMQ_WITH_PYTHON:-0}" = 1 ] \
   && ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
  optional+=(python3 python3-venv)
fi
if [ "${ECHOMQ_WITH_REDIS:-0}" = 1 ] && ! command -v redis-server >/dev/null 2>&1; then
  optional+=(redis-server)
fi
if [ "${ECHOMQ_WITH_NODE:-0}" = 1 ]; then
  command -v node >/dev/null 2>&1 || optional+=(nodejs)
  command -v npm >/dev/null 2>&1 || optional+=(npm)
fi
# The tests look for the binary itself (not /usr/bin's wrapper script).
if [ "${ECHOMQ_WITH_BROWSER:-0}" = 1 ] && [ -z "${ECHOMQ_CHROMIUM:-}" ] \
   && [ ! -x /usr/lib/chromium/chromium-headless-shell ] && [ ! -x /usr/lib/chromium/chromium ]; then
  optional+=(chromium-headless-shell)
fi
if [ "${ECHOMQ_WITH_PROMTOOL:-0}" = 1 ] && [ -z "${ECHOMQ_PROMTOOL:-}" ] \
   && ! command -v promtool >/dev/null 2>&1; then
  optional+=(prometheus)
fi
[ ${#need[@]} -eq 0 ] && [ ${#optional[@]} -eq 0 ] && finish
can_install=1
[ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 || can_install=0
if [ ${#need[@]} -eq 0 ] && [ $can_install = 0 ]; then
  echo "note: cannot install ${optional[*]} here; the tests that need them will say SKIPPED" >&2
  finish
fi
need+=("${optional[@]}")
# de-duplicate
mapfile -t need < <(printf '%s\n' "${need[@]}" | sort -u)

explain() {
  echo "echomq needs: ${need[*]}" >&2
  echo "  Debian 12:  add 'deb http://deb.debian.org/debian bookworm-backports main' to apt sources, then" >&2
  echo "              apt-get install -t bookworm-backports valkey-server valkey-tools; apt-get install libclang-dev" >&2
  echo "  Debian 13 / Ubuntu 24.04+: apt-get install valkey-server valkey-tools libclang-dev" >&2
  echo "  elsewhere:  Valkey 8 from https://valkey.io/download and libclang (LLVM) for bindgen" >&2
  exit 1
}

[ "$(id -u)" = 0 ] || { echo "not root: cannot install." >&2; explain; }
command -v apt-get >/dev/null 2>&1 || { echo "no apt-get: cannot install." >&2; explain; }

. /etc/os-release
export DEBIAN_FRONTEND=noninteractive
apt_opts=(-y -q -o Dpkg::Use-Pty=0)
backports=()
if [ "${ID:-}" = debian ] && [ "${VERSION_CODENAME:-}" = bookworm ]; then
  if ! grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    # Use the mirror the machine already uses for Debian itself.
    mirror=$(grep -rhoE '(https?://[^ ]+/debian)/?( |$)' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null \
             | grep -v security | head -n 1 | tr -d ' ' || true)
    mirror=${mirror%/}
    [ -n "$mirror" ] || mirror=http://deb.debian.org/debian
    echo "deb $mirror bookworm-backports main" > /etc/apt/sources.list.d/echomq-bookworm-backports.list
  fi
  backports=(-t bookworm-backports)
fi
apt-get update -q
valkey_pkgs=() other_pkgs=() prom_pkgs=()
for p in "${need[@]}"; do
  case $p in valkey-*) valkey_pkgs+=("$p");; prometheus) prom_pkgs+=("$p");; *) other_pkgs+=("$p");; esac
done
[ ${#valkey_pkgs[@]} -eq 0 ] || apt-get install "${apt_opts[@]}" "${backports[@]}" "${valkey_pkgs[@]}"
[ ${#other_pkgs[@]} -eq 0 ] || apt-get install "${apt_opts[@]}" "${other_pkgs[@]}"
# Only for promtool: not the recommended exporters.
[ ${#prom_pkgs[@]} -eq 0 ] || apt-get install "${apt_opts[@]}" --no-install-recommends "${prom_pkgs[@]}"
# The packaged service cannot start without systemd (containers); nothing here relies on it.
command -v valkey-server >/dev/null 2>&1 || explain
finish
