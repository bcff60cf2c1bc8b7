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
exit $failures
