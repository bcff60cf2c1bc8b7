/* Socket-less connections for tests and fuzz targets (testing.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "admin.h"
#include "engine.h"
#include "testing.h"

struct cb__testconn_s {
  cb_config_t cfg;
  cb__fixtures_t fx;
  cb__routes_t *routes;
  uint64_t conn_ids, jseq, jfloor;
  cb__worker_t *w;
  cb__conn_t *c;
  uint8_t freed; /* set by the connection when it is freed: tc->c is dangling from then on */
};

static int is_closed(cb__testconn_t *tc) {
  /* The connection is freed from a close callback; a closing one counts as closed already. */
  if (tc->freed) return 1;
  if (tc->c->closing) {
    uv_run(&tc->w->loop, UV_RUN_NOWAIT); /* let the close callbacks free it */
    return 1;
  }
  return 0;
}

/* A worker and one connection: over a sink (tls NULL), or over the TLS transport on the socket fd, polled by the
 * worker's loop as an accepted connection is. */
static cb__testconn_t *make(const cb_config_t *cfg, cb__sink_fn sink, void *arg, int fd, cb__tls_ctx_t *tls) {
  cb__testconn_t *tc = calloc(1, sizeof *tc);
  if (tc == NULL) goto fail;
  if (cfg)
    tc->cfg = *cfg;
  else
    cb_config_init(&tc->cfg);
  tc->cfg.host = "127.0.0.1";
  tc->cfg.cpus = NULL;
  tc->cfg.ncpus = 0;
  if (cb__fixtures_open(&tc->fx, cfg ? cfg->fixture_dir : NULL) != 0) goto fail;
  tc->w = malloc(sizeof *tc->w);
  if (tc->w == NULL) goto fail_fx;
  if (cb__worker_init_test(tc->w, &tc->cfg, &tc->fx, &cb__detect_ops, &cb__router) != 0) goto fail_w;
  /* The same route registry and table as a server's, for one worker. */
  tc->w->conn_ids = &tc->conn_ids;
  if (cb__routes_new(1, cb__fixture_routes, &tc->routes) != 0 || cb__rtable_build(tc->routes, &tc->w->table) != 0) goto fail_loop;
  tc->w->counters = cb__routes_counters(tc->routes, 0);
  if (tc->cfg.journal > 0 && cb__journal_new(&tc->cfg, &tc->jseq, &tc->jfloor, &tc->w->journal) != 0)
    goto fail_loop;
  cb__tport_t tr;
  if (tls == NULL) {
    tr = cb__tport_sink(sink, arg);
    tc->c = cb__conn_new(tc->w, &tr);
  } else {
    static const struct sockaddr peer = {.sa_family = AF_UNIX};
    if (cb__tport_tls(fd, tls, NULL, &tr) != 0) goto fail_loop; /* no handshake budget: one connection */
    tr.loop = &tc->w->loop;
    if (cb__conn_accept(tc->w, &tr, &peer) != 0) {
      tr.ops->close(&tr, 0); /* closes fd */
      fd = -1;
      goto fail_loop;
    }
    fd = -1; /* the connection's */
    tc->c = tc->w->conns; /* the one just accepted */
  }
  if (tc->c == NULL) goto fail_loop;
  tc->c->freed_flag = &tc->freed;
  return tc;
fail_loop:
  cb__worker_close_test(tc->w);
  cb__rtable_retire(tc->w->table, 0);
  cb__journal_free(tc->w->journal);
  cb__routes_free(tc->routes);
fail_w:
  free(tc->w);
fail_fx:
  cb__fixtures_close(&tc->fx);
fail:
  free(tc);
  if (tls != NULL && fd >= 0) close(fd);
  return NULL;
}

cb__testconn_t *cb__testconn_new(const cb_config_t *cfg, cb__sink_fn sink, void *arg) {
  return make(cfg, sink, arg, -1, NULL);
}

cb__testconn_t *cb__testconn_new_tls(const cb_config_t *cfg, int fd, cb__tls_ctx_t *ctx) {
  if (ctx == NULL) return NULL;
  return make(cfg, NULL, NULL, fd, ctx);
}

