#!/usr/bin/env bash
# End-to-end test of TLS client certificates and session resumption in cbench-server (issue 24, docs/tls.md):
# --tls-client-auth none|request|require with curl (exit status and message, or the status), the client
# certificate and key cbench-server writes, a certificate of another CA; resumption with openssl s_client
# (-sess_out, then -sess_in: "Reused") over TLS 1.3 and 1.2, and the handshakes cbench-server counts at exit;
# a bad --tls-client-auth value. Everything runs against 127.0.0.1.
#
#   CBENCH_SERVER=build/cbench-server test/tls_auth_e2e.sh
set -euo pipefail

SERVER=${CBENCH_SERVER:-build/cbench-server}
[ -x "$SERVER" ] || { echo "tls-auth-e2e: $SERVER is not built" >&2; exit 1; }
for tool in curl openssl; do
  command -v "$tool" >/dev/null || { echo "tls-auth-e2e: $tool is not installed (scripts/deps.sh test)" >&2; exit 1; }
done

NAME=tls-auth-e2e
# shellcheck source=test/tls_lib.sh
. "$(dirname "$0")/tls_lib.sh"

# start NAME ARGS...: cbench-server --tls; sets PORT, SPID, CA, and CERT and KEY (empty without client auth).
start() {
  local name=$1
  shift
  launch "$name" 1 --tls --port 0 --threads 2 "$@"
  ready "$name" '^cbench-server listening on https://127\.0\.0\.1:([0-9]+) with 2 threads$'
  PORT=${BASH_REMATCH[1]}
  sleep 0.05
  CA=$(sed -n 's/^cbench-server TLS CA in //p' "$work/$name.out")
  CERT=$(sed -n 's/^cbench-server TLS client certificate in \(.*\), its key in .*/\1/p' "$work/$name.out")
  KEY=$(sed -n 's/^cbench-server TLS client certificate in .*, its key in //p' "$work/$name.out")
}

# stop NAME: SIGTERM, exit 0; the stats cbench-server prints at exit are in $work/NAME.out.
stop() {
  kill -TERM "$SPID"
  local rc=0
  wait "$SPID" || rc=$?
  check "$1: graceful stop exit status" 0 "$rc"
}

# get ARGS...: curl GET /hello; "exit:status" or "exit:the reason OpenSSL gave curl".
get() {
  local rc=0 code
  code=$(curl -sS --max-time 10 --cacert "$CA" -o /dev/null -w '%{http_code}' "$@" "https://localhost:$PORT/hello" \
    2>"$work/curl.err") || rc=$?
  if [ "$rc" = 0 ]; then echo "0:$code"; else
    echo "$rc:$(grep -o 'tlsv13 alert certificate required\|sslv3 alert handshake failure\|tlsv1 alert unknown ca' "$work/curl.err" | head -n 1)"
  fi
}

# A certificate and key of a CA the server does not know.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=stranger \
  -keyout "$work/stranger.key" -out "$work/stranger.pem" 2>/dev/null

# ---- require ----
start require --tls-client-auth require
check "require: a client certificate file is named" 1 "$([ -s "$CERT" ] && [ -s "$KEY" ] && echo 1 || echo 0)"
check "require: it is a client certificate" "TLS Web Client Authentication" \
  "$(openssl x509 -in "$CERT" -noout -ext extendedKeyUsage 2>/dev/null | sed -n 2p | sed 's/^ *//')"
check "require: its subject" "subject=CN = cbench client" "$(openssl x509 -in "$CERT" -noout -subject)"
# TLS 1.3: curl's handshake ends first, then it reads the alert instead of a response (exit 56).
check "require, no certificate, h1" "56:tlsv13 alert certificate required" "$(get --http1.1)"
check "require, no certificate, h2" "56:tlsv13 alert certificate required" "$(get --http2)"
# TLS 1.2: the handshake fails (exit 35).
check "require, no certificate, TLS 1.2" "35:sslv3 alert handshake failure" "$(get --tls-max 1.2)"
check "require, with the certificate, h1" "0:200" "$(get --http1.1 --cert "$CERT" --key "$KEY")"
check "require, with the certificate, h2" "0:200" "$(get --http2 --cert "$CERT" --key "$KEY")"
check "require, with the certificate, TLS 1.2" "0:200" "$(get --tls-max 1.2 --cert "$CERT" --key "$KEY")"
check "require, a certificate of another CA" "56:tlsv1 alert unknown ca" \
  "$(get --cert "$work/stranger.pem" --key "$work/stranger.key")"
cert_file=$CERT key_file=$KEY
stop require
check "require: three handshakes counted, the refused ones not" "  tls handshakes: full 3, resumed 0" \
  "$(grep '^  tls handshakes:' "$work/require.out")"
check "the client certificate files are removed at exit" 0 "$([ -e "$cert_file" ] || [ -e "$key_file" ] && echo 1 || echo 0)"

# ---- request ----
start request --tls-client-auth request
check "request, no certificate" "0:200" "$(get)"
check "request, with the certificate" "0:200" "$(get --cert "$CERT" --key "$KEY")"
check "request, a certificate of another CA" "56:tlsv1 alert unknown ca" \
  "$(get --cert "$work/stranger.pem" --key "$work/stranger.key")"
stop request

# ---- none (the default) ----
start none
check "none: no client certificate written" "" "$CERT"
check "none, no certificate" "0:200" "$(get)"
check "none, a certificate of another CA (not asked for)" "0:200" \
  "$(get --cert "$work/stranger.pem" --key "$work/stranger.key")"

# ---- resumption: openssl s_client saves the session, then offers it ----
# Each s_client sends a request that asks the server to close, and reads to the end (-ign_eof): TLS 1.3 tickets
# come after the handshake, before the response, so the first one has its ticket when it saves the session.
resume() { # resume VERSION -> "New Reused"
  local v=$1 first second req='GET /hello HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n'
  first=$(printf "$req" | openssl s_client -connect "127.0.0.1:$PORT" -servername localhost -CAfile "$CA" "-$v" \
    -ign_eof -sess_out "$work/sess.$v" 2>/dev/null | grep -o '^New\|^Reused' | head -n 1)
  second=$(printf "$req" | openssl s_client -connect "127.0.0.1:$PORT" -servername localhost -CAfile "$CA" "-$v" \
    -ign_eof -sess_in "$work/sess.$v" 2>/dev/null | grep -o '^New\|^Reused' | head -n 1)
  echo "$first $second"
}
check "resumption, TLS 1.3 (a ticket)" "New Reused" "$(resume tls1_3)"
check "resumption, TLS 1.2 (a ticket)" "New Reused" "$(resume tls1_2)"
stop none
# Two gets, two full handshakes and two resumed ones.
check "none: handshakes counted" "  tls handshakes: full 4, resumed 2" "$(grep '^  tls handshakes:' "$work/none.out")"

# ---- a bad value: usage and exit 2 ----
rc=0
"$SERVER" --tls --port 0 --tls-client-auth maybe >/dev/null 2>"$work/bad.err" || rc=$?
check "--tls-client-auth maybe: exit 2" 2 "$rc"
check "its message names the values" \
  "cbench-server: --tls-client-auth takes one of none|request|require (default none), not 'maybe'" \
  "$(head -n 1 "$work/bad.err")"

echo "tls-auth-e2e: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
