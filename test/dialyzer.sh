#!/bin/bash
# Dialyzer on a consumer's code: a misspelt option key (#{prot => 0}) and a misspelt stats key
# (#{requsts := N}) are flagged through cbench's opts() and stats() types; the same code spelt right passes.
# The PLT of erts, kernel and stdlib is built once into $PLT (about 30 s on 2 cores), then reused.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
PLT=${PLT:-$root/build/dialyzer-base.plt}
cd "$root" || exit 1
mkdir -p "$(dirname "$PLT")"
if [ ! -f "$PLT" ]; then
  echo "dialyzer-test: building the PLT of erts, kernel and stdlib in $PLT"
  dialyzer --build_plt --apps erts kernel stdlib --output_plt "$PLT.tmp" >/dev/null && mv "$PLT.tmp" "$PLT" || exit 1
fi
rebar3 compile >/dev/null || exit 1
ebin=_build/default/lib/cbench/ebin
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
erlc +debug_info -o "$tmp" test/consumer/good_consumer.erl test/consumer/misspelt_consumer.erl || exit 1
failures=0

out=$(dialyzer --plt "$PLT" --no_check_plt "$ebin" "$tmp/good_consumer.beam" 2>&1)
if [ $? -eq 0 ]; then
  echo "dialyzer-test: ok: cbench and good_consumer.erl: no warnings"
else
  echo "dialyzer-test: FAIL: warnings on cbench or the well-spelt consumer:"; echo "$out"; failures=1
fi

out=$(dialyzer --plt "$PLT" --no_check_plt "$ebin" "$tmp/misspelt_consumer.beam" 2>&1)
rc=$?
if [ $rc -eq 2 ] && grep -q "'prot'" <<<"$out" && grep -q "breaks the contract" <<<"$out" \
   && grep -q "requsts" <<<"$out"; then
  echo "dialyzer-test: ok: misspelt_consumer.erl: #{prot => 0} breaks start_server/2's contract, #{requsts := N} never matches stats()"
else
  echo "dialyzer-test: FAIL: expected warnings for 'prot' and 'requsts' (exit $rc):"; echo "$out"; failures=1
fi
# The same as a consumer runs it, through rebar3: a throwaway project with cbench in _checkouts and in its test
# profile's deps, and the misspelt module under test/. `rebar3 as test dialyzer` flags both keys with
# {plt_extra_apps, [cbench]} and says nothing without it (cbench is not in the project's .app.src, so it is not
# in the PLT): the line docs/erlang.md gives ("Use it in your test suite"). The base PLT (erts, kernel, stdlib)
# is kept in build/rebar3-plt and reused, which only makes the check faster.
rebar_plt=$root/build/rebar3-plt
mkdir -p "$rebar_plt"
rebar_dialyzer() {  # $1: the project's folder, $2: dialyzer options before the base PLT's
  mkdir -p "$1/src" "$1/test" "$1/_checkouts"
  ln -s "$root" "$1/_checkouts/cbench"
  printf '{application, consumer, [{description, "consumer"}, {vsn, "0.1.0"}, {applications, [kernel, stdlib]}, {registered, []}]}.\n' \
    >"$1/src/consumer.app.src"
  printf -- '-module(consumer).\n-export([x/0]).\nx() -> ok.\n' >"$1/src/consumer.erl"
  cp test/consumer/misspelt_consumer.erl "$1/test/"
  printf '{erl_opts, [debug_info]}.\n{profiles, [{test, [{deps, [cbench]}]}]}.\n{dialyzer, [%s{base_plt_apps, [erts, kernel, stdlib]}, {base_plt_location, "%s"}]}.\n' \
    "$2" "$rebar_plt" >"$1/rebar.config"
  (cd "$1" && env -u ERL_LIBS rebar3 as test dialyzer 2>&1)
}

out=$(rebar_dialyzer "$tmp/with" "{plt_extra_apps, [cbench]}, ")
rc=$?
if [ $rc -ne 0 ] && grep -q "'prot'" <<<"$out" && grep -q "breaks the contract" <<<"$out" && grep -q "requsts" <<<"$out"; then
  echo "dialyzer-test: ok: rebar3 as test dialyzer with {plt_extra_apps, [cbench]} flags 'prot' and 'requsts' in test/"
else
  echo "dialyzer-test: FAIL: rebar3 with plt_extra_apps: expected warnings for 'prot' and 'requsts' (exit $rc):"
  echo "$out"; failures=1
fi

out=$(rebar_dialyzer "$tmp/without" "")
rc=$?
if [ $rc -eq 0 ] && ! grep -q "'prot'" <<<"$out"; then
  echo "dialyzer-test: ok: without plt_extra_apps the same run is silent (why the docs give the line)"
else
  echo "dialyzer-test: FAIL: rebar3 without plt_extra_apps: expected no warning (exit $rc); if rebar3 now adds"
  echo "test dependencies to the PLT itself, docs/erlang.md must say so:"; echo "$out"; failures=1
fi
exit $failures
