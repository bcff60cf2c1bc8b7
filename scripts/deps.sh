#!/bin/sh
# The Debian packages cbench needs, in three sets, each a superset of the one before:
#
#   c       the C library and cbench-server (make serve, make install)
#   priv    the NIF and the port program too: what rebar3's pre-compile hook builds when cbench is a dependency
#   build   the whole BEAM side: the Erlang application and a node to run it (make, make run)
#   test    what the tests and benchmarks run besides (make test, make bench): clang and the sanitizer
#           runtime, Common Test, EUnit, dialyzer, h2load, wrk, curl, python3 (test/admin_client.py: the
#           admin API driven from another language, standard library only), procps (pgrep: bench/lib.sh counts the
#           CPU of a server's whole process group; without it only the group's leader was counted, silently)
#
# usage: scripts/deps.sh [c|priv|build|test] [--check]
#
# Checks with dpkg-query only (fast, no network). When some are missing: as root, `apt-get update` once and
# `apt-get install -y --no-install-recommends` them (recommends would bring hundreds of desktop packages; what
# cbench needs is listed here explicitly); otherwise print the command to run and exit 1. With --check, never
# install: print one line naming the missing packages and exit 1.
set -eu

# libjansson-dev: JSON in the library (the stub file, the admin API, body matchers: src/stub_json.c,
# src/admin.c, src/routes/body_match.c) and for cbench-load. libwslay-dev: cbench-load's
# WebSocket framing; cbench-load is built by make and by rebar3's hook as priv/cbench_load for cbench:load/2.
# zlib1g-dev: the library compresses the /gzip route's body once at start (and ehttpd's zlib is the same).
# libssl-dev: OpenSSL 3 for TLS, the certificates made for tests (src/base/certs.c) and WebSocket's SHA-1.
C_PACKAGES="gcc libc6-dev binutils make pkg-config libuv1-dev libnghttp2-dev node-llhttp libjansson-dev
zlib1g-dev libssl-dev"
PRIV_PACKAGES="$C_PACKAGES erlang-dev libwslay-dev"
BUILD_PACKAGES="$PRIV_PACKAGES erlang-base rebar3"
# erlang-proper-dev: proper.hrl for cbench_api_statem (erlang-proper alone ships no include file).
TEST_PACKAGES="$BUILD_PACKAGES clang libclang-rt-14-dev erlang-nox erlang-common-test erlang-eunit
erlang-dialyzer erlang-tools erlang-proper erlang-proper-dev nghttp2-client wrk curl python3 openssl procps"

set_name=build
check_only=""
for arg in "$@"; do
  case "$arg" in
    c) PACKAGES=$C_PACKAGES; set_name=$arg ;;
    priv) PACKAGES=$PRIV_PACKAGES; set_name=$arg ;;
    build) PACKAGES=$BUILD_PACKAGES; set_name=$arg ;;
    test) PACKAGES=$TEST_PACKAGES; set_name=$arg ;;
    --check) check_only=1 ;;
    *) echo "usage: scripts/deps.sh [c|priv|build|test] [--check]" >&2; exit 2 ;;
  esac
done
PACKAGES=${PACKAGES:-$BUILD_PACKAGES}

if ! command -v dpkg-query >/dev/null 2>&1; then
  echo "deps.sh: dpkg-query not found: cbench is built on Debian 12 (or a derivative) with these packages:" >&2
  echo "  $(echo $PACKAGES)" >&2
  exit 1
fi

# One dpkg-query call for all of them; packages it does not know are simply absent from its output.
# shellcheck disable=SC2086 # one word per package
installed=$(dpkg-query -W -f='${Package} ${db:Status-Abbrev}\n' $PACKAGES 2>/dev/null || true)
missing=""
for p in $PACKAGES; do
  if ! printf '%s\n' "$installed" | grep -q "^$p ii"; then
    missing="$missing $p"
  fi
done
missing=${missing# }

if [ -z "$missing" ]; then
  exit 0
fi

install="apt-get install -y --no-install-recommends $missing"
if [ -n "$check_only" ]; then
  echo "cbench: missing Debian packages ($set_name): $missing (as root: apt-get update && $install)" >&2
  exit 1
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "deps.sh: missing Debian packages ($set_name): $missing" >&2
  echo "run as root:" >&2
  echo "apt-get update && DEBIAN_FRONTEND=noninteractive $install"
  exit 1
fi

echo "deps.sh: installing missing Debian packages ($set_name): $missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update
# Another apt-get (an unattended upgrade, a parallel install) may hold the dpkg lock: wait for it.
# shellcheck disable=SC2086 # one word per package
apt-get -o DPkg::Lock::Timeout=300 install -y --no-install-recommends $missing
