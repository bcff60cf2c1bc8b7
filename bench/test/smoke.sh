#!/bin/bash
# Smoke test of the harness (make bench-smoke, part of make test): one case, one
# engine, a 1 s run and a 1 s latency ladder; checks that report.md, data.json,
# data.csv and the SVG charts are produced and well-formed, that bad input exits 2,
# and that an interrupted run leaves no server behind.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
ENGINE=${BENCH_SMOKE_ENGINE:-cbench-server}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/cbench-smoke.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
fail() { echo "bench-smoke: FAIL: $*" >&2; exit 1; }

# 1. Bad input: a clear message and exit 2.
for args in "--cases nope" "--engines apache" "--profile huge" "--runs x" "--target nourl"; do
    # shellcheck disable=SC2086
    bench/run.sh $args >"$WORK/bad.out" 2>&1
    rc=$?
    [ "$rc" = 2 ] || fail "bench/run.sh $args exited $rc, expected 2"
    grep -q "^bench: " "$WORK/bad.out" || fail "bench/run.sh $args printed no message"
done
echo "bench-smoke: bad input exits 2 with a message"

# 2. One case, one engine, 1 s.
OUT="$WORK/out"
bench/run.sh --profile smoke --engines "$ENGINE" --out "$OUT" >"$WORK/run.out" 2>&1 \
    || { cat "$WORK/run.out"; fail "the smoke run exited $?"; }
grep -q "throughput" "$WORK/run.out" || { cat "$WORK/run.out"; fail "no summary on the terminal"; }
erl -noshell -pa bench/ebin -eval '
    [Out] = init:get_plain_arguments(),
    F = fun(N) -> filename:join(Out, N) end,
    Check = fun(true, _) -> ok;
               (false, Why) -> io:format(standard_error, "bench-smoke: FAIL: ~s~n", [Why]), halt(1)
            end,
    {ok, Md} = file:read_file(F("report.md")),
    [Check(binary:match(Md, S) =/= nomatch, ["report.md lacks ", S])
     || S <- [<<"## Setup">>, <<"## Throughput">>, <<"## Latency">>, <<"## Resources">>, <<"## Legend">>]],
    {ok, Js} = file:read_file(F("data.json")),
    J = cbench_bench_json:decode(Js),
    [T | _] = maps:get(<<"throughput">>, J),
    Check(maps:get(<<"status">>, T) =:= <<"ok">>, io_lib:format("smoke case status ~p", [T])),
    Check(is_number(maps:get(<<"rps">>, T)) andalso maps:get(<<"rps">>, T) > 0, "no req/s in data.json"),
    Check(maps:get(<<"latency">>, J) =/= [], "no latency rows in data.json"),
    %% The ladder is cbench-load open loop: corrected and uncorrected percentiles and its send lag.
    [Check(maps:is_key(K, L1), ["latency row without ", K])
     || L1 <- maps:get(<<"latency">>, J), lists:member(maps:get(<<"status">>, L1), [<<"ok">>, <<"overloaded">>]),
        K <- [<<"p50">>, <<"p99">>, <<"p999">>, <<"u_p99">>, <<"lag_p99">>, <<"answered">>]],
    {ok, Csv} = file:read_file(F("data.csv")),
    Lines = binary:split(Csv, <<"\n">>, [global, trim_all]),
    Check(length(Lines) >= 2, "data.csv has no data line"),
    Cols = length(binary:split(hd(Lines), <<",">>, [global])),
    [Check(length(binary:split(L, <<",">>, [global])) =< Cols, ["ragged csv line ", L]) || L <- Lines],
    Svgs = filelib:wildcard(F("*.svg")),
    Check(length(Svgs) >= 2, "fewer than two SVG charts"),
    [begin
         {Doc, _} = xmerl_scan:file(S, [{quiet, true}]),
         Check(element(2, Doc) =:= svg, [S, " is not an svg document"])
     end || S <- Svgs],
    io:format("bench-smoke: report.md, data.json, data.csv and ~b SVG charts are well-formed~n", [length(Svgs)]),
    halt(0).' -extra "$OUT" || fail "the outputs did not check out"

# 3. Interrupted mid-run: every server the harness started is gone afterwards.
# Job control puts the run in its own process group with SIGINT not ignored, as a
# terminal would, so that the INT below is the same as a Ctrl-C.
PIDS="$WORK/pids"
mkdir -p "$PIDS"
set -m
TMPDIR="$PIDS" bench/run.sh --profile smoke --engines "$ENGINE" --duration 20 --no-latency \
    --out "$WORK/out2" >"$WORK/int.out" 2>&1 &
runner=$!
set +m
servers=""
for _ in $(seq 1 50); do
    sleep 0.1
    servers=$(cat "$PIDS"/cbench-bench.*/*.pid 2>/dev/null | tr '\n' ' ')
    case "$servers" in *" "*" "*) break ;; esac   # the server and h2load are both running
done
[ -n "$servers" ] || { cat "$WORK/int.out"; fail "no child was recorded by the harness"; }
t0=$(date +%s)
kill -INT -- "-$runner"
wait "$runner"
rc=$?
[ "$rc" = 130 ] || { cat "$WORK/int.out"; fail "the interrupted run exited $rc, expected 130"; }
[ $(( $(date +%s) - t0 )) -lt 10 ] || fail "the interrupted run did not stop at once"
[ ! -e "$WORK/out2/report.md" ] || fail "the interrupted run went on to write its report"
# The children got their signal; on a loaded machine they may need a moment to exit, so wait for them (bounded)
# instead of sampling once.
alive() {
    [ -d "/proc/$1" ] && ! grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null
}
for p in $servers; do
    for _ in $(seq 1 100); do alive "$p" || break; sleep 0.1; done
    if alive "$p"; then
        # What it is and what it is doing, for a failure that is rare (seen 1 time in 30 under load).
        grep -E '^(Name|State|PPid|SigBlk|SigIgn|SigCgt):' "/proc/$p/status" 2>/dev/null | tr '\n' ' ' >&2
        echo "pgid/sid: $(awk '{print $5, $6}' "/proc/$p/stat" 2>/dev/null)" >&2
        fail "process $p ($(cat /proc/$p/comm 2>/dev/null)) is still running 10 s after Ctrl-C"
    fi
done
echo "bench-smoke: Ctrl-C left nothing running ($servers)"
echo "bench-smoke: passed"
