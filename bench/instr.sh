#!/usr/bin/env bash
# Instructions per request of cbench-server (issue 11), counted by callgrind: independent of the machine's load,
# so it can drive optimisation on a busy machine where CPU-time figures are noise.
#
#   bench/instr.sh [--n1 N] [--n2 N] [--conns C] [--where] [CASE...]
#
# CASE is one of h1 (HTTP/1.1 /hello), h1-nojournal, h2c (/hello, -m 10), h2c-nojournal, floor (bench/floor:
# one read and one canned write per request, the HTTP/1.1 floor), h2o (h2o serving /hello over h2c the way
# bench/ab.sh configures it, one thread; when run as root it runs as nobody, so that callgrind can write its
# counts after h2o's start); default: h1 h2c floor.
# Each case runs the server (one thread) under callgrind twice, loaded by h2load with N1 and then N2 requests
# over C connections (default 2000 / 12000, 50): the difference of the two totals over N2 - N1 cancels the
# start-up, the stop and the connections' set-up. With --where, each case's instructions per request are also
# split by where they go (the parser, the header callbacks, routing, the response, the write, the connection
# step...: the `where` table below), each part by the same difference. The parts are made for HTTP/1.1: on h2c,
# http2.c and nghttp2 count as the response.
set -euo pipefail

SERVER=${CBENCH_SERVER:-build/cbench-server}
FLOOR=${CBENCH_FLOOR:-build/bench-floor}
N1=2000
N2=12000
CONNS=50
WHERE=0
cases=()
while [ $# -gt 0 ]; do
  case $1 in
    --n1) N1=$2; shift 2 ;;
    --n2) N2=$2; shift 2 ;;
    --conns) CONNS=$2; shift 2 ;;
    --where) WHERE=1; shift ;;
    h1|h1-nojournal|h2c|h2c-nojournal|floor|h2o) cases+=("$1"); shift ;;
    *) echo "usage: bench/instr.sh [--n1 N] [--n2 N] [--conns C] [--where] [h1|h1-nojournal|h2c|h2c-nojournal|floor|h2o]..." >&2
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

# start_h2o: h2o under callgrind on a free port, configured as bench/ab.sh does; sets PORT and spid. h2o names
# its port in its configuration, so readiness is a request that succeeds.
start_h2o() {
  local h="$work/h2o" p= run=()
  command -v h2o >/dev/null || { echo "bench/instr.sh: h2o is not installed" >&2; exit 1; }
  mkdir -p "$h/doc"
  chmod 1777 "$h" # h2o as nobody writes its log there, callgrind its counts
  rm -f "$work/cg.out" "$h/cg.out"
  printf 'Hello, Joe!' >"$h/doc/hello"
  for _ in $(seq 1 100); do
    p=$((10000 + RANDOM % 20000)) # below the ephemeral range (32768 on): no client connection holds it
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || break
  done
  cat >"$h/h2o.conf" <<CONF
num-threads: 1
error-log: $h/error.log
listen: {host: 127.0.0.1, port: $p}
hosts:
  default:
    paths:
      /hello:
        file.file: $h/doc/hello
CONF
  chmod a+rx "$work"
  chmod -R a+rX "$h"
  [ "$(id -u)" = 0 ] && run=(setpriv --reuid=nobody --regid=nogroup --clear-groups)
  "${run[@]}" valgrind --tool=callgrind --callgrind-out-file="$h/cg.out" -q "$(command -v h2o)" -c "$h/h2o.conf" \
    >"$work/server.out" 2>"$work/server.err" &
  spid=$!
  for _ in $(seq 1 600); do
    h2load -n 1 "http://127.0.0.1:$p/hello" 2>/dev/null | grep -q "1 succeeded" && break
    sleep 0.1
  done
  h2load -n 1 "http://127.0.0.1:$p/hello" 2>/dev/null | grep -q "1 succeeded" ||
    { echo "h2o did not start: $(cat "$work/server.err")" >&2; exit 1; }
  PORT=$p
}

