/* cbench_port: the C engine beside a BEAM node, spoken to over stdin/stdout with {packet, 4} frames of
 * ei-encoded terms (see erl/cbench_port.erl):
 *
 *   {start, Opts}                    ->  {ok, Port, Threads, Cpus} | {error, Reason}
 *   stats                            ->  {ok, StatsMap} | {error, stopped}
 *   stop                             ->  ok
 *   down | up                        ->  ok | {error, Reason}
 *   the control plane (port_calls.c, over the codec the NIF uses too): routes, stubs, scenarios, the
 *   journal, handler routes and their replies
 * and, unsolicited (port_deliver.c):     {cbench_journal, Seq} while listening; {cbench_requests, Id, [Req]},
 *                                        {cbench_body, Ref, Data, End} and {cbench_gone, Ref} for handler routes
 *
 * Opts is the map cbench_port:start/1 builds, keyed by the names of the engine's option table, each value
 * checked here again against that table: a bad one is answered {error, {bad_option, Key, Value, Allowed}}.
 * EOF on stdin means the node went away: the server is stopped and the program exits 0. A frame that does not
 * decode (not a map of atoms, an unknown command) is a bug on the other side, so the program exits with
 * EXIT_MALFORMED rather than guess; the arguments of the route and journal commands, checked field by field,
 * get {error, badarg} instead.
 * When Opts lists CPUs, the whole process (this thread and so every engine thread it starts) is first
 * restricted to that set, so that the port engine runs on the same CPUs as the node's schedulers.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <sys/uio.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "port.h"

/* Requests are small except a stub's body, which cbench_spec bounds at 64 MiB; anything larger is not from
 * cbench_port.erl. */
#define MAX_FRAME ((64u << 20) + (1u << 20))

cb_server_t *port_server;

void port_die(int status) {
  if (port_server != NULL) cb_server_stop(port_server);
  exit(status);
}

static pthread_mutex_t write_lock = PTHREAD_MUTEX_INITIALIZER;

/* One frame, length and term, written whole: 0, or -1 when stdout is gone. */
static int write_bytes(const char *bytes, size_t n_bytes) {
  unsigned char len[4] = {(unsigned char)(n_bytes >> 24), (unsigned char)(n_bytes >> 16),
                          (unsigned char)(n_bytes >> 8), (unsigned char)n_bytes};
  struct iovec iov[2] = {{len, 4}, {(void *)bytes, n_bytes}};
  int n = 2, rc = 0;
  pthread_mutex_lock(&write_lock);
  while (n > 0) {
    ssize_t w = writev(STDOUT_FILENO, iov, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      rc = -1;
      break;
    }
    while (n > 0 && (size_t)w >= iov[0].iov_len) { /* drop what was written */
      w -= (ssize_t)iov[0].iov_len;
      iov[0] = iov[1];
      n--;
    }
    if (n > 0) {
      iov[0].iov_base = (char *)iov[0].iov_base + w;
      iov[0].iov_len -= (size_t)w;
    }
  }
  pthread_mutex_unlock(&write_lock);
  return rc;
}

static int write_frame(ei_x_buff *x) {
  int rc = write_bytes(x->buff, (size_t)x->index);
  ei_x_free(x);
  return rc;
}

void port_send(ei_x_buff *x) {
  if (write_frame(x) != 0) port_die(EXIT_IO);
}

void port_send_from_worker(ei_x_buff *x) { (void)write_frame(x); }

void port_send_bytes_from_worker(char *bytes, size_t n) {
  (void)write_bytes(bytes, n);
  free(bytes);
}

void port_new(ei_x_buff *x) {
  if (ei_x_new_with_version(x) != 0) port_die(EXIT_NOMEM);
}

void port_begin(cb_ei_out_t *w, ei_x_buff *x) {
  port_new(x);
  cb_ei_out_init(w, x);
}

void port_answer(cb_ei_out_t *w) {
  if (cb_ei_out_done(w) != 0) port_die(EXIT_NOMEM);
  port_send(w->x);
}

void port_reply_error_atom(const char *atom) {
  cb_ei_out_t w;
  ei_x_buff x;
  port_begin(&w, &x);
  cb_codec_error_atom(&w.out, atom);
  port_answer(&w);
}

void port_reply_result(int err) {
  cb_ei_out_t w;
  ei_x_buff x;
  port_begin(&w, &x);
  cb_codec_result(&w.out, err);
  port_answer(&w);
}

/* The fixture route names, taken at start. */
cb_codec_fixture_t port_fixture;

