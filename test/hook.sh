#!/bin/bash
# rebar3's pre-compile hook (scripts/rebar3_hook.sh), as a consumer of cbench meets it:
#   1. a Debian package the build needs is missing: one line naming it, nothing compiled;
#   2. a build that works prints at most one line, no compiler command;
#   3. a build that fails prints the compiler's output.
# The build runs in a copy of the repository's files, so this checkout's priv/ and build/ are not touched.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
bad() { echo "hook-test: FAIL: $*"; failures=$((failures + 1)); }
ok() { echo "hook-test: ok: $*"; }

# What the hook builds from (no build outputs: they are made in the copy).
(cd "$root" && tar cf - Makefile mk include src terms nif c_src scripts rebar.config erl) | tar xf - -C "$work" \
  || { echo "hook-test: cannot copy the repository"; exit 1; }
mkdir -p "$work/fake"
# A dpkg-query that does not know node-llhttp (and otherwise answers as the real one).
cat >"$work/fake/dpkg-query" <<'FAKE'
#!/bin/sh
/usr/bin/dpkg-query "$@" | grep -v '^node-llhttp '
FAKE
chmod +x "$work/fake/dpkg-query"

# 1. The missing package, named in one line, before any compiling.
out=$(cd "$work" && PATH="$work/fake:$PATH" sh scripts/rebar3_hook.sh 2>&1)
rc=$?
lines=$(printf '%s\n' "$out" | grep -c .)
if [ "$rc" -ne 0 ] && [ "$lines" -eq 1 ] && printf '%s' "$out" | grep -q 'node-llhttp' && [ ! -e "$work/build" ]; then
  ok "missing node-llhttp: exit $rc, one line: $out"
else
  bad "missing node-llhttp: exit $rc, $lines lines (expected non-zero, one line naming it, nothing built): $out"
fi

# 2. A working build: quiet.
out=$(cd "$work" && sh scripts/rebar3_hook.sh 2>&1)
rc=$?
lines=$(printf '%s\n' "$out" | grep -c .)
if [ "$rc" -eq 0 ] && [ "$lines" -le 1 ] && ! printf '%s' "$out" | grep -q -- '-std=gnu11' \
   && [ -f "$work/priv/cbench_nif.so" ] && [ -x "$work/priv/cbench_port" ]; then
  ok "build: exit 0, $lines line: $out"
else
  bad "build: exit $rc, $lines lines (expected 0 and at most one line without compiler commands): $(printf '%s' "$out" | head -c 600)"
fi

# 3. A failing build: the compiler's output is shown.
rm -f "$work/priv/cbench_nif.so"
echo 'this is not C;' >>"$work/nif/cbench_nif.c"
out=$(cd "$work" && sh scripts/rebar3_hook.sh 2>&1)
rc=$?
if [ "$rc" -ne 0 ] && printf '%s' "$out" | grep -q 'cbench_nif.c' && printf '%s' "$out" | grep -q 'error'; then
  ok "failing build: exit $rc, the compiler's output shown ($(printf '%s\n' "$out" | grep -c .) lines)"
else
  bad "failing build: exit $rc, expected non-zero with the compiler's errors: $(printf '%s' "$out" | head -c 600)"
fi

[ "$failures" -eq 0 ] || exit 1
