#!/usr/bin/env bash
# The Valkey versions of the test matrix beyond the packaged 8.0: the newest 8.1
# and the newest 9.x that Debian's source packages carry (8.1 from trixie, 9.x
# from testing/unstable), each fetched with `apt-get source`, built once and
# cached per machine under $ECHOMQ_VALKEY_CACHE (default /var/cache/echomq) as
# valkey-<version>/bin/{valkey-server,valkey-cli}, so a clean clone on the same
# machine finds them again without building.
#
#   scripts/valkey-matrix.sh          fetch and build what is missing, then
#                                     print one line per version: "<version> <server path>"
#   scripts/valkey-matrix.sh --list   only print what is cached (no apt, no build)
#
# Only the deb-src suites are added: no binary package of trixie or unstable
# can be installed (or upgraded to) through them.
set -euo pipefail

cache=${ECHOMQ_VALKEY_CACHE:-/var/cache/echomq}
# The series of the matrix: each gets the newest version Debian's sources list.
series=(8.1 9)

list_cached() {
  local dir bin
  for dir in "$cache"/valkey-*/; do
    bin=${dir}bin/valkey-server
    [ -x "$bin" ] || continue
    # The version the binary itself reports, not the folder's name.
    printf '%s %s\n' "$("$bin" --version | sed -n 's/.* v=\([^ ]*\).*/\1/p')" "$bin"
  done | sort -V
}

if [ "${1:-}" = --list ]; then
  list_cached
  exit 0
fi

[ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 || {
  echo "valkey-matrix: needs root and apt-get to fetch and build Valkey 8.1 and 9.x; cached so far:" >&2
  list_cached >&2
  exit 1
}
export DEBIAN_FRONTEND=noninteractive
apt_opts=(-y -q -o Dpkg::Use-Pty=0)

# deb-src lines on the mirror the machine already uses for Debian itself.
src_list=/etc/apt/sources.list.d/echomq-valkey-src.list
if [ ! -f "$src_list" ]; then
  mirror=$(grep -rhoE '(https?://[^ ]+/debian)/?( |$)' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null \
           | grep -v security | head -n 1 | tr -d ' ' || true)
  mirror=${mirror%/}
  [ -n "$mirror" ] || mirror=http://deb.debian.org/debian
  {
    echo "# echomq's test matrix: Valkey 8.1 (trixie) and 9.x (testing, unstable), sources only"
    echo "deb-src $mirror trixie main"
    echo "deb-src $mirror testing main"
    echo "deb-src $mirror unstable main"
  } > "$src_list"
  apt-get update -q >&2
else
  # A list made before (an earlier run, another clone): update only when apt
  # knows no 9.x source yet. (Read whole: grep -q would cut the pipe short.)
  known=$(apt-cache showsrc valkey 2>/dev/null || true)
  grep -Eq '^Version: ([0-9]+:)?9\.' <<<"$known" || apt-get update -q >&2
fi

# Building needs a compiler and make; unpacking a source package, dpkg-source.
# (Valkey bundles jemalloc and Lua; BUILD_TLS=no needs no OpenSSL headers.)
tools=()
command -v gcc >/dev/null 2>&1 || tools+=(gcc)
command -v make >/dev/null 2>&1 || tools+=(make)
command -v pkg-config >/dev/null 2>&1 || tools+=(pkg-config)
command -v dpkg-source >/dev/null 2>&1 || tools+=(dpkg-dev)
[ ${#tools[@]} -eq 0 ] || apt-get install "${apt_opts[@]}" --no-install-recommends "${tools[@]}" >&2

# Debian version -> upstream version: no epoch, no revision, no +dfsg tag.
upstream() { local v=${1#*:}; v=${v%-*}; echo "${v%%+*}"; }

mkdir -p "$cache/src"
for want in "${series[@]}"; do
  debver=$(apt-cache showsrc valkey 2>/dev/null | sed -n 's/^Version: //p' | sort -u \
           | awk -v s="$want" '{ v = $0; sub(/^[0-9]+:/, "", v) } index(v, s ".") == 1' \
           | sort -V | tail -n 1 || true)
  if [ -z "$debver" ]; then
    echo "valkey-matrix: Debian's sources list no Valkey $want.x" >&2
    continue
  fi
  up=$(upstream "$debver")
  dest=$cache/valkey-$up
  if [ -x "$dest/bin/valkey-server" ] && "$dest/bin/valkey-server" --version | grep -q " v=$up "; then
    continue
  fi
  echo "== Valkey $up: apt-get source valkey=$debver, then make (a few minutes on 2 cores)" >&2
  work=$cache/src/$up
  rm -rf "$work" && mkdir -p "$work"
  # apt-get source unpacks with Debian's patches. Where the mirror serves the
  # upstream tarball but not Debian's part (seen for a point release of
  # trixie), build from the upstream tarball alone.
  (cd "$work" && apt-get source -q "valkey=$debver") >&2 || true
  tree=$(find "$work" -mindepth 1 -maxdepth 1 -type d -name 'valkey-*' | head -n 1)
  patched=debian
  if [ -z "$tree" ]; then
    orig=$(find "$work" -maxdepth 1 -name "valkey_${up}*.orig.tar.*" | head -n 1)
    [ -n "$orig" ] || { echo "valkey-matrix: could not fetch Valkey $debver" >&2; exit 1; }
    echo "valkey-matrix: Debian's part of $debver is missing: building the upstream tarball $(basename "$orig")" >&2
    tar -xf "$orig" -C "$work"
    tree=$(find "$work" -mindepth 1 -maxdepth 1 -type d -name 'valkey-*' | head -n 1)
    patched=upstream
  fi
  started=$(date +%s)
  # The default target: naming several targets races on the settings step.
  make -C "$tree" -j2 BUILD_TLS=no USE_SYSTEMD=no >"$work/build.log" 2>&1 || {
    tail -n 30 "$work/build.log" >&2
    echo "valkey-matrix: building Valkey $up failed (log: $work/build.log)" >&2
    exit 1
  }
  mkdir -p "$dest/bin"
  cp "$tree/src/valkey-server" "$tree/src/valkey-cli" "$dest/bin/"
  printf 'debian %s\nsource %s\nbuilt %s in %ss\n' "$debver" "$patched" "$(date -u +%FT%TZ)" \
    "$(( $(date +%s) - started ))" > "$dest/BUILD"
  echo "valkey-matrix: Valkey $up built in $(( $(date +%s) - started ))s" >&2
  # Keep the unpacked source (Valkey's own tests run from it), not the objects.
  make -C "$tree" clean >/dev/null 2>&1 || true
done
list_cached