/* ---- Decoding {start, Opts} ----
 *
 * Walks the engine's option table (cb_config_options()), as the NIF does: an option added there is decoded here
 * without an edit. A value of the wrong type or out of bounds is answered {error, {bad_option, Key, Value,
 * Allowed}}, the same term as the NIF's and the Erlang API's. */

/* cpus arrive as a list of integers, or as a string when every value is below 256 (term_to_binary's
 * STRING_EXT). */
static int decode_cpus(const char *buf, int *idx, const cb_option_t *o, int *cpus, int *ncpus) {
  int type, size;
  if (ei_get_type(buf, idx, &type, &size) != 0) return -1;
  if (type == ERL_STRING_EXT) {
    if (size > CB_MAX_THREADS) return -1;
    char s[CB_MAX_THREADS + 1];
    if (ei_decode_string(buf, idx, s) != 0) return -1;
    for (int i = 0; i < size; i++) cpus[i] = (unsigned char)s[i];
    *ncpus = size;
  } else {
    int arity;
    if (ei_decode_list_header(buf, idx, &arity) != 0 || arity > CB_MAX_THREADS) return -1;
    for (int i = 0; i < arity; i++) {
      unsigned long long v;
      if (ei_decode_ulonglong(buf, idx, &v) != 0 || v > o->max) return -1;
      cpus[i] = (int)v;
    }
    if (arity > 0) {
      int tail; /* a proper list ends with [] */
      if (ei_decode_list_header(buf, idx, &tail) != 0 || tail != 0) return -1;
    }
    *ncpus = arity;
  }
  for (int i = 0; i < *ncpus; i++)
    if ((unsigned long long)cpus[i] < o->min || (unsigned long long)cpus[i] > o->max) return -1;
  return 0;
}

/* The string options' bytes (the host, the TLS certificate and key files), each NUL-terminated, for cfg's
 * pointers while the server starts: room for every string option of the table at its longest. */
typedef struct {
  char buf[64 + 2 * 4096 + 256];
  size_t used;
} opt_strings_t;

static int decode_option(const char *buf, int *idx, const cb_option_t *o, cb_config_t *cfg, opt_strings_t *strs,
                         int *cpus) {
  unsigned long long u;
  int b, type, size, n;
  long len;
  switch (o->type) {
    case CB_OPT_UINT: return ei_decode_ulonglong(buf, idx, &u) == 0 && cb_config_set_uint(cfg, o, u) == 0 ? 0 : -1;
    case CB_OPT_BOOL: return ei_decode_boolean(buf, idx, &b) == 0 ? cb_config_set_uint(cfg, o, (uint64_t)b) : -1;
    case CB_OPT_HOST:
    case CB_OPT_STRING: {
      /* A binary, as cbench_opts makes it. */
      char *s = strs->buf + strs->used;
      if (ei_get_type(buf, idx, &type, &size) != 0 || type != ERL_BINARY_EXT || (uint64_t)size < o->min ||
          (uint64_t)size > o->max || (size_t)size >= sizeof strs->buf - strs->used ||
          ei_decode_binary(buf, idx, s, &len) != 0 || memchr(s, 0, (size_t)len) != NULL)
        return -1;
      s[len] = '\0';
      strs->used += (size_t)len + 1;
      memcpy((char *)cfg + o->offset, &s, sizeof s);
      return 0;
    }
    case CB_OPT_ENUM: {
      char name[MAXATOMLEN_UTF8];
      if (ei_decode_atom(buf, idx, name) != 0) return -1;
      for (int i = 0; o->names[i] != NULL; i++)
        if (strcmp(name, o->names[i]) == 0) return cb_config_set_uint(cfg, o, (uint64_t)i);
      return -1;
    }
    case CB_OPT_CPUS:
      if (decode_cpus(buf, idx, o, cpus, &n) != 0) return -1;
      cfg->cpus = n ? cpus : NULL;
      cfg->ncpus = n;
      return 0;
  }
  return -1;
}

static void encode_allowed(ei_x_buff *x, const cb_option_t *o) {
  switch (o->type) {
    case CB_OPT_UINT:
      ei_x_encode_tuple_header(x, 3);
      ei_x_encode_atom(x, "integer");
      ei_x_encode_ulonglong(x, o->min);
      ei_x_encode_ulonglong(x, o->max);
      return;
    case CB_OPT_BOOL: ei_x_encode_atom(x, "boolean"); return;
    case CB_OPT_HOST: ei_x_encode_atom(x, "address"); return;
    case CB_OPT_STRING:
      ei_x_encode_tuple_header(x, 2);
      ei_x_encode_atom(x, "string");
      ei_x_encode_ulonglong(x, o->max);
      return;
    case CB_OPT_CPUS:
      ei_x_encode_tuple_header(x, 2);
      ei_x_encode_atom(x, "list");
      ei_x_encode_tuple_header(x, 3);
      ei_x_encode_atom(x, "integer");
      ei_x_encode_ulonglong(x, o->min);
      ei_x_encode_ulonglong(x, o->max);
      return;
    case CB_OPT_ENUM: {
      int n = 0;
      while (o->names[n] != NULL) n++;
      ei_x_encode_tuple_header(x, 2);
      ei_x_encode_atom(x, "one_of");
      ei_x_encode_list_header(x, n);
      for (int i = 0; i < n; i++) ei_x_encode_atom(x, o->names[i]);
      ei_x_encode_empty_list(x);
      return;
    }
  }
}

