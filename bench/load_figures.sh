#!/bin/bash
# The figures of issues 10 and 28 in one run (make bench-load): cbench-load against the client floor, wrk and
# h2load on cbench-server /hello, server on one CPU and the load generator on another.
#
#   1. client CPU per request (user + system time of the load generator's process over the requests it got
#      answered, /usr/bin/time for every tool alike) and closed-loop req/s, 50 connections, one thread each:
#      over HTTP/1.1 the client floor (bench/floor_client.c, the least a generator can do), wrk, h2load and
#      cbench-load; over h2c (50 x 10 streams) h2load and cbench-load. RUNS rounds, each running every tool of
#      the protocol once (the order rotates by one tool per round, so no tool always runs first); medians, and
#      the ratios issue 28's goals name (cbench-load / floor, / wrk, / h2load);
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
[ -x build/cbench-load ] && [ -x build/cbench-server ] && [ -x build/bench-floor-client ] \
  || { echo "bench-load: run make load build/cbench-server build/bench-floor-client first" >&2; exit 2; }
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

# run_tool TOOL PROTO: one closed-loop run of DUR s; appends its req/s to $WORK/TOOL-PROTO.rps and its client
# CPU per request (us) to $WORK/TOOL-PROTO.cpu. A run that got nothing answered stops the script with its output.
run_tool() {
  local tool=$1 proto=$2 c rps n
  case $tool-$proto in
    floor-h1) c=$(cputime build/bench-floor-client "$PORT" 50 "$DUR" /hello)
      rps=$(awk '$1 == "rate" {print $2}' "$WORK/out"); n=$(awk '$1 == "requests" {print $2}' "$WORK/out") ;;
    wrk-h1) c=$(cputime wrk -t 1 -c 50 -d "$DUR" "$URL")
      rps=$(awk '/^Requests\/sec:/ {printf "%.0f", $2}' "$WORK/out"); n=$(awk '/ requests in / {print $1}' "$WORK/out") ;;
    h2load-h1 | h2load-h2c)
      if [ "$proto" = h1 ]; then c=$(cputime h2load -t 1 --h1 -c 50 -m 1 -D "$DUR" "$URL")
      else c=$(cputime h2load -t 1 -c 50 -m 10 -D "$DUR" "$URL"); fi
      rps=$(awk '/^finished in/ {gsub(",", "", $4); print $4}' "$WORK/out"); n=$(awk '/^requests:/ {print $8}' "$WORK/out") ;;
    cbl-h1 | cbl-h2c)
      if [ "$proto" = h1 ]; then c=$(cputime build/cbench-load -t 1 -p h1 -c 50 -m 1 -d "$DUR" "$URL")
      else c=$(cputime build/cbench-load -t 1 -p h2c -c 50 -m 10 -d "$DUR" "$URL"); fi
      rps=$(awk '/^  rate/ {print $2}' "$WORK/out"); n=$(awk '/^  requests/ {print $4}' "$WORK/out") ;;
  esac
  if ! [[ "${n:-}" =~ ^[0-9]+$ ]] || [ "$n" = 0 ]; then
    cat "$WORK/out" >&2
    echo "bench-load: $tool over $proto answered no request" >&2
    exit 1
  fi
  echo "$rps" >>"$WORK/$tool-$proto.rps"
  awk -v c="$c" -v n="$n" 'BEGIN {printf "%.3f\n", c * 1e6 / n}' >>"$WORK/$tool-$proto.cpu"
  echo "bench-load: $proto $tool run $run: $rps req/s, $(tail -1 "$WORK/$tool-$proto.cpu") us CPU/req"
}

declare -A RPS CPU NAME=([floor]=floor [wrk]=wrk [h2load]=h2load [cbl]=cbench-load)
TOOLS_h1=(floor wrk h2load cbl)
TOOLS_h2c=(h2load cbl)
for proto in h1 h2c; do
  declare -n tools="TOOLS_$proto"
  for run in $(seq 1 "$RUNS"); do
    k=${#tools[@]}
    for i in $(seq 0 $((k - 1))); do run_tool "${tools[$(((i + run - 1) % k))]}" "$proto"; done
  done
  for tool in "${tools[@]}"; do
    RPS[$tool-$proto]=$(median <"$WORK/$tool-$proto.rps")
    CPU[$tool-$proto]=$(median <"$WORK/$tool-$proto.cpu")
  done
  unset -n tools
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
  echo "# cbench-load against the client floor, wrk and h2load ($(date -u +%Y-%m-%dT%H:%M:%SZ))"
  echo
  echo "cbench-server --threads 1 on CPU $SCPU, \`$URL\`; every load generator on CPU $LCPU with one thread;"
  echo "$RUNS runs of $DUR s per tool and protocol, in rounds of one run per tool (rotating order), medians. $(nproc) CPUs: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')."
  echo "Client CPU per request: the load generator's user + system time over the requests answered (lower is better)."
  echo
  echo "| protocol | load generator | req/s (closed loop) | client CPU us/req | cbench-load's CPU per request / this one's |"
  echo "| --- | --- | --- | --- | --- |"
  for proto in h1 h2c; do
    declare -n tools="TOOLS_$proto"
    for tool in "${tools[@]}"; do
      echo "| $proto | ${NAME[$tool]} | ${RPS[$tool-$proto]} | ${CPU[$tool-$proto]} | $(ratio "${CPU[cbl-$proto]}" "${CPU[$tool-$proto]}") |"
    done
    unset -n tools
  done
  echo
  echo "Issue 28's goals, client CPU per request: cbench-load / floor $(ratio "${CPU[cbl-h1]}" "${CPU[floor-h1]}") (goal <= 1.2)," \
    "cbench-load / wrk $(ratio "${CPU[cbl-h1]}" "${CPU[wrk-h1]}") (goal <= 0.6) over HTTP/1.1;" \
    "cbench-load / h2load $(ratio "${CPU[cbl-h2c]}" "${CPU[h2load-h2c]}") over h2c -m 10 (goal <= 0.5)."
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
