#!/usr/bin/env bash
# Interleaved A B A B comparison of server CPU per request (issue 11): cbench-server against each peer that is
# installed (h2o, nginx) and, over HTTP/1.1, against the floor (bench/floor.c, a bare epoll loop).
#
#   bench/ab.sh [--proto h1|h2c|both] [--runs R] [--seconds S] [--warmup S] [--conns C] [--peers LIST]
#
# For each pair and each of R rounds, A (cbench-server) then B, B then A in the next round (the order
# alternates, so a machine that slows down or speeds up during the run moves both sides alike): the server is
# started fresh, pinned to CPU 0; h2load (one thread, pinned to CPU 1) runs C connections (10 streams each over
# h2c) for S seconds after a warm-up of W seconds (h2load's --warm-up-time: the warm-up is not counted); the
# server's CPU time (user + system, every process of its process group, every thread: /proc/PID/stat of each)
# is read when the measured window starts and when h2load ends, and divided by the requests h2load counted.
# The ratio A/B is taken per round, and the median of the R ratios is reported (and each run's figures).
# Defaults: h1 and h2c, 5 rounds, 10 s after 3 s, 50 connections, peers h2o,nginx,floor. A peer that is not
# installed is named and skipped. Results: stdout and bench/results/ab-<time>.txt.
set -euo pipefail
ME=bench/ab.sh
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"

SERVER=${CBENCH_SERVER:-build/cbench-server}
FLOOR=${CBENCH_FLOOR:-build/bench-floor}
PROTOS=(h1 h2c)
RUNS=5
SECS=10
WARM=3
CONNS=50
PEERS=h2o,nginx,floor
usage() {
  echo "usage: bench/ab.sh [--proto h1|h2c|both] [--runs R] [--seconds S] [--warmup S] [--conns C] [--peers h2o,nginx,floor]" >&2
  exit 2
}
while [ $# -gt 0 ]; do
  case $1 in
    --proto) case $2 in h1|h2c) PROTOS=("$2") ;; both) PROTOS=(h1 h2c) ;; *) usage ;; esac; shift 2 ;;
    --runs) RUNS=$2; shift 2 ;;
    --seconds) SECS=$2; shift 2 ;;
    --warmup) WARM=$2; shift 2 ;;
    --conns) CONNS=$2; shift 2 ;;
    --peers) PEERS=$2; shift 2 ;;
    *) usage ;;
  esac
done
for v in "$RUNS" "$SECS" "$WARM" "$CONNS"; do [[ "$v" =~ ^[0-9]+$ ]] && [ "$v" -gt 0 ] || usage; done
[ -x "$SERVER" ] || { echo "bench/ab.sh: $SERVER is not built (make)" >&2; exit 1; }
command -v h2load >/dev/null || { echo "bench/ab.sh: h2load is not installed (nghttp2-client)" >&2; exit 1; }
ncpu=$(nproc)
SCPU=0
LCPU=$((ncpu > 1 ? 1 : 0))
HZ=$(getconf CLK_TCK)

work=$(mktemp -d)
spid=
cleanup() {
  if [ -n "$spid" ]; then kill -TERM -- "-$spid" 2>/dev/null || true; sleep 0.2; kill -KILL -- "-$spid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT INT TERM

# start NAME PROTO: the server in its own process group, pinned; sets spid and PORT.
start() {
  local name=$1 proto=$2
  PORT=$(free_port)
  local cmd=()
  case $name in
    cbench) cmd=("$SERVER" --port "$PORT" --threads 1) ;;
    floor) cmd=("$FLOOR" "$PORT") ;;
    nginx)
      mkdir -p "$work/nginx"
      local listen="listen 127.0.0.1:$PORT;"
      [ "$proto" = h2c ] && listen="listen 127.0.0.1:$PORT http2;"
      cat >"$work/nginx/nginx.conf" <<CONF
daemon off; master_process on; worker_processes 1; pid $work/nginx/nginx.pid; error_log $work/nginx/error.log warn;
events { worker_connections 4096; }
http { access_log off; client_body_temp_path $work/nginx/body; proxy_temp_path $work/nginx/proxy;
  fastcgi_temp_path $work/nginx/fcgi; uwsgi_temp_path $work/nginx/uwsgi; scgi_temp_path $work/nginx/scgi;
  tcp_nodelay on; keepalive_requests 1000000000; keepalive_timeout 120s;
  server { $listen location = /hello { default_type text/plain; return 200 'Hello, Joe!'; } } }
CONF
      cmd=("$(command -v nginx)" -p "$work/nginx" -c "$work/nginx/nginx.conf") ;;
    h2o)
      mkdir -p "$work/h2o/doc"
      printf 'Hello, Joe!' >"$work/h2o/doc/hello"
      local user=""
      [ "$(id -u)" = 0 ] && user="user: nobody"
      cat >"$work/h2o/h2o.conf" <<CONF
