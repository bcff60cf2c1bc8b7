#!/usr/bin/env bash
# End-to-end test of cbench-server over TLS (issue 24) with real clients: curl over HTTP/1.1 and h2 (ALPN), with
# the CA the server made at start and printed; nghttp and h2load over TLS; bodies compared byte for byte with
# files made here; the bad-certificate identities chosen by SNI (curl's exit status and message); a user's
# certificate and key made with openssl(1); bad --tls-* arguments. Everything runs against 127.0.0.1.
#
#   CBENCH_SERVER=build/cbench-server test/tls_e2e.sh
#   CBENCH_TLS_LOAD=N  requests per h2load run (default 4000)
set -euo pipefail

SERVER=${CBENCH_SERVER:-build/cbench-server}
LOAD=${CBENCH_TLS_LOAD:-4000}
[ -x "$SERVER" ] || { echo "tls-e2e: $SERVER is not built" >&2; exit 1; }
for tool in curl nghttp h2load openssl; do
  command -v "$tool" >/dev/null || { echo "tls-e2e: $tool is not installed (scripts/deps.sh test)" >&2; exit 1; }
done

NAME=tls-e2e
# shellcheck source=test/tls_lib.sh
. "$(dirname "$0")/tls_lib.sh"

# start_tls NAME ARGS...: starts the server with --tls, waits for the ready line (https) and, when the server made
# its CA, the line naming its file; sets PORT, SPID and CA (empty without one).
start_tls() {
  local name=$1
  shift
  launch "$name" 1 --tls --port 0 --threads 2 "$@"
  ready "$name" '^cbench-server listening on https://127\.0\.0\.1:([0-9]+) with 2 threads$'
  PORT=${BASH_REMATCH[1]}
  sleep 0.05
  CA=$(sed -n 's/^cbench-server TLS CA in //p' "$work/$name.out")
}

stop() { # stop: SIGTERM, a graceful stop, exit 0
  kill -TERM "$SPID"
  local rc=0
  wait "$SPID" || rc=$?
  check "graceful stop exit status" 0 "$rc"
}

# ---- expected bodies ----
for ((i = 0; i < 251; i++)); do printf "\\$(printf %03o "$i")"; done >"$work/period"
cp "$work/period" "$work/grow"
while [ "$(stat -c %s "$work/grow")" -lt 5242880 ]; do
  cat "$work/grow" "$work/grow" >"$work/grow2"
  mv "$work/grow2" "$work/grow"
done
head -c 102400 "$work/grow" >"$work/file_small"
head -c 5242880 "$work/grow" >"$work/file_big"
rm -f "$work/grow"
head -c 200000 /dev/urandom >"$work/upload"

# ---- the made CA ----
start_tls made
check "the CA file is named on the second line" 1 "$([ -s "$CA" ] && echo 1 || echo 0)"
check "the CA is a CA certificate" "CA:TRUE" "$(openssl x509 -in "$CA" -noout -ext basicConstraints 2>/dev/null | grep -o 'CA:TRUE' || true)"
URL=https://localhost:$PORT
c() { curl -sS --max-time 20 --cacert "$CA" "$@"; }

for v in 1.1 2; do
  flag=--http1.1
  [ "$v" = 2 ] && flag=--http2
  check "h$v /hello" "Hello, Joe!" "$(c $flag "$URL/hello")"
  check "h$v version (ALPN)" "$v" "$(c $flag -o /dev/null -w '%{http_version}' "$URL/hello")"
  check "h$v 127.0.0.1 (an IP in the leaf)" "200" "$(c $flag -o /dev/null -w '%{http_code}' "https://127.0.0.1:$PORT/hello")"
  c $flag -o "$work/got_small" "$URL/file/small"
  check "h$v /file/small bytes" ok "$(cmp -s "$work/got_small" "$work/file_small" && echo ok || echo differ)"
  c $flag -o "$work/got_big" "$URL/file/big"
  check "h$v /file/big bytes (no sendfile under TLS: read and written)" ok \
    "$(cmp -s "$work/got_big" "$work/file_big" && echo ok || echo differ)"
  c $flag --data-binary "@$work/upload" -H 'content-type: application/octet-stream' -o "$work/echoed" "$URL/echo"
  check "h$v /echo of 200,000 bytes" ok "$(cmp -s "$work/echoed" "$work/upload" && echo ok || echo differ)"
  check "h$v /stream/small length" 6400 "$(c $flag "$URL/stream/small" | wc -c)"
  check "h$v 404" 404 "$(c $flag -o /dev/null -w '%{http_code}' "$URL/nothing")"
