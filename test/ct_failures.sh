#!/bin/sh
# Prints the failed Common Test cases of the newest run (name and up to 20 lines of the reason), so that a CI log
# that keeps only its tail still names what failed. Called by `make test-beam` after a failing run.
log=$(ls -d _build/test/logs/ct_run.*/lib.cbench.logs/run.*/suite.log 2>/dev/null | sort | tail -1)
[ -n "$log" ] || { echo "ct_failures: no suite.log under _build/test/logs" >&2; exit 0; }
echo "==== failed Common Test cases ($log) ===="
awk '/^=case/ { c = $2; show = 0; next }
     /^=result +(failed|auto_skipped)/ { print c ": " substr($0, 16); n++; show = 20; next }
     /^=/ { show = 0; next }
     show > 0 { print "    " $0; show-- }
     END { if (n == 0) print "(none recorded as failed: see the output above)" }' "$log"