/* {error, {bad_option, Key, Value, Allowed}}: Key and Value are the request's own bytes; Allowed is the row's
 * bounds, the names the engine takes (o == NULL: an unknown key), or the CPUs this process may run on. */
typedef enum { ALLOWED_ROW, ALLOWED_KNOWN, ALLOWED_AVAILABLE } allowed_kind;

static void reply_bad_option(const char *buf, int key_idx, int value_idx, int end_idx, const cb_option_t *o,
                             allowed_kind kind, const int *avail, int navail) {
  ei_x_buff x;
  port_new(&x);
  ei_x_encode_tuple_header(&x, 2);
  ei_x_encode_atom(&x, "error");
  ei_x_encode_tuple_header(&x, 4);
  ei_x_encode_atom(&x, "bad_option");
  ei_x_append_buf(&x, buf + key_idx, value_idx - key_idx);
  ei_x_append_buf(&x, buf + value_idx, end_idx - value_idx);
  if (kind == ALLOWED_ROW) {
    encode_allowed(&x, o);
  } else if (kind == ALLOWED_KNOWN) {
    int n;
    const cb_option_t *opts = cb_config_options(&n);
    ei_x_encode_tuple_header(&x, 2);
    ei_x_encode_atom(&x, "known");
    for (int i = 0; i < n; i++) {
      if (opts[i].flags & CB_OPT_F_EHTTPD_ONLY) continue;
      ei_x_encode_list_header(&x, 1);
      ei_x_encode_atom(&x, opts[i].name);
    }
    ei_x_encode_empty_list(&x);
  } else {
    ei_x_encode_tuple_header(&x, 2);
    ei_x_encode_atom(&x, "available");
    for (int i = 0; i < navail; i++) {
      ei_x_encode_list_header(&x, 1);
      ei_x_encode_long(&x, avail[i]);
    }
    ei_x_encode_empty_list(&x);
  }
  port_send(&x);
}

/* Decodes the options map into cfg. Returns 1 when it did; 0 after answering a bad option; -1 when the term is
 * not a map of atom keys (a bug on the other side). cpus_at: where the cpus key, its value and the value's end
 * are in buf (cpus_at[0] = -1: absent), to answer a pin the kernel refuses. */