done

# Without the CA a client refuses the server (curl: 60, "self-signed certificate in certificate chain").
rc=0
curl -sS --max-time 10 -o /dev/null "$URL/hello" 2>"$work/noca.err" || rc=$?
check "curl without the CA: exit 60" 60 "$rc"

# nghttp: h2 by ALPN.
out=$(nghttp -v "$URL/hello" 2>&1 || true)
check "nghttp negotiates h2" 1 "$(grep -c 'The negotiated protocol: h2' <<<"$out" || true)"
check "nghttp body" 1 "$(grep -c '^Hello, Joe!\[' <<<"$out" || true)" # the body, then nghttp's next log line

# h2load over TLS: h2 (ALPN) with 10 streams per connection, and HTTP/1.1; no request fails.
out=$(h2load -n "$LOAD" -c 10 -m 10 "$URL/hello" 2>&1 || true)
check "h2load h2 over TLS" 1 "$(grep -c "requests: $LOAD total, $LOAD started, $LOAD done, $LOAD succeeded, 0 failed" <<<"$out" || true)"
check "h2load's protocol" 1 "$(grep -c 'Application protocol: h2' <<<"$out" || true)"
out=$(h2load --h1 -n "$LOAD" -c 10 "$URL/hello" 2>&1 || true)
check "h2load http/1.1 over TLS" 1 "$(grep -c "requests: $LOAD total, $LOAD started, $LOAD done, $LOAD succeeded, 0 failed" <<<"$out" || true)"

# The bad-certificate identities, by SNI: every name resolves to 127.0.0.1 (--resolve), the CA is trusted, and
# each leaf has exactly one flaw. curl's exit status and the reason OpenSSL gives it.
sni() { # sni NAME -> "exit:reason"
  local rc=0
  curl -sS --max-time 10 --cacert "$CA" --resolve "$1:$PORT:127.0.0.1" -o /dev/null "https://$1:$PORT/hello" \
    2>"$work/sni.err" || rc=$?
  echo "$rc:$(grep -o 'certificate has expired\|certificate is not yet valid\|no alternative certificate subject name matches\|self-signed certificate\|unable to get local issuer certificate\|EE certificate key too weak' "$work/sni.err" | head -n 1)"
}
check "expired.localhost" "60:certificate has expired" "$(sni expired.localhost)"
check "not-yet-valid.localhost" "60:certificate is not yet valid" "$(sni not-yet-valid.localhost)"
check "wrong-host.localhost" "60:no alternative certificate subject name matches" "$(sni wrong-host.localhost)"
check "self-signed.localhost" "60:self-signed certificate" "$(sni self-signed.localhost)"
check "untrusted-root.localhost" "60:unable to get local issuer certificate" "$(sni untrusted-root.localhost)"
check "missing-intermediate.localhost" "60:unable to get local issuer certificate" "$(sni missing-intermediate.localhost)"
check "weak-key.localhost" "60:EE certificate key too weak" "$(sni weak-key.localhost)"
check "any other name gets the default leaf (and fails the name check)" \
  "60:no alternative certificate subject name matches" "$(sni other.localhost)"
ca_file=$CA
stop
check "the CA file is removed at exit" 0 "$([ -e "$ca_file" ] && echo 1 || echo 0)"

# ---- a user's certificate and key ----
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=localhost \
  -addext subjectAltName=DNS:localhost -keyout "$work/user.key" -out "$work/user.pem" 2>/dev/null
