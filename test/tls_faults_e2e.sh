#!/usr/bin/env bash
# End-to-end test of the TLS faults (issue 24, docs/faults.md "TLS faults") with curl: reads the table between
# <!-- tls-outcomes --> and <!-- /tls-outcomes --> in docs/faults.md and asserts every cell: curl's exit code
# and a piece of its message (for exit 0, the status) over HTTP/1.1 and h2 against `cbench-server --tls`, and
# the status of /fault/ on a cleartext server (HTTP/1.1 and h2c prior knowledge). Then: the TLS server still
# answers, and stops gracefully. Everything runs against 127.0.0.1.
#
#   CBENCH_SERVER=build/cbench-server test/tls_faults_e2e.sh
set -euo pipefail

SERVER=${CBENCH_SERVER:-build/cbench-server}
DOC=${CBENCH_FAULTS_DOC:-docs/faults.md}
[ -x "$SERVER" ] || { echo "tls-faults-e2e: $SERVER is not built" >&2; exit 1; }
command -v curl >/dev/null || { echo "tls-faults-e2e: curl is not installed (scripts/deps.sh test)" >&2; exit 1; }

NAME=tls-faults-e2e
# shellcheck source=test/tls_lib.sh
. "$(dirname "$0")/tls_lib.sh"

# start NAME ARGS...: starts a server, waits for its ready line; sets PORT, SPID and CA (empty without TLS).
start() {
  local name=$1
  shift
  launch "$name" 1 --port 0 --threads 2 "$@"
  ready "$name" '^cbench-server listening on https?://127\.0\.0\.1:([0-9]+) with 2 threads$'
  PORT=${BASH_REMATCH[1]}
  sleep 0.05
  CA=$(sed -n 's/^cbench-server TLS CA in //p' "$work/$name.out")
}

start tls --tls
TLS_PORT=$PORT TLS_PID=$SPID TLS_CA=$CA
start clear
CLEAR_PORT=$PORT CLEAR_PID=$SPID

# The table: every line between the markers after the header and its rule.
rows=$(sed -n '/^<!-- tls-outcomes -->$/,/^<!-- \/tls-outcomes -->$/p' "$DOC" | grep '^| ' | tail -n +3)
[ -n "$rows" ] || { echo "tls-faults-e2e: no table between <!-- tls-outcomes --> markers in $DOC" >&2; exit 1; }

unquote() { sed 's/^ *`\(.*\)` *$/\1/; s/^ *//; s/ *$//' <<<"$1"; }

# outcome TARGET MAXTIME FLAG -> "exit message-or-status" where the cell expects a message or a status.
run_curl() {
  local target=$1 m=$2 flag=$3 rc=0 url args=()
  if [[ "$target" == /* ]]; then
    url="https://localhost:$TLS_PORT$target"
  else
    url="https://$target:$TLS_PORT/hello"
    args=(--resolve "$target:$TLS_PORT:127.0.0.1")
  fi
  curl -sS -m "$m" --cacert "$TLS_CA" "$flag" "${args[@]}" -o /dev/null -w '%{http_code}' "$url" \
    >"$work/curl.out" 2>"$work/curl.err" || rc=$?
  echo "$rc"
}

assert_cell() { # assert_cell NAME CELL RC
  local name=$1 cell=$2 rc=$3 code msg
  code=${cell%% *}
  msg=$(sed -n 's/^[0-9]* `\(.*\)`$/\1/p' <<<"$cell")
  check "$name: exit" "$code" "$rc"
  if [ "$code" = 0 ]; then
    check "$name: status" "$msg" "$(cat "$work/curl.out")"
  else
    # A cell may give alternatives ("`a` or `b`"): where curl's timer fires (in the TCP connect's or the TLS
    # handshake's wait) decides which words it prints for the same exit code.
    local alt found=0
    while IFS= read -r alt; do
      grep -qF -- "$alt" "$work/curl.err" && found=1
    done <<<"${msg//\` or \`/$'\n'}"
    if [ "$found" = 1 ]; then ok; else bad "$name: curl's message has none of '$msg': $(cat "$work/curl.err")"; fi
  fi
}

n=0
while IFS='|' read -r _ target m h1 h2 clear _; do
  target=$(unquote "$target")
  m=$(unquote "$m")
  h1=$(unquote "$h1")
  h2=$(unquote "$h2")
  clear=$(unquote "$clear")
  n=$((n + 1))
  rc=$(run_curl "$target" "$m" --http1.1)
  assert_cell "$target -m $m over HTTP/1.1" "$h1" "$rc"
  rc=$(run_curl "$target" "$m" --http2)
  assert_cell "$target -m $m over h2" "$h2" "$rc"
  if [ -n "$clear" ]; then
    check "$target in cleartext (HTTP/1.1)" "$clear" \
      "$(curl -s -m 10 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$CLEAR_PORT$target" || true)"
    check "$target in cleartext (h2c)" "$clear" \
      "$(curl -s -m 10 --http2-prior-knowledge -o /dev/null -w '%{http_code}' "http://127.0.0.1:$CLEAR_PORT$target" || true)"
  fi
done <<<"$rows"
check "rows read from $DOC" 1 "$([ "$n" -ge 9 ] && echo 1 || echo 0)"

# The server that misbehaved still serves, with the good leaf, over both protocols.
for flag in --http1.1 --http2; do
  check "after the faults, $flag /hello" "Hello, Joe!" \
    "$(curl -sS -m 10 --cacert "$TLS_CA" $flag "https://localhost:$TLS_PORT/hello")"
done

for p in "$TLS_PID" "$CLEAR_PID"; do
  kill -TERM "$p"
  rc=0
  wait "$p" || rc=$?
  check "graceful stop exit status" 0 "$rc"
done

echo "tls-faults-e2e: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
