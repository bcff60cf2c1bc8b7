#!/usr/bin/env bash
# The proxy benchmark (issue 26, docs/bench.md "Proxy"): cbench-server as a reverse proxy against nginx and h2o as
# reverse proxies, all forwarding GET /hello to one cbench-server upstream over kept-alive HTTP/1.1, and against
# cbench-server answering /hello itself.
#
#   bench/proxy.sh [--rounds R] [--seconds S] [--warmup S] [--conns C]
#                  [--servers cbench,cbench-pipe,cbench-h2up,nginx,h2o,floor] [--protos h1,h2c] [--out FILE]
#                  [--smoke]
#
# Rows: `direct` is cbench-server answering /hello (its fixture route) with no upstream; `proxy` is each server
# forwarding every request to the upstream: cbench-server with a catch-all proxy stub (docs/proxy.md), nginx with
# proxy_pass to an upstream block holding a keepalive pool, h2o with proxy.reverse.url (it keeps upstream
# connections alive by itself). The client side is HTTP/1.1 (h2load --h1, -m 1) or h2c with prior knowledge
# (h2load -m 10); the upstream side is HTTP/1.1 for every proxy (neither nginx 1.22 nor h2o 2.2.5 proxies to h2c),
# except `cbench-h2up`: cbench-server's proxy stub with protocol h2c, every request a stream on the upstream's
# h2c connections (the same upstream server, which speaks both). With an h2c client that is the "h2c to h2c" case.
# `cbench-pipe`: cbench-server's proxy stub with `"pipeline": 8` (docs/proxy.md, "Pipelining"): the requests of a
# loop turn share upstream connections, up to 8 in flight on each, and leave in one write.
#
# Measurement, as bench/ab.sh: the measured server is started fresh for each run, pinned to CPU 0, one worker or
# thread; the upstream (one cbench-server, --journal 0, kept across runs) and h2load (one thread) share CPU 1. The
# measured server's CPU time (user + system of its process group) over the window is divided by the requests
# h2load counted in it. Rounds interleave the servers (the order rotates each round); medians are reported with
# two ratios: cbench's proxy against each peer's proxy (issue 26: below 1), and cbench's proxy against cbench
# answering directly (issue 26: within 2).
#
# `floor` (HTTP/1.1 only; make bench-floor): bench/floor.c answering /hello itself (direct) and bench/floor_proxy.c
# forwarding bytes blindly over one upstream connection per client connection (proxy), the least a server and a
# proxy can do per request. Their ratio, printed under the table, is what proxying costs at the floor (two reads
# and two writes per request where answering takes one of each), to set cbench's proxy / direct beside.
#
# --smoke: 1 round of 1 s without warm-up on 4 connections, the results in a temporary file unless --out (make
# bench-smoke runs it to prove the script works; nothing it prints is a figure to keep).
set -euo pipefail
ME=bench/proxy.sh
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"

SERVER=${CBENCH_SERVER:-build/cbench-server}
ROUNDS=3
SECS=5
WARM=2
CONNS=50
SERVERS=cbench,cbench-pipe,cbench-h2up,nginx,h2o,floor
FLOOR=${CBENCH_FLOOR:-build/bench-floor}
FLOOR_PROXY=${CBENCH_FLOOR_PROXY:-build/bench-floor-proxy}
PROTOS=h1,h2c
OUT=
SMOKE=0
usage() {
  sed -n '6,7p' "$0" | sed 's/^# *//' >&2
  exit 2
}
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) ROUNDS=${2:-}; shift 2 ;;
    --seconds) SECS=${2:-}; shift 2 ;;
    --warmup) WARM=${2:-}; shift 2 ;;
    --conns) CONNS=${2:-}; shift 2 ;;
    --servers) SERVERS=${2:-}; shift 2 ;;
    --protos) PROTOS=${2:-}; shift 2 ;;
    --out) OUT=${2:-}; shift 2 ;;
    --smoke) SMOKE=1; ROUNDS=1; SECS=1; WARM=0; CONNS=4; shift ;;
    *) usage ;;
  esac
