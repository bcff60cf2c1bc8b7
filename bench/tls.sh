#!/usr/bin/env bash
# The TLS benchmark (issue 24, docs/bench.md "TLS"): cbench-server against nginx and h2o, all three serving the
# same certificate, over HTTP/1.1+TLS and h2+TLS, their handshakes per CPU-second, full and resumed, and the memory
# an idle TLS connection holds.
#
#   bench/tls.sh [--rounds R] [--seconds S] [--warmup S] [--conns C] [--servers cbench,nginx,h2o]
#                [--cases hello_h1,hello_h2,echo_h1,echo_h2,hs_full,hs_resumed,idle_h1,idle_h2]
#                [--tools h2load,cbench-load] [--idle-conns N] [--out FILE] [--smoke]
#
# The certificate: a CA and a leaf for localhost and 127.0.0.1 (ECDSA P-256) made here with openssl(1), the leaf
# signed by the CA; cbench-server gets them with --tls-cert-file/--tls-key-file, nginx and h2o in their configs.
# TLS 1.3 and TLS_AES_128_GCM_SHA256 are asked by the clients (h2load --tls13-ciphers, cbench-load
# --tls-version 1.3 --tls13-ciphers) and also set in nginx's config; every run's negotiated version and cipher is
# checked, and a run that got another is marked `!`.
#
# Cases: hello (GET /hello) and echo (POST /echo, 1 KiB) over HTTP/1.1+TLS (-m 1) and h2+TLS (-m 10), C
# connections, measured by h2load and by cbench-load (a column each); hs_full and hs_resumed: a new connection
# per request (cbench-load --new-conn; --no-resume for hs_full, each connection offering its last session for
# hs_resumed), measured by cbench-load only: h2load opens each client's connection once. nginx has no echo
# (its cells show `-`); h2o answers /echo with a small mruby handler, as in make bench.
#
# idle_h1 and idle_h2: memory per idle TLS connection. bench/tls_idle.py (python3's ssl, on CPU 1) opens 200
# connections (warm-up: the servers' first pages and caches), then N more (--idle-conns, default 2,000), each
# after a full TLS 1.3 handshake (ALPN http/1.1 or h2) and one GET /hello read in full, and holds them all open.
# The server's resident memory (VmRSS summed over its process group: nginx's master and worker) is read 2 s
# after the warm-up connections and 2 s after the N (time for cbench-server's rest step, CB__REST_MS), and the
# growth divided by N is the figure: bytes per idle connection, lower is better (ratio cbench/server <= 1 meets
# issue 24's goal). Every server keeps idle connections 120 s, longer than the case lasts.
#
# Measurement, as bench/ab.sh: the server is started fresh for each run, pinned to CPU 0, one worker or thread;
# the load generator runs on CPU 1 (one thread) for S seconds after W seconds of warm-up; the server's CPU time
# (user + system of every process of its process group, /proc/PID/stat) is read when the measured window starts
# and when the generator ends, and divided by the requests (or handshakes) the generator counted in the window.
# Rounds interleave the servers (the order rotates each round), and the median of the rounds is reported with
# the ratios cbench-server / peer. A peer that is not installed, or a case it cannot serve, is named and skipped.
# Results: stdout and bench/results/tls-<time>.md (or --out FILE).
#
# --smoke: 1 round of 1 s without warm-up on 4 connections (idle: 20 after 5), every case, and the results in a temporary file
# unless --out: make bench-smoke runs it to prove the script works (nothing it prints is a figure to keep).
set -euo pipefail
ME=bench/tls.sh
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"

