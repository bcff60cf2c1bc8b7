# The shared part of the TLS end-to-end scripts (test/tls_e2e.sh, tls_auth_e2e.sh, tls_faults_e2e.sh), sourced
# after they set SERVER (the cbench-server to run) and NAME (what their messages start with): a work folder
# removed at exit with every server still running killed, the pass/fail counters, and starting a server.

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
bad() { failed=$((failed + 1)); echo "$NAME: FAILED: $*" >&2; }
check() { # check NAME EXPECTED ACTUAL
  if [ "$2" = "$3" ]; then ok; else bad "$1: expected '$2', got '$3'"; fi
}

# launch LABEL LINES ARGS...: starts $SERVER ARGS (TMPDIR: the work folder, where it writes its CA), stdout and
# stderr in $work/LABEL.out and .err, and waits until stdout has LINES lines or the server ended; sets SPID.
launch() {
  local label=$1 lines=$2 i
  shift 2
  TMPDIR=$work "$SERVER" "$@" >"$work/$label.out" 2>"$work/$label.err" &
  SPID=$!
  pids+=("$SPID")
  for i in $(seq 1 200); do
    [ "$( { wc -l <"$work/$label.out"; } 2>/dev/null || echo 0)" -ge "$lines" ] && break
    kill -0 "$SPID" 2>/dev/null || break
    sleep 0.05
  done
}

# ready LABEL REGEX: the server's first line matches REGEX (BASH_REMATCH holds its groups), or the script ends
# saying what the server printed.
ready() {
  local line
  line=$(head -n 1 "$work/$1.out" 2>/dev/null || true)
  if ! [[ "$line" =~ $2 ]]; then
    echo "$NAME: $1 did not start; stdout: $(cat "$work/$1.out"); stderr: $(cat "$work/$1.err")" >&2
    exit 1
  fi
}