done
for v in "$ROUNDS" "$SECS" "$CONNS"; do [[ "$v" =~ ^[0-9]+$ ]] && [ "$v" -gt 0 ] || usage; done
[[ "$WARM" =~ ^[0-9]+$ ]] || usage
IFS=, read -r -a servers <<<"$SERVERS"
IFS=, read -r -a protos <<<"$PROTOS"
for s in "${servers[@]}"; do case $s in cbench|cbench-pipe|cbench-h2up|nginx|h2o|floor) ;; *) echo "$ME: unknown server $s" >&2; exit 2 ;; esac; done
for p in "${protos[@]}"; do case $p in h1|h2c) ;; *) echo "$ME: unknown protocol $p" >&2; exit 2 ;; esac; done
[ -x "$SERVER" ] || { echo "$ME: $SERVER is not built (make)" >&2; exit 1; }
command -v h2load >/dev/null || { echo "$ME: h2load is not installed (nghttp2-client)" >&2; exit 1; }
notes=()
peers=()
for s in "${servers[@]}"; do
  if [ "$s" = floor ] && ! { [ -x "$FLOOR" ] && [ -x "$FLOOR_PROXY" ]; }; then
    notes+=("the floor is not built (make bench-floor): its rows are skipped")
  elif [ "$s" = nginx ] || [ "$s" = h2o ] && ! command -v "$s" >/dev/null; then
    notes+=("$s is not installed: its rows are skipped")
  else
    peers+=("$s")
  fi
done
ncpu=$(nproc)
SCPU=0
LCPU=$((ncpu > 1 ? 1 : 0))
HZ=$(getconf CLK_TCK)

work=$(mktemp -d)
spid=
upid=
cleanup() {
  [ -n "$spid" ] && stop_group "$spid"
  [ -n "$upid" ] && stop_group "$upid"
  rm -rf "$work"
}
trap cleanup EXIT INT TERM

# The upstream: one cbench-server on the load generator's CPU, for every run.
UPORT=$(free_port)
setsid taskset -c "$LCPU" "$SERVER" --port "$UPORT" --threads 1 --journal 0 >"$work/upstream.out" 2>&1 &
upid=$!
wait_port "$UPORT" || { echo "$ME: the upstream did not start: $(tail -n 3 "$work/upstream.out")" >&2; exit 1; }

# start NAME MODE PROTO: the measured server (MODE direct or proxy) in its own process group on CPU 0; sets spid
# and PORT.
start() {
  local name=$1 mode=$2 proto=$3 cmd=()
  PORT=$(free_port)
  case $name in
    cbench|cbench-pipe|cbench-h2up)
      cmd=("$SERVER" --port "$PORT" --threads 1)
      if [ "$mode" = proxy ]; then
        local upproto=http1 pipeline=0
        [ "$name" = cbench-h2up ] && upproto=h2c
        [ "$name" = cbench-pipe ] && pipeline=8
        printf '[{"name": "proxy", "match": {"path": "/*", "method": "any"}, "response": {"proxy": {"to": "http://127.0.0.1:%s", "protocol": "%s", "pipeline": %s}}}]\n' \
          "$UPORT" "$upproto" "$pipeline" >"$work/proxy.json"
        cmd+=(--stubs "$work/proxy.json")
      fi ;;
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
  upstream up { server 127.0.0.1:$UPORT; keepalive 64; keepalive_requests 1000000000; }
  server { $listen location / { proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection ""; } } }
CONF
      cmd=("$(command -v nginx)" -p "$work/nginx" -c "$work/nginx/nginx.conf") ;;
    h2o)
      mkdir -p "$work/h2o"
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
      /:
        proxy.reverse.url: http://127.0.0.1:$UPORT/
CONF
      chmod -R a+rX "$work"
      cmd=("$(command -v h2o)" -c "$work/h2o/h2o.conf") ;;
    floor)
      if [ "$mode" = proxy ]; then cmd=("$FLOOR_PROXY" "$PORT" "$UPORT"); else cmd=("$FLOOR" "$PORT"); fi ;;
  esac
  setsid taskset -c "$SCPU" "${cmd[@]}" >"$work/$name.out" 2>&1 &
  spid=$!
  wait_port "$PORT" || { echo "$ME: $name did not start: $(tail -n 3 "$work/$name.out")" >&2; exit 1; }
}

stop() {
  stop_group "$spid"
  spid=
}

# measure NAME MODE PROTO: one run. Prints "VALUE COUNT": us of server CPU per request, and the requests.
measure() {
  local name=$1 mode=$2 proto=$3 args=(-t 1 -c "$CONNS" -D "$SECS")
  start "$name" "$mode" "$proto"
  [ "$WARM" -gt 0 ] && args+=(--warm-up-time "$WARM")
  if [ "$proto" = h1 ]; then args+=(--h1 -m 1); else args+=(-m 10); fi
  taskset -c "$LCPU" h2load "${args[@]}" "http://127.0.0.1:$PORT/hello" >"$work/load.out" 2>&1 &
  local lpid=$! t0 t1 n failed
  sleep "$WARM"
  t0=$(group_ticks "$spid")
  wait "$lpid" || true
  t1=$(group_ticks "$spid")
  stop
  n=$(sed -n 's/^requests: .* \([0-9]*\) succeeded, \([0-9]*\) failed.*/\1/p' "$work/load.out")
  failed=$(sed -n 's/^requests: .* \([0-9]*\) succeeded, \([0-9]*\) failed.*/\2/p' "$work/load.out")
  if [ -z "$n" ] || [ "$n" = 0 ] || [ "${failed:-1}" != 0 ]; then
    echo "$ME: $name $mode $proto failed: $(grep -E '^requests:' "$work/load.out" || tail -n 2 "$work/load.out")" >&2
    echo "- 0"
    return
  fi
  awk -v a="$t0" -v b="$t1" -v n="$n" -v hz="$HZ" 'BEGIN { printf "%.3f %d\n", (b - a) * 1e6 / hz / n, n }'
}

