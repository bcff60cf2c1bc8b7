#!/usr/bin/env bash
# The route-table benchmark of issue 9 (make bench-routes): server CPU per request, in one run, for
#   stub_hello  vs builtin_hello   a stub answering "Hello, Joe!" vs the built-in /hello     (goal <= 1.05x)
#   routes_100  vs route_1         100 routes requested round robin vs one route             (goal <= 1.10x)
#   journal_on  vs journal_off     /hello with the request journal on vs off                 (goal <= 1.10x)
#
# Each case starts cbench-server (one thread, pinned to CPU 0) and loads it from CPU 1.
#   --mode cpu        (default) server CPU time from /proc over a run of SECONDS: microseconds per request
#   --mode callgrind  the server under callgrind; instructions per request from two runs of N1 and N2 requests
#                     (their difference cancels start-up): independent of the machine's load
#   --proto h2c|h1    (default h2c)   --seconds S (default 5)   --n1 N --n2 N (callgrind, default 2000/12000)
#   --runs R          (cpu mode, default 5) rounds; in each, the two cases of a comparison run one after the
#                     other, A then B in odd rounds and B then A in even ones, and the ratio A/B is taken per
#                     round: the median of the ratios is reported (with the median of each side)
# Results go to stdout as a table, and to bench/results/routes-<time>.txt.
set -euo pipefail

SERVER=${CBENCH_SERVER:-build/cbench-server}
MODE=cpu
PROTO=h2c
SECONDS_RUN=5
N1=2000
N2=12000
RUNS=5
while [ $# -gt 0 ]; do
  case $1 in
    --mode) MODE=$2; shift 2 ;;
    --proto) PROTO=$2; shift 2 ;;
    --seconds) SECONDS_RUN=$2; shift 2 ;;
    --n1) N1=$2; shift 2 ;;
    --n2) N2=$2; shift 2 ;;
    --runs) RUNS=$2; shift 2 ;;
    *) echo "usage: bench/routes.sh [--mode cpu|callgrind] [--proto h2c|h1] [--seconds S] [--n1 N] [--n2 N] [--runs R]" >&2; exit 2 ;;
  esac
done
case $MODE in cpu|callgrind) ;; *) echo "bench/routes.sh: --mode cpu|callgrind" >&2; exit 2 ;; esac
case $PROTO in h2c|h1) ;; *) echo "bench/routes.sh: --proto h2c|h1" >&2; exit 2 ;; esac
for v in "$RUNS" "$SECONDS_RUN" "$N1" "$N2"; do
  [[ "$v" =~ ^[0-9]+$ ]] && [ "$v" -gt 0 ] || { echo "bench/routes.sh: counts must be positive integers" >&2; exit 2; }
done
[ -x "$SERVER" ] || { echo "bench/routes.sh: $SERVER is not built" >&2; exit 1; }
ncpu=$(nproc)
SCPU=0
LCPU=$((ncpu > 1 ? 1 : 0))

work=$(mktemp -d)
spid=
cleanup() {
  [ -n "$spid" ] && kill -9 "$spid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# ---- the stub files ----
hello='"response": {"headers": {"content-type": "text/plain"}, "body": "Hello, Joe!"}'
printf '[{"match": {"method": "GET", "path": "/hello2"}, %s}]\n' "$hello" >"$work/hello.json"
printf '[{"match": {"method": "GET", "path": "/api/v1/res0"}, %s}]\n' "$hello" >"$work/one.json"
echo "http://127.0.0.1:PORT/api/v1/res0" >"$work/one.uris"
# 100 routes of the shapes a REST service has: exact paths under many first segments, exact paths sharing one,
# and {param} routes; every one requested in turn.
{
  echo "["
  for i in $(seq 0 99); do
    case $((i % 3)) in
      0) p="/api/v1/res$i"; u="/api/v1/res$i" ;;
      1) p="/svc$i/items"; u="/svc$i/items" ;;
      2) p="/users$i/{id}/profile"; u="/users$i/42/profile" ;;
    esac
    sep=$([ "$i" -lt 99 ] && echo "," || echo "")
    printf '  {"match": {"method": "GET", "path": "%s"}, %s}%s\n' "$p" "$hello" "$sep"
    echo "http://127.0.0.1:PORT$u" >>"$work/many.uris"
  done
  echo "]"
} >"$work/many.json"

# start ARGS...: the server on a free port, pinned; sets PORT and spid.
start() {
  local prefix=(taskset -c "$SCPU")
  if [ "$MODE" = callgrind ]; then
    prefix+=(valgrind --tool=callgrind --callgrind-out-file="$work/cg.out" -q)
  fi
  # Emptied here, not by the redirection below: that runs in the child, after the loop may have read the
  # previous server's line (and port).
  : >"$work/server.out"
  "${prefix[@]}" "$SERVER" --port 0 --threads 1 "$@" >"$work/server.out" 2>"$work/server.err" &
  spid=$!
  local line=
  for _ in $(seq 1 600); do
    line=$(head -n 1 "$work/server.out" 2>/dev/null || true)
    [ -n "$line" ] && break
    sleep 0.05
  done
  [[ "$line" =~ :([0-9]+)\ with ]] || { echo "server did not start: $(cat "$work/server.err")" >&2; exit 1; }
  PORT=${BASH_REMATCH[1]}
}