static int decode_opts(const char *buf, int *idx, cb_config_t *cfg, opt_strings_t *strs, int *cpus,
                       int cpus_at[3]) {
  int arity;
  if (ei_decode_map_header(buf, idx, &arity) != 0) return -1;
  cb_config_init(cfg);
  cfg->port = 0;
  cpus_at[0] = -1;
  for (int i = 0; i < arity; i++) {
    char key[MAXATOMLEN_UTF8];
    int key_idx = *idx;
    if (ei_decode_atom(buf, idx, key) != 0) return -1;
    int value_idx = *idx, end_idx = value_idx;
    if (ei_skip_term(buf, &end_idx) != 0) return -1;
    const cb_option_t *o = cb_config_option(key);
    if (o == NULL || strcmp(o->name, key) != 0 || (o->flags & CB_OPT_F_EHTTPD_ONLY)) {
      reply_bad_option(buf, key_idx, value_idx, end_idx, NULL, ALLOWED_KNOWN, NULL, 0);
      return 0;
    }
    if (o->type == CB_OPT_CPUS) {
      cpus_at[0] = key_idx;
      cpus_at[1] = value_idx;
      cpus_at[2] = end_idx;
    }
    if (decode_option(buf, idx, o, cfg, strs, cpus) != 0) {
      reply_bad_option(buf, key_idx, value_idx, end_idx, o, ALLOWED_ROW, NULL, 0);
      return 0;
    }
    *idx = end_idx;
  }
  return 1;
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
  opt_strings_t strs = {.used = 0};
  int cpus[CB_MAX_THREADS], cpus_at[3];
  int decoded = decode_opts(buf, idx, &cfg, &strs, cpus, cpus_at);
  if (decoded < 0) port_die(EXIT_MALFORMED);
  if (decoded == 0) return;
  if (port_server != NULL) {
    ei_x_buff x;
    port_new(&x);
    ei_x_encode_tuple_header(&x, 2);
    ei_x_encode_atom(&x, "error");
    ei_x_encode_atom(&x, "already_started");
    port_send(&x);
    return;
  }
  /* The CPUs we may run on before pin_process narrows them, for the answer to a refused pin. */
  int avail[CB_MAX_THREADS];
  int navail = cb_cpus_allowed(avail, CB_MAX_THREADS);
  pin_process(&cfg);
  int err = cb_server_start(&cfg, &port_server);
  if (err < 0) {
    port_server = NULL;
    /* Every bound was checked while decoding, so CB_ETHREADS with a CPU list is a pin the kernel refused. */
    if (err == CB_ETHREADS && cfg.ncpus > 0 && cpus_at[0] >= 0) {
      reply_bad_option(buf, cpus_at[0], cpus_at[1], cpus_at[2], NULL, ALLOWED_AVAILABLE, avail,
                       navail < 0 ? 0 : (navail < CB_MAX_THREADS ? navail : CB_MAX_THREADS));
    } else {
      port_reply_result(err);
    }
    return;
  }
  cb_route_counts_t *rc;
  if (cb_server_route_counts(port_server, &rc) == 0) {
    cb_codec_fixture_take(&port_fixture, rc);
    cb_route_counts_free(rc);
  }
  int threads = cb_server_threads(port_server);
  ei_x_buff x;
  port_new(&x);
  ei_x_encode_tuple_header(&x, 8);
  ei_x_encode_atom(&x, "ok");
  ei_x_encode_long(&x, cb_server_port(port_server));
  ei_x_encode_long(&x, threads);
  for (int i = 0; i < threads; i++) {
    ei_x_encode_list_header(&x, 1);
    ei_x_encode_long(&x, cb_server_worker_cpu(port_server, i));
  }
  ei_x_encode_empty_list(&x);
  ei_x_encode_long(&x, cb_server_admin_port(port_server)); /* 0: no admin API */
  ei_x_encode_long(&x, cb_server_tls_port(port_server));   /* 0: no TLS */
  char why[192];
  ei_x_encode_boolean(&x, cb_server_ktls(port_server, why, sizeof why) == 1);
  ei_x_encode_binary(&x, why, (long)strlen(why)); /* empty when kernel TLS is tried */
  port_send(&x);
}

static void do_stats(void) {
  cb_stats_t st;
  cb_route_counts_t *rc = NULL;
  if (port_server == NULL || cb_server_stats(port_server, &st) != 0 || cb_server_route_counts(port_server, &rc) != 0) {
    port_reply_error_atom("stopped");
    return;
  }
  cb_ei_out_t w;
  ei_x_buff x;
  port_begin(&w, &x);
  w.out.ops->tuple(&w.out, 2);
  w.out.ops->atom(&w.out, "ok", 2);
  cb_codec_stats(&w.out, &port_fixture, &st, rc);
  cb_route_counts_free(rc);
  port_answer(&w);
}

static void do_stop(void) {
  if (port_server != NULL) cb_server_stop(port_server);
  port_server = NULL;
  port_reply_result(0);
}

/* Commands that need a started server answer {error, stopped} without one. */
static int started(void) {
  if (port_server != NULL) return 1;
  port_reply_error_atom("stopped");
  return 0;
}

static void atom_command(const char *cmd) {
  if (strcmp(cmd, "stats") == 0) {
    do_stats();
  } else if (strcmp(cmd, "stop") == 0) {
    do_stop();
  } else if (strcmp(cmd, "down") == 0) {
    if (started()) port_reply_result(cb_server_down(port_server));
  } else if (strcmp(cmd, "up") == 0) {
    if (started()) port_reply_result(cb_server_up(port_server));
  } else if (strcmp(cmd, "route_reset") == 0) {
    if (started()) port_route_reset();
  } else if (strcmp(cmd, "scenarios_reset") == 0) {
    if (started()) port_scenarios_reset();
  } else if (strcmp(cmd, "stubs") == 0) {
    if (started()) port_stubs();
  } else if (strcmp(cmd, "tls") == 0) {
    if (started()) port_tls();
  } else if (strcmp(cmd, "requests_clear") == 0) {
    if (started()) port_requests_clear();
  } else if (strcmp(cmd, "client_ca") == 0) {
    if (started()) port_client_ca();
  } else if (strcmp(cmd, "recorded") == 0) {
    if (started()) port_recorded();
  } else if (strcmp(cmd, "clear_recorded") == 0) {
    if (started()) port_clear_recorded();
  } else {
    port_die(EXIT_MALFORMED);
  }
}