SERVER=${CBENCH_SERVER:-build/cbench-server}
LOAD=${CBENCH_LOAD:-build/cbench-load}
ROUNDS=3
SECS=5
WARM=2
CONNS=50
SERVERS=cbench,nginx,h2o
CASES=hello_h1,hello_h2,echo_h1,echo_h2,hs_full,hs_resumed,idle_h1,idle_h2
IDLE=2000
IDLE_WARM=200
TOOLS=h2load,cbench-load
OUT=
SMOKE=0
CIPHER=TLS_AES_128_GCM_SHA256
usage() {
  sed -n '6,8p' "$0" | sed 's/^# *//' >&2
  exit 2
}
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) ROUNDS=${2:-}; shift 2 ;;
    --seconds) SECS=${2:-}; shift 2 ;;
    --warmup) WARM=${2:-}; shift 2 ;;
    --conns) CONNS=${2:-}; shift 2 ;;
    --servers) SERVERS=${2:-}; shift 2 ;;
    --cases) CASES=${2:-}; shift 2 ;;
    --tools) TOOLS=${2:-}; shift 2 ;;
    --idle-conns) IDLE=${2:-}; shift 2 ;;
    --out) OUT=${2:-}; shift 2 ;;
    --smoke) SMOKE=1; ROUNDS=1; SECS=1; WARM=0; CONNS=4; IDLE=20; IDLE_WARM=5; shift ;;
    *) usage ;;
  esac
done
for v in "$ROUNDS" "$SECS" "$CONNS" "$IDLE"; do [[ "$v" =~ ^[0-9]+$ ]] && [ "$v" -gt 0 ] || usage; done
[[ "$WARM" =~ ^[0-9]+$ ]] || usage
IFS=, read -r -a servers <<<"$SERVERS"
IFS=, read -r -a cases <<<"$CASES"
IFS=, read -r -a tools <<<"$TOOLS"
for s in "${servers[@]}"; do case $s in cbench|nginx|h2o) ;; *) echo "bench/tls.sh: unknown server $s" >&2; exit 2 ;; esac; done
for c in "${cases[@]}"; do
  case $c in hello_h1|hello_h2|echo_h1|echo_h2|hs_full|hs_resumed|idle_h1|idle_h2) ;; *) echo "bench/tls.sh: unknown case $c" >&2; exit 2 ;; esac
done
for t in "${tools[@]}"; do case $t in h2load|cbench-load) ;; *) echo "bench/tls.sh: unknown tool $t" >&2; exit 2 ;; esac; done
[ -x "$SERVER" ] || { echo "bench/tls.sh: $SERVER is not built (make)" >&2; exit 1; }
[ -x "$LOAD" ] || { echo "bench/tls.sh: $LOAD is not built (make load)" >&2; exit 1; }
command -v openssl >/dev/null || { echo "bench/tls.sh: openssl(1) is not installed (openssl)" >&2; exit 1; }
notes=()
if [[ " ${tools[*]} " == *" h2load "* ]] && ! command -v h2load >/dev/null; then
  notes+=("h2load is not installed (nghttp2-client): its column is skipped")
  tools=("${tools[@]/h2load/}")
fi
# The idle cases: python3 for the client, and descriptors for every connection, in this shell and so in the
# servers it starts (nginx and h2o are also told their connection limits in their configs).
idle_cases=0
for c in "${cases[@]}"; do [[ $c == idle_* ]] && idle_cases=1; done
if [ "$idle_cases" = 1 ]; then
  if ! command -v python3 >/dev/null; then
    notes+=("python3 is not installed: the idle cases are skipped")
    cases=("${cases[@]/idle_*/}")
  else
    want_fds=$((IDLE + IDLE_WARM + 256))
    hard=$(ulimit -Hn)
    [ "$hard" = unlimited ] || [ "$hard" -ge "$want_fds" ] || want_fds=$hard
    ulimit -Sn "$want_fds" 2>/dev/null || true
    if [ "$(ulimit -Sn)" != unlimited ] && [ "$(ulimit -Sn)" -lt $((IDLE + IDLE_WARM + 256)) ]; then
      IDLE=$(($(ulimit -Sn) - IDLE_WARM - 256))
      [ "$IDLE" -gt 0 ] || { echo "bench/tls.sh: the descriptor limit $(ulimit -Sn) leaves no room for idle connections" >&2; exit 1; }
      notes+=("descriptor limit $(ulimit -Sn): the idle cases open $IDLE connections")
    fi
  fi
