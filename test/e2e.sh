#!/usr/bin/env bash
# End-to-end test of cbench-server with real clients: curl on every route (bodies compared byte for byte with
# files made here, statuses and headers exactly), the CLI (bad arguments, port in use, SIGTERM), and short,
# bounded h2load --h1 runs with zero failures. Everything runs against 127.0.0.1 on a free port.
#
#   CBENCH_SERVER=build/cbench-server test/e2e.sh
#   CBENCH_E2E_LOAD=N  requests per h2load run on /hello (default 20000; /file/small gets a tenth)
set -euo pipefail

SERVER=${CBENCH_SERVER:-build/cbench-server}
LOAD=${CBENCH_E2E_LOAD:-20000}
[ -x "$SERVER" ] || { echo "e2e: $SERVER is not built" >&2; exit 1; }

work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

passed=0
failed=0
ok() { passed=$((passed + 1)); }
bad() { failed=$((failed + 1)); echo "e2e: FAILED: $*" >&2; }

# start_server NAME ARGS...: starts the server in the background, waits for its ready line, sets PORT and
# SPID. The ready line is exactly "cbench-server listening on http://HOST:PORT with N threads" ("1 thread").
start_server() {
  local name=$1 i line
  shift
  "$SERVER" "$@" >"$work/$name.out" 2>"$work/$name.err" &
  SPID=$!
  pids+=("$SPID")
  for i in $(seq 1 200); do
    line=$(head -n 1 "$work/$name.out" 2>/dev/null || true)
    if [ -n "$line" ]; then break; fi
    if ! kill -0 "$SPID" 2>/dev/null; then break; fi
    sleep 0.05
  done
  if ! [[ "$line" =~ ^cbench-server\ listening\ on\ http://(127\.0\.0\.1|localhost):([0-9]+)\ with\ (1\ thread|[02-9]\ threads|[1-9][0-9]+\ threads)$ ]]; then
    echo "e2e: $name did not start; stdout: $(cat "$work/$name.out"); stderr: $(cat "$work/$name.err")" >&2
    exit 1
  fi
  PORT=${BASH_REMATCH[2]}
  THREADS_LINE=${BASH_REMATCH[3]}
}

# ---- expected bodies, made with printf only ----
LINE=0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
repeat() { # repeat N STRING > file
  local n=$1 s=$2 i
  for ((i = 0; i < n; i++)); do printf '%s' "$s"; done
}
mkdir -p "$work/exp"
# The fixture files: byte i is i % 251. One period of 251 bytes, doubled until big enough, then cut.
for ((i = 0; i < 251; i++)); do printf "\\$(printf %03o "$i")"; done >"$work/period"
cp "$work/period" "$work/grow"
while [ "$(stat -c %s "$work/grow")" -lt 5242880 ]; do
  cat "$work/grow" "$work/grow" >"$work/grow2"
  mv "$work/grow2" "$work/grow"
done
head -c 1024 "$work/grow" >"$work/exp/file_tiny"
head -c 102400 "$work/grow" >"$work/exp/file_small"
head -c 5242880 "$work/grow" >"$work/exp/file_big"
rm -f "$work/grow"
BIGLINE=$(repeat 256 "$LINE")
printf 'hello world!' >"$work/exp/root"
printf 'Hello, Joe!' >"$work/exp/hello"
printf '{"message":"Hello, Joe!"}' >"$work/exp/json"
printf 'hello, Joe!' >"$work/exp/stream"
repeat 100 "$LINE" >"$work/exp/stream_small"
repeat 64 "$BIGLINE" >"$work/exp/stream_big"
repeat 32 "event: tick
data: $LINE

" >"$work/exp/sse"
repeat 100 "event: tick
data: $LINE

" >"$work/exp/sse_small"
repeat 64 "event: tick
data: $BIGLINE

" >"$work/exp/sse_big"
printf 'ok' >"$work/exp/delay"
: >"$work/exp/empty"

start_server main --port 0 --threads 2
MAIN_PID=$SPID
BASE=http://127.0.0.1:$PORT

# check_get PATH STATUS EXPECTED_BODY_FILE CONTENT_TYPE(or -) [curl args...]
check() {
  local path=$1 status=$2 body=$3 ctype=$4 got_status got_ctype
  shift 4
  got_status=$(curl -sS --max-time 10 -o "$work/body" -D "$work/head" -w '%{http_code}' "$@" "$BASE$path") || {
    bad "curl $* $path failed"
    return
  }
  got_ctype=$(tr -d '\r' <"$work/head" | sed -n 's/^content-type: //p')
  if [ "$got_status" != "$status" ]; then
    bad "$path: status $got_status, expected $status"
  elif ! cmp -s "$work/body" "$body"; then
    bad "$path: body differs from $(basename "$body") ($(stat -c %s "$work/body") bytes, expected $(stat -c %s "$body"))"
  elif [ "$ctype" = - ] && [ -n "$got_ctype" ]; then
    bad "$path: content-type '$got_ctype', expected none"
  elif [ "$ctype" != - ] && [ "$got_ctype" != "$ctype" ]; then
    bad "$path: content-type '$got_ctype', expected '$ctype'"
  else
    ok
  fi
}

# check_head PATH EXPECTED_HEAD (exact header block, date line removed, without the final empty line)
check_head() {
  local path=$1 expected=$2 got
  got=$(curl -sS --max-time 10 -I "$BASE$path" | tr -d '\r' | grep -v '^date: ' | sed '/^$/d') || {
    bad "HEAD $path failed"
    return
  }
  if [ "$got" = "$expected" ]; then ok; else bad "HEAD $path: got [$got], expected [$expected]"; fi
}

check / 200 "$work/exp/root" -
check /hello 200 "$work/exp/hello" text/plain
check '/hello?name=x' 200 "$work/exp/hello" text/plain
check /json 200 "$work/exp/json" application/json
check /file/tiny 200 "$work/exp/file_tiny" application/octet-stream
check /file/small 200 "$work/exp/file_small" application/octet-stream
check /file/big 200 "$work/exp/file_big" application/octet-stream
check /stream 200 "$work/exp/stream" text/plain
check /stream/small 200 "$work/exp/stream_small" application/octet-stream
check /stream/big 200 "$work/exp/stream_big" application/octet-stream
check /sse 200 "$work/exp/sse" text/event-stream
check /sse/small 200 "$work/exp/sse_small" text/event-stream
check /sse/big 200 "$work/exp/sse_big" text/event-stream
check /delay/0 200 "$work/exp/delay" text/plain
check /delay/50 200 "$work/exp/delay" text/plain
check /status/200 200 "$work/exp/empty" -
check /status/204 204 "$work/exp/empty" -
check /status/418 418 "$work/exp/empty" -
check /status/503 503 "$work/exp/empty" -
check /status/600 400 "$work/exp/empty" -
check /delay/60001 400 "$work/exp/empty" -
check /delay/abc 400 "$work/exp/empty" -
check /nope 404 "$work/exp/empty" -
check /hello/ 404 "$work/exp/empty" -
check /hello 405 "$work/exp/empty" - -X POST
check /echo 405 "$work/exp/empty" -
check /echo 200 "$work/exp/file_small" application/octet-stream --data-binary "@$work/exp/file_small" \
  -H 'content-type: application/octet-stream'
# Over 1 MiB curl sends Expect: 100-continue.
check /echo 200 "$work/exp/file_big" application/octet-stream --data-binary "@$work/exp/file_big" \
  -H 'content-type: application/octet-stream'
check /echo 200 "$work/exp/file_tiny" application/octet-stream -H 'transfer-encoding: chunked' \
  --data-binary "@$work/exp/file_tiny"
check /echo/chunked 200 "$work/exp/file_small" application/octet-stream --data-binary "@$work/exp/file_small"
check /echo/chunked 200 "$work/exp/file_big" application/octet-stream -H 'transfer-encoding: chunked' \
  --data-binary "@$work/exp/file_big"
printf '{"host":"127.0.0.1:%s","user-agent":"cbench-e2e","accept":"*/*","x-two":"a, b"}' "$PORT" >"$work/exp/headers"
check /headers 200 "$work/exp/headers" application/json -A cbench-e2e -H 'X-Two: a' -H 'x-two: b'

# Headers of the HEAD answers (curl -I), in the contract's order.
check_head /hello "HTTP/1.1 200 OK
content-type: text/plain
content-length: 11"
check_head /file/big "HTTP/1.1 200 OK
content-type: application/octet-stream
content-length: 5242880"
check_head /sse "HTTP/1.1 200 OK
content-type: text/event-stream
cache-control: no-cache
transfer-encoding: chunked"
check_head /status/204 "HTTP/1.1 204 No Content"

# Keep-alive: several URLs on one curl command reuse one connection.
out=$(curl -sS --max-time 10 -w '%{num_connects}\n' -o /dev/null -o /dev/null -o /dev/null \
  "$BASE/hello" "$BASE/json" "$BASE/file/tiny" | tr '\n' ' ')
if [ "$out" = "1 0 0 " ]; then ok; else bad "keep-alive: connects per request: $out, expected 1 0 0"; fi

# ---- load: bounded h2load --h1 runs; every request must succeed ----
h2load_check() {
  local n=$1 path=$2 out
  out=$(timeout 60 h2load --h1 -n "$n" -c 10 -t 1 "$BASE$path" 2>&1) || {
    bad "h2load $path exited with an error: $(echo "$out" | tail -5)"
    return
  }
  # Here-strings, not `echo | grep -q`: grep -q exits at the first match, and under pipefail the echo that
  # gets SIGPIPE for it would fail the check.
  if grep -q "requests: $n total, $n started, $n done, $n succeeded, 0 failed, 0 errored, 0 timeout" <<<"$out" &&
    grep -q "status codes: $n 2xx" <<<"$out"; then
    ok
  else
    bad "h2load $path: $(echo "$out" | grep -E '^(requests|status codes):')"
  fi
}
h2load_check "$LOAD" /hello
h2load_check $((LOAD / 10)) /file/small

# ---- CLI ----
# SIGTERM: stats on the way out, exit status 0.
kill -TERM "$MAIN_PID"
if wait "$MAIN_PID"; then
  ok
else
  bad "SIGTERM: exit status $?, expected 0"
  tail -n 60 "$work/main.err" >&2 # a sanitizer's report, under make asan
fi
if grep -q "requests" "$work/main.out" "$work/main.err"; then ok; else bad "SIGTERM: no stats printed"; fi

# SIGINT the same. A request in flight finishes during the graceful stop, and the stats printed after the
# stop count it: its connection is closed, none is open.
start_server int --port 0 --threads 1 --no-h2
curl -sS --max-time 5 -o /dev/null "http://127.0.0.1:$PORT/hello" || bad "--no-h2 server does not answer"
curl -sS --max-time 10 -o "$work/delay.out" "http://127.0.0.1:$PORT/delay/700" &
CURL_PID=$!
sleep 0.3
kill -INT "$SPID"
if wait "$SPID"; then ok; else bad "SIGINT: exit status $?, expected 0"; fi
if wait "$CURL_PID" && [ "$(cat "$work/delay.out")" = ok ]; then ok; else bad "SIGINT: /delay/700 not answered while draining"; fi
if grep -q "conns accepted 2 open 0 closed 2, requests 2" "$work/int.out" && grep -q " delay 1" "$work/int.out"; then
  ok
else
  bad "SIGINT: the stats miss what finished while draining: $(cat "$work/int.out")"
fi

# --no-h1: an h2c-only listener. HTTP/2 with prior knowledge is served; an HTTP/1.1 request is not (it gets
# GOAWAY(PROTOCOL_ERROR) and a close, so curl fails).
start_server noh1 --port 0 --threads 1 --no-h1
body=$(curl -sS --max-time 5 --http2-prior-knowledge "http://127.0.0.1:$PORT/hello" || true)
if [ "$body" = "Hello, Joe!" ]; then ok; else bad "--no-h1: h2c prior knowledge answered '$body'"; fi
if curl -sS --max-time 5 --http1.1 -o /dev/null "http://127.0.0.1:$PORT/hello" 2>/dev/null; then
  bad "--no-h1: an HTTP/1.1 request was answered"
else
  ok
fi
kill -TERM "$SPID"
wait "$SPID" || bad "SIGTERM of the --no-h1 server: exit status $?"

# Every option is accepted.
start_server opts --host 127.0.0.1 --port 0 --threads 2 --cpus 0 --max-header-bytes 2048 --max-body-bytes 100 \
  --header-timeout-ms 2000 --idle-timeout-ms 3000 --stop-timeout-ms 500
code=$(curl -sS --max-time 5 -o /dev/null -w '%{http_code}' --data-binary "@$work/exp/file_tiny" "http://127.0.0.1:$PORT/echo")
if [ "$code" = 413 ]; then ok; else bad "--max-body-bytes 100: /echo of 1024 bytes answered $code, expected 413"; fi
OPTS_PORT=$PORT
OPTS_PID=$SPID

# --threads 0 is the online CPUs; one thread is "1 thread"; a host name resolves.
start_server zero --port 0 --threads 0
if [ "$THREADS_LINE" = "$(nproc) thread$([ "$(nproc)" = 1 ] || echo s)" ]; then ok; else bad "--threads 0: '$THREADS_LINE', expected $(nproc) threads"; fi
kill -TERM "$SPID"; wait "$SPID" || bad "SIGTERM of the --threads 0 server: exit status $?"
start_server one --host localhost --port 0 --threads 1
if [ "$THREADS_LINE" = "1 thread" ]; then ok; else bad "--threads 1: '$THREADS_LINE', expected '1 thread'"; fi
body=$(curl -sS --max-time 5 "http://127.0.0.1:$PORT/hello" || true)
if [ "$body" = "Hello, Joe!" ]; then ok; else bad "--host localhost: /hello on 127.0.0.1 answered '$body'"; fi
kill -TERM "$SPID"; wait "$SPID" || bad "SIGTERM of the localhost server: exit status $?"

# --version prints the library's version and exits 0.
if [ "$("$SERVER" --version)" = "cbench-server 0.1.0" ]; then ok; else bad "--version: '$("$SERVER" --version 2>&1)'"; fi

# Arguments that cannot work on this machine: exit status 2 and a message that names the flag.
# A CPU this process may not run on: the pin is refused, nothing runs.
allowed=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)
declare -A may_run=()
IFS=, read -r -a ranges <<<"$allowed"
for r in "${ranges[@]}"; do
  for ((c = ${r%-*}; c <= ${r#*-}; c++)); do may_run[$c]=1; done
done
cpu=1023
while [ "$cpu" -gt 0 ] && [ -n "${may_run[$cpu]:-}" ]; do cpu=$((cpu - 1)); done
for args in "--cpus $cpu" "--host nosuch.invalid"; do
  set +e
  # shellcheck disable=SC2086 # split the arguments
  timeout 10 "$SERVER" --port 0 $args >"$work/refused.out" 2>"$work/refused.err"
  rc=$?
  set -e
  flag=${args%% *}
  if [ "$rc" = 2 ] && grep -q -- "$flag" "$work/refused.err" && [ ! -s "$work/refused.out" ]; then
    ok
  else
    bad "'cbench-server $args' (allowed CPUs $allowed): exit status $rc, expected 2 with a message naming $flag (stderr: $(head -c 300 "$work/refused.err"))"
  fi
done
# A value out of range: the message names the flag and the range from the option table.
set +e
"$SERVER" --max-header-bytes 10 >/dev/null 2>"$work/range.err"
rc=$?
set -e
if [ "$rc" = 2 ] && grep -q -- "--max-header-bytes takes an integer from 64 to 16777216, not '10'" "$work/range.err"; then
  ok
else
  bad "--max-header-bytes 10: exit status $rc, stderr: $(head -c 300 "$work/range.err")"
fi

# Port in use: a clear message and exit status 1.
set +e
timeout 10 "$SERVER" --port "$OPTS_PORT" --threads 1 >"$work/inuse.out" 2>"$work/inuse.err"
rc=$?
set -e
if [ "$rc" = 1 ] && [ -s "$work/inuse.err" ]; then ok; else bad "port in use: exit status $rc, expected 1 with a message (stderr: $(cat "$work/inuse.err"))"; fi
kill -TERM "$OPTS_PID"
wait "$OPTS_PID" || bad "SIGTERM of the options server: exit status $?"

# Bad arguments: usage on stderr, exit status 2, nothing on stdout.
for args in "--bogus" "--port" "--port abc" "--port 70000" "--port -1" "--threads -1" "--threads x" \
  "--threads 100000" "--cpus a,b" "--max-body-bytes" "--max-header-bytes 0" "--header-timeout-ms -5" \
  "--idle-timeout-ms 1x" "--host" "extra-argument" "--no-h1 --no-h2" "--no-h2 --no-h1" "--proxy-to" \
  "--proxy-to ftp://127.0.0.1:1" "--proxy-to http:/x" "--record-to" "--proxy-ca" \
  "--proxy-to http://127.0.0.1:1 --proxy-insecure" "--proxy-to http://127.0.0.1:1 --proxy-ca /nonexistent.pem" \
  "--proxy-to https://127.0.0.1:1 --proxy-ca /nonexistent.pem --proxy-insecure" "--proxy-protocol" \
  "--proxy-protocol h3" "--proxy-to http://127.0.0.1:1 --proxy-protocol HTTP1" "--proxy-protocol h2c" \
  "--proxy-pipeline 2" "--proxy-pipeline 65" "--proxy-pipeline x" "--proxy-to https://127.0.0.1:1 --proxy-pipeline 2" \
  "--proxy-to http://127.0.0.1:1 --proxy-protocol h2c --proxy-pipeline 2" \
  "--tls-cert-file /nonexistent.pem" "--tls-key-file /nonexistent.key" "--tls-client-auth require" \
  "--tls-cert-file /nonexistent.pem --tls-key-file /nonexistent.key --tls-client-auth request"; do
  set +e
  # shellcheck disable=SC2086 # split the arguments
  timeout 10 "$SERVER" $args >"$work/bad.out" 2>"$work/bad.err"
  rc=$?
  set -e
  if [ "$rc" = 2 ] && grep -qi usage "$work/bad.err" && [ ! -s "$work/bad.out" ]; then
    ok
  else
    bad "'cbench-server $args': exit status $rc, expected 2 with usage on stderr (stderr: $(head -c 300 "$work/bad.err"))"
  fi
done

for args in "--journal -1" "--journal 10000001" "--journal-body-bytes x" "--stubs"; do
  set +e
  # shellcheck disable=SC2086 # split the arguments
  timeout 10 "$SERVER" $args >"$work/bad.out" 2>"$work/bad.err"
  rc=$?
  set -e
  if [ "$rc" = 2 ] && grep -qi usage "$work/bad.err"; then ok; else bad "'cbench-server $args': exit status $rc, expected 2"; fi
done

# --stubs: a valid file is served (curl, HTTP/1.1 and h2c); a file with an error names file, line and field
# and exits 2 without the ready line.
cat >"$work/stubs.json" <<'JSON'
[
  {"name": "user", "match": {"method": "GET", "path": "/users/{id}"},
   "response": {"status": 200, "headers": {"content-type": "application/json"}, "body": "{\"id\":1}"}},
  {"match": {"path": "/gone"}, "response": {"status": 410}}
]
JSON
start_server stubs --port 0 --threads 1 --stubs "$work/stubs.json" --journal 100
body=$(curl -s "http://127.0.0.1:$PORT/users/42")
if [ "$body" = '{"id":1}' ]; then ok; else bad "--stubs: GET /users/42 answered '$body'"; fi
code=$(curl -s --http2-prior-knowledge -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/gone")
if [ "$code" = 410 ]; then ok; else bad "--stubs: h2c GET /gone answered $code"; fi
kill -INT "$SPID"
wait "$SPID" || bad "--stubs server: exit status $?"
if grep -q "user 1" "$work/stubs.out"; then ok; else bad "--stubs: stats lack 'user 1': $(cat "$work/stubs.out")"; fi
# --stubs given twice: both files are added, in the order given (each one a stub file of its own), so a stub of
# the second wins a tie with one of the first (among equal priorities the newest first: docs/routes.md); an
# error in the second file still exits 2 without the ready line.
printf '[{"match": {"path": "/first"}, "response": {"body": "1"}},
  {"match": {"path": "/both"}, "response": {"body": "from first"}}]\n' >"$work/stubs_a.json"
printf '[{"match": {"path": "/second"}, "response": {"body": "2"}},
  {"match": {"path": "/both"}, "response": {"body": "from second"}}]\n' >"$work/stubs_b.json"
start_server stubs2 --port 0 --threads 1 --stubs "$work/stubs_a.json" --stubs "$work/stubs_b.json"
got="$(curl -s "http://127.0.0.1:$PORT/first") $(curl -s "http://127.0.0.1:$PORT/second") $(curl -s "http://127.0.0.1:$PORT/both")"
if [ "$got" = "1 2 from second" ]; then ok; else bad "--stubs twice: /first /second /both answered '$got'"; fi
kill -INT "$SPID"
wait "$SPID" || bad "--stubs twice server: exit status $?"
printf '[{"match": {"path": "/x"}, "response": {"status": "200"}}]\n' >"$work/stubs_bad.json"
set +e
timeout 10 "$SERVER" --port 0 --stubs "$work/stubs_a.json" --stubs "$work/stubs_bad.json" >"$work/stubs2bad.out" \
  2>"$work/stubs2bad.err"
rc=$?
set -e
want="cbench-server: $work/stubs_bad.json:1: stubs[0].response.status: wrong_type: must be an integer from 200 to 599"
if [ "$rc" = 2 ] && [ "$(cat "$work/stubs2bad.err")" = "$want" ] && [ ! -s "$work/stubs2bad.out" ]; then
  ok
else
  bad "--stubs twice, the second bad: exit status $rc, stderr '$(cat "$work/stubs2bad.err")', expected 2 and '$want'"
fi
printf '[
  {"match": {"path": "/a"},
   "response": {"status": "200"}}
]
' >"$work/badstubs.json"
set +e
timeout 10 "$SERVER" --port 0 --stubs "$work/badstubs.json" >"$work/badstubs.out" 2>"$work/badstubs.err"
rc=$?
set -e
want="cbench-server: $work/badstubs.json:3: stubs[0].response.status: wrong_type: must be an integer from 200 to 599"
if [ "$rc" = 2 ] && [ "$(cat "$work/badstubs.err")" = "$want" ] && [ ! -s "$work/badstubs.out" ]; then
  ok
else
  bad "bad stub file: exit status $rc, stderr '$(cat "$work/badstubs.err")', expected 2 and '$want'"
fi
# What the engine refuses is named by field and reason too (cb_error_detail(): docs/routes.md), the value escaped.
printf '[
  {"match": {"path": "/ok"}},
  {"match": {"path": "/a/{b}/c"},
   "response": {"headers": {"x-a": "1",
                            "x-b": "v\\r\\nset-cookie: y"}}}
]
' >"$work/badstubs2.json"
set +e
timeout 10 "$SERVER" --port 0 --stubs "$work/badstubs2.json" >"$work/badstubs2.out" 2>"$work/badstubs2.err"
rc=$?
set -e
want="cbench-server: $work/badstubs2.json:5: stubs[1].response.headers.x-b: control_char: \"v\\r\\nset-cookie: y\" (docs/routes.md)"
if [ "$rc" = 2 ] && [ "$(cat "$work/badstubs2.err")" = "$want" ] && [ ! -s "$work/badstubs2.out" ]; then
  ok
else
  bad "engine-refused stub: exit status $rc, stderr '$(cat "$work/badstubs2.err")', expected 2 and '$want'"
fi

# Issue 22: a body file that is a FIFO (no writer), a device, a directory or bigger than 1 TiB (sparse) is refused
# before the ready line, naming the stub; nothing hangs (each run is bounded by timeout: 124 would be a hang).
mkfifo "$work/body.fifo"
mkdir "$work/bodydir"
truncate -s 1099511627777 "$work/huge"
for f in body.fifo /dev/zero bodydir huge; do
  case $f in
    body.fifo) what="not_regular: $work/body.fifo is a FIFO: a body file must be a regular file" ;;
    /dev/zero) what="not_regular: /dev/zero is a device: a body file must be a regular file" ;;
    bodydir) what="eisdir: $work/bodydir is a directory: a body file must be a regular file" ;;
    huge) what="efbig: $work/huge has 1099511627777 bytes: a body file may have at most 1099511627776" ;;
  esac
  printf '[{"match": {"path": "/ok"}},\n {"match": {"path": "/f"}, "response": {"body": {"file": "%s"}}}]\n' "$f" \
    >"$work/fstubs.json"
  set +e
  timeout 10 "$SERVER" --port 0 --threads 1 --stubs "$work/fstubs.json" >"$work/fstubs.out" 2>"$work/fstubs.err"
  rc=$?
  set -e
  want="cbench-server: $work/fstubs.json:2: stubs[1].response.body.file: $what"
  if [ "$rc" = 2 ] && [ "$(cat "$work/fstubs.err")" = "$want" ] && [ ! -s "$work/fstubs.out" ]; then
    ok
  else
    bad "body file $f: exit status $rc, stderr '$(cat "$work/fstubs.err")', expected 2 and '$want'"
  fi
