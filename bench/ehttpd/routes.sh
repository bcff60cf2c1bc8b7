#!/usr/bin/env bash
# The route-table benchmark of the ehttpd engine (make bench-ehttpd-routes): see cbench_ehttpd_routes.erl.
#   bench/ehttpd/routes.sh [REQUESTS]   (default 100000 per case)
# The node runs on CPU 0 with one scheduler, h2load on the last CPU.
set -euo pipefail
cd "$(dirname "$0")/../.."
n=${1:-100000}
ebin=$(mktemp -d)
trap 'rm -rf "$ebin"' EXIT
erlc -o "$ebin" bench/ehttpd/cbench_ehttpd_routes.erl
load=$(( $(nproc) - 1 ))
taskset -c 0 erl +S 1 +sbt db +sbwt none +sbwtdcpu none +sbwtdio none -noshell \
  -pa _build/default/lib/cbench/ebin -pa "$ebin" -run cbench_ehttpd_routes main "$n" "$load"