fi
MAXCONN=$((IDLE + IDLE_WARM + 256 > 4096 ? IDLE + IDLE_WARM + 256 : 4096))
here=$(cd "$(dirname "$0")" && pwd)
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

# ---- the certificate: a CA and a leaf it signed, ECDSA P-256 ----
(
  cd "$work"
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out ca.key
  openssl req -x509 -new -key ca.key -subj "/CN=cbench bench CA" -days 2 -out ca.pem \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out leaf.key
  openssl req -new -key leaf.key -subj "/CN=localhost" -out leaf.csr
  printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n' >leaf.ext
  openssl x509 -req -in leaf.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -extfile leaf.ext -out leaf.pem
) >"$work/openssl.log" 2>&1 || { echo "bench/tls.sh: openssl could not make the certificate: $(tail -n 3 "$work/openssl.log")" >&2; exit 1; }
# The idle client's cipher: python3's ssl cannot choose TLS 1.3 suites itself; OpenSSL's configuration can.
printf 'openssl_conf = conf\n[conf]\nssl_conf = ssl\n[ssl]\nsystem_default = tls\n[tls]\nCiphersuites = %s\n' "$CIPHER" >"$work/client.cnf"
head -c 1024 /dev/zero | tr '\0' 'e' >"$work/body_1k"

# start NAME: the server in its own process group, pinned to CPU 0, TLS on one port for HTTP/1.1 and h2 (ALPN);
# sets spid and PORT.
start() {
  local name=$1 cmd=()
  PORT=$(free_port)
  case $name in
    cbench) cmd=("$SERVER" --port "$PORT" --threads 1 --idle-timeout-ms 120000 --tls --tls-cert-file "$work/leaf.pem" --tls-key-file "$work/leaf.key") ;;
    nginx)
      mkdir -p "$work/nginx"
      cat >"$work/nginx/nginx.conf" <<CONF
daemon off; master_process on; worker_processes 1; pid $work/nginx/nginx.pid; error_log $work/nginx/error.log warn;
events { worker_connections $MAXCONN; }
http { access_log off; client_body_temp_path $work/nginx/body; proxy_temp_path $work/nginx/proxy;
  fastcgi_temp_path $work/nginx/fcgi; uwsgi_temp_path $work/nginx/uwsgi; scgi_temp_path $work/nginx/scgi;
  tcp_nodelay on; keepalive_requests 1000000000; keepalive_timeout 120s;
  ssl_certificate $work/leaf.pem; ssl_certificate_key $work/leaf.key; ssl_protocols TLSv1.3;
  ssl_conf_command Ciphersuites $CIPHER; ssl_session_cache shared:SSL:10m; ssl_session_tickets on;
  server { listen 127.0.0.1:$PORT ssl http2; location = /hello { default_type text/plain; return 200 'Hello, Joe!'; } } }
CONF
      cmd=("$(command -v nginx)" -p "$work/nginx" -c "$work/nginx/nginx.conf") ;;
    h2o)
      mkdir -p "$work/h2o"
      printf 'Hello, Joe!' >"$work/h2o/hello"
      local user=""
      [ "$(id -u)" = 0 ] && user="user: nobody"
      cat >"$work/h2o/h2o.conf" <<CONF
$user
num-threads: 1
max-connections: $MAXCONN
error-log: $work/h2o/error.log
http1-request-timeout: 120
http2-idle-timeout: 120
listen:
  host: 127.0.0.1
  port: $PORT
  ssl:
    certificate-file: $work/leaf.pem
    key-file: $work/leaf.key
hosts:
  default:
    paths:
      /hello:
        file.file: $work/h2o/hello
      /echo:
        mruby.handler: |
          Proc.new do |env|
            [200, {"content-type" => "application/octet-stream"}, [env["rack.input"].read]]
          end
CONF
      chmod -R a+rX "$work"
      cmd=("$(command -v h2o)" -c "$work/h2o/h2o.conf") ;;
  esac
  setsid taskset -c "$SCPU" "${cmd[@]}" >"$work/$name.out" 2>&1 &
  spid=$!
  wait_port "$PORT" || { echo "bench/tls.sh: $name did not start: $(tail -n 3 "$work/$name.out")" >&2; exit 1; }
}

