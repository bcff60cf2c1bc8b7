#!/usr/bin/env bash
# End-to-end HTTP/2 (h2c) test of cbench-server with real clients: every route with nghttp (prior knowledge)
# and curl --http2-prior-knowledge, bodies compared byte for byte with files made here; Upgrade: h2c with
# curl --http2 and nghttp -u; bounded h2load -m 10 runs with zero failures; --max-concurrent-streams and
# --no-h2. Everything runs against 127.0.0.1 on a free port (--port 0).
#
#   CBENCH_SERVER=build/cbench-server test/h2_e2e.sh
#   CBENCH_H2_E2E_LOAD=N  requests per h2load run (default 20000; the sanitizer run uses 2000)
set -euo pipefail

SERVER=${CBENCH_SERVER:-build/cbench-server}
LOAD=${CBENCH_H2_E2E_LOAD:-20000}
[ -x "$SERVER" ] || { echo "h2-e2e: $SERVER is not built" >&2; exit 1; }
for tool in curl nghttp h2load timeout cmp; do
  command -v "$tool" >/dev/null || { echo "h2-e2e: $tool is missing (nghttp2-client, curl)" >&2; exit 1; }
done

work=$(mktemp -d)
server_pids=()
cleanup() {
  local p
  for p in "${server_pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

passed=0
failed=0
pass() { passed=$((passed + 1)); }
fail() { failed=$((failed + 1)); echo "h2-e2e: FAILED: $*" >&2; }

# run_server NAME ARGS...: starts cbench-server in the background and waits for its ready line
# ("cbench-server listening on http://HOST:PORT with N threads"); sets PORT and SPID.
run_server() {
  local name=$1 line="" _
  shift
  "$SERVER" "$@" >"$work/$name.out" 2>"$work/$name.err" &
  SPID=$!
  server_pids+=("$SPID")
  for _ in $(seq 1 200); do
    line=$(head -n 1 "$work/$name.out" 2>/dev/null || true)
    [ -n "$line" ] && break
    kill -0 "$SPID" 2>/dev/null || break
    sleep 0.05
  done
  if ! [[ "$line" =~ ^cbench-server\ listening\ on\ http://127\.0\.0\.1:([0-9]+)\ with\ [0-9]+\ threads?$ ]]; then
    echo "h2-e2e: server $name did not start: $(cat "$work/$name.out" "$work/$name.err")" >&2
    exit 1
  fi
  PORT=${BASH_REMATCH[1]}
}

stop_server() { # stop_server PID: SIGTERM, and the exit status must be 0
  local rc=0
  kill -TERM "$1" && wait "$1" || rc=$?
  if [ "$rc" = 0 ]; then
    pass
  else
    fail "server $1 did not stop cleanly (exit status $rc)"
    # What the servers wrote to stderr (a sanitizer's report, under h2-asan), for a log that keeps only its tail.
    for f in "$work"/*.err; do
      [ -s "$f" ] && { echo "h2-e2e: $(basename "$f"):"; tail -n 60 "$f"; } >&2
    done
  fi
}

# ---- expected bodies (docs/wire.md), made with printf and head only ----
LINE=0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
times() { # times N STRING: STRING N times on stdout
  local k
  for ((k = 0; k < $1; k++)); do printf '%s' "$2"; done
}
exp=$work/exp
mkdir -p "$exp"
# Fixture files: byte i is i % 251. One period, doubled until it covers 5 MiB, then cut to size.
# shellcheck disable=SC2059 # the format is the octal escape of byte b
for ((b = 0; b < 251; b++)); do printf "\\$(printf '%03o' "$b")"; done >"$work/p0"
while [ "$(stat -c %s "$work/p0")" -lt 5242880 ]; do cat "$work/p0" "$work/p0" >"$work/p1" && mv "$work/p1" "$work/p0"; done
head -c 1024 "$work/p0" >"$exp/file_tiny"
head -c 102400 "$work/p0" >"$exp/file_small"
head -c 5242880 "$work/p0" >"$exp/file_big"
rm -f "$work/p0"
BIGLINE=$(times 256 "$LINE")
printf 'hello world!' >"$exp/root"
printf 'Hello, Joe!' >"$exp/hello"
printf '{"message":"Hello, Joe!"}' >"$exp/json"
printf 'hello, Joe!' >"$exp/stream"
times 100 "$LINE" >"$exp/stream_small"
times 64 "$BIGLINE" >"$exp/stream_big"
times 32 "$(printf 'event: tick\ndata: %s\n\n_' "$LINE")" | tr -d _ >"$exp/sse"
times 100 "$(printf 'event: tick\ndata: %s\n\n_' "$LINE")" | tr -d _ >"$exp/sse_small"
times 64 "$(printf 'event: tick\ndata: %s\n\n_' "$BIGLINE")" | tr -d _ >"$exp/sse_big"
printf 'ok' >"$exp/delay"
: >"$exp/empty"
[ "$(stat -c %s "$exp/sse")" = $((32 * 84)) ] || { echo "h2-e2e: bad expected sse file" >&2; exit 1; }

# The routes: PATH STATUS BODY-FILE CONTENT-TYPE (- for none)
routes=(
  "/ 200 root -"
  "/hello 200 hello text/plain"
  "/hello?x=1 200 hello text/plain"
  "/json 200 json application/json"
  "/file/tiny 200 file_tiny application/octet-stream"
  "/file/small 200 file_small application/octet-stream"
  "/file/big 200 file_big application/octet-stream"
  "/stream 200 stream text/plain"
  "/stream/small 200 stream_small application/octet-stream"
  "/stream/big 200 stream_big application/octet-stream"
  "/sse 200 sse text/event-stream"
  "/sse/small 200 sse_small text/event-stream"
  "/sse/big 200 sse_big text/event-stream"
  "/delay/0 200 delay text/plain"
  "/delay/30 200 delay text/plain"
  "/status/200 200 empty -"
  "/status/204 204 empty -"
  "/status/418 418 empty -"
  "/status/599 599 empty -"
  "/status/600 400 empty -"
  "/delay/60001 400 empty -"
  "/nope 404 empty -"
  "/hello/ 404 empty -"
)

run_server main --port 0 --threads 2
MAIN_PID=$SPID
BASE=http://127.0.0.1:$PORT

# The last header block of a curl -D file (after an upgrade it also holds the 101), CRs removed.
last_block() { tr -d '\r' <"$1" | awk 'NF == 0 { if (b != "") l = b; b = ""; next } { b = b $0 "\n" } END { printf "%s", b != "" ? b : l }'; }
# The same without the status line and date, for exact comparisons.
headers_of() { last_block "$1" | sed -e '1d' -e '/^date: /d'; }

# check_curl LABEL EXPECTED-VERSION PATH STATUS BODY CTYPE [curl options...]
check_curl() {
  local label=$1 want_version=$2 path=$3 status=$4 body=$5 ctype=$6 got got_ctype
  shift 6
  if ! got=$(timeout 30 curl -sS --max-time 20 -o "$work/body" -D "$work/head" -w '%{http_code} %{http_version}' \
    "$@" "$BASE$path" 2>"$work/curl.err"); then
    fail "$label $path: curl failed: $(cat "$work/curl.err")"
    return
  fi
  last_block "$work/head" >"$work/block"
  got_ctype=$(sed -n 's/^content-type: //p' "$work/block")
  if [ "$got" != "$status $want_version" ]; then
    fail "$label $path: status and version '$got', expected '$status $want_version'"
  elif ! cmp -s "$work/body" "$exp/$body"; then
    fail "$label $path: body differs from $body ($(stat -c %s "$work/body") bytes, expected $(stat -c %s "$exp/$body"))"
  elif [ "$ctype" = - ] && [ -n "$got_ctype" ]; then
    fail "$label $path: content-type '$got_ctype', expected none"
  elif [ "$ctype" != - ] && [ "$got_ctype" != "$ctype" ]; then
    fail "$label $path: content-type '$got_ctype', expected '$ctype'"
  elif ! grep -Eq '^date: [A-Z][a-z]{2}, [0-9]{2} [A-Z][a-z]{2} [0-9]{4} [0-9:]{8} GMT$' "$work/block"; then
    fail "$label $path: no date header"
  elif [ "$want_version" = 2 ] && grep -Eiq '^(transfer-encoding|connection):' "$work/block"; then
    fail "$label $path: a connection-specific header over HTTP/2"
  else
    pass
  fi
}

# check_nghttp LABEL PATH STATUS BODY CTYPE [nghttp options...]: headers from -v, body from a second run.
check_nghttp() {
  local label=$1 path=$2 status=$3 body=$4 ctype=$5 got_status got_ctype
  shift 5
  if ! timeout 30 nghttp -t 20 -nv "$@" "$BASE$path" >"$work/nghttp.v" 2>&1; then
    fail "$label $path: nghttp -nv failed: $(tail -3 "$work/nghttp.v")"
    return
  fi
  if ! timeout 30 nghttp -t 20 "$@" "$BASE$path" >"$work/body" 2>"$work/nghttp.err"; then
    fail "$label $path: nghttp failed: $(cat "$work/nghttp.err")"
    return
  fi
  got_status=$(sed -n 's/.*recv (stream_id=[0-9]*) :status: //p' "$work/nghttp.v" | tail -1)
  got_ctype=$(sed -n 's/.*recv (stream_id=[0-9]*) content-type: //p' "$work/nghttp.v" | tail -1)
  if [ "$got_status" != "$status" ]; then
    fail "$label $path: status '$got_status', expected $status"
  elif ! cmp -s "$work/body" "$exp/$body"; then
    fail "$label $path: body differs from $body ($(stat -c %s "$work/body") bytes, expected $(stat -c %s "$exp/$body"))"
  elif [ "$ctype" = - ] && [ -n "$got_ctype" ]; then
    fail "$label $path: content-type '$got_ctype', expected none"
  elif [ "$ctype" != - ] && [ "$got_ctype" != "$ctype" ]; then
    fail "$label $path: content-type '$got_ctype', expected '$ctype'"
  elif ! grep -q 'recv (stream_id=[0-9]*) date: ' "$work/nghttp.v"; then
    fail "$label $path: no date header"
  else
    pass
  fi
}

# ---- every route, prior knowledge ----
for r in "${routes[@]}"; do
  # shellcheck disable=SC2086 # split the route line
  set -- $r
  check_curl "curl --http2-prior-knowledge" 2 "$1" "$2" "$3" "$4" --http2-prior-knowledge
  check_nghttp "nghttp" "$1" "$2" "$3" "$4"
done
check_curl "curl h2 POST" 2 /echo 200 file_small application/octet-stream --http2-prior-knowledge \
  --data-binary "@$exp/file_small"
check_curl "curl h2 POST" 2 /echo 200 file_big application/octet-stream --http2-prior-knowledge \
  --data-binary "@$exp/file_big"
check_curl "curl h2 POST" 2 /echo/chunked 200 file_small application/octet-stream --http2-prior-knowledge \
  --data-binary "@$exp/file_small"
check_curl "curl h2 POST" 2 /hello 405 empty - --http2-prior-knowledge -X POST
check_curl "curl h2 GET" 2 /echo 405 empty - --http2-prior-knowledge
check_nghttp "nghttp POST" /echo 200 file_tiny application/octet-stream -d "$exp/file_tiny"
check_nghttp "nghttp POST" /echo/chunked 200 file_big application/octet-stream -d "$exp/file_big"

# Exact header blocks (date removed) of a few answers over HTTP/2.
exact_head() { # exact_head PATH EXPECTED [curl options...]
  local path=$1 want=$2 got
  shift 2
  timeout 30 curl -sS --max-time 20 --http2-prior-knowledge -o /dev/null -D "$work/head" "$@" "$BASE$path" || {
    fail "exact head $path: curl failed"
    return
  }
  got=$(headers_of "$work/head")
  if [ "$(last_block "$work/head" | head -1 | sed 's/ *$//')" = "HTTP/2 ${want%%$'\n'*}" ] &&
    [ "$got" = "$(printf '%s\n' "$want" | sed 1d)" ]; then
    pass
  else
    fail "exact head $path: got [$(tr -d '\r' <"$work/head")], expected [$want]"
  fi
}
exact_head /hello "200
content-type: text/plain
content-length: 11"
exact_head /sse "200
content-type: text/event-stream
cache-control: no-cache"
exact_head /file/big "200
content-type: application/octet-stream
content-length: 5242880" -I
exact_head /echo "405
allow: POST
content-length: 0"
exact_head /status/304 "304"

# /headers: regular fields only, never the pseudo-headers.
printf '{"user-agent":"h2-e2e","accept":"*/*","x-two":"a, b"}' >"$exp/headers"
check_curl "curl h2 /headers" 2 /headers 200 headers application/json --http2-prior-knowledge -A h2-e2e \
  -H 'X-Two: a' -H 'x-two: b'

# Several requests on one connection: nghttp sends all its URIs as streams of one connection. (Not curl: 7.88's
# --http2-prior-knowledge fails on connection reuse with "Error in the HTTP2 framing layer", curl issue 10634,
# fixed in 7.89 by curl PR 10643.)
if timeout 30 nghttp -t 20 -nv "$BASE/hello" "$BASE/json" "$BASE/file/small" "$BASE/sse" >"$work/multi" 2>&1 &&
  [ "$(grep -c '\] Connected' "$work/multi")" = 1 ] &&
  [ "$(grep -c 'recv (stream_id=[0-9]*) :status: 200' "$work/multi")" = 4 ]; then
  pass
else
  fail "four streams on one nghttp connection: $(grep -E 'Connected|:status' "$work/multi" | tr '\n' ' ')"
fi

# ---- Upgrade: h2c ----
# curl 7.88 takes at most 32 KiB of HTTP/2 bytes in the read that carries the 101 ("connection buffer size is
# too small to store data following HTTP Upgrade response header"); the server holds the response's DATA until
# the client's preface has arrived, so big bodies upgrade with curl too.
for r in "/hello 200 hello text/plain" "/file/tiny 200 file_tiny application/octet-stream" \
  "/file/big 200 file_big application/octet-stream" "/sse/big 200 sse_big text/event-stream" \
  "/sse 200 sse text/event-stream" "/status/204 204 empty -" "/nope 404 empty -"; do
  # shellcheck disable=SC2086
  set -- $r
  check_curl "curl --http2 (upgrade)" 2 "$1" "$2" "$3" "$4" --http2
done
for r in "/hello 200 hello text/plain" "/file/big 200 file_big application/octet-stream" \
  "/sse/big 200 sse_big text/event-stream" "/nope 404 empty -"; do
  # shellcheck disable=SC2086
  set -- $r
  check_nghttp "nghttp -u" "$1" "$2" "$3" "$4" -u
done
# (Output to a file first: with pipefail, grep -q leaving early would fail the pipeline with SIGPIPE.)
timeout 30 nghttp -t 20 -nuv "$BASE/hello" >"$work/upgrade.v" 2>&1 || true
if grep -q 'HTTP Upgrade success' "$work/upgrade.v"; then pass; else
  fail "nghttp -u: no 'HTTP Upgrade success'"
fi
# A request with a body is answered over HTTP/1.1 without upgrading.
check_curl "curl --http2 POST (no upgrade)" 1.1 /echo 200 file_tiny application/octet-stream --http2 \
  --data-binary "@$exp/file_tiny"

# ---- load: bounded h2load runs, every request must succeed ----
printf '%1024s' '' | tr ' ' x >"$work/kib"
h2load_run() { # h2load_run N PATH [h2load options...]
  local n=$1 path=$2 out rc=0
  shift 2
  out=$(timeout 30 h2load -n "$n" -c 10 -m "${h2load_m:-10}" -t 1 "$@" "$BASE$path" 2>&1) || rc=$?
  if [ "$rc" != 0 ]; then
    fail "h2load $path: exit status $rc: $(echo "$out" | tail -3)"
    return
  fi
  if grep -q "requests: $n total, $n started, $n done, $n succeeded, 0 failed, 0 errored, 0 timeout" <<<"$out" &&
    grep -q "status codes: $n 2xx, 0 3xx, 0 4xx, 0 5xx" <<<"$out" &&
    grep -q "Application protocol: h2c" <<<"$out"; then
    pass
    echo "h2-e2e: h2load $path: $(echo "$out" | grep -E '^finished in')"
  else
    fail "h2load $path: $(echo "$out" | grep -E '^(requests|status codes|Application protocol):' | tr '\n' ' ')"
  fi
}
h2load_run "$LOAD" /hello
h2load_run "$LOAD" /echo -d "$work/kib"
h2load_run "$LOAD" /file/small

stop_server "$MAIN_PID"
if grep -q 'h2c_prior' "$work/main.out"; then pass; else fail "stats at exit: no per-protocol counts"; fi

# ---- --max-concurrent-streams: announced, and kept to by h2load without failures ----
# (With -m above the limit, h2load's first streams go out before it has the server's SETTINGS and the ones over
# the limit are refused with RST_STREAM(REFUSED_STREAM), which h2load counts as errors: -m 4 here.)
run_server streams --port 0 --threads 1 --max-concurrent-streams 4
BASE=http://127.0.0.1:$PORT
timeout 30 nghttp -t 20 -nv "$BASE/hello" >"$work/settings.v" 2>&1 || true
if grep -q 'SETTINGS_MAX_CONCURRENT_STREAMS(0x03):4\]' "$work/settings.v"; then pass; else
  fail "--max-concurrent-streams 4 is not announced"
fi
h2load_m=4 h2load_run $((LOAD / 10)) /delay/1
stop_server "$SPID"

# ---- --no-h2: the preface is a bad HTTP/1.1 request, Upgrade: h2c is ignored ----
run_server noh2 --port 0 --threads 1 --no-h2
BASE=http://127.0.0.1:$PORT
if timeout 30 curl -sS --max-time 10 --http2-prior-knowledge -o /dev/null "$BASE/hello" 2>/dev/null; then
  fail "--no-h2: a prior-knowledge request succeeded"
else
  pass
fi
check_curl "--no-h2 curl --http2" 1.1 /hello 200 hello text/plain --http2
stop_server "$SPID"

echo "h2-e2e: $passed passed, $failed failed"
[ "$failed" = 0 ]