int cb__testconn_feed(cb__testconn_t *tc, const char *data, size_t len) {
  if (is_closed(tc)) return 1;
  /* As from a socket: the bytes are valid only during the call (a real read buffer is reused by the next
   * read). A copy, scribbled over and freed afterwards, makes a reference kept past the call show up (wrong
   * bytes, or a use after free under the sanitizers). */
  char *copy = len > 0 ? malloc(len) : NULL;
  if (len > 0 && copy == NULL) {
    cb__conn_input(tc->c, data, len);
    return is_closed(tc);
  }
  if (len > 0) memcpy(copy, data, len);
  cb__conn_input(tc->c, copy ? copy : data, len);
  if (len > 0) memset(copy, 0xA5, len);
  free(copy);
  return is_closed(tc);
}

int cb__testconn_holds(cb__testconn_t *tc) {
  if (is_closed(tc)) return 0;
  return (tc->c->proto_state != NULL ? 1 : 0) | (tc->c->out.block != NULL ? 2 : 0);
}

int cb__testconn_rest(cb__testconn_t *tc) {
  if (is_closed(tc)) return 1;
  cb__conn_rest_now(tc->c);
  return is_closed(tc);
}

int cb__testconn_eof(cb__testconn_t *tc) {
  if (is_closed(tc)) return 1;
  cb__conn_input_eof(tc->c);
  return is_closed(tc);
}

int cb__testconn_run(cb__testconn_t *tc, int until_idle) {
  if (is_closed(tc)) return 1;
  if (!until_idle) {
    cb__worker_turn(tc->w, 1); /* a TLS connection's socket is in the worker's set, not libuv's */
  } else {
    /* Run while the connection is open and a timer other than its own timeout is pending. The date timer
     * is unreferenced; the connection's timer is referenced, so stop at its turn. */
    while (!is_closed(tc)) {
      uv_unref((uv_handle_t *)&tc->c->timer);
      int more = uv_run(&tc->w->loop, UV_RUN_ONCE);
      if (tc->freed) break;
      if (!tc->c->closing) uv_ref((uv_handle_t *)&tc->c->timer);
      if (!more) break;
    }
  }
  return is_closed(tc);
}

void cb__testconn_set_date(cb__testconn_t *tc, const char *imf) {
  cb__worker_t *w = tc->w;
  int n = snprintf(w->date_line, sizeof w->date_line, "date: %s\r\n", imf);
  w->date_len = n > 0 && (size_t)n < sizeof w->date_line ? (size_t)n : 0;
  w->date_gen++;
}

int cb__testconn_stall(cb__testconn_t *tc, int stalled) {
  if (is_closed(tc)) return 1;
  tc->c->tr.stalled = (uint8_t)(stalled != 0);
  if (!stalled) cb__conn_after(tc->c); /* the writable event a socket would give */
  return is_closed(tc);
}

int cb__testconn_unstall_unseen(cb__testconn_t *tc) {
  if (is_closed(tc)) return 1;
  tc->c->tr.stalled = 0;
  return 0;
}

size_t cb__testconn_queued(cb__testconn_t *tc) { return is_closed(tc) ? 0 : tc->c->out.bytes; }

uint64_t cb__testconn_pace_wakes(cb__testconn_t *tc) { return tc->w->pace_wakes; }

uint64_t cb__server_flushes(cb_server_t *srv) {
  uint64_t n = 0;
  for (int i = 0; i < srv->nworkers; i++) n += __atomic_load_n(&srv->workers[i]->flushes, __ATOMIC_RELAXED);
  return n;
}

static void reply_queued_call(cb__worker_t *w, cb__call_t *call) {
  cb_reqref_t ref = *(const cb_reqref_t *)call->arg;
  if ((int)(ref >> 56) == w->index) call->out = (void *)(uintptr_t)cb__deferred_queued(w, ref);
  cb__call_done(call);
}

size_t cb__server_reply_queued(cb_server_t *srv, cb_reqref_t ref) {
  if ((int)(ref >> 56) >= srv->nworkers) return SIZE_MAX;
  cb__call_t *calls = calloc((size_t)srv->nworkers, sizeof *calls);
  if (calls == NULL || cb__call_all(srv, reply_queued_call, &ref, calls) != 0) {
    free(calls);
    return SIZE_MAX;
  }
  size_t n = (size_t)(uintptr_t)calls[ref >> 56].out;
  free(calls);
  return n;
}