stop() {
  stop_group "$spid"
  spid=
}

ticks() { group_ticks "$spid"; }

# rss_kb: the resident memory of the server's processes, summed (kB).
rss_kb() { group_rss_kb "$spid"; }

# measure_idle NAME CASE: one run of an idle case. Prints "VALUE COUNT FLAG" as measure does: bytes of server
# memory per idle connection, the connections held, and `!` when the client got another cipher.
measure_idle() {
  local name=$1 case=$2 proto=http/1.1 line r0 r1 flag=""
  [ "$case" = idle_h2 ] && proto=h2
  start "$name"
  coproc IDLECL { OPENSSL_CONF=$work/client.cnf exec taskset -c "$LCPU" python3 "$here/tls_idle.py" "$PORT" "$proto" "$IDLE_WARM" "$IDLE" "$work/ca.pem" 2>"$work/idle.err"; }
  local out=${IDLECL[0]} in=${IDLECL[1]} cpid=$IDLECL_PID
  if ! read -r -t 600 line <&"$out" || [ "$line" != warm ]; then
    echo "bench/tls.sh: $name $case: the idle client failed: $(tail -n 2 "$work/idle.err")" >&2
    kill "$cpid" 2>/dev/null || true
    wait "$cpid" 2>/dev/null || true
    stop
    echo "- 0 x"
    return
  fi
  sleep 2
  r0=$(rss_kb)
  echo go >&"$in"
  if ! read -r -t 600 line <&"$out" || [[ $line != held* ]]; then
    echo "bench/tls.sh: $name $case: the idle client failed: $(tail -n 2 "$work/idle.err")" >&2
    kill "$cpid" 2>/dev/null || true
    wait "$cpid" 2>/dev/null || true
    stop
    echo "- 0 x"
    return
  fi
  sleep 2
  r1=$(rss_kb)
  [ "${line##* }" = "$CIPHER" ] || flag="!"
  exec {in}>&-
  wait "$cpid" 2>/dev/null || true
  stop
  awk -v a="$r0" -v b="$r1" -v n="$IDLE" -v f="$flag" 'BEGIN { printf "%.0f %d %s\n", (b - a) * 1024 / n, n, f }'
}

# serves NAME CASE: whether the server answers the case (nginx has no echo).
serves() { ! { [ "$1" = nginx ] && [[ $2 == echo_* ]]; }; }