start_tls user --tls-cert-file "$work/user.pem" --tls-key-file "$work/user.key"
check "no CA line with the user's certificate" "" "$CA"
check "user certificate: h2" "Hello, Joe!" "$(curl -sS --max-time 10 --cacert "$work/user.pem" --http2 "https://localhost:$PORT/hello")"
stop

# ---- a TLS port beside the cleartext one (--tls-port) ----
# start_both NAME ARGS...: cbench-server --port 0 --tls-port 0 ARGS; sets PORT (cleartext), TPORT, SPID, CA and
# KTLS (the kernel TLS line).
start_both() {
  local name=$1
  shift
  launch "$name" 3 --port 0 --tls-port 0 "$@"
  ready "$name" '^cbench-server listening on http://127\.0\.0\.1:([0-9]+) with [0-9]+ threads?, TLS on https://127\.0\.0\.1:([0-9]+)$'
  PORT=${BASH_REMATCH[1]}
  TPORT=${BASH_REMATCH[2]}
  CA=$(sed -n 's/^cbench-server TLS CA in //p' "$work/$name.out")
  KTLS=$(sed -n 's/^cbench-server kernel TLS //p' "$work/$name.out")
}
# The stats line about TLS of a stopped server.
tls_stats() { sed -n 's/^  tls: //p' "$work/$1.out"; }
if grep -qw tls /proc/sys/net/ipv4/tcp_available_ulp 2>/dev/null; then kernel_tls=1; else kernel_tls=0; fi

start_both both --threads 2
check "both: the CA line" 1 "$([ -s "$CA" ] && echo 1 || echo 0)"
if [ "$kernel_tls" = 0 ]; then
  check "both: kernel TLS off, and why" \
    "off: the kernel offers no tls ULP (/proc/sys/net/ipv4/tcp_available_ulp does not list tls: modprobe tls)" "$KTLS"
else
  check "both: kernel TLS tried" "tried after each handshake (the kernel offers the tls ULP)" "$KTLS"
fi
check "both: cleartext /hello" "Hello, Joe!" "$(curl -sS --max-time 10 "http://127.0.0.1:$PORT/hello")"
check "both: cleartext h2c" 2 "$(curl -sS --max-time 10 --http2-prior-knowledge -o /dev/null -w '%{http_version}' "http://127.0.0.1:$PORT/hello")"
for v in 1.1 2; do
  flag=--http1.1
  [ "$v" = 2 ] && flag=--http2
  check "both: h$v over the TLS port" "Hello, Joe!" "$(c $flag "https://localhost:$TPORT/hello")"
  check "both: h$v version (ALPN)" "$v" "$(c $flag -o /dev/null -w '%{http_version}' "https://localhost:$TPORT/hello")"
  c $flag -o "$work/got_big" "https://localhost:$TPORT/file/big"
  check "both: h$v /file/big bytes over the TLS port" ok "$(cmp -s "$work/got_big" "$work/file_big" && echo ok || echo differ)"
done
rc=0
curl -sS --max-time 10 --cacert "$CA" -o /dev/null "https://localhost:$PORT/hello" 2>/dev/null || rc=$?
check "both: TLS on the cleartext port fails (curl 35)" 35 "$rc"
rc=0
curl -sS --max-time 10 -o /dev/null "http://127.0.0.1:$TPORT/hello" 2>/dev/null || rc=$?
check "both: cleartext on the TLS port gets no answer (curl 52 or 56, was $rc)" 1 \
  "$([ "$rc" = 52 ] || [ "$rc" = 56 ] && echo 1 || echo 0)"
stop
check "both: the failed handshake counted" "handshakes failed 1, refused 0; kernel TLS 0" "$(tls_stats both)"