$user
num-threads: 1
error-log: $work/h2o/error.log
listen: {host: 127.0.0.1, port: $PORT}
hosts:
  default:
    paths:
      /hello:
        file.file: $work/h2o/doc/hello
CONF
      chmod -R a+rX "$work"
      cmd=("$(command -v h2o)" -c "$work/h2o/h2o.conf") ;;
  esac
  setsid taskset -c "$SCPU" "${cmd[@]}" >"$work/$name.out" 2>&1 &
  spid=$!
  wait_port "$PORT" || { echo "bench/ab.sh: $name did not start: $(tail -n 3 "$work/$name.out")" >&2; exit 1; }
}

stop() {
  stop_group "$spid"
  spid=
}

ticks() { group_ticks "$spid"; }

# measure NAME PROTO: one run; prints "us_per_request requests".
measure() {
  local name=$1 proto=$2 args=(-t 1 -c "$CONNS" -D "$SECS" --warm-up-time "$WARM")
  if [ "$proto" = h1 ]; then args+=(--h1 -m 1); else args+=(-m 10); fi
  start "$name" "$proto"
  taskset -c "$LCPU" h2load "${args[@]}" "http://127.0.0.1:$PORT/hello" >"$work/h2load.out" 2>&1 &
  local lpid=$!
  sleep "$WARM"
  local t0
  t0=$(ticks)
  wait "$lpid" || true
  local t1
  t1=$(ticks)
  stop
  local ok failed
  ok=$(sed -n 's/^requests: .* \([0-9]*\) succeeded, \([0-9]*\) failed.*/\1/p' "$work/h2load.out")
  failed=$(sed -n 's/^requests: .* \([0-9]*\) succeeded, \([0-9]*\) failed.*/\2/p' "$work/h2load.out")
  if [ -z "$ok" ] || [ "$ok" = 0 ] || [ "${failed:-1}" != 0 ]; then
    echo "bench/ab.sh: $name over $proto: h2load failed: $(grep -E '^requests:' "$work/h2load.out")" >&2
    exit 1
  fi
  awk -v t=$((t1 - t0)) -v n="$ok" -v hz="$HZ" 'BEGIN { printf "%.3f %d\n", t * 1e6 / hz / n, n }'
}

median() { sort -n | awk '{a[NR] = $1} END { if (NR % 2) print a[(NR + 1) / 2]; else printf "%.3f\n", (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

mkdir -p bench/results
out="bench/results/ab-$(date -u +%Y%m%dT%H%M%SZ).txt"
{
  echo "bench/ab.sh: server CPU per request (us), cbench-server (A) vs peer (B), interleaved A B / B A rounds"
  echo "server: 1 thread on CPU $SCPU; h2load -t 1 -c $CONNS (-m 10 on h2c) on CPU $LCPU; $SECS s after $WARM s warm-up; $RUNS rounds"
  echo "machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg) at the start"
  echo
  echo "| protocol | peer | cbench us/req (median) | peer us/req (median) | ratio A/B (median of rounds) | ratios per round |"
  echo "| --- | --- | --- | --- | --- | --- |"
} | tee "$out"
IFS=, read -r -a peers <<<"$PEERS"
for proto in "${PROTOS[@]}"; do
  for peer in "${peers[@]}"; do
    case $peer in
      floor) [ "$proto" = h1 ] || continue
             [ -x "$FLOOR" ] || { echo "| $proto | floor | not built (make bench-floor) | | | |" | tee -a "$out"; continue; } ;;
      nginx|h2o) command -v "$peer" >/dev/null || { echo "| $proto | $peer | not installed | | | |" | tee -a "$out"; continue; } ;;
      *) echo "bench/ab.sh: unknown peer $peer" >&2; exit 2 ;;
    esac
    as=() bs=() rs=()
    for r in $(seq 1 "$RUNS"); do
      if [ $((r % 2)) = 1 ]; then
        a=$(measure cbench "$proto"); b=$(measure "$peer" "$proto")
      else
        b=$(measure "$peer" "$proto"); a=$(measure cbench "$proto")
      fi
      a=${a%% *} b=${b%% *}
      as+=("$a") bs+=("$b")
      rs+=("$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", a / b }')")
      echo "  $proto $peer round $r: cbench $a us/req, $peer $b us/req, ratio ${rs[-1]}" >&2
    done
    ma=$(printf '%s\n' "${as[@]}" | median)
    mb=$(printf '%s\n' "${bs[@]}" | median)
    mr=$(printf '%s\n' "${rs[@]}" | median)
    echo "| $proto | $peer | $ma | $mb | $mr | ${rs[*]} |" | tee -a "$out"
  done
done