/* {Cmd, Args...}: args is the index of the first argument. */
static void tuple_command(const char *cmd, int arity, const char *buf, int args) {
  if (strcmp(cmd, "start") == 0 && arity == 2) {
    do_start(buf, &args);
  } else if (strcmp(cmd, "route_add") == 0 && arity == 3) {
    if (started()) port_route_add(buf, args);
  } else if (strcmp(cmd, "scenario") == 0 && arity == 2) {
    if (started()) port_scenario(buf, args);
  } else if (strcmp(cmd, "client_cert") == 0 && arity == 2) {
    if (started()) port_client_cert(buf, args);
  } else if (strcmp(cmd, "save_stubs") == 0 && arity == 2) {
    if (started()) port_save_stubs(buf, args);
  } else if (strcmp(cmd, "load_stubs") == 0 && arity == 2) {
    if (started()) port_load_stubs(buf, args);
  } else if (strcmp(cmd, "scenario_set") == 0 && arity == 3) {
    if (started()) port_scenario_set(buf, args);
  } else if (strcmp(cmd, "route_remove") == 0 && arity == 2) {
    if (started()) port_route_remove(buf, args);
  } else if (strcmp(cmd, "requests") == 0 && arity == 2) {
    if (started()) port_requests(buf, args);
  } else if (strcmp(cmd, "journal_listen") == 0 && arity == 2) {
    if (started()) port_journal_listen(buf, args);
  } else if (strcmp(cmd, "handler_add") == 0 && arity == 4) {
    if (started()) port_handler_add(buf, args);
  } else if (strcmp(cmd, "handler_fail") == 0 && arity == 2) {
    if (started()) port_handler_fail(buf, args);
  } else if (strcmp(cmd, "reply") == 0 && arity == 2) {
    if (port_server != NULL) port_reply(buf, args); /* no answer, so none for a stopped server either */
  } else {
    port_die(EXIT_MALFORMED);
  }
}

/* One frame: the whole term must be consumed, or it is malformed. */
static void dispatch(const char *buf, int len) {
  int idx = 0, version, arity, type, size;
  char cmd[MAXATOMLEN_UTF8];
  if (ei_decode_version(buf, &idx, &version) != 0 || ei_get_type(buf, &idx, &type, &size) != 0)
    port_die(EXIT_MALFORMED);
  if (type == ERL_ATOM_EXT || type == ERL_SMALL_ATOM_EXT || type == ERL_ATOM_UTF8_EXT ||
      type == ERL_SMALL_ATOM_UTF8_EXT) {
    if (ei_decode_atom(buf, &idx, cmd) != 0 || idx != len) port_die(EXIT_MALFORMED);
    atom_command(cmd);
    return;
  }
  if (ei_decode_tuple_header(buf, &idx, &arity) != 0 || arity < 2 || ei_decode_atom(buf, &idx, cmd) != 0)
    port_die(EXIT_MALFORMED);
  int args = idx;
  /* The frames of answers come at the rate of requests: most are read in one pass (port_reply_frame.c). */
  if (arity == 2 && port_server != NULL && strcmp(cmd, "reply") == 0 && port_reply_fast(buf, args, len)) return;
  for (int i = 1; i < arity; i++)
    if (ei_skip_term(buf, &idx) != 0) port_die(EXIT_MALFORMED);
  if (idx != len) port_die(EXIT_MALFORMED);
  tuple_command(cmd, arity, buf, args);
}

int main(void) {
  if (ei_init() != 0) return EXIT_NOMEM;
  static char buf[MAX_FRAME + 4];
  size_t have = 0;
  for (;;) {
    ssize_t n = read(STDIN_FILENO, buf + have, sizeof buf - have);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) port_die(EXIT_IO);
    if (n == 0) port_die(have == 0 ? 0 : EXIT_MALFORMED); /* EOF: the node closed the port or died */
    have += (size_t)n;
    /* Dispatch every complete frame and keep the remainder for the next read. */
    size_t off = 0;
    while (have - off >= 4) {
      const unsigned char *p = (const unsigned char *)buf + off;
      uint32_t len = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
      if (len > MAX_FRAME) port_die(EXIT_TOO_LARGE);
      if (have - off - 4 < len) break;
      dispatch(buf + off + 4, (int)len);
      off += 4 + len;
    }
    if (off > 0) { /* a big frame arrives in many reads: move only what follows a dispatched one */
      memmove(buf, buf + off, have - off);
      have -= off;
    }
  }
}