done
rm -f "$work/huge"

# A stub file that is a FIFO nobody writes: SIGTERM (SIGINT) while the server waits in open(2), after its
# workers started, ends it at once with 143 (130) and a message, without the ready line.
mkfifo "$work/stubs.fifo"
for sig in TERM INT; do
  "$SERVER" --port 0 --threads 1 --stubs "$work/stubs.fifo" >"$work/sigfifo.out" 2>"$work/sigfifo.err" &
  fpid=$!
  pids+=("$fpid")
  # Main thread, signal thread and the worker: the start is over and the open is under way.
  for i in $(seq 1 100); do
    [ "$(ls "/proc/$fpid/task" 2>/dev/null | wc -l)" -ge 3 ] && break
    sleep 0.05
  done
  sleep 0.2
  kill -"$sig" "$fpid"
  for i in $(seq 1 100); do
    kill -0 "$fpid" 2>/dev/null || break
    sleep 0.05
  done
  if kill -0 "$fpid" 2>/dev/null; then
    bad "SIG$sig during the start (stub file a FIFO): still running after 5 s"
    kill -9 "$fpid"
  fi
  set +e
  wait "$fpid"
  rc=$?
  set -e
  want_rc=$([ "$sig" = TERM ] && echo 143 || echo 130)
  want="cbench-server: stopped by a signal before it was ready"
  if [ "$rc" = "$want_rc" ] && [ "$(cat "$work/sigfifo.err")" = "$want" ] && [ ! -s "$work/sigfifo.out" ]; then
    ok
  else
    bad "SIG$sig during the start: exit status $rc, stderr '$(cat "$work/sigfifo.err")', expected $want_rc and '$want'"
  fi