# measure NAME CASE TOOL: one run. Prints "VALUE COUNT FLAG": us of server CPU per request (hello, echo) or
# handshakes per CPU-second (hs_*), what the tool counted, and flags: `!` when the negotiated version or cipher
# was not TLS 1.3 and TLS_AES_128_GCM_SHA256, `r` when hs_resumed resumed fewer than 90% of its handshakes (or
# hs_full resumed any), `e` when the generator counted errors.
measure() {
  local name=$1 case=$2 tool=$3 url path proto flag=""
  case $case in hello_*|hs_*) path=/hello ;; echo_*) path=/echo ;; esac
  case $case in *_h2) proto=h2 ;; *) proto=h1 ;; esac
  url="https://localhost:PORT$path"
  start "$name"
  url=${url/PORT/$PORT}
  local lpid
  if [ "$tool" = h2load ]; then
    local args=(-t 1 -c "$CONNS" -D "$SECS" --tls13-ciphers="$CIPHER")
    [ "$WARM" -gt 0 ] && args+=(--warm-up-time "$WARM")
    if [ "$proto" = h1 ]; then args+=(--h1 -m 1); else args+=(-m 10); fi
    [[ $case == echo_* ]] && args+=(-d "$work/body_1k")
    taskset -c "$LCPU" h2load "${args[@]}" "$url" >"$work/load.out" 2>&1 &
  else
    local args=(-t 1 -c "$CONNS" -d "$SECS" -w "$WARM" --cacert "$work/ca.pem" --tls-version 1.3
                --tls13-ciphers "$CIPHER" --json "$work/load.json" -q)
    case $case in
      *_h2) args+=(-p h2 -m 10) ;;
      hs_full) args+=(--new-conn --no-resume) ;;
      hs_resumed) args+=(--new-conn) ;;
    esac
    [[ $case == echo_* ]] && args+=(-b "$work/body_1k")
    rm -f "$work/load.json"
    taskset -c "$LCPU" "$LOAD" "${args[@]}" "$url" >"$work/load.out" 2>&1 &
  fi
  lpid=$!
  sleep "$WARM"
  local t0 t1
  t0=$(ticks)
  wait "$lpid" || true
  t1=$(ticks)
  stop
  local n version cipher
  if [ "$tool" = h2load ]; then
    n=$(sed -n 's/^requests: .* \([0-9]*\) succeeded, \([0-9]*\) failed.*/\1/p' "$work/load.out")
    local failed
    failed=$(sed -n 's/^requests: .* \([0-9]*\) succeeded, \([0-9]*\) failed.*/\2/p' "$work/load.out")
    version=$(sed -n 's/^TLS Protocol: //p' "$work/load.out")
    cipher=$(sed -n 's/^Cipher: //p' "$work/load.out")
    if [ -z "$n" ] || [ "$n" = 0 ] || [ "${failed:-1}" != 0 ]; then
      echo "bench/tls.sh: $name $case h2load failed: $(grep -E '^requests:' "$work/load.out" || tail -n 2 "$work/load.out")" >&2
      echo "- 0 x"
      return
    fi
  else
    if [ ! -s "$work/load.json" ]; then
      echo "bench/tls.sh: $name $case cbench-load failed: $(tail -n 2 "$work/load.out")" >&2
      echo "- 0 x"
      return
    fi
    local j="$work/load.json" full resumed errs
    version=$(grep -o '"version": "TLS[^"]*"' "$j" | sed 's/.*: "\(.*\)"/\1/')
    cipher=$(grep -o '"cipher": "[^"]*"' "$j" | sed 's/.*: "\(.*\)"/\1/')
    n=$(grep -o '"ok": [0-9]*' "$j" | head -n 1 | sed 's/.*: //')
    full=$(grep -o '"full": [0-9]*' "$j" | sed 's/.*: //')
    resumed=$(grep -o '"resumed": [0-9]*' "$j" | sed 's/.*: //')
    errs=$(grep -o '"total": [0-9]*' "$j" | head -n 1 | sed 's/.*: //')
    [ "${errs:-1}" = 0 ] || flag="e"
    if [[ $case == hs_* ]]; then
      n=$((full + resumed))
      if [ "$case" = hs_resumed ] && [ "$n" -gt 0 ] && [ $((resumed * 10)) -lt $((n * 9)) ]; then flag="${flag}r"; fi
      if [ "$case" = hs_full ] && [ "${resumed:-0}" != 0 ]; then flag="${flag}r"; fi
    fi
    if [ -z "$n" ] || [ "$n" = 0 ]; then
      echo "bench/tls.sh: $name $case cbench-load counted nothing: $(tail -n 2 "$work/load.out")" >&2
      echo "- 0 x"
      return
    fi
  fi
  [ "$version" = TLSv1.3 ] && [ "$cipher" = "$CIPHER" ] || flag="${flag}!"
  if [[ $case == hs_* ]]; then
    awk -v t=$((t1 - t0)) -v n="$n" -v hz="$HZ" -v f="$flag" 'BEGIN { printf "%.0f %d %s\n", t ? n * hz / t : 0, n, f }'
  else
    awk -v t=$((t1 - t0)) -v n="$n" -v hz="$HZ" -v f="$flag" 'BEGIN { printf "%.3f %d %s\n", t * 1e6 / hz / n, n, f }'
  fi
}

