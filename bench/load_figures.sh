#!/bin/bash
# The figures of issue 10 in one run (make bench-load): cbench-load against h2load and wrk on cbench-server
# /hello, server on one CPU and the load generator on another.
#
#   1. client CPU per request (user + system time of the load generator's process over the requests it got
#      answered) and closed-loop req/s, cbench-load vs h2load, HTTP/1.1 (50 connections) and h2c (50 x 10
#      streams); RUNS runs each, alternating, medians reported;
#   2. wrk's closed-loop p50 at low concurrency (1 thread, 10 connections), and cbench-load's open-loop p50
#      (corrected and uncorrected) at 25% of the best closed-loop peak, 50 connections; RUNS runs, medians.
#
# Environment: DUR (seconds per run, default 5), RUNS (default 3), SERVER_CPU (0), LOAD_CPU (1), OUT (results
# directory, default bench/results/<UTC timestamp>-load). Prints the table and writes $OUT/figures.md.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
DUR=${DUR:-5}
RUNS=${RUNS:-3}
SCPU=${SERVER_CPU:-0}
LCPU=${LOAD_CPU:-1}
OUT=${OUT:-bench/results/$(date -u +%Y%m%dT%H%M%SZ)-load}
for t in h2load wrk taskset /usr/bin/time; do
  command -v "$t" >/dev/null || { echo "bench-load: $t is missing (scripts/deps.sh)" >&2; exit 2; }