done

# A key given twice is refused with its line; bytes of the input a terminal would act on are quoted as \xNN.
printf '[\n  {"match": {"path": "/a"}},\n  {"match": {"path": "/b", "path": "/c"}}\n]\n' >"$work/dup.json"
printf '[{"match": {"path": "/a", "x\\u001b]0;owned\\u0007": 1}}]\n' >"$work/esc.json"
for f in dup esc; do
  case $f in
    dup) want="cbench-server: $work/dup.json:3: column 33: duplicate object key near '\"path\"'" ;;
    esc) want="cbench-server: $work/esc.json:1: stubs[0].match.x\\x1b]0;owned\\x07: unknown_key: unknown field" ;;
  esac
  set +e
  timeout 10 "$SERVER" --port 0 --stubs "$work/$f.json" >"$work/$f.out" 2>"$work/$f.err"
  rc=$?
  set -e
  if [ "$rc" = 2 ] && [ "$(cat "$work/$f.err")" = "$want" ] && ! LC_ALL=C grep -q "$(printf '\033')" "$work/$f.err"; then
    ok
  else
    bad "stub file $f: exit status $rc, stderr '$(cat -v "$work/$f.err")', expected 2 and '$want'"
  fi
done

# Arguments quoted in messages get the same treatment.
set +e
timeout 10 "$SERVER" --port "$(printf '1\033[2J')" >"$work/escarg.out" 2>"$work/escarg.err"
rc=$?
set -e
want="cbench-server: --port takes an integer from 0 to 65535, not '1\\x1b[2J'"
if [ "$rc" = 2 ] && [ "$(head -n 1 "$work/escarg.err")" = "$want" ] && ! LC_ALL=C grep -q "$(printf '\033')" "$work/escarg.err"; then
  ok
