#!/usr/bin/env bash
# Interleaved A B A B comparison of server CPU per request (issue 11): cbench-server against each peer that is
# installed (h2o, nginx) and, over HTTP/1.1, against the floor (bench/floor.c, a bare epoll loop).
#
#   bench/ab.sh [--proto h1|h2c|both] [--runs R] [--seconds S] [--warmup S] [--conns C] [--peers LIST]
#               [--servers fresh|kept] [--order alternate|ab|ba] [--h2o-access-log] [--out FILE]
#
# For each pair and each of R rounds, A (cbench-server) then B, B then A in the next round (--order alternate,
# the default: a machine that slows down or speeds up during the run moves both sides alike; ab and ba keep one
# order in every round, to see whether the order matters): the server is pinned to CPU 0 and, with --servers
# fresh (the default), started for the run and stopped after it; with --servers kept both servers of the pair
# are started once, before the first round, and kept running (the other one idle) until the pair's last round,
# as a harness that keeps its servers across rounds does (issue 28: the two ways gave different ratios; see
# docs/bench.md); h2load (one thread, pinned to CPU 1) runs C connections (10 streams each over
# h2c) for S seconds after a warm-up of W seconds (h2load's --warm-up-time: the warm-up is not counted); the
# server's CPU time (user + system, every process of its process group, every thread: /proc/PID/stat of each)
# is read when the measured window starts and when h2load ends, and divided by the requests h2load counted.
# The ratio A/B is taken per round, and the median of the R ratios is reported (and each run's figures).
# Defaults: h1 and h2c, 5 rounds, 10 s after 3 s, 50 connections, peers h2o,nginx,floor. A peer that is not
# installed is named and skipped. --h2o-access-log gives h2o an access log (a file in the work folder), which
# the peers otherwise have not (nginx: access_log off; h2o: no access-log directive), to measure what one costs.
# Results: stdout and bench/results/ab-<time>.txt (--out FILE: that file instead).
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
SERVERS=fresh
ORDER=alternate
H2O_LOG=0
OUT=
usage() {
  echo "usage: bench/ab.sh [--proto h1|h2c|both] [--runs R] [--seconds S] [--warmup S] [--conns C] [--peers h2o,nginx,floor]" >&2
  echo "                   [--servers fresh|kept] [--order alternate|ab|ba] [--h2o-access-log] [--out FILE]" >&2
  exit 2
}
while [ $# -gt 0 ]; do
  [ $# -ge 2 ] || [ "$1" = --h2o-access-log ] || usage
  case $1 in
    --proto) case $2 in h1|h2c) PROTOS=("$2") ;; both) PROTOS=(h1 h2c) ;; *) usage ;; esac; shift 2 ;;
    --runs) RUNS=$2; shift 2 ;;
    --seconds) SECS=$2; shift 2 ;;
    --warmup) WARM=$2; shift 2 ;;
    --conns) CONNS=$2; shift 2 ;;
    --peers) PEERS=$2; shift 2 ;;
    --servers) case $2 in fresh|kept) SERVERS=$2 ;; *) usage ;; esac; shift 2 ;;
    --order) case $2 in alternate|ab|ba) ORDER=$2 ;; *) usage ;; esac; shift 2 ;;
    --h2o-access-log) H2O_LOG=1; shift ;;
    --out) OUT=$2; shift 2 ;;
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
# With --servers kept: the process group and port of each running server of the pair, by name.
declare -A KEPT_PID KEPT_PORT
cleanup() {
  local p
  for p in $spid "${KEPT_PID[@]}"; do
    kill -TERM -- "-$p" 2>/dev/null || true; sleep 0.2; kill -KILL -- "-$p" 2>/dev/null || true
  done
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
      local log=""
      [ "$H2O_LOG" = 1 ] && log="access-log: $work/h2o/access.log"
      cat >"$work/h2o/h2o.conf" <<CONF
$user
$log
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

# up NAME PROTO: sets spid and PORT to a running NAME: started now (--servers fresh), or the one kept since the
# pair's first round (--servers kept). down: stops it unless it is kept.
up() {
  if [ "$SERVERS" = kept ] && [ -n "${KEPT_PID[$1]:-}" ]; then
    spid=${KEPT_PID[$1]} PORT=${KEPT_PORT[$1]}
    return
  fi
  start "$1" "$2"
  if [ "$SERVERS" = kept ]; then KEPT_PID[$1]=$spid KEPT_PORT[$1]=$PORT; fi
}
down() { if [ "$SERVERS" = kept ]; then spid=; else stop; fi; }

# stop_kept: at the end of a pair, stops the servers kept through its rounds.
stop_kept() {
  local n
  for n in "${!KEPT_PID[@]}"; do stop_group "${KEPT_PID[$n]}"; unset "KEPT_PID[$n]" "KEPT_PORT[$n]"; done
}

ticks() { group_ticks "$spid"; }

# measure NAME PROTO: one run; prints "us_per_request requests".
measure() {
  local name=$1 proto=$2 args=(-t 1 -c "$CONNS" -D "$SECS" --warm-up-time "$WARM")
  if [ "$proto" = h1 ]; then args+=(--h1 -m 1); else args+=(-m 10); fi
  up "$name" "$proto"
  taskset -c "$LCPU" h2load "${args[@]}" "http://127.0.0.1:$PORT/hello" >"$work/h2load.out" 2>&1 &
  local lpid=$!
  sleep "$WARM"
  local t0
  t0=$(ticks)
  wait "$lpid" || true
  local t1
  t1=$(ticks)
  down
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

out=${OUT:-bench/results/ab-$(date -u +%Y%m%dT%H%M%SZ).txt}
mkdir -p "$(dirname "$out")"
{
  echo "bench/ab.sh: server CPU per request (us), cbench-server (A) vs peer (B), interleaved A B / B A rounds"
  echo "server: 1 thread on CPU $SCPU; h2load -t 1 -c $CONNS (-m 10 on h2c) on CPU $LCPU; $SECS s after $WARM s warm-up; $RUNS rounds"
  echo "servers: $SERVERS (fresh: started for each run; kept: started once per pair); order: $ORDER; h2o access log: $([ "$H2O_LOG" = 1 ] && echo on || echo off)"
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
    # measure runs in a subshell ($(...)), so kept servers are started here, in this shell, where they stay.
    if [ "$SERVERS" = kept ]; then up cbench "$proto"; up "$peer" "$proto"; spid=; fi
    for r in $(seq 1 "$RUNS"); do
      if [ "$ORDER" = ab ] || { [ "$ORDER" = alternate ] && [ $((r % 2)) = 1 ]; }; then
        a=$(measure cbench "$proto"); b=$(measure "$peer" "$proto")
      else
        b=$(measure "$peer" "$proto"); a=$(measure cbench "$proto")
      fi
      a=${a%% *} b=${b%% *}
      as+=("$a") bs+=("$b")
      rs+=("$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", a / b }')")
      echo "  $proto $peer round $r: cbench $a us/req, $peer $b us/req, ratio ${rs[-1]}" >&2
    done
    stop_kept
    ma=$(printf '%s\n' "${as[@]}" | median)
    mb=$(printf '%s\n' "${bs[@]}" | median)
    mr=$(printf '%s\n' "${rs[@]}" | median)
    echo "| $proto | $peer | $ma | $mb | $mr | ${rs[*]} |" | tee -a "$out"
  done
done