# The runs: per protocol, cbench direct and every server as a proxy.
runs=()
for p in "${protos[@]}"; do
  runs+=("cbench direct $p")
  for s in "${peers[@]}"; do
    [ "$s" = floor ] && [ "$p" != h1 ] && continue
    [ "$s" = floor ] && runs+=("floor direct $p")
    runs+=("$s proxy $p")
  done
done
declare -A vals
for ((r = 1; r <= ROUNDS; r++)); do
  n=${#runs[@]}
  for ((i = 0; i < n; i++)); do
    run=${runs[$(((i + r - 1) % n))]}
    read -r name mode proto <<<"$run"
    read -r v c <<<"$(measure "$name" "$mode" "$proto")"
    echo "  $proto $mode $name round $r: $v (count $c)" >&2
    vals[$run]="${vals[$run]:-} $v"
  done
done

median() { tr ' ' '\n' | awk '$1 != "" && $1 != "-"' | sort -g | awk '{a[NR] = $1} END { if (NR == 0) print "-"; else print a[int((NR + 1) / 2)] }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b == 0) print "-"; else printf "%.3f\n", a / b }'; }

if [ -z "$OUT" ]; then
  if [ "$SMOKE" = 1 ]; then OUT=$work/proxy-smoke.md; else mkdir -p bench/results; OUT=bench/results/proxy-$(date -u +%Y%m%dT%H%MZ).md; fi
fi
{
  echo "# bench/proxy.sh: GET /hello through a reverse proxy to one cbench-server upstream (HTTP/1.1, kept alive)"
  echo
  echo "measured server: 1 worker/thread on CPU $SCPU; upstream and h2load (1 thread, $CONNS connections, -m 10 on h2c) on CPU $LCPU;"
  echo "$SECS s after $WARM s warm-up; $ROUNDS rounds, servers interleaved"
  echo "machine: $ncpu CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg) at the end; $("$SERVER" --version 2>/dev/null | head -n 1)"
  for s in "${peers[@]}"; do
    case $s in
      nginx) echo "nginx: $(nginx -v 2>&1)" ;;
      h2o) echo "h2o: $(h2o --version 2>/dev/null | head -n 1)" ;;
    esac
  done
  for note in "${notes[@]}"; do echo "note: $note"; done
  echo
  echo "Server CPU per request (us, lower is better), median of rounds, with each round's value."
  echo
  echo "| client side | mode | server | median | rounds | cbench proxy / this |"
  echo "| --- | --- | --- | --- | --- | --- |"
  for p in "${protos[@]}"; do
    cb=$(echo "${vals[cbench proxy $p]:-}" | median)
    for run in "${runs[@]}"; do
      read -r name mode proto <<<"$run"
      [ "$proto" = "$p" ] || continue
      m=$(echo "${vals[$run]}" | median)
      rat=""
      [ "$run" != "cbench proxy $p" ] && rat=$(ratio "$cb" "$m")
      echo "| $p | $mode | $name | $m | ${vals[$run]} | $rat |"
    done
  done
  echo
  for p in "${protos[@]}"; do
    cbd=$(echo "${vals[cbench direct $p]:-}" | median)
    cbp=$(echo "${vals[cbench proxy $p]:-}" | median)
    line="proxy / direct, $p: cbench $(ratio "$cbp" "$cbd")"
    if [ -n "${vals[cbench-pipe proxy $p]:-}" ]; then
      line+=", cbench-pipe $(ratio "$(echo "${vals[cbench-pipe proxy $p]}" | median)" "$cbd")"
    fi
    if [ -n "${vals[cbench-h2up proxy $p]:-}" ]; then
      line+=", cbench-h2up $(ratio "$(echo "${vals[cbench-h2up proxy $p]}" | median)" "$cbd")"
    fi
    if [ -n "${vals[floor proxy $p]:-}" ]; then
      line+=", floor $(ratio "$(echo "${vals[floor proxy $p]}" | median)" "$(echo "${vals[floor direct $p]}" | median)")"
    fi
    echo "$line"
  done
} >"$OUT"
cat "$OUT"
echo "wrote $OUT"