median() { sort -n | awk '{a[NR] = $1} END { if (NR == 0) print "-"; else if (NR % 2) print a[(NR + 1) / 2]; else printf "%.3f\n", (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

if [ -z "$OUT" ]; then
  if [ "$SMOKE" = 1 ]; then OUT="$work/tls-smoke.md"; else mkdir -p bench/results; OUT="bench/results/tls-$(date -u +%Y%m%dT%H%M%SZ).md"; fi
fi
# Which servers run: the peers that are installed.
run_servers=()
for s in "${servers[@]}"; do
  if [ "$s" != cbench ] && ! command -v "$s" >/dev/null; then
    notes+=("$s is not installed (apt-get install $([ "$s" = nginx ] && echo nginx-light || echo h2o)): its cells are skipped")
    continue
  fi
  run_servers+=("$s")
done
{
  echo "# bench/tls.sh: TLS 1.3, $CIPHER, ECDSA P-256 leaf (the same for every server)"
  echo
  echo "server: 1 worker/thread on CPU $SCPU; load: 1 thread on CPU $LCPU, $CONNS connections (-m 10 on h2); $SECS s after $WARM s warm-up; $ROUNDS rounds, servers interleaved"
  echo "machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg) at the start; $("$SERVER" --version 2>/dev/null | head -n 1 || true)"
  for s in "${run_servers[@]}"; do
    case $s in
      nginx) echo "nginx: $(nginx -v 2>&1)" ;;
      h2o) echo "h2o: $(h2o --version 2>/dev/null | head -n 1)" ;;
    esac
  done
  for n in "${notes[@]}"; do echo "note: $n"; done
  echo
  echo "Server CPU per request (us, lower is better) for hello and echo; handshakes per CPU-second (higher is better) for hs_*;"
  echo "bytes of server memory (RSS growth) per idle connection for idle_* ($IDLE connections after $IDLE_WARM, lower is better);"
  echo "median of rounds, with each round's value. \`!\`: a run negotiated another version or cipher; \`r\`: hs_resumed resumed under"
  echo "90% of its handshakes (hs_full: any); \`e\`: the generator counted errors; \`-\`: not measured."
  echo
  echo "| case | tool | server | median | rounds | ratio cbench/server |"
  echo "| --- | --- | --- | --- | --- | --- |"
} | tee "$OUT"

declare -A vals flags
for c in "${cases[@]}"; do
  [ -n "$c" ] || continue
  # The idle cases have their own client (bench/tls_idle.py), named as their tool.
  if [[ $c == idle_* ]]; then ctools=(tls_idle.py); else ctools=("${tools[@]}"); fi
  for t in "${ctools[@]}"; do
    [ -n "$t" ] || continue
    [[ $c == hs_* ]] && [ "$t" = h2load ] && continue
    for r in $(seq 1 "$ROUNDS"); do
      # The order of the servers rotates each round, so a machine that drifts moves them all alike.
      order=("${run_servers[@]:$(((r - 1) % ${#run_servers[@]}))}" "${run_servers[@]:0:$(((r - 1) % ${#run_servers[@]}))}")
      for s in "${order[@]}"; do
        serves "$s" "$c" || continue
        if [[ $c == idle_* ]]; then read -r v n f < <(measure_idle "$s" "$c"); else read -r v n f < <(measure "$s" "$c" "$t"); fi
        echo "  $c $t $s round $r: $v (count $n) $f" >&2
        [ "$v" = - ] || vals[$c.$t.$s]+="$v "
        flags[$c.$t.$s]+="$f"
      done
    done
    base=$(printf '%s\n' ${vals[$c.$t.cbench]:-} | median)
    for s in "${run_servers[@]}"; do
      if ! serves "$s" "$c"; then echo "| $c | $t | $s | - | does not serve it | |" | tee -a "$OUT"; continue; fi
      m=$(printf '%s\n' ${vals[$c.$t.$s]:-} | median)
      ratio=""
      if [ "$s" != cbench ] && [ "$m" != - ] && [ "$base" != - ]; then
        ratio=$(awk -v a="$base" -v b="$m" 'BEGIN { printf "%.3f", a / b }')
      fi
      echo "| $c | $t | $s | $m ${flags[$c.$t.$s]:-} | ${vals[$c.$t.$s]:-} | $ratio |" | tee -a "$OUT"
    done
  done
done
echo "wrote $OUT"
