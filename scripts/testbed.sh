#!/bin/sh
# A testbed of several "machines" on one host, for cbench:load/2 over several nodes (docs/bench.md, "More than
# one machine"): N network namespaces joined by a bridge, each with its own address, its own loopback and its
# own epmd; an Erlang node is then started in one with `ip netns exec NS erl ...' (cbench_peers's `exec'
# option does exactly that).
#
#   scripts/testbed.sh up N      make namespaces ${PREFIX}1 .. ${PREFIX}N (N from 1 to 20), addresses
#                                ${NET}.1 .. ${NET}.N/24, epmd running and answering in each
#   scripts/testbed.sh down      end every process in the testbed's namespaces and remove them (idempotent:
#                                also after a crash, or when nothing is up)
#   scripts/testbed.sh status    the namespaces and their addresses
#
# The bridge sits in a namespace of its own (${PREFIX}0), not in the host's, and every veth pair is created
# inside the namespaces: the host's own network gets no interface, no address and no route, so traffic between
# the namespaces never leaves them. Needs root (ip netns); exits 77 with a message otherwise, which the tests
# read as "skip". TESTBED_PREFIX (default cbtb) and TESTBED_NET (default 10.77.0, a private range used only
# inside these namespaces) change the names and addresses; test/cbench_cluster_SUITE.erl uses the prefix
# cbct<its OS pid>n, so that two runs on one machine never remove each other's namespaces (after a crashed run:
# TESTBED_PREFIX=cbct<pid>n scripts/testbed.sh down, or `ip netns list` to find them).
set -eu

PREFIX=${TESTBED_PREFIX:-cbtb}
NET=${TESTBED_NET:-10.77.0}
HUB=${PREFIX}0
case "$PREFIX" in
  '' | *[!a-zA-Z0-9_]*) echo "testbed: TESTBED_PREFIX must be letters, digits and _ only" >&2; exit 2 ;;
esac

need_root() {
  if [ "$(id -u)" != 0 ]; then
    echo "testbed: needs root (network namespaces); skipped" >&2
    exit 77
  fi
  if ! ip netns list >/dev/null 2>&1; then
    echo "testbed: 'ip netns' is not available here; skipped" >&2
    exit 77
  fi
  if ! command -v epmd >/dev/null 2>&1; then
    echo "testbed: epmd is not on the PATH (Erlang not installed?); skipped" >&2
    exit 77
  fi
}

# The testbed's namespaces: ${PREFIX} followed by digits only, so that no other namespace is touched.
ours() {
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${PREFIX}[0-9]+\$" || true
}

down() {
  for ns in $(ours); do
    # Every process left in the namespace (epmd, Erlang nodes, fixtures): by pid, from the namespace itself.
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    if [ -n "$pids" ]; then kill -9 $pids 2>/dev/null || true; fi
  done
  for ns in $(ours); do
    ip netns del "$ns" 2>/dev/null || true
  done
  if [ -n "$(ours)" ]; then
    echo "testbed: could not remove: $(ours)" >&2
    exit 1
  fi
}

# (sh has no local variables: these names are its own.)
wait_epmd() {
  w_ns=$1
  w_try=0
  while ! ip netns exec "$w_ns" epmd -names >/dev/null 2>&1; do
    w_try=$((w_try + 1))
    if [ $w_try -gt 200 ]; then
      echo "testbed: epmd in $w_ns does not answer after 10 s" >&2
      exit 1
    fi
    sleep 0.05
  done
}

up() {
  n=$1
  case "$n" in
    '' | *[!0-9]*) echo "usage: $0 up N (1 to 20)" >&2; exit 2 ;;
  esac
  if [ "$n" -lt 1 ] || [ "$n" -gt 20 ]; then
    echo "usage: $0 up N (1 to 20)" >&2
    exit 2
  fi
  down
  ip netns add "$HUB"
  ip -n "$HUB" link add br0 type bridge
  ip -n "$HUB" link set br0 up
  i=1
  while [ $i -le "$n" ]; do
    ns=$PREFIX$i
    ip netns add "$ns"
    # Both ends are created in the hub and one is moved into the node's namespace: none ever exists in the
    # host's namespace.
    ip -n "$HUB" link add "p$i" type veth peer name eth0 netns "$ns"
    ip -n "$HUB" link set "p$i" master br0 up
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "$NET.$i/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip netns exec "$ns" epmd -daemon
    i=$((i + 1))
  done
  i=1
  while [ $i -le "$n" ]; do
    wait_epmd "$PREFIX$i"
    i=$((i + 1))
  done
  echo "testbed: $n namespaces up: ${PREFIX}1..${PREFIX}$n at $NET.1..$NET.$n"
}

status() {
  for ns in $(ours); do
    printf '%s ' "$ns"
    ip -n "$ns" -4 -o addr show 2>/dev/null | awk '$2 != "lo" {printf "%s ", $4}'
    echo
  done
}

case "${1:-}" in
  up) need_root; up "${2:-}" ;;
  down) need_root; down ;;
  status) need_root; status ;;
  *) echo "usage: $0 up N | down | status" >&2; exit 2 ;;
esac