else
  bad "--port with ESC: exit status $rc, stderr '$(head -n 1 "$work/escarg.err" | cat -v)', expected 2 and '$want'"
fi

# 20,000 stubs from one file (one route table, not one per stub): every one tried answers its own body.
awk 'BEGIN { printf "["; for (i = 0; i < 20000; i++) printf "%s{\"match\": {\"path\": \"/s/%d\"}, \"response\": {\"body\": \"s%d\"}}", (i ? ",\n" : ""), i, i; print "]" }' \
  >"$work/many.json"
start_server many --port 0 --threads 2 --stubs "$work/many.json"
for i in 0 1 9999 12345 19999; do
  body=$(curl -s "http://127.0.0.1:$PORT/s/$i")
  if [ "$body" = "s$i" ]; then ok; else bad "20,000 stubs: GET /s/$i answered '$body'"; fi
done
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/s/20000")
if [ "$code" = 404 ]; then ok; else bad "20,000 stubs: GET /s/20000 answered $code, expected 404"; fi
kill -TERM "$SPID"
wait "$SPID" || bad "20,000 stubs server: exit status $?"

# ---- the admin API (--admin-port; docs/routes.md "The admin API") ----
# Off by default: a server started without --admin-port prints one line only.
if [ "$(wc -l <"$work/many.out")" -ge 1 ] && ! grep -q "admin API" "$work/many.out"; then ok; else bad "admin API announced without --admin-port: $(cat "$work/many.out")"; fi
set +e
timeout 10 "$SERVER" --port 0 --admin-port 70000 >"$work/badadmin.out" 2>"$work/badadmin.err"
rc=$?
set -e
want="cbench-server: --admin-port takes an integer from 0 to 65535, not '70000'"
if [ "$rc" = 2 ] && [ "$(head -n 1 "$work/badadmin.err")" = "$want" ]; then ok; else bad "--admin-port 70000: exit status $rc, stderr '$(head -n 1 "$work/badadmin.err")'"; fi
# TLS flags without TLS (neither --tls nor --tls-port): a usage error, as the proxy's flags without their proxy,
# not a cleartext server that ignored them.
set +e
timeout 10 "$SERVER" --port 0 --tls-cert-file "$work/none.pem" --tls-key-file "$work/none.key" >"$work/notls.out" 2>"$work/notls.err"
rc=$?
set -e
want="cbench-server: --tls-cert-file, --tls-key-file and --tls-client-auth go with --tls or --tls-port"
if [ "$rc" = 2 ] && [ "$(head -n 1 "$work/notls.err")" = "$want" ] && [ ! -s "$work/notls.out" ]; then ok; else
  bad "--tls-cert-file without --tls: exit status $rc, stderr '$(head -n 1 "$work/notls.err")', expected 2 and '$want'"
