/* cbench_port: the C engine beside a BEAM node, spoken to over stdin/stdout with {packet, 4} frames of
 * ei-encoded terms (see erl/cbench_port.erl):
 *
 *   {start, Opts}  ->  {ok, Port, Threads, Cpus} | {error, Reason}
 *   stats          ->  {ok, StatsMap} | {error, stopped}
 *   stop           ->  ok
 *
 * Opts is the map cbench_port:start/1 builds: every key of cb_config_t that Erlang sets, each value checked
 * here again. EOF on stdin means the node went away: the server is stopped and the program exits 0. A frame
 * that does not decode is a bug on the other side, so the program exits with EXIT_MALFORMED rather than guess.
 * When Opts lists CPUs, the whole process (this thread and so every engine thread it starts) is first
 * restricted to that set, so that the port engine runs on the same CPUs as the node's schedulers.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <ctype.h>
#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ei.h>

#include "cbench.h"

enum { EXIT_MALFORMED = 2, EXIT_TOO_LARGE = 3, EXIT_IO = 4, EXIT_NOMEM = 5 };

/* Requests are small (an options map); anything larger is not from cbench_port.erl. */
#define MAX_FRAME (1u << 20)

static cb_server_t *server;

static void die(int status) {
  if (server != NULL) cb_server_stop(server);
  exit(status);
}

static void write_all(const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(STDOUT_FILENO, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) die(EXIT_IO);
    p += w;
    n -= (size_t)w;
  }
}

static void send_reply(ei_x_buff *x) {
  unsigned char len[4] = {(unsigned char)(x->index >> 24), (unsigned char)(x->index >> 16),
                          (unsigned char)(x->index >> 8), (unsigned char)x->index};
  write_all((const char *)len, 4);
  write_all(x->buff, (size_t)x->index);
  ei_x_free(x);
}

static void new_reply(ei_x_buff *x) {
  if (ei_x_new_with_version(x) != 0) die(EXIT_NOMEM);
}

/* {error, Name}: the engine's error name lowercased without the CB_ prefix, as the NIF answers. */
static void reply_error(int err) {
  const char *name = cb_err_name(err);
  if (strncmp(name, "CB_", 3) == 0) name += 3;
  char buf[64];
  size_t i;
  for (i = 0; name[i] != '\0' && i < sizeof buf - 1; i++) buf[i] = (char)tolower((unsigned char)name[i]);
  buf[i] = '\0';
  ei_x_buff x;
  new_reply(&x);
  ei_x_encode_tuple_header(&x, 2);
  ei_x_encode_atom(&x, "error");
  ei_x_encode_atom(&x, buf);
  send_reply(&x);
}

/* ---- Decoding {start, Opts} ---- */

static int decode_uint(const char *buf, int *idx, unsigned long long max, unsigned long long *out) {
  return ei_decode_ulonglong(buf, idx, out) == 0 && *out <= max ? 0 : -1;
}

/* cpus arrive as a list of integers, or as a string when every value is below 256 (term_to_binary's
 * STRING_EXT). */
static int decode_cpus(const char *buf, int *idx, int *cpus, int *ncpus) {
  int type, size;
  if (ei_get_type(buf, idx, &type, &size) != 0) return -1;
  if (type == ERL_STRING_EXT) {
    if (size > CB_MAX_THREADS) return -1;
    char s[CB_MAX_THREADS + 1];
    if (ei_decode_string(buf, idx, s) != 0) return -1;
    for (int i = 0; i < size; i++) cpus[i] = (unsigned char)s[i];
    *ncpus = size;
    return 0;
  }
  int arity;
  if (ei_decode_list_header(buf, idx, &arity) != 0 || arity > CB_MAX_THREADS) return -1;
  for (int i = 0; i < arity; i++) {
    long v;
    if (ei_decode_long(buf, idx, &v) != 0 || v < 0 || v > 65535) return -1;
    cpus[i] = (int)v;
  }
  if (arity > 0) {
    int tail; /* a proper list ends with [] */
    if (ei_decode_list_header(buf, idx, &tail) != 0 || tail != 0) return -1;
  }
  *ncpus = arity;
  return 0;
}

