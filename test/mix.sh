#!/bin/bash
# An Elixir (Mix) project using cbench as a path dependency with rebar3 as its builder runs its ExUnit tests
# (test/mix_consumer/). Offline: Mix is pointed at the system rebar3 (MIX_REBAR3) and has no other
# dependency, so neither Hex nor `mix local.rebar` is needed. Skipped, with a message, when mix is absent
# (Debian: apt-get install --no-install-recommends elixir).
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
if ! command -v mix >/dev/null 2>&1; then
  echo "mix-test: skipped: mix is not installed (apt-get install --no-install-recommends elixir)"
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$root/test/mix_consumer" "$work/consumer"
cd "$work/consumer" || exit 1
# A HOME of its own: Mix writes its archives and caches there.
out=$(HOME="$work" CBENCH_DIR="$root" MIX_REBAR3=$(command -v rebar3) MIX_ENV=test timeout 300 mix test 2>&1)
rc=$?
[ -n "${MIX_TEST_VERBOSE:-}" ] && echo "$out"
if [ $rc -eq 0 ] && grep -q "2 tests, 0 failures" <<<"$out"; then
  echo "mix-test: ok: a Mix project with {:cbench, path: ..., manager: :rebar3}: 2 tests, 0 failures"
else
  echo "mix-test: FAIL (exit $rc):"; echo "$out"; exit 1
fi