stop() {
  kill -INT "$spid"
  wait "$spid" 2>/dev/null || true
  spid=
}

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# load URIFILE|URL [N]: h2load pinned to the other CPU; prints the requests answered. A URI file's paths are
# requested in turn.
load() {
  local target=$1 n=${2:-}
  local urls=()
  if [[ "$target" == http* ]]; then urls=("${target//PORT/$PORT}"); else mapfile -t urls < <(sed "s/PORT/$PORT/" "$target"); fi
  local args=(-t 1 -c 50)
  if [ "$PROTO" = h1 ]; then args+=(--h1 -m 1); else args+=(-m 10); fi
  if [ -n "$n" ]; then args+=(-n "$n"); else args+=(-D "$SECONDS_RUN"); fi
  if [ ${#urls[@]} -eq 1 ]; then
    args+=("${urls[0]}")
  else
    printf '%s\n' "${urls[@]}" >"$work/uris"
    args+=(-i "$work/uris")
  fi
  taskset -c "$LCPU" h2load "${args[@]}" >"$work/h2load.out" 2>&1 || true
  local ok
  ok=$(sed -n 's/^requests: .* \([0-9]*\) succeeded, \([0-9]*\) failed.*/\1 \2/p' "$work/h2load.out")
  set -- $ok
  [ "${2:-1}" = 0 ] || { echo "h2load failed: $(cat "$work/h2load.out")" >&2; exit 1; }
  echo "$1"
}

median() { tr ' ' '\n' | sed '/^$/d' | sort -g | awk '{a[NR] = $1} END { print a[int((NR + 1) / 2)] }'; }

# The cases: NAME -> target and server arguments.
declare -A target sargs fig vals
case_def() { target[$1]=$2; sargs[$1]=$3; }
# The built-in /hello is requested from a server with the same table as the stub's (the fixture routes and one
# stub), so the pair differs only in which route answers.
case_def builtin_hello "http://127.0.0.1:PORT/hello" "--journal 0 --stubs $work/hello.json"
case_def stub_hello "http://127.0.0.1:PORT/hello2" "--journal 0 --stubs $work/hello.json"
case_def route_1 "$work/one.uris" "--journal 0 --stubs $work/one.json"
case_def routes_100 "$work/many.uris" "--journal 0 --stubs $work/many.json"
case_def journal_off "http://127.0.0.1:PORT/hello" "--journal 0"
case_def journal_on "http://127.0.0.1:PORT/hello" "--journal 10000"

# measure NAME: one figure for the case (a fresh server each time).
measure() {
  local name=$1
  # shellcheck disable=SC2086 # the server arguments are words without spaces
  if [ "$MODE" = cpu ]; then
    start ${sargs[$name]}
    load "${target[$name]}" 2000 >/dev/null # warm-up
    local t0 t1 n
    t0=$(cpu_ticks "$spid")
    n=$(load "${target[$name]}")
    t1=$(cpu_ticks "$spid")
    stop
    awk -v t=$((t1 - t0)) -v n="$n" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.3f", t * 1e6 / hz / n }'
  else
    local ir=() n
    for n in "$N1" "$N2"; do
      start ${sargs[$name]}
      load "${target[$name]}" "$n" >/dev/null
      stop
      ir+=("$(awk '/^summary:|^totals:/ {print $2; exit}' "$work/cg.out")")
    done
    awk -v a="${ir[0]}" -v b="${ir[1]}" -v n=$((N2 - N1)) 'BEGIN { printf "%.0f", (b - a) / n }'
  fi
}

# The comparisons: A against B.
pairs=("stub_hello builtin_hello" "routes_100 route_1" "journal_on journal_off")
declare -A ratios
rounds=$([ "$MODE" = cpu ] && echo "$RUNS" || echo 1)
for round in $(seq 1 "$rounds"); do
  for pr in "${pairs[@]}"; do
    set -- $pr
    a=$1 b=$2
    if [ $((round % 2)) = 1 ]; then va=$(measure "$a"); vb=$(measure "$b"); else vb=$(measure "$b"); va=$(measure "$a"); fi
    vals[$a]="${vals[$a]:-} $va"
    vals[$b]="${vals[$b]:-} $vb"
    r=$(awk -v a="$va" -v b="$vb" 'BEGIN { printf "%.3f", a / b }')
    ratios[$a]="${ratios[$a]:-} $r"
    echo "round $round: $a $va, $b $vb, ratio $r" >&2
  done
done
for c in "${!vals[@]}"; do fig[$c]=$(echo "${vals[$c]}" | median); done

unit=$([ "$MODE" = cpu ] && echo "us server CPU per request" || echo "instructions per request")
ratio() { # the median of the per-round ratios
  echo "${ratios[$1]}" | median
}
mkdir -p bench/results
out="bench/results/routes-$(date -u +%Y%m%dT%H%M%SZ)-$MODE-$PROTO.txt"
if [ "$MODE" = callgrind ]; then how="runs of $N1 and $N2 requests"
else
  streams=""
  [ "$PROTO" = h2c ] && streams=" x 10 streams"
  how="h2load closed loop, 50 connections$streams, $SECONDS_RUN s per case; $RUNS rounds, median of per-round ratios"
fi
{
  echo "bench/routes.sh --mode $MODE --proto $PROTO ($unit; server 1 thread on CPU $SCPU, load on CPU $LCPU;"
  echo "$how; machine load average $(cut -d' ' -f1-3 /proc/loadavg) at the end)"
  echo "| comparison | case | base | ratio | ratios per round | goal |"
  echo "| --- | --- | --- | --- | --- | --- |"
  echo "| stub vs built-in /hello | ${fig[stub_hello]} | ${fig[builtin_hello]} | $(ratio stub_hello) |${ratios[stub_hello]} | <= 1.05 |"
  echo "| 100 routes round robin vs 1 route | ${fig[routes_100]} | ${fig[route_1]} | $(ratio routes_100) |${ratios[routes_100]} | <= 1.10 |"
  echo "| journal on vs off (/hello) | ${fig[journal_on]} | ${fig[journal_off]} | $(ratio journal_on) |${ratios[journal_on]} | <= 1.10 |"
} | tee "$out"
