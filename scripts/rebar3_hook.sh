#!/bin/sh
# rebar3's pre-compile hook (rebar.config): builds the NIF and the port program into priv/ with make.
#
# When cbench is someone's dependency, its build should say one useful thing or nothing: first the Debian
# packages the C build needs are checked, and a missing one is named in one line before anything compiles;
# then make runs with its output kept aside, printed only when the build fails (or with CBENCH_VERBOSE=1).
set -u
cd "$(dirname "$0")/.." || exit 1

# Off Debian there is no dpkg-query: let the compiler speak for itself.
if command -v dpkg-query >/dev/null 2>&1; then
  scripts/deps.sh priv --check || exit 1
fi

MAKE=${MAKE:-make}
if [ -n "${CBENCH_VERBOSE:-}" ]; then
  exec $MAKE --no-print-directory beam-priv
fi
if $MAKE --no-print-directory -q priv/cbench_nif.so priv/cbench_port priv/cbench_load 2>/dev/null; then
  exit 0
fi
log=$(mktemp "${TMPDIR:-/tmp}/cbench-build.XXXXXX") || exit 1
if $MAKE --no-print-directory beam-priv >"$log" 2>&1; then
  rm -f "$log"
  echo "cbench: built priv/cbench_nif.so, priv/cbench_port and priv/cbench_load"
  exit 0
fi
cat "$log" >&2
rm -f "$log"
echo "cbench: building the NIF, the port program and cbench-load failed (make beam-priv, output above)" >&2
exit 1