static int decode_opts(const char *buf, int *idx, cb_config_t *cfg, char *host, size_t hostlen, int *cpus) {
  int arity;
  if (ei_decode_map_header(buf, idx, &arity) != 0) return -1;
  cb_config_init(cfg);
  cfg->port = 0;
  for (int i = 0; i < arity; i++) {
    char key[MAXATOMLEN_UTF8];
    unsigned long long u;
    if (ei_decode_atom(buf, idx, key) != 0) return -1;
    if (strcmp(key, "ip") == 0) {
      int type, size;
      long len;
      if (ei_get_type(buf, idx, &type, &size) != 0 || type != ERL_BINARY_EXT || size <= 0 ||
          (size_t)size >= hostlen || ei_decode_binary(buf, idx, host, &len) != 0)
        return -1;
      host[len] = '\0';
      cfg->host = host;
    } else if (strcmp(key, "cpus") == 0) {
      int n = 0;
      if (decode_cpus(buf, idx, cpus, &n) != 0 || n < 0) return -1;
      cfg->cpus = n ? cpus : NULL;
      cfg->ncpus = n;
    } else if (strcmp(key, "enable_h2") == 0) {
      int b;
      if (ei_decode_boolean(buf, idx, &b) != 0) return -1;
      cfg->enable_h2 = b;
    } else if (strcmp(key, "port") == 0) {
      if (decode_uint(buf, idx, 65535, &u)) return -1;
      cfg->port = (int)u;
    } else if (strcmp(key, "threads") == 0) {
      if (decode_uint(buf, idx, CB_MAX_THREADS, &u)) return -1;
      cfg->threads = (int)u;
    } else if (strcmp(key, "backlog") == 0) {
      if (decode_uint(buf, idx, 65535, &u)) return -1;
      cfg->backlog = (int)u;
    } else if (strcmp(key, "max_header_bytes") == 0) {
      if (decode_uint(buf, idx, SIZE_MAX, &u)) return -1;
      cfg->max_header_bytes = (size_t)u;
    } else if (strcmp(key, "max_body_bytes") == 0) {
      if (decode_uint(buf, idx, SIZE_MAX, &u)) return -1;
      cfg->max_body_bytes = (size_t)u;
    } else if (strcmp(key, "header_timeout_ms") == 0) {
      if (decode_uint(buf, idx, UINT32_MAX, &u)) return -1;
      cfg->header_timeout_ms = (unsigned)u;
    } else if (strcmp(key, "idle_timeout_ms") == 0) {
      if (decode_uint(buf, idx, UINT32_MAX, &u)) return -1;
      cfg->idle_timeout_ms = (unsigned)u;
    } else if (strcmp(key, "stop_timeout_ms") == 0) {
      if (decode_uint(buf, idx, UINT32_MAX, &u)) return -1;
      cfg->stop_timeout_ms = (unsigned)u;
    } else if (strcmp(key, "h2_max_concurrent_streams") == 0) {
      if (decode_uint(buf, idx, UINT32_MAX, &u)) return -1;
      cfg->h2_max_concurrent_streams = (unsigned)u;
    } else {
      return -1;
    }
  }
  return 0;
}

/* Restricts this process to the engine's CPUs before the engine starts its threads (they inherit it). */
static void pin_process(const cb_config_t *cfg) {
  if (cfg->ncpus == 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int i = 0; i < cfg->ncpus; i++)
    if (cfg->cpus[i] >= 0 && cfg->cpus[i] < CPU_SETSIZE) CPU_SET(cfg->cpus[i], &set);
  /* Best effort: a CPU outside our allowed set makes the engine's own pinning report the error. */
  (void)sched_setaffinity(0, sizeof set, &set);
}

/* ---- Commands ---- */

static void do_start(const char *buf, int *idx) {
  cb_config_t cfg;
  char host[64];
  int cpus[CB_MAX_THREADS];
  if (decode_opts(buf, idx, &cfg, host, sizeof host, cpus) != 0) die(EXIT_MALFORMED);
  if (server != NULL) {
    ei_x_buff x;
    new_reply(&x);
    ei_x_encode_tuple_header(&x, 2);
    ei_x_encode_atom(&x, "error");
    ei_x_encode_atom(&x, "already_started");
    send_reply(&x);
    return;
  }
  pin_process(&cfg);
  int err = cb_server_start(&cfg, &server);
  if (err < 0) {
    server = NULL;
    reply_error(err);
    return;
  }
  int threads = cb_server_threads(server);
  ei_x_buff x;
  new_reply(&x);
  ei_x_encode_tuple_header(&x, 4);
  ei_x_encode_atom(&x, "ok");
  ei_x_encode_long(&x, cb_server_port(server));
  ei_x_encode_long(&x, threads);
  for (int i = 0; i < threads; i++) {
    ei_x_encode_list_header(&x, 1);
    ei_x_encode_long(&x, cb_server_worker_cpu(server, i));
  }
  ei_x_encode_empty_list(&x);
  send_reply(&x);
}

static void encode_counters(ei_x_buff *x, const uint64_t *v, int n, const char *(*name)(int)) {
  ei_x_encode_map_header(x, n);
  for (int i = 0; i < n; i++) {
    ei_x_encode_atom(x, name(i));
    ei_x_encode_ulonglong(x, v[i]);
  }
}

/* Requests by route name; a name that repeats (stubs may share one) is added up into its first entry. */
static void encode_route_counts(ei_x_buff *x, const cb_route_counts_t *rc) {
  size_t n = 0;
  for (size_t i = 0; i < rc->count; i++) {
    size_t k = 0;
    while (k < i && strcmp(rc->items[k].name.ptr, rc->items[i].name.ptr) != 0) k++;
    if (k == i) n++;
  }
  ei_x_encode_map_header(x, (long)n);
  for (size_t i = 0; i < rc->count; i++) {
    size_t k = 0;
    while (k < i && strcmp(rc->items[k].name.ptr, rc->items[i].name.ptr) != 0) k++;
    if (k < i) continue;
    uint64_t sum = 0;
    for (size_t j = i; j < rc->count; j++)
      if (strcmp(rc->items[j].name.ptr, rc->items[i].name.ptr) == 0) sum += rc->items[j].requests;
    ei_x_encode_atom_len(x, rc->items[i].name.ptr, (int)rc->items[i].name.len);
    ei_x_encode_ulonglong(x, sum);
  }
}

