#!/usr/bin/env bash
# Runs CI as CI runs it, several times in a row: each run in a fresh clone of this checkout's HEAD, as
# `CI=true bash .ci/run`, stopping at the first failure. With --busy, both CPUs are kept busy by other
# processes (one spinning shell loop per CPU, at normal priority) for the whole run, so that tests meet a
# loaded machine: a test that depends on timing shows it here.
#
#   scripts/ci_repeat.sh [--busy] [RUNS]      (RUNS: 1 by default)
#
# A line per run goes to stdout (run, clone, seconds, exit status); each run's output is kept in
# $CI_REPEAT_DIR (default /tmp/cbench-ci-repeat) as run-N.log, and its clone is removed after it passed.
set -euo pipefail
busy=0
if [ "${1:-}" = "--busy" ]; then busy=1; shift; fi
runs=${1:-1}
case "$runs" in ''|*[!0-9]*) echo "usage: $0 [--busy] [RUNS]" >&2; exit 2 ;; esac
top=$(git rev-parse --show-toplevel)
dir=${CI_REPEAT_DIR:-/tmp/cbench-ci-repeat}
mkdir -p "$dir"
spinners=()
stop_spinners() { [ ${#spinners[@]} -eq 0 ] || kill "${spinners[@]}" 2>/dev/null || true; }
trap stop_spinners EXIT
if [ "$busy" = 1 ]; then
  for _ in $(seq "$(nproc)"); do
    (while :; do :; done) &
    spinners+=($!)
  done
fi
for i in $(seq "$runs"); do
  clone="$dir/clone-$i"
  rm -rf "$clone"
  git clone -q "$top" "$clone"
  start=$(date +%s)
  set +e
  (cd "$clone" && CI=true bash .ci/run) >"$dir/run-$i.log" 2>&1 </dev/null
  rc=$?
  set -e
  echo "run $i: $(git -C "$clone" rev-parse --short HEAD) $(( $(date +%s) - start )) s exit $rc$([ "$busy" = 1 ] && echo ' (CPUs busy)')"
  if [ "$rc" -ne 0 ]; then
    echo "run $i failed: $dir/run-$i.log (clone kept in $clone)"
    tail -n 30 "$dir/run-$i.log"
    exit 1
  fi
  rm -rf "$clone"
done
