#!/usr/bin/env bash
# Runs the Python client's test suite: makes (or reuses) a virtual environment under
# <repo>/target/pyenv-clients with python3 (or $ECHOMQ_PYTHON), installs the package with its
# test extra into it, and runs pytest against a valkey-server it starts itself (the module from
# $ECHOMQ_MODULE, else <repo>/target/release/libechomq.so: run `make build` first).
# Without Python 3.9+ or venv support: SKIPPED (exit 0), or a failure when CI=true.
# Extra arguments go to pytest (e.g. -k scenario3); --prepare only makes the environment.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
venv="$repo/target/pyenv-clients"
py=${ECHOMQ_PYTHON:-python3}

unavailable() {
  if [ "${CI:-}" = true ]; then
    echo "FAILED: $1" >&2
    exit 1
  fi
  echo "SKIPPED: $1"
  exit 0
}

command -v "$py" >/dev/null 2>&1 || unavailable "$py not found (set ECHOMQ_PYTHON or install python3)"
"$py" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 9) else 1)' \
  || unavailable "$py is older than 3.9"

version='import sys; print("%d.%d" % sys.version_info[:2])'
# Reuse the environment unless it is broken or made by another Python version.
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import pip' >/dev/null 2>&1 \
   || [ "$("$venv/bin/python" -c "$version")" != "$("$py" -c "$version")" ]; then
  rm -rf "$venv"
  mkdir -p "$repo/target"
  if ! err=$("$py" -m venv "$venv" 2>&1); then
    rm -rf "$venv"
    unavailable "cannot create a virtual environment with $py (on Debian: apt-get install python3-venv): ${err##*$'\n'}"
  fi
fi

cd "$repo"
# --prepare installs and stops; ECHOMQ_PREPARED=1 skips the install, for make
# test's pool, where other suites import the package from this venv meanwhile.
if [ "${ECHOMQ_PREPARED:-}" != 1 ]; then
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "./clients/python[test]"
fi
[ "${1:-}" = --prepare ] && exit 0
cd "$here"
exec "$venv/bin/python" -m pytest -q "$@"
