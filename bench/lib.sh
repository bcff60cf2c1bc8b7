# Shell functions the server benchmarks share (bench/ab.sh, bench/tls.sh, bench/proxy.sh): sourced, not run.
# The sourcing script sets ME (its name, for messages) and, for stop/ticks/rss_kb, spid (the server's process
# group leader, started with setsid).

# Below the kernel's ephemeral range, so that no client connection (h2load's) holds the port as its own end.
port_floor=$(awk '{print $1}' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)

# A port nothing listened on a moment ago (nginx and h2o need one named in their configuration).
free_port() {
  local p span=$((port_floor > 12000 ? port_floor - 10000 : 20000)) base=$((port_floor > 12000 ? 10000 : 40000))
  for _ in $(seq 1 100); do
    p=$((base + RANDOM % span))
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return 0; }
  done
  echo "$ME: no free port found" >&2
  exit 1
}

# Waits up to 10 s for something to accept on 127.0.0.1:PORT.
wait_port() {
  for _ in $(seq 1 200); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.05
  done
  return 1
}

# stop_group PID: SIGTERM to the process group, SIGKILL after 5 s.
stop_group() {
  kill -TERM -- "-$1" 2>/dev/null || true
  for _ in $(seq 1 50); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
  kill -KILL -- "-$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}

# group_ticks PID: the CPU ticks (user + system) of every process in PID's process group (every thread is in its
# process's stat). A process that ends between pgrep and the read counts for nothing.
group_ticks() {
  local total=0 p v
  for p in $(pgrep -g "$1" 2>/dev/null || echo "$1"); do
    v=$(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null) || continue
    total=$((total + ${v:-0}))
  done
  echo "$total"
}

# group_rss_kb PID: the resident memory of PID's process group, summed (kB).
group_rss_kb() {
  local total=0 p v
  for p in $(pgrep -g "$1" 2>/dev/null || echo "$1"); do
    v=$(awk '/^VmRSS:/ {print $2}' "/proc/$p/status" 2>/dev/null) || continue
    total=$((total + ${v:-0}))
  done
  echo "$total"
}