done
[ -x build/cbench-load ] && [ -x build/cbench-server ] || { echo "bench-load: run make load lib first" >&2; exit 2; }
WORK=$(mktemp -d "${TMPDIR:-/tmp}/cbench-bench-load.XXXXXX")
SPID=""
cleanup() {
  [ -n "$SPID" ] && kill "$SPID" 2>/dev/null && wait "$SPID" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

taskset -c "$SCPU" build/cbench-server --port 0 --threads 1 >"$WORK/server.out" 2>&1 &
SPID=$!
PORT=""
for _ in $(seq 1 50); do
  PORT=$(sed -n 's/.*127\.0\.0\.1:\([0-9]*\) with.*/\1/p' "$WORK/server.out")
  [ -n "$PORT" ] && break
  sleep 0.1
done
[ -n "$PORT" ] || { cat "$WORK/server.out"; echo "bench-load: cbench-server did not start" >&2; exit 1; }
URL="http://127.0.0.1:$PORT/hello"

# Runs a command pinned to the load CPU; its output goes to $WORK/out, its user + system seconds are printed.
cputime() {
  /usr/bin/time -f "%U %S" -o "$WORK/time" taskset -c "$LCPU" "$@" >"$WORK/out" 2>&1
  awk '{printf "%.3f", $1 + $2}' "$WORK/time"
}
median() { sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
us() { awk -v v="$1" 'BEGIN {n = v + 0; if (v ~ /ms$/) n *= 1000; else if (v ~ /[^u]s$/) n *= 1000000; printf "%.1f", n}'; }

declare -A RPS CPU
for proto in h1 h2c; do
  if [ "$proto" = h1 ]; then H2=(--h1 -c 50 -m 1); CL=(-p h1 -c 50 -m 1); else H2=(-p h2c -c 50 -m 10); CL=(-p h2c -c 50 -m 10); fi
  for run in $(seq 1 "$RUNS"); do
    c=$(cputime h2load -t 1 "${H2[@]}" -D "$DUR" "$URL")
    rps=$(awk '/^finished in/ {gsub(",", "", $4); print $4}' "$WORK/out")
    n=$(awk '/^requests:/ {print $8}' "$WORK/out")
    echo "$rps" >>"$WORK/h2load-$proto.rps"
    awk -v c="$c" -v n="$n" 'BEGIN {printf "%.3f\n", c * 1e6 / n}' >>"$WORK/h2load-$proto.cpu"
    echo "bench-load: $proto h2load run $run: $rps req/s, $(tail -1 "$WORK/h2load-$proto.cpu") us CPU/req"
    c=$(cputime build/cbench-load -t 1 "${CL[@]}" -d "$DUR" "$URL")
    rps=$(awk '/^  rate/ {print $2}' "$WORK/out")
    n=$(awk '/^  requests/ {print $4}' "$WORK/out")
    echo "$rps" >>"$WORK/cbl-$proto.rps"
    awk -v c="$c" -v n="$n" 'BEGIN {printf "%.3f\n", c * 1e6 / n}' >>"$WORK/cbl-$proto.cpu"
    echo "bench-load: $proto cbench-load run $run: $rps req/s, $(tail -1 "$WORK/cbl-$proto.cpu") us CPU/req"
  done
  for tool in h2load cbl; do
    RPS[$tool-$proto]=$(median <"$WORK/$tool-$proto.rps")
    CPU[$tool-$proto]=$(median <"$WORK/$tool-$proto.cpu")
  done
done

# Latency: wrk closed loop at low concurrency, cbench-load open loop at 25% of the best h1 peak; RUNS runs each,
# alternating, medians.
PEAK=$(printf '%s\n%s\n' "${RPS[h2load-h1]}" "${RPS[cbl-h1]}" | sort -g | tail -1)
RATE=$(awk -v p="$PEAK" 'BEGIN {printf "%d", p / 4}')
for run in $(seq 1 "$RUNS"); do
  taskset -c "$LCPU" wrk -t 1 -c 10 -d "$DUR" --latency "$URL" >"$WORK/wrk.out" 2>&1
  us "$(awk '$1 == "50%" {print $2}' "$WORK/wrk.out")" >>"$WORK/wrk.p50"
  echo >>"$WORK/wrk.p50"
  taskset -c "$LCPU" build/cbench-load -c 50 -w 1 -d "$DUR" -r "$RATE" "$URL" >"$WORK/open.out" 2>&1
  awk '$1 == "corrected" {print $2 >> "'"$WORK"'/open.c50"; print $4 >> "'"$WORK"'/open.c99"}
       $1 == "uncorrected" {print $2 >> "'"$WORK"'/open.u50"}
       $1 == "send" {print $3 >> "'"$WORK"'/open.lag"}
       /^  rate/ {print $2 >> "'"$WORK"'/open.ach"}' "$WORK/open.out"
  echo "bench-load: latency run $run: wrk p50 $(tail -1 "$WORK/wrk.p50") us, cbench-load at $RATE req/s p50 $(tail -1 "$WORK/open.c50") us corrected, $(tail -1 "$WORK/open.u50") us uncorrected"
done
WRK_P50=$(median <"$WORK/wrk.p50")
OPEN_C50=$(median <"$WORK/open.c50")
OPEN_U50=$(median <"$WORK/open.u50")
OPEN_C99=$(median <"$WORK/open.c99")
OPEN_LAG=$(median <"$WORK/open.lag")
OPEN_ACH=$(median <"$WORK/open.ach")

ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
mkdir -p "$OUT"
{
  echo "# cbench-load against h2load and wrk ($(date -u +%Y-%m-%dT%H:%M:%SZ))"
  echo
  echo "cbench-server --threads 1 on CPU $SCPU, \`$URL\`; every load generator on CPU $LCPU with one thread;"
  echo "$RUNS runs of $DUR s per tool and protocol, alternating, medians. $(nproc) CPUs: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')."
  echo "Client CPU per request: the load generator's user + system time over the requests answered (lower is better)."
  echo
  echo "| protocol | h2load req/s | cbench-load req/s | req/s ratio | h2load CPU us/req | cbench-load CPU us/req | CPU ratio |"
  echo "| --- | --- | --- | --- | --- | --- | --- |"
  for proto in h1 h2c; do
    echo "| $proto | ${RPS[h2load-$proto]} | ${RPS[cbl-$proto]} | $(ratio "${RPS[cbl-$proto]}" "${RPS[h2load-$proto]}") | ${CPU[h2load-$proto]} | ${CPU[cbl-$proto]} | $(ratio "${CPU[cbl-$proto]}" "${CPU[h2load-$proto]}") |"
  done
  echo
  echo "Latency at low load: wrk closed loop (1 thread, 10 connections) p50 against cbench-load open loop at 25%"
  echo "of the best HTTP/1.1 peak ($RATE req/s, 50 connections, 1 s warm-up), medians of $RUNS runs:"
  echo
  echo "| wrk p50 (us) | cbench-load p50 corrected (us) | uncorrected (us) | corrected / wrk | cbench-load p99 corrected (us) | send lag p50 (us) | achieved req/s |"
  echo "| --- | --- | --- | --- | --- | --- | --- |"
  echo "| $WRK_P50 | $OPEN_C50 | $OPEN_U50 | $(ratio "$OPEN_C50" "$WRK_P50") | $OPEN_C99 | $OPEN_LAG | $OPEN_ACH |"
} >"$OUT/figures.md"
echo
cat "$OUT/figures.md"
echo
echo "bench-load: wrote $OUT/figures.md"