# --tls-max-handshakes 1 on one worker: a connection that sends nothing holds the one handshake; the next TLS
# client is closed at once (curl 35) and counted; the cleartext port is served; once the holder leaves, TLS is
# served again.
start_both bound --threads 1 --tls-max-handshakes 1
exec 3<>"/dev/tcp/127.0.0.1/$TPORT"
sleep 0.2
rc=0
curl -sS --max-time 10 --cacert "$CA" -o /dev/null "https://localhost:$TPORT/hello" 2>/dev/null || rc=$?
check "bound: over --tls-max-handshakes, closed at once (curl 35)" 35 "$rc"
check "bound: the cleartext port is served meanwhile" "Hello, Joe!" "$(curl -sS --max-time 10 "http://127.0.0.1:$PORT/hello")"
exec 3>&-
sleep 0.2
check "bound: served once the holder left" "Hello, Joe!" "$(c "https://localhost:$TPORT/hello")"
stop
check "bound: one refused, the holder failed" "handshakes failed 1, refused 1; kernel TLS 0" "$(tls_stats bound)"

# A kernel said to offer the tls ULP (a file that lists it): the server asks OpenSSL for kernel TLS; where the real
# kernel has no tls module, each connection falls back to OpenSSL's record layer and is served the same.
printf 'mptcp tls\n' >"$work/ulp"
CBENCH_KTLS_ULP_FILE=$work/ulp start_both ktls --threads 1
check "ktls: tried" "tried after each handshake (the kernel offers the tls ULP)" "$KTLS"
c -o "$work/got_big" "https://localhost:$TPORT/file/big"
check "ktls: /file/big bytes" ok "$(cmp -s "$work/got_big" "$work/file_big" && echo ok || echo differ)"
stop
check "ktls: connections that went to the kernel" "handshakes failed 0, refused 0; kernel TLS $kernel_tls" "$(tls_stats ktls)"

# ---- bad arguments: usage and exit 2 ----
rc=0
"$SERVER" --port 0 --tls-port 65536 >/dev/null 2>"$work/bad.err" || rc=$?
check "--tls-port 65536: exit 2" 2 "$rc"
check "its message" "cbench-server: --tls-port takes an integer from 0 to 65535, not '65536'" "$(head -n 1 "$work/bad.err")"
rc=0
"$SERVER" --port 0 --tls-max-handshakes 0 >/dev/null 2>"$work/bad.err" || rc=$?
check "--tls-max-handshakes 0: exit 2" 2 "$rc"

rc=0
"$SERVER" --tls --port 0 --tls-cert-file "$work/missing.pem" --tls-key-file "$work/user.key" >/dev/null 2>"$work/bad.err" || rc=$?
check "a missing certificate file: exit 2" 2 "$rc"
check "its message names the file" 1 "$(grep -c 'missing.pem' "$work/bad.err" || true)"
rc=0
"$SERVER" --tls --port 0 --tls-cert-file "$work/user.pem" --tls-key-file "$work/user.pem" >/dev/null 2>"$work/bad.err" || rc=$?
check "a certificate given as the key: exit 2" 2 "$rc"

# Clients that close after their last answer, with or without close_notify (curl, h2load over h2 and HTTP/1.1),
# reset nothing: a client that sent close_notify and closed answers our close_notify with a reset, and OpenSSL 3
# calls an end without close_notify an error; neither is a reset of an exchange.
start_tls closes
for i in 1 2 3; do
  curl -sS --cacert "$CA" -o /dev/null "https://localhost:$PORT/hello" || true
  curl -sS --http2 --cacert "$CA" -o /dev/null "https://localhost:$PORT/hello" || true
done
h2load -n 200 -c 8 "https://localhost:$PORT/hello" >/dev/null 2>&1 || true
h2load --h1 -n 200 -c 8 "https://localhost:$PORT/hello" >/dev/null 2>&1 || true
stop
check "clients that closed: requests" 406 "$(sed -n 's/.*, requests \([0-9]*\),.*/\1/p' "$work/closes.out")"
check "clients that closed: no reset counted" "resets 0" "$(grep -o 'resets [0-9]*' "$work/closes.out")"

echo "tls-e2e: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