static void do_stats(void) {
  cb_stats_t st;
  cb_route_counts_t *rc = NULL;
  if (server == NULL || cb_server_stats(server, &st) != 0 || cb_server_route_counts(server, &rc) != 0) {
    ei_x_buff x;
    new_reply(&x);
    ei_x_encode_tuple_header(&x, 2);
    ei_x_encode_atom(&x, "error");
    ei_x_encode_atom(&x, "stopped");
    send_reply(&x);
    return;
  }
  const struct {
    const char *name;
    uint64_t value;
  } scalars[] = {
      {"conns_accepted", st.conns_accepted}, {"conns_open", st.conns_open},
      {"conns_closed", st.conns_closed},     {"requests", st.requests},
      {"bytes_read", st.bytes_read},         {"bytes_written", st.bytes_written},
      {"status_400", st.status_400},         {"status_404", st.status_404},
      {"status_405", st.status_405},         {"status_413", st.status_413},
      {"status_431", st.status_431},         {"timeouts", st.timeouts},
      {"resets", st.resets},                 {"h2_errors", st.h2_errors},
      {"accept_backoffs", st.accept_backoffs},
  };
  int nscalars = (int)(sizeof scalars / sizeof scalars[0]);
  ei_x_buff x;
  new_reply(&x);
  ei_x_encode_tuple_header(&x, 2);
  ei_x_encode_atom(&x, "ok");
  ei_x_encode_map_header(&x, nscalars + 3);
  for (int i = 0; i < nscalars; i++) {
    ei_x_encode_atom(&x, scalars[i].name);
    ei_x_encode_ulonglong(&x, scalars[i].value);
  }
  ei_x_encode_atom(&x, "requests_by_route");
  encode_route_counts(&x, rc);
  cb_route_counts_free(rc);
  ei_x_encode_atom(&x, "conns_by_proto");
  encode_counters(&x, st.conns_by_proto, CB_PROTO_COUNT, cb_proto_name);
  ei_x_encode_atom(&x, "requests_by_proto");
  encode_counters(&x, st.requests_by_proto, CB_PROTO_COUNT, cb_proto_name);
  send_reply(&x);
}

static void do_stop(void) {
  if (server != NULL) cb_server_stop(server);
  server = NULL;
  ei_x_buff x;
  new_reply(&x);
  ei_x_encode_atom(&x, "ok");
  send_reply(&x);
}

/* One frame: the whole term must be consumed, or it is malformed. */
static void dispatch(const char *buf, int len) {
  int idx = 0, version, arity, type, size;
  char cmd[MAXATOMLEN_UTF8];
  if (ei_decode_version(buf, &idx, &version) != 0 || ei_get_type(buf, &idx, &type, &size) != 0)
    die(EXIT_MALFORMED);
  if (type == ERL_ATOM_EXT || type == ERL_SMALL_ATOM_EXT || type == ERL_ATOM_UTF8_EXT ||
      type == ERL_SMALL_ATOM_UTF8_EXT) {
    if (ei_decode_atom(buf, &idx, cmd) != 0) die(EXIT_MALFORMED);
    if (idx != len) die(EXIT_MALFORMED);
    if (strcmp(cmd, "stats") == 0)
      do_stats();
    else if (strcmp(cmd, "stop") == 0)
      do_stop();
    else
      die(EXIT_MALFORMED);
    return;
  }
  if (ei_decode_tuple_header(buf, &idx, &arity) != 0 || arity != 2 || ei_decode_atom(buf, &idx, cmd) != 0 ||
      strcmp(cmd, "start") != 0)
    die(EXIT_MALFORMED);
  int opts_idx = idx;
  if (ei_skip_term(buf, &idx) != 0 || idx != len) die(EXIT_MALFORMED);
  do_start(buf, &opts_idx);
}

int main(void) {
  if (ei_init() != 0) return EXIT_NOMEM;
  static char buf[MAX_FRAME + 4];
  size_t have = 0;
  for (;;) {
    ssize_t n = read(STDIN_FILENO, buf + have, sizeof buf - have);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) die(EXIT_IO);
    if (n == 0) die(have == 0 ? 0 : EXIT_MALFORMED); /* EOF: the node closed the port or died */
    have += (size_t)n;
    /* Dispatch every complete frame and keep the remainder for the next read. */
    size_t off = 0;
    while (have - off >= 4) {
      const unsigned char *p = (const unsigned char *)buf + off;
      uint32_t len = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
      if (len > MAX_FRAME) die(EXIT_TOO_LARGE);
      if (have - off - 4 < len) break;
      dispatch(buf + off + 4, (int)len);
      off += 4 + len;
    }
    memmove(buf, buf + off, have - off);
    have -= off;
  }
}
