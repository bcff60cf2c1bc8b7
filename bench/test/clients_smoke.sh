#!/bin/bash
# Smoke test of the client benchmark (make bench-clients-smoke, part of make test), through
# bench/run.sh as `make bench-clients` runs it:
#   1. bad input exits 2 with a message;
#   2. the smoke profile (both adapters, a tiny grid, the fixture in a peer node, the hold phase)
#      writes report.md, data.json, data.csv and SVG charts, and the fixture's counters agree
#      with the clients' (every success was a request the fixture answered, no server error);
#   3. a fixture node killed mid-cell gives errors in that cell and a report, not a hang;
#   4. --server-node: the fixture on a running node reached by distributed Erlang;
#   5. --nodes: each cell's workers on a peer node the harness starts and stops.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/cbench-clients-smoke.XXXXXX")
FXNODE=""
cleanup() {
    [ -n "$FXNODE" ] && kill "$FXNODE" 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT
fail() { echo "bench-clients-smoke: FAIL: $*" >&2; exit 1; }
export CBENCH_BENCH_MAIN=cbench_clients CBENCH_BENCH_ERL_FLAGS="+sbwt none +Q 65536" ERL_CRASH_DUMP_SECONDS=0

# 1. Bad input.
for args in "--clients nope" "--profile huge" "--concurrency x" "--engine apache" "--server-node nohost" \
            "--nodes nohost"; do
    # shellcheck disable=SC2086
    bench/run.sh $args >"$WORK/bad.out" 2>&1
    rc=$?
    [ "$rc" = 2 ] || fail "bench/run.sh $args exited $rc, expected 2"
    grep -q "^bench-clients: " "$WORK/bad.out" || fail "bench/run.sh $args printed no message"
done
echo "bench-clients-smoke: bad input exits 2 with a message"

# Checks data.json of a run: Erlang terms in, halt(1) with a message on the first failure.
check_json() {
    erl -noshell -pa bench/ebin -eval '
        [Out, Expr] = init:get_plain_arguments(),
        {ok, Js} = file:read_file(filename:join(Out, "data.json")),
        J = cbench_bench_json:decode(Js),
        {ok, Toks, _} = erl_scan:string(Expr ++ "."),
        {ok, Es} = erl_parse:parse_exprs(Toks),
        case erl_eval:exprs(Es, erl_eval:add_binding(list_to_atom("J"), J, erl_eval:new_bindings())) of
            {value, ok, _} -> halt(0);
            {value, Why, _} -> io:format(standard_error, "bench-clients-smoke: FAIL: ~p~n", [Why]), halt(1)
        end.' -extra "$1" "$2"
}

# 2. The smoke profile.
OUT="$WORK/out"
bench/run.sh --profile smoke --out "$OUT" >"$WORK/run.out" 2>&1
rc=$?
[ "$rc" = 0 ] || { cat "$WORK/run.out"; fail "the smoke run exited $rc"; }
grep -q "results (sorted by req/s)" "$WORK/run.out" || { cat "$WORK/run.out"; fail "no table on the terminal"; }
for s in "## Setup" "## Results" "| Client | Pool Count | Pool Size | Concurrency | Req/sec | Error % |" \
         "## Cells" "## The fixture at the top concurrency" "## Legend"; do
    grep -qF "$s" "$OUT/report.md" || fail "report.md lacks '$s'"
done
check_json "$OUT" '
    Cells = maps:get(<<"cells">>, J),
    Hold = maps:get(<<"hold">>, J),
    Bad = [C || C <- Cells,
                not (maps:get(<<"status">>, C) =:= <<"ok">>
                     andalso maps:get(<<"ok">>, C) =:= maps:get(<<"iterations">>, C)
                     andalso maps:get(<<"server_requests">>, C) =:= maps:get(<<"ok">>, C)
                     andalso maps:get(<<"server_errors">>, C) =:= #{}
                     andalso maps:get(<<"errors_total">>, C) =:= 0
                     andalso is_number(maps:get(<<"server_cpu_pct">>, C))
                     andalso is_integer(maps:get(<<"p99_us">>, C)))],
    HoldBad = [H || H <- Hold, maps:get(<<"server_errors">>, H) =/= #{}
                               orelse maps:get(<<"server_requests">>, H) =/= maps:get(<<"iterations">>, H)],
    Engines = [maps:get(<<"engine">>, H) || H <- Hold],
    if length(Cells) =/= 6 -> {cells, length(Cells)};
       Bad =/= [] -> {bad_cells, Bad};
       Engines =/= [<<"nif">>, <<"ehttpd">>] -> {hold_engines, Engines};
       HoldBad =/= [] -> {bad_hold, HoldBad};
       true -> ok
    end' || fail "data.json of the smoke run did not check out"
lines=$(wc -l <"$OUT/data.csv")
[ "$lines" = 9 ] || fail "data.csv has $lines lines, expected 9 (header, 6 cells, 2 hold rows)"
cols=$(head -1 "$OUT/data.csv" | tr ',' '\n' | wc -l)
awk -F, -v c="$cols" 'NF != c { exit 1 }' "$OUT/data.csv" || fail "data.csv has ragged lines"
erl -noshell -eval '
    [Out] = init:get_plain_arguments(),
    Svgs = filelib:wildcard(filename:join(Out, "clients-*.svg")),
    2 = length(Svgs),
    [svg = element(2, element(1, xmerl_scan:file(S, [{quiet, true}]))) || S <- Svgs],
    halt(0).' -extra "$OUT" || fail "the SVG charts are not two well-formed svg documents"
echo "bench-clients-smoke: the smoke profile wrote a well-formed report, data and charts; fixture and clients agree"

# 3. The fixture's node killed mid-cell: the harness records its pid, as for every child.
PIDS="$WORK/pids"
mkdir -p "$PIDS"
TMPDIR="$PIDS" bench/run.sh --profile smoke --clients tcp --concurrency 16 --iterations 100000000 \
    --max-seconds 5 --no-hold --out "$WORK/out3" >"$WORK/kill.out" 2>&1 &
runner=$!
fx=""
for _ in $(seq 1 100); do
    sleep 0.1
    fx=$(cat "$PIDS"/cbench-bench.*/fixture-*.pid 2>/dev/null)
    [ -n "$fx" ] && break
done
[ -n "$fx" ] || { kill "$runner"; cat "$WORK/kill.out"; fail "the fixture's node was not recorded"; }
sleep 1.5
kill -KILL "$fx"
t0=$(date +%s)
wait "$runner"
rc=$?
[ "$rc" = 0 ] || { cat "$WORK/kill.out"; fail "the run with a killed fixture exited $rc"; }
[ $(( $(date +%s) - t0 )) -lt 20 ] || fail "the run with a killed fixture took too long to end"
check_json "$WORK/out3" '
    [C] = maps:get(<<"cells">>, J),
    E = maps:get(<<"errors">>, C),
    case {maps:get(<<"status">>, C), maps:get(<<"refused">>, E) + maps:get(<<"closed">>, E), maps:get(<<"ok">>, C)} of
        {<<"fixture_died">>, Errs, Ok} when Errs > 0, Ok > 0 -> ok;
        Other -> {cell, Other}
    end' || fail "the cell whose fixture died does not show it"
grep -q "fixture stopped answering" "$WORK/out3/report.md" || fail "report.md has no note of the dead fixture"
echo "bench-clients-smoke: a fixture killed mid-cell gave errors and a report in $(( $(date +%s) - t0 ))s"

# 4. --server-node: a node started here stands for one on another machine.
NAME="cbench_fx_$$"
COOKIE="cbench_smoke_$$"
erl -sname "$NAME" -setcookie "$COOKIE" -noshell -noinput -pa "$ROOT/_build/default/lib/cbench/ebin" \
    >"$WORK/fxnode.out" 2>&1 &
FXNODE=$!
HOST=$(hostname -s)
for _ in $(seq 1 100); do
    epmd -names 2>/dev/null | grep -q "name $NAME " && break
    sleep 0.1
done
bench/run.sh --profile smoke --clients tcp,httpc --pool-counts 1 --concurrency 8 --no-hold \
    --server-node "$NAME@$HOST" --cookie "$COOKIE" --out "$WORK/out4" >"$WORK/remote.out" 2>&1
rc=$?
[ "$rc" = 0 ] || { cat "$WORK/remote.out"; fail "the --server-node run exited $rc"; }
grep -q "remote node $NAME@$HOST" "$WORK/out4/report.md" || fail "report.md does not name the remote node"
check_json "$WORK/out4" '
    Cells = maps:get(<<"cells">>, J),
    case [C || C <- Cells, maps:get(<<"status">>, C) =/= <<"ok">>
                           orelse maps:get(<<"server_requests">>, C) =/= maps:get(<<"ok">>, C)] of
        [] when length(Cells) =:= 2 -> ok;
        Bad -> {cells, Bad}
    end' || fail "the --server-node cells did not check out"
kill "$FXNODE"
FXNODE=""
echo "bench-clients-smoke: the fixture on a --server-node answered every cell"

# 5. --nodes (make bench-clients NODES=...): each cell's workers on a peer node on this machine,
# started by the harness and stopped at the end; every success a request the fixture answered.
gen="cbench_cgen_$$"
bench/run.sh --profile smoke --clients tcp,httpc --pool-counts 1 --concurrency 8 --no-hold \
    --nodes "$gen@127.0.0.1" --out "$WORK/out5" >"$WORK/nodes.out" 2>&1
rc=$?
[ "$rc" = 0 ] || { cat "$WORK/nodes.out"; fail "the --nodes run exited $rc"; }
grep -q "load node $gen@127.0.0.1: started" "$WORK/nodes.out" || { cat "$WORK/nodes.out"; fail "no client node started"; }
check_json "$WORK/out5" '
    Cells = maps:get(<<"cells">>, J),
    case [C || C <- Cells, maps:get(<<"status">>, C) =/= <<"ok">>
                           orelse maps:get(<<"server_requests">>, C) =/= maps:get(<<"ok">>, C)
                           orelse maps:get(<<"ok">>, C) < 1
                           orelse length(maps:get(<<"nodes">>, C, [])) =/= 1] of
        [] when length(Cells) =:= 2 -> ok;
        Bad -> {cells, Bad}
    end' || fail "the --nodes cells did not check out"
if epmd -names 2>/dev/null | grep -q "name $gen "; then fail "the client node $gen is still running"; fi
echo "bench-clients-smoke: --nodes $gen@127.0.0.1 ran every cell's workers there, and stopped it"
echo "bench-clients-smoke: passed"