stop() { # SIGINT stops cbench-server (and the floor); h2o stops on SIGTERM
  kill "-${1:-INT}" "$spid"
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

# Where the instructions go: the first pattern (an awk regular expression on callgrind_annotate's function
# column, file:function [object]) that matches a function takes its self cost.
where=(
  "llhttp: the parser and its callback wrappers|llhttp|smmintrin"
  "request line and header callbacks (url, version, names, values)|http1.c:(on_url|on_version|on_method_complete|on_header_|head_|pin_head|note_header|lower_is|count_head|grow_hdrs)"
  "head complete: Host check, method, keep-alive|http1.c:(on_headers_complete|valid_host|host_ok|head_complete|path_length)"
  "route lookup and dispatch|(route_table|route|req).c:(cb__rtable_dispatch|rtable_dispatch|dispatch_lookup|cb__req_dispatch|cb__match_in|cb__route_match|hash_bytes|probe|lookup|answer_last|last_answers)|internal.h:cb__rtable_dispatch"
  "response: head, body, end (handler, output queue)|http1.c:(h1_head|new_head|format_head|h1_data|h1_end|chunk_size_line|h1_fixed|fixed_miss|whole_)|handlers.c|fixture_routes.c|internal.h|core.h|req.c:cb__res|http_status.c|outq.c:(cb__outq_copy|copy_slow|cb__outq_reserve|cb__outq_commit|push|cb__outq_ref)|http2.c|nghttp2"
  "write and release (flush, route-table use)|outq.c:(cb__outq_flush|flush_all|flush_short|consume|entry_ptr)|plain.c|release|run_releases"
  "request state taken and given back|http1.c:(h1_wake|h1_free|h1_rest)|outq.c:(outq_rest|outq_wake|cb__outq_rest)|pool.c|malloc|free"
  "message begin and complete|http1.c:(on_message_begin|on_message_complete|finish_request)|cb__conn_head_begin"
  "connection step (poll, read, after-event, timers)|conn.c|detect.c|http1.c:(h1_after|h1_timer_mode|h1_writable|h1_read|parse)|uv_now"
  "journal|journal.c"
  "system calls: libc's read(2), write(2), writev(2), syscall(2) wrappers|read.c|write.c|writev.c|cancellation|syscall"
  "libuv's loop|libuv"
  "memcpy, memcmp, memchr, strlen, memset|memmove|memcpy|memcmp|memchr|strlen|memset"
)

# parts FILE: one line per part of `where` (its name, then its self cost), then "other" for the rest.
parts() {
  callgrind_annotate --auto=no --threshold=100 "$1" 2>/dev/null | awk -v spec="$(printf '%s\n' "${where[@]}")" '
    BEGIN { n = split(spec, lines, "\n"); for (i = 1; i <= n; i++) if (lines[i] != "") {
              k = index(lines[i], "|"); name[++m] = substr(lines[i], 1, k - 1); re[m] = substr(lines[i], k + 1) } }
    /^ *[0-9,]+ +\( *[0-9.]+%\) +[^ ]/ {
      v = $1; gsub(",", "", v); f = $0; sub(/^ *[0-9,]+ +\( *[0-9.]+%\) +/, "", f)
      if (f ~ /^PROGRAM TOTALS/) next
      for (i = 1; i <= m; i++) if (f ~ re[i]) { sum[i] += v; next }
      other += v }
    END { for (i = 1; i <= m; i++) printf "%s\t%d\n", name[i], sum[i]; printf "other\t%d\n", other }'
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
  [ "$c" = h2o ] && proto=h2c
  ir=()
  for n in "$N1" "$N2"; do
    out="$work/cg.out"
    if [ "$c" = h2o ]; then
      start_h2o
      out="$work/h2o/cg.out"
    else
      start "${args[@]}"
    fi
    load "$proto" "$n"
    if [ "$c" = h2o ]; then stop TERM; else stop; fi
    ir+=("$(awk '/^summary:|^totals:/ {print $2; exit}' "$out")")
    [ "$WHERE" = 1 ] && parts "$out" >"$work/parts.$n"
  done
  awk -v c="$c" -v a="${ir[0]}" -v b="${ir[1]}" -v n=$((N2 - N1)) \
    'BEGIN { printf "%-14s %8.0f instructions per request\n", c, (b - a) / n }'
  if [ "$WHERE" = 1 ]; then
    paste "$work/parts.$N1" "$work/parts.$N2" | awk -F '\t' -v n=$((N2 - N1)) \
      '{ v = ($4 - $2) / n; if (v > -0.5 && v < 0.5) v = 0; printf "  %8.0f  %s\n", v, $1 }'
  fi
done
