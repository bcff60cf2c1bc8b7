#!/bin/bash
# Runs the cbench benchmark harness (bench/src/cbench_bench.erl) and guarantees that
# nothing it started outlives it: every server, node and h2load it spawns leads its
# own process group and is listed in a pid directory; on exit, Ctrl-C or TERM the
# trap below sends TERM, then KILL, to each listed group.
#
# Usage: bench/run.sh [options]   (bench/run.sh --help lists them)
# CBENCH_BENCH_MAIN picks the harness: cbench_bench (make bench, the default) or
# cbench_clients (make bench-clients); CBENCH_BENCH_ERL_FLAGS adds flags to its node.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
EBIN="$ROOT/bench/ebin"
MAIN=${CBENCH_BENCH_MAIN:-cbench_bench}
if [ ! -f "$EBIN/$MAIN.beam" ]; then
    echo "bench: $EBIN is not built (run: make bench-build)" >&2
    exit 2
fi
PIDDIR=$(mktemp -d "${TMPDIR:-/tmp}/cbench-bench.XXXXXX")
# The harness keeps its scratch files here too; h2o drops to user nobody and must
# be able to reach the fixture files below it.
chmod 755 "$PIDDIR"
export CBENCH_BENCH_PIDDIR="$PIDDIR" CBENCH_ROOT="$ROOT" ERL_CRASH_DUMP_SECONDS=0
child=""

cleanup() {
    trap - EXIT INT TERM HUP
    # The harness node first, at once: it holds no state worth saving, and it must
    # not go on to start the next case while its children are being stopped.
    if [ -n "$child" ] && kill -0 "$child" 2>/dev/null; then
        kill -KILL "$child" 2>/dev/null
    fi
    # Each listed child is signalled as a group and as a process: the node learns a
    # child's pid when it is forked, before the child has made its own group
    # (setsid, then exec), so a Ctrl-C in that moment finds no group to signal.
    local f pid left=""
    for f in "$PIDDIR"/*.pid; do
        [ -e "$f" ] || continue
        pid=$(cat "$f")
        kill -TERM -- "-$pid" 2>/dev/null
        kill -TERM "$pid" 2>/dev/null
        left="$left $pid"
    done
    if [ -n "$left" ]; then
        sleep 1
        for pid in $left; do
            kill -KILL -- "-$pid" 2>/dev/null
            kill -KILL "$pid" 2>/dev/null
        done
    fi
    rm -rf "$PIDDIR"
}
trap 'cleanup; exit 130' INT
trap 'cleanup; exit 143' TERM HUP
trap cleanup EXIT

# Thousands of connections need as many file descriptors: the soft limit is raised
# to the hard one (the harness reports the limit it got, and what it needs).
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

# +B: Ctrl-C ends the VM at once (no break menu); the trap then kills the children.
# shellcheck disable=SC2086
erl -noshell -noinput +B ${CBENCH_BENCH_ERL_FLAGS:-} -pa "$EBIN" -run "$MAIN" main -extra "$@" &
child=$!
wait "$child"
rc=$?
child=""
exit $rc