fi
# An --admin-host that does not resolve is named as such (the data listener's --host resolved: it is not the
# one to blame).
set +e
timeout 10 "$SERVER" --port 0 --admin-host nosuch.invalid >"$work/badahost.out" 2>"$work/badahost.err"
rc=$?
set -e
want="cbench-server: --admin-host nosuch.invalid does not resolve: give an address literal (127.0.0.1, ::1) or a name the resolver knows"
if [ "$rc" = 2 ] && [ "$(cat "$work/badahost.err")" = "$want" ] && [ ! -s "$work/badahost.out" ]; then ok; else
  bad "--admin-host nosuch.invalid: exit status $rc, stderr '$(cat "$work/badahost.err")', expected 2 and '$want'"
fi

printf '[{"name": "ping", "match": {"method": "GET", "path": "/ping"}, "response": {"body": "pong"}, "expect": {"times": 1}}]\n' \
  >"$work/admin_stubs.json"
start_server admin --port 0 --threads 2 --admin-port 0 --stubs "$work/admin_stubs.json" --record-to "$work/rec.json"
line2=$(sed -n 2p "$work/admin.out")
if [[ "$line2" =~ ^cbench-server\ admin\ API\ on\ http://127\.0\.0\.1:([0-9]+)$ ]]; then ok; else bad "admin ready line: '$line2'"; fi
APORT=${BASH_REMATCH[1]:-0}
A="http://127.0.0.1:$APORT"
D="http://127.0.0.1:$PORT"
# adm METHOD PATH [BODY]: sets CODE and BODY (the admin API's answer).
adm() {
  local out
  if [ $# -ge 3 ]; then
    out=$(curl -s -X "$1" -H 'content-type: application/json' --data-binary "$3" -w '\n%{http_code}' "$A$2")
  else
    out=$(curl -s -X "$1" -w '\n%{http_code}' "$A$2")
  fi
  CODE=${out##*$'\n'}
  BODY=${out%$'\n'*}
}
expect_adm() { # expect_adm WHAT CODE BODY
  if [ "$CODE" = "$2" ] && [ "$BODY" = "$3" ]; then ok; else bad "admin $1: $CODE '$BODY', expected $2 '$3'"; fi
}
adm GET /stubs
expect_adm "GET /stubs (from --stubs)" 200 '[{"id":1,"name":"ping","path":"/ping","methods":["GET"],"priority":0,"status":200,"times":0,"hits":0,"spent":false,"expect":{"times":1}}]'
adm POST /verify
expect_adm "POST /verify, nothing arrived" 409 '{"ok":false,"problems":[{"problem":"no_request_arrived","stub":"GET /ping","id":1,"expected":{"times":1},"got":0}]}'
if [ "$(curl -s "$D/ping")" = pong ]; then ok; else bad "GET /ping on the data port"; fi
adm POST /verify
expect_adm "POST /verify, met" 200 '{"ok":true,"problems":[]}'
# The data port does not serve the admin API (its /stubs is a 404 like any unknown path).
code=$(curl -s -o /dev/null -w '%{http_code}' "$D/stubs")
if [ "$code" = 404 ]; then ok; else bad "GET /stubs on the data port: $code"; fi
adm POST /verify
expect_adm "POST /verify after a stray request" 409 '{"ok":false,"problems":[{"problem":"unexpected_request","method":"GET","path":"/stubs","query":"","seq":2,"status":404}]}'
adm POST /stubs '{"match": {"path": "/h2", "method": ["GET", "POST"]}, "response": {"status": 202, "headers": {"x-a": "1"}}}'
expect_adm "POST /stubs, one stub" 201 '{"ids":[2]}'
out=$(curl -s --http2-prior-knowledge -D - -o /dev/null "$D/h2" | tr -d '\r' | grep -E '^(HTTP|x-a)')
if [ "$out" = "HTTP/2 202 
x-a: 1" ]; then ok; else bad "a stub from the admin API over h2c: '$out'"; fi
adm GET "/requests?path=/h2"
if [[ "$CODE" = 200 && "$BODY" =~ ^\[\{\"seq\":3,.*\"proto\":\"h2c_prior\",.*\"method\":\"GET\",\"path\":\"/h2\",.*\"status\":202, ]]; then ok; else bad "GET /requests?path=/h2: $CODE '$BODY'"; fi
adm GET "/requests?since=2"
if [ "$CODE" = 200 ] && [ "$(grep -o '"seq":' <<<"$BODY" | wc -l)" = 1 ]; then ok; else bad "GET /requests?since=2: $CODE '$BODY'"; fi
# Bad input: 400 naming the field and why.
adm POST /stubs '{"match": {"path": "/x"'
expect_adm "bad JSON" 400 "{\"why\":\"bad_json\",\"message\":\"body:1: column 23: '}' expected near end of file\"}"
adm POST /stubs '{"match": {"path": "/x", "pathx": "/y"}}'
expect_adm "unknown field" 400 '{"field":"stubs[0].match.pathx","why":"unknown_key","message":"body:1: stubs[0].match.pathx: unknown_key: unknown field"}'
adm POST /stubs '[{"match": {"path": "/x"}}, {"match": {"path": "/x"}, "response": {"headers": {"x-b": "v\r\nset-cookie: y"}}}]'
expect_adm "engine-refused field" 400 '{"field":"stubs[1].response.headers.x-b","why":"control_char","value":"v\\r\\nset-cookie: y","message":"body:1: stubs[1].response.headers.x-b: control_char: \"v\\r\\nset-cookie: y\" (docs/routes.md)"}'
adm POST /stubs '{"match": {"path": "/x"}, "expect": {"times": -1}}'
expect_adm "bad expect" 400 '{"field":"stubs[0].expect.times","why":"out_of_range","message":"body:1: stubs[0].expect.times: out_of_range: must be an integer from 0 to 9223372036854775807"}'
adm GET "/requests?sinse=1"
expect_adm "unknown query parameter" 400 '{"field":"sinse","why":"unknown_key","message":"GET /requests takes path, method, route, stub, since and limit"}'
adm DELETE /stubs/x
expect_adm "DELETE /stubs/x" 400 '{"field":"id","why":"wrong_type","value":"x","message":"a stub id is a positive integer"}'
adm DELETE /stubs/99
expect_adm "DELETE /stubs/99" 404 '{"field":"id","why":"not_found","value":"99","message":"no such stub"}'
adm GET /nowhere
expect_adm "unknown endpoint" 404 '{"why":"not_found","message":"the admin API has /stubs, /stubs/{id}, /requests, /near-misses, /verify, /reset, /stats, /recorded, /recorded/save"}'
allow=$(curl -s -X PUT -D - -o /dev/null "$A/stubs" | tr -d '\r' | grep -E '^(HTTP|allow)')
if [ "$allow" = "HTTP/1.1 405 Method Not Allowed
allow: GET, HEAD, POST" ]; then ok; else bad "PUT /stubs: '$allow'"; fi
adm GET /near-misses
expect_adm "GET /near-misses" 200 '[{"seq":2,"method":"GET","path":"/stubs","query":"","near_misses":[{"name":"stub_2","id":2,"differs":["path"]},{"name":"ping","id":1,"differs":["path"]}]}]'
nm_note=$(curl -s -D - -o /dev/null "$A/near-misses" | tr -d '\r' | grep -ci '^x-cbench-note' || true)
if [ "$nm_note" = 0 ]; then ok; else bad "GET /near-misses still has an x-cbench-note header"; fi
adm GET /stats
if [[ "$CODE" = 200 && "$BODY" =~ \"requests\":3, && "$BODY" =~ \"ping\":1 && "$BODY" =~ \"not_found\":1 ]]; then ok; else bad "GET /stats: $CODE '$BODY'"; fi
# Recordings (docs/record.md): none without a proxy stub; saved to the --record-to file on request and at stop.
adm GET /recorded
expect_adm "GET /recorded" 200 $'{"stubs": [\n\n]}\n'
adm POST /recorded/save
expect_adm "POST /recorded/save" 200 "{\"saved\":0,\"file\":\"$work/rec.json\"}"
if [ "$(cat "$work/rec.json")" = $'{"stubs": [\n\n]}' ]; then ok; else bad "the saved recordings: '$(cat "$work/rec.json")'"; fi
rm -f "$work/rec.json"
adm DELETE /recorded
expect_adm "DELETE /recorded" 204 ''
adm PUT /recorded/save
expect_adm "PUT /recorded/save" 405 '{"why":"method_not_allowed","message":"see docs/routes.md, \"The admin API\""}'
adm GET /stats
if [[ "$BODY" =~ \"recorded\":0,\"recorded_duplicates\":0,\"record_skipped\":0 ]]; then ok; else bad "GET /stats: recorded counts: '$BODY'"; fi
adm DELETE /stubs/2
expect_adm "DELETE /stubs/2" 204 ''
adm DELETE /requests
expect_adm "DELETE /requests" 204 ''
adm GET /requests
expect_adm "GET /requests after DELETE" 200 '[]'
adm POST /reset
expect_adm "POST /reset" 204 ''
adm GET /stubs
expect_adm "GET /stubs after reset" 200 '[]'
if [ "$(curl -s "$D/hello")" = "Hello, Joe!" ]; then ok; else bad "fixture routes after reset"; fi
# The Python client (standard library only) drives every endpoint.
if python3 test/admin_client.py "$D" "$A"; then ok; else bad "test/admin_client.py"; fi
kill -TERM "$SPID"
wait "$SPID" || bad "admin server: exit status $?"
if [ -f "$work/rec.json" ] && grep -q "^cbench-server recorded 0 stubs to $work/rec.json$" "$work/admin.out"; then ok; else
  bad "--record-to at stop: $(cat "$work/admin.out")"; fi

# ---- proxy, record and replay from the shell (--proxy-to, --record-to; docs/record.md) ----
# A "real" service (stubs from a file), a recording proxy in front of it, curl through the proxy; the file is
# written at SIGTERM; the real service goes; a server started with --stubs on the file answers the same bytes
# (status line, headers but date, body). (Bad --proxy-to and --record-to arguments are checked above.)
printf '%s\n' '[{"name": "user", "match": {"method": "GET", "path": "/api/user", "query": {"id": "7"}},' \
  ' "response": {"headers": {"content-type": "application/json", "x-real": "yes"}, "body": {"json": {"id": 7}}}},' \
  ' {"name": "bin", "match": {"method": "GET", "path": "/api/bin"}, "response": {"body": {"bytes": 300}}},' \
  ' {"name": "made", "match": {"method": "POST", "path": "/api/made"}, "response": {"status": 201, "body": "made"}}]' \
  >"$work/real_stubs.json"
start_server real --port 0 --threads 1 --stubs "$work/real_stubs.json"
RPORT=$PORT
RPID=$SPID
start_server recorder --port 0 --threads 1 --proxy-to "http://127.0.0.1:$RPORT" --record-to "$work/cassette.json"
QPORT=$PORT
QPID=$SPID
# through FILE PORT ARGS...: curl's answer to FILE: the head (CRs and the date line dropped), then the body's
# bytes as they came (FILE.b holds the body alone).
through() {
  local f=$1 port=$2
  shift 2
  curl -s -D "$f.h" -o "$f.b" "$@" "http://127.0.0.1:$port/$(cat "$work/through_path")" || true
  { tr -d '\r' <"$f.h" | grep -av '^date: '; cat "$f.b"; } >"$f"
}
i=0
for req in "api/user?id=7" "api/bin" "api/user?id=7" "api/none"; do
  i=$((i + 1))
  printf '%s' "$req" >"$work/through_path"
  through "$work/rec$i" "$QPORT"
done
printf '%s' "api/made" >"$work/through_path"
through "$work/rec5" "$QPORT" -X POST --data-binary 'x=1'
if head -n 1 "$work/rec1" | grep -q '^HTTP/1.1 200 OK$' && grep -q '^x-real: yes$' "$work/rec1" && [ "$(tail -c 8 "$work/rec1")" = '{"id":7}' ]; then ok; else bad "proxied GET /api/user: $(cat "$work/rec1")"; fi
if [ "$(wc -c <"$work/rec2.b")" = 300 ] && cmp -s "$work/rec2.b" <(head -c 300 "$work/exp/file_tiny"); then ok; else bad "proxied GET /api/bin: not the 300 generated body bytes"; fi
if head -n 1 "$work/rec4" | grep -q '^HTTP/1.1 404 '; then ok; else bad "proxied GET /api/none: $(head -n 1 "$work/rec4")"; fi
if head -n 1 "$work/rec5" | grep -q '^HTTP/1.1 201 '; then ok; else bad "proxied POST /api/made: $(head -n 1 "$work/rec5")"; fi
kill -TERM "$QPID"
wait "$QPID" || bad "recorder: exit status $?"
kill -TERM "$RPID"
wait "$RPID" || bad "real service: exit status $?"
# Four distinct exchanges (the repeated GET is one), in arrival order.
nrec=$(grep -o '"name": *"rec_[0-9]*"' "$work/cassette.json" | wc -l)
if [ "$nrec" = 4 ]; then ok; else bad "--record-to wrote $nrec recordings, expected 4: $(cat "$work/cassette.json")"; fi
start_server replay --port 0 --threads 1 --stubs "$work/cassette.json"
i=0
for req in "api/user?id=7" "api/bin" "api/user?id=7" "api/none"; do
  i=$((i + 1))
  printf '%s' "$req" >"$work/through_path"
  through "$work/rep$i" "$PORT"
  if cmp -s "$work/rec$i" "$work/rep$i"; then ok; else bad "replayed GET /$req differs: $(diff "$work/rec$i" "$work/rep$i" | head -n 5)"; fi
done
printf '%s' "api/made" >"$work/through_path"
through "$work/rep5" "$PORT" -X POST --data-binary 'x=1'
if cmp -s "$work/rec5" "$work/rep5"; then ok; else bad "replayed POST /api/made differs: $(diff "$work/rec5" "$work/rep5" | head -n 5)"; fi
kill -TERM "$SPID"
wait "$SPID" || bad "replay server: exit status $?"
# ---- an https upstream (--proxy-to https://, --proxy-ca; docs/proxy.md "https upstreams") ----
# A --tls server writes its made CA to a file (TMPDIR) and names it on its second line; a proxy verifying it with
# --proxy-ca answers through it, one without it gets the 502 of a failed verification, one with a CA file that
# holds no certificate does not start (exit 2, the field and why named).
TMPDIR=$work "$SERVER" --tls --port 0 --threads 1 >"$work/tlsup.out" 2>"$work/tlsup.err" &
TPID=$!
pids+=("$TPID")
for i in $(seq 1 200); do
  [ "$( { wc -l <"$work/tlsup.out"; } 2>/dev/null || echo 0)" -ge 2 ] && break
  kill -0 "$TPID" 2>/dev/null || break
  sleep 0.05
done
line=$(head -n 1 "$work/tlsup.out")
if ! [[ "$line" =~ ^cbench-server\ listening\ on\ https://127\.0\.0\.1:([0-9]+)\ with ]]; then
  echo "e2e: the TLS upstream did not start: $(cat "$work/tlsup.out" "$work/tlsup.err")" >&2
  exit 1
fi
TPORT=${BASH_REMATCH[1]}
TCA=$(sed -n 's/^cbench-server TLS CA in //p' "$work/tlsup.out")
start_server httpsproxy --port 0 --threads 1 --proxy-to "https://127.0.0.1:$TPORT" --proxy-ca "$TCA"
got=$(curl -s "http://127.0.0.1:$PORT/hello")
if [ "$got" = "Hello, Joe!" ]; then ok; else bad "GET /hello through an https upstream: '$got'"; fi
got=$(curl -s --data-binary 'over tls' "http://127.0.0.1:$PORT/echo")
if [ "$got" = "over tls" ]; then ok; else bad "POST /echo through an https upstream: '$got'"; fi
kill -TERM "$SPID"
wait "$SPID" >/dev/null || bad "https proxy: exit status $?"
if grep -q '^  proxy: requests 2, upstream connects 1, reused 1, 502 0, 504 0$' "$work/httpsproxy.out"; then ok; else
  bad "https proxy's counts at exit: $(grep proxy: "$work/httpsproxy.out")"; fi
# h2 by ALPN to the same upstream (--proxy-protocol h2c with an https:// URL): one stream each, one connection.
start_server httpsh2 --port 0 --threads 1 --proxy-to "https://127.0.0.1:$TPORT" --proxy-ca "$TCA" --proxy-protocol h2c
got=$(curl -s "http://127.0.0.1:$PORT/hello")
if [ "$got" = "Hello, Joe!" ]; then ok; else bad "GET /hello through an https upstream over h2: '$got'"; fi
got=$(curl -s --data-binary 'over h2' "http://127.0.0.1:$PORT/echo")
if [ "$got" = "over h2" ]; then ok; else bad "POST /echo through an https upstream over h2: '$got'"; fi
kill -TERM "$SPID"
wait "$SPID" >/dev/null || bad "https h2 proxy: exit status $?"
if grep -q '^  proxy: requests 2, upstream connects 1, reused 1, 502 0, 504 0$' "$work/httpsh2.out"; then ok; else
  bad "https h2 proxy's counts at exit: $(grep proxy: "$work/httpsh2.out")"; fi
start_server httpsnoca --port 0 --threads 1 --proxy-to "https://127.0.0.1:$TPORT"
curl -s -o "$work/noca.body" -w '%{http_code}' "http://127.0.0.1:$PORT/hello" >"$work/noca.code" || true
want="cbench proxy: tls handshake failed: certificate verify failed: unable to get local issuer certificate (https://127.0.0.1:$TPORT)"
if [ "$(cat "$work/noca.code")" = 502 ] && [ "$(cat "$work/noca.body")" = "$want" ]; then ok; else
  bad "https upstream without its CA: $(cat "$work/noca.code") '$(cat "$work/noca.body")'"; fi
kill -TERM "$SPID"
wait "$SPID" >/dev/null || bad "https proxy without the CA: exit status $?"
printf 'not a certificate\n' >"$work/nocert.pem"
set +e
timeout 10 "$SERVER" --port 0 --proxy-to "https://127.0.0.1:$TPORT" --proxy-ca "$work/nocert.pem" >"$work/badca.out" 2>"$work/badca.err"
rc=$?
set -e
if [ "$rc" = 2 ] && grep -qF "response.proxy: bad_ca \"$work/nocert.pem\"" "$work/badca.err"; then ok; else
  bad "--proxy-ca without a certificate: exit status $rc, stderr: $(cat "$work/badca.err")"; fi
# h2 over TLS from curl, two transfers 2 s apart on one connection: between them the idle session is parked at
# the rest step and made again by the second request (docs/tls.md "Idle connections").
curl -s --http2 --cacert "$TCA" --rate 30/m -w '%{http_version} %{http_code} %{num_connects}\n' \
  -o "$work/park1.body" "https://localhost:$TPORT/hello" -o "$work/park2.body" "https://localhost:$TPORT/json" \
  >"$work/park.codes" 2>&1 || true
if [ "$(tr '\n' ' ' <"$work/park.codes")" = "2 200 1 2 200 0 " ] && [ "$(cat "$work/park1.body")" = "Hello, Joe!" ] &&
  [ "$(cat "$work/park2.body")" = '{"message":"Hello, Joe!"}' ]; then ok; else
  bad "h2 over TLS across a parked session: $(cat "$work/park.codes") '$(cat "$work/park1.body")' '$(cat "$work/park2.body")'"; fi
kill -TERM "$TPID"
wait "$TPID" || bad "TLS upstream: exit status $?"


# ---- an h2c upstream (--proxy-protocol h2c; docs/proxy.md, "h2c upstreams") ----
# The real service again, a proxy speaking prior-knowledge HTTP/2 to it; curl over HTTP/1.1 and over h2c to the
# proxy gets what the service answers itself (head but date, body); both ride one upstream connection.
start_server real2 --port 0 --threads 1 --stubs "$work/real_stubs.json"
RPORT=$PORT
RPID=$SPID
start_server h2proxy --port 0 --threads 1 --proxy-to "http://127.0.0.1:$RPORT" --proxy-protocol h2c
printf '%s' "api/user?id=7" >"$work/through_path"
through "$work/h2d" "$RPORT"
through "$work/h2p" "$PORT"
if cmp -s "$work/h2d" "$work/h2p" && grep -q '^x-real: yes$' "$work/h2p"; then ok; else
  bad "GET through the h2c upstream differs: $(diff "$work/h2d" "$work/h2p" | head -n 5)"; fi
through "$work/h2q" "$PORT" --http2-prior-knowledge
if head -n 1 "$work/h2q" | grep -q '^HTTP/2 200' && [ "$(cat "$work/h2q.b")" = '{"id":7}' ]; then ok; else
  bad "h2c client through the h2c upstream: $(head -c 300 "$work/h2q")"; fi
kill -TERM "$SPID"
wait "$SPID" || bad "h2c proxy: exit status $?"
if grep -q '^  proxy: requests 2, upstream connects 1, reused 1, 502 0, 504 0$' "$work/h2proxy.out"; then ok; else
  bad "h2c proxy counters: $(grep proxy: "$work/h2proxy.out")"; fi

# --proxy-pipeline 4 (docs/proxy.md, "Pipelining"): the catch-all takes it, and curl gets what the service answers.
start_server pipeproxy --port 0 --threads 1 --proxy-to "http://127.0.0.1:$RPORT" --proxy-pipeline 4
through "$work/pipep" "$PORT"
if cmp -s "$work/h2d" "$work/pipep"; then ok; else
  bad "GET through --proxy-pipeline 4 differs: $(diff "$work/h2d" "$work/pipep" | head -n 5)"; fi
# 10 h2load clients at once (h2load_check): every request answered, and the requests shared upstream connections.
# At most 10 are in flight, and a connection is opened only when the pipelining one holds 4 and none is idle, so
# fewer than 10 are ever opened (up to one per client without the option).
BASE=http://127.0.0.1:$PORT h2load_check 2000 /hello
kill -TERM "$SPID"
wait "$SPID" || bad "pipelining proxy: exit status $?"
read -r preq pcon preu < <(sed -n 's/^  proxy: requests \([0-9]*\), upstream connects \([0-9]*\), reused \([0-9]*\), 502 0, 504 0$/\1 \2 \3/p' \
  "$work/pipeproxy.out")
if [ "${preq:-0}" = 2001 ] && [ $((pcon + preu)) = 2001 ] && [ "$pcon" -lt 10 ]; then ok; else
  bad "pipelining proxy counters: $(grep proxy: "$work/pipeproxy.out")"; fi
kill -TERM "$RPID"
wait "$RPID" || bad "real service: exit status $?"
echo "e2e: $passed passed, $failed failed"
[ "$failed" = 0 ]
