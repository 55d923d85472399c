#!/usr/bin/env bash
# Prints "<name> <path>" for each integration-test binary of one workspace
# package (its directory relative to the repository: `.` for the module,
# `clients/tests`, ...), from the release build `cargo test --release
# --workspace` makes (building what is missing, as that command would).
#
# Why not `cargo test -p <package> --test <name>`: cargo unifies the
# features of shared dependencies over the packages a command selects, so a
# command naming fewer packages than the workspace build rebuilds redis, tokio
# and every test binary with other features (70 s in make test's Redis run, as
# long again in each test-matrix run). Running the binaries of the one
# workspace build tests exactly what make test built, and builds nothing.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
package_dir=$(cd "$repo/${1:?usage: test-binaries.sh PACKAGE_DIR}" && pwd)
cd "$repo"
"${CARGO:-cargo}" test --release --workspace --no-run --message-format=json \
  | grep '"reason":"compiler-artifact"' \
  | grep -F "\"manifest_path\":\"$package_dir/Cargo.toml\"" \
  | grep '"kind":\["test"\]' \
  | sed -E 's/.*"target":\{[^}]*"name":"([^"]+)".*"executable":"([^"]+)".*/\1 \2/'
