#!/bin/sh
# Checks that every Debian package cbench needs is installed (dpkg-query only: fast, no network).
# When some are missing: as root, `apt-get update` once and `apt-get install -y` them; otherwise print the
# command to run and exit 1.
set -eu

PACKAGES="libuv1-dev libnghttp2-dev node-llhttp libjansson-dev pkg-config gcc make clang libclang-rt-14-dev
erlang-nox erlang-dev erlang-common-test erlang-eunit rebar3 nghttp2-client wrk curl"

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

if [ "$(id -u)" -ne 0 ]; then
  echo "deps.sh: missing Debian packages: $missing" >&2
  echo "run as root:" >&2
  echo "apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y $missing"
  exit 1
fi

echo "deps.sh: installing missing Debian packages: $missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update
# shellcheck disable=SC2086 # one word per package
apt-get install -y $missing
