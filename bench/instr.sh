#!/usr/bin/env bash
# Instructions per request of cbench-server (issue 11), counted by callgrind: independent of the machine's load,
# so it can drive optimisation on a busy machine where CPU-time figures are noise.
#
#   bench/instr.sh [--n1 N] [--n2 N] [--conns C] [CASE...]
#
# CASE is one of h1 (HTTP/1.1 /hello), h1-nojournal, h2c (/hello, -m 10), h2c-nojournal, floor (bench/floor:
# one read and one canned write per request, the HTTP/1.1 floor); default: h1 h2c floor.
# Each case runs the server (one thread) under callgrind twice, loaded by h2load with N1 and then N2 requests
# over C connections (default 2000 / 12000, 50): the difference of the two totals over N2 - N1 cancels the
# start-up, the stop and the connections' set-up.
set -euo pipefail

SERVER=${CBENCH_SERVER:-build/cbench-server}
FLOOR=${CBENCH_FLOOR:-build/bench-floor}
N1=2000
N2=12000
CONNS=50
cases=()
while [ $# -gt 0 ]; do
  case $1 in
    --n1) N1=$2; shift 2 ;;
    --n2) N2=$2; shift 2 ;;
    --conns) CONNS=$2; shift 2 ;;
    h1|h1-nojournal|h2c|h2c-nojournal|floor) cases+=("$1"); shift ;;
    *) echo "usage: bench/instr.sh [--n1 N] [--n2 N] [--conns C] [h1|h1-nojournal|h2c|h2c-nojournal|floor]..." >&2
       exit 2 ;;
  esac
done
[ ${#cases[@]} -gt 0 ] || cases=(h1 h2c floor)
command -v valgrind >/dev/null || { echo "bench/instr.sh: valgrind is not installed" >&2; exit 1; }
command -v h2load >/dev/null || { echo "bench/instr.sh: h2load is not installed" >&2; exit 1; }

work=$(mktemp -d)
spid=
cleanup() {
  [ -n "$spid" ] && kill -9 "$spid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# start PROGRAM ARGS...: under callgrind on a free port; sets PORT and spid. The program prints
# "... 127.0.0.1:PORT with ..." (cbench-server) or "PORT" (the floor) on its first line.
start() {
  rm -f "$work/server.out" # else the loop below may read the last server's port before the redirect truncates it
  valgrind --tool=callgrind --callgrind-out-file="$work/cg.out" -q "$@" >"$work/server.out" 2>"$work/server.err" &
  spid=$!
  local line=
  for _ in $(seq 1 600); do
    line=$(head -n 1 "$work/server.out" 2>/dev/null || true)
    [ -n "$line" ] && break
    sleep 0.05
  done
  if [[ "$line" =~ :([0-9]+)\ with ]] || [[ "$line" =~ ^([0-9]+)$ ]]; then
    PORT=${BASH_REMATCH[1]}
  else
    echo "server did not start: $(cat "$work/server.err")" >&2
    exit 1
  fi
}

stop() {
  kill -INT "$spid"
  wait "$spid" 2>/dev/null || true
  spid=
}

load() { # PROTO N
  local args=(-t 1 -c "$CONNS" -n "$2")
  if [ "$1" = h1 ]; then args+=(--h1 -m 1); else args+=(-m 10); fi
  h2load "${args[@]}" "http://127.0.0.1:$PORT/hello" >"$work/h2load.out" 2>&1 || true
  grep -q "requests: .* $2 succeeded, 0 failed" "$work/h2load.out" ||
    { echo "h2load failed: $(cat "$work/h2load.out")" >&2; exit 1; }
}

for c in "${cases[@]}"; do
  proto=h1
  args=("$SERVER" --port 0 --threads 1)
  case $c in
    h1-nojournal) args+=(--journal 0) ;;
    h2c) proto=h2c ;;
    h2c-nojournal) proto=h2c; args+=(--journal 0) ;;
    floor) args=("$FLOOR") ;;
  esac
  ir=()
  for n in "$N1" "$N2"; do
    start "${args[@]}"
    load "$proto" "$n"
    stop
    ir+=("$(awk '/^summary:|^totals:/ {print $2; exit}' "$work/cg.out")")
  done
  awk -v c="$c" -v a="${ir[0]}" -v b="${ir[1]}" -v n=$((N2 - N1)) \
    'BEGIN { printf "%-14s %8.0f instructions per request\n", c, (b - a) / n }'
done