static void longest_timer(uv_handle_t *h, void *arg) {
  if (h->type != UV_TIMER || !uv_is_active(h)) return;
  uint64_t due = uv_timer_get_due_in((uv_timer_t *)h);
  if (due > *(uint64_t *)arg) *(uint64_t *)arg = due;
}

uint64_t cb__testconn_timer_max(cb__testconn_t *tc) {
  uint64_t max = 0;
  uv_walk(&tc->w->loop, longest_timer, &max);
  return max;
}

void cb__testconn_stats(cb__testconn_t *tc, cb_stats_t *out) {
  *out = tc->w->stats;
  out->conns_open = out->conns_accepted - out->conns_closed;
}

uint64_t cb__testconn_route_count(cb__testconn_t *tc, const char *name) {
  int n;
  uint64_t sum = 0;
  cb__route_t **fx = cb__routes_fixtures(tc->routes, &n);
  cb__route_t *all[64];
  int k = 0;
  for (int i = 0; i < n && k < 63; i++) all[k++] = fx[i];
  all[k++] = cb__routes_not_found(tc->routes);
  for (int i = 0; i < k; i++)
    if (strcmp(all[i]->name, name) == 0)
      sum += cb__routes_count(tc->routes, 2 * all[i]->slot) + cb__routes_count(tc->routes, 2 * all[i]->slot + 1);
  return sum;
}

int cb__testconn_route_add(cb__testconn_t *tc, const cb_stub_t *stub, uint64_t *id) {
  int err = cb__stub_append(tc->routes, stub, id);
  if (err) return err;
  /* One worker, driven by this thread: the new table is swapped in directly instead of through a queue. */
  cb__rtable_t *t;
  cb__routes_lock(tc->routes);
  err = cb__rtable_build(tc->routes, &t);
  cb__routes_unlock(tc->routes);
  if (err) return err;
  cb__rtable_t *old = tc->w->table;
  tc->w->table = t;
  cb__rtable_retire(old, 0);
  return 0;
}

int cb__testconn_free(cb__testconn_t *tc) {
  int rc = cb__worker_close_test(tc->w);
  cb__rtable_retire(tc->w->table, 0);
  cb__journal_free(tc->w->journal);
  cb__routes_free(tc->routes);
  cb__fixtures_close(&tc->fx);
  free(tc->w);
  free(tc);
  return rc;
}

int cb__testconn_near(cb__testconn_t *tc, const char *method, const char *target, const char *const *hdrs, int nhdrs,
                      char out[][256], int max) {
  return cb__testconn_near_counted(tc, method, target, hdrs, nhdrs, out, max, NULL);
}

int cb__testconn_near_counted(cb__testconn_t *tc, const char *method, const char *target, const char *const *hdrs,
                              int nhdrs, char out[][256], int max, uint64_t *work) {
  cb__hdr_t h[16];
  cb__req_t r;
  memset(&r, 0, sizeof r);
  if (nhdrs > 16) nhdrs = 16;
  for (int i = 0; i < nhdrs; i++) {
    const char *colon = strchr(hdrs[i], ':');
    h[i] = (cb__hdr_t){hdrs[i], (size_t)(colon - hdrs[i]), colon + 1, strlen(colon + 1)};
  }
  const char *q = strchr(target, '?');
  r.path = target;
  r.target_len = strlen(target);
  r.path_len = q ? (size_t)(q - target) : r.target_len;
  r.method = (uint16_t)cb_method_bit((cb_str_t){method, strlen(method)});
  r.headers = h;
  r.nheaders = nhdrs;
  r.content_length = -1;
  cb__near_t near[CB__NEAR_MAX];
  int n = cb__near_misses(tc->w->table, &r, near, work);
  for (int i = 0; i < n && i < max; i++) {
    int k = snprintf(out[i], 256, "%.*s %u: ", (int)near[i].route->name_len, near[i].route->name, near[i].score);
    if (k > 0 && k < 256) cb__near_text(&near[i], out[i] + k, 256 - (size_t)k);
  }
  return n;
}

void cb__test_admin_reset_hook(void (*fn)(void *arg), void *arg) {
  /* Atomic: the admin thread reads them, and what orders the two threads (a socket) is no lock a race detector
   * sees. */
  __atomic_store_n(&cb__admin_reset_hook_arg, arg, __ATOMIC_RELEASE);
  __atomic_store_n(&cb__admin_reset_hook, fn, __ATOMIC_RELEASE);
}
