/* cb_server_*: configuration, the start handshake, stop, and the stats sum. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "admin.h"
#include "engine.h"
#include "tls_server.h"

static int online_cpus(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : (n > CB_MAX_THREADS ? CB_MAX_THREADS : (int)n);
}

static int set_port(struct sockaddr_storage *ss, int port) {
  if (ss->ss_family == AF_INET6)
    ((struct sockaddr_in6 *)ss)->sin6_port = htons((uint16_t)port);
  else
    ((struct sockaddr_in *)ss)->sin_port = htons((uint16_t)port);
  return 0;
}

/* An address literal, or else a name: its first IPv4 address, or its first IPv6 one when it has no IPv4
 * address (a fixture bound to "localhost" should be reachable as 127.0.0.1, whatever order the resolver
 * prefers). */
static int parse_host(const char *host, int port, struct sockaddr_storage *ss, socklen_t *len) {
  memset(ss, 0, sizeof *ss);
  struct sockaddr_in *a4 = (struct sockaddr_in *)ss;
  struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;
  if (inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
    a4->sin_family = AF_INET;
    *len = sizeof *a4;
    return set_port(ss, port);
  }
  if (inet_pton(AF_INET6, host, &a6->sin6_addr) == 1) {
    a6->sin6_family = AF_INET6;
    *len = sizeof *a6;
    return set_port(ss, port);
  }
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
  int rc = getaddrinfo(host, NULL, &hints, &res);
  if (rc != 0) return rc == EAI_MEMORY ? UV_ENOMEM : UV_EAI_NONAME;
  const struct addrinfo *pick = NULL;
  for (const struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next)
    if (ai->ai_family == AF_INET && (pick = ai) != NULL) break;
  for (const struct addrinfo *ai = res; pick == NULL && ai != NULL; ai = ai->ai_next)
    if (ai->ai_family == AF_INET6) pick = ai;
  int err = UV_EAI_NONAME;
  if (pick != NULL && pick->ai_addrlen <= sizeof *ss) {
    memcpy(ss, pick->ai_addr, pick->ai_addrlen);
    *len = pick->ai_addrlen;
    err = set_port(ss, port);
  }
  freeaddrinfo(res);
  return err;
}

/* A socket bound to addr. reuseport: join the group of the server's other workers. */
static int bind_socket(const struct sockaddr_storage *ss, socklen_t len, int reuseport, int backlog, int *out) {
  int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return uv_translate_sys_error(errno);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (reuseport && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) != 0) goto fail;
  if (bind(fd, (const struct sockaddr *)ss, len) != 0) goto fail;
  if (backlog >= 0 && listen(fd, backlog) != 0) goto fail;
  *out = fd;
  return 0;
fail:;
  int err = uv_translate_sys_error(errno);
  close(fd);
  return err;
}

static int bound_port(int fd) {
  struct sockaddr_storage ss;
  socklen_t len = sizeof ss;
  if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0) return -1;
  return ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                        : ((struct sockaddr_in *)&ss)->sin_port);
}

/* Binds one listening socket per worker, all on the same port; *bound: the port (the kernel's pick for 0). */
static int open_port(cb_server_t *srv, int port, int *fds, int *bound) {
  struct sockaddr_storage ss;
  socklen_t len;
  int err = parse_host(srv->cfg.host, port, &ss, &len);
  if (err) return err;
  for (int i = 0; i < srv->nworkers; i++) fds[i] = -1;
  if (port != 0) {
    /* Sockets of one user that all set SO_REUSEPORT share a port silently: a second server would join ours
     * instead of failing. A probe bound without it fails with EADDRINUSE when anyone listens there. */
    int probe;
    err = bind_socket(&ss, len, 0, -1, &probe);
    if (err) return err;
    close(probe);
  }
  for (int i = 0; i < srv->nworkers; i++) {
    err = bind_socket(&ss, len, 1, srv->cfg.backlog, &fds[i]);
    if (err) goto fail;
    if (i == 0) {
      *bound = bound_port(fds[0]);
      if (*bound <= 0) {
        err = UV_EINVAL;
        goto fail;
      }
      /* Port 0: the other workers join the port the kernel picked. */
      set_port(&ss, *bound);
    }
  }
  return 0;
fail:
  for (int i = 0; i < srv->nworkers; i++)
    if (fds[i] >= 0) {
      close(fds[i]);
      fds[i] = -1;
    }
  return err;
}

/* Closes the sockets of ls that no worker took. */
static void close_lsocks(const cb_server_t *srv, cb__lsocks_t *ls) {
  for (int k = 0; k < ls->n; k++)
    for (int i = 0; i < srv->nworkers; i++)
      if (ls->fd[k][i] >= 0) {
        close(ls->fd[k][i]);
        ls->fd[k][i] = -1;
      }
}

/* The server's listeners, a socket per worker each: the main port (cleartext, or TLS with cfg.tls alone), then the
 * TLS port of cfg.tls_port. port and tls_port: what to bind (srv->port and srv->tls_port again for up). */
static int open_listeners(cb_server_t *srv, int port, int tls_port, cb__lsocks_t *ls) {
  const cb_config_t *cfg = &srv->cfg;
  ls->n = 0;
  ls->tls[0] = cfg->tls_port < 0 ? srv->tls : NULL;
  ls->tls[1] = srv->tls;
  for (int k = 0; k < CB__LISTENERS; k++)
    for (int i = 0; i < srv->nworkers; i++) ls->fd[k][i] = -1;
  int err = open_port(srv, port, ls->fd[0], &srv->port);
  if (err) return err;
  ls->n = 1;
  if (cfg->tls_port >= 0) {
    err = open_port(srv, tls_port, ls->fd[1], &srv->tls_port);
    if (err) {
      close_lsocks(srv, ls);
      return err;
    }
    ls->n = 2;
  }
  return 0;
}

static void free_server(cb_server_t *srv) {
  if (srv->workers != NULL) {
    for (int i = 0; i < srv->nworkers; i++) {
      if (srv->workers[i] == NULL) continue;
      cb__journal_free(srv->workers[i]->journal);
      free(srv->workers[i]);
    }
    free(srv->workers);
  }
  /* Every table was let go of by the workers (or never handed out): the routes go with the registry. */
  cb__routes_free(srv->routes);
  cb__fixtures_close(&srv->fx);
  cb__server_tls_close(srv);
  cb__recorder_free(srv->recorder);
  if (srv->api_mu_ok) uv_mutex_destroy(&srv->api_mu);
  free(srv);
}

/* cfg.proxy_to: the catch-all proxy stub, below every other stub (docs/record.md). */
static int add_proxy_all(cb_server_t *srv, const cb_config_t *cfg) {
  const char *url = cfg->proxy_to, *ca = cfg->proxy_ca;
  cb_proxy_t p = {.to = {url, strlen(url)}, .record = cfg->record_to != NULL, .insecure = cfg->proxy_insecure,
                  .ca_file = {ca, ca ? strlen(ca) : 0}, .protocol = cfg->proxy_protocol,
                  .pipeline = cfg->proxy_pipeline};
  cb_stub_t st = {.name = CB_S("proxy_all"), .match = {.path = CB_S("/*"), .priority = -1000000},
                  .response = {.proxy = &p}};
  uint64_t id;
  return cb_server_route_add(srv, &st, &id);
}

int cb_server_start(const cb_config_t *cfg, cb_server_t **out) {
  if (cfg == NULL || out == NULL) return UV_EINVAL;
  int err = cb_config_check(cfg, NULL);
  if (err) return err;

  cb_server_t *srv = calloc(1, sizeof *srv);
  if (srv == NULL) return UV_ENOMEM;
  for (int i = 0; i < CB__FILE_COUNT; i++) srv->fx.fd[i] = -1;
  srv->cfg = *cfg;
  strcpy(srv->host, cfg->host);
  srv->cfg.host = srv->host;
  snprintf(srv->admin_host, sizeof srv->admin_host, "%s", cfg->admin_host ? cfg->admin_host : "127.0.0.1");
  srv->cfg.admin_host = srv->admin_host;
  memcpy(srv->cpus, cfg->cpus ? cfg->cpus : srv->cpus, (size_t)cfg->ncpus * sizeof(int));
  srv->cfg.cpus = srv->cpus;
  srv->cfg.fixture_dir = NULL; /* not kept: only read here */
  srv->cfg.tls_cert_file = srv->cfg.tls_key_file = NULL;
  srv->nworkers = cfg->threads ? cfg->threads : online_cpus();

  cb__lsocks_t ls;
  ls.n = 0;
  int started = 0;
  srv->workers = calloc((size_t)srv->nworkers, sizeof *srv->workers);
  if (srv->workers == NULL) {
    free_server(srv);
    return UV_ENOMEM;
  }
  err = cb__fixtures_open(&srv->fx, cfg->fixture_dir);
  if (err == 0) err = cb__server_tls_open(srv, cfg, NULL, 0);
  if (err) {
    free_server(srv);
    return err;
  }
  if (uv_mutex_init(&srv->api_mu) != 0) {
    free_server(srv);
    return UV_ENOMEM;
  }
  srv->api_mu_ok = 1;
  if ((err = cb__recorder_new(cfg->record_to, &srv->recorder)) != 0) {
    free_server(srv);
    return err;
  }
  srv->cfg.record_to = cb__recorder_file(srv->recorder);
  srv->cfg.proxy_to = srv->cfg.proxy_ca = NULL; /* read once, below */
  cb__rtable_t *table = NULL;
  err = cb__routes_new(srv->nworkers, cb__fixture_routes, &srv->routes);
  if (err == 0) err = cb__rtable_build(srv->routes, &table);
  if (err) {
    free_server(srv);
    return err;
  }
  err = open_listeners(srv, cfg->port, cfg->tls_port, &ls);
  if (err) {
    for (int i = 0; i < srv->nworkers; i++) cb__rtable_retire(table, i);
    free_server(srv);
    return err;
  }
  int inited = 0;
  for (int i = 0; i < srv->nworkers; i++) {
    /* Workers are big (their read buffer is inside) and must not move: one allocation each. */
    srv->workers[i] = malloc(sizeof(cb__worker_t));
    if (srv->workers[i] == NULL) {
      err = UV_ENOMEM;
      break;
    }
    int cpu = cfg->ncpus > 0 ? cfg->cpus[i % cfg->ncpus] : -1;
    /* The layers meet here: connections start with protocol detection, requests reach the route table. */
    err = cb__worker_init(srv->workers[i], srv, &srv->cfg, &srv->fx, i, cpu, &cb__detect_ops, &cb__router);
    if (err) {
      free(srv->workers[i]);
      srv->workers[i] = NULL;
      break;
    }
    cb__worker_t *w = srv->workers[i];
    w->table = table;
    w->counters = cb__routes_counters(srv->routes, i);
    w->conn_ids = &srv->conn_ids;
    inited++;
    err = cb__worker_listen(w, &ls);
    if (err) break;
    for (int k = 0; k < ls.n; k++) ls.fd[k][i] = -1; /* the worker's now: its stop closes them */
    if (cfg->journal > 0) {
      err = cb__journal_new(&srv->cfg, &srv->jseq, &srv->jfloor, &w->journal);
      if (err) break;
    }
  }
  /* Workers that never got the table do not hold it: let go for them. */
  for (int i = inited; i < srv->nworkers; i++) cb__rtable_retire(table, i);
  if (err == 0) {
    for (; started < inited; started++) {
      err = cb__worker_start(srv->workers[started]);
      if (err) break;
    }
  }
  /* The handshake: each started worker has pinned itself (or failed to) before it reports ready. A pin that
   * did not happen fails the start: the same settings for every engine is the point of pinning. */
  for (int i = 0; i < started; i++) {
    int ready = cb__worker_wait_ready(srv->workers[i]);
    if (err == 0) err = ready;
  }
  if (err) {
    /* Undo: the started workers stop and are joined; the others never ran, so their loops are ours. */
    for (int i = 0; i < started; i++) cb__worker_post_stop(srv->workers[i]);
    for (int i = 0; i < started; i++) cb__worker_join(srv->workers[i]);
    for (int i = started; i < inited; i++) {
      cb__worker_t *w = srv->workers[i];
      cb__worker_post_stop(w);
      uv_run(&w->loop, UV_RUN_DEFAULT);
      uv_loop_close(&w->loop);
      cb__worker_destroy_sync(w);
      cb__rtable_retire(w->table, i);
    }
    close_lsocks(srv, &ls); /* those no worker took; the stop sequence closed the others */
    free_server(srv);
    return err;
  }
  if (cfg->proxy_to != NULL && (err = add_proxy_all(srv, cfg)) != 0) {
    cb_server_stop(srv);
    return err;
  }
  /* The admin API last: its thread calls this server's API, which needs the workers running. */
  if (cfg->admin && (err = cb__admin_start(srv, srv->admin_host, cfg->admin_port, &srv->admin)) != 0) {
    cb_server_stop(srv);
    return err;
  }
  *out = srv;
  return 0;
}

int cb_server_port(const cb_server_t *srv) { return srv ? srv->port : UV_EINVAL; }
int cb_server_tls_port(const cb_server_t *srv) {
  return srv == NULL ? UV_EINVAL : srv->tls == NULL ? 0 : srv->tls_port > 0 ? srv->tls_port : srv->port;
}
int cb_server_admin_port(const cb_server_t *srv) {
  return srv == NULL ? UV_EINVAL : srv->admin ? cb__admin_port(srv->admin) : 0;
}
int cb_server_threads(const cb_server_t *srv) { return srv ? srv->nworkers : UV_EINVAL; }

int cb_server_worker_cpu(const cb_server_t *srv, int i) {
  if (srv == NULL || i < 0 || i >= srv->nworkers) return -1;
  return srv->workers[i]->cpu;
}

int cb_server_stop_stats(cb_server_t *srv, cb_stats_t *final) {
  if (srv == NULL) return UV_EINVAL;
  cb__admin_stop(srv->admin); /* first: its thread calls this server */
  srv->admin = NULL;
  for (int i = 0; i < srv->nworkers; i++) cb__worker_post_stop(srv->workers[i]);
  for (int i = 0; i < srv->nworkers; i++) {
    cb__worker_join(srv->workers[i]);
    for (int k = 0; k < srv->workers[i]->nlst; k++) /* a stop closes them; a socket left is closed here */
      if (srv->workers[i]->lst[k].fd >= 0) close(srv->workers[i]->lst[k].fd);
  }
  if (final != NULL) cb_server_stats(srv, final); /* the workers are joined, their counters still here */
  free_server(srv);
  return 0;
}

int cb_server_stop(cb_server_t *srv) { return cb_server_stop_stats(srv, NULL); }
/* ---- down and up ---- */

static void down_call(cb__worker_t *w, cb__call_t *call) { cb__worker_down(w, call); }
static void up_call(cb__worker_t *w, cb__call_t *call) { cb__worker_up(w, call); }

int cb_server_down(cb_server_t *srv) {
  if (srv == NULL) return UV_EINVAL;
  if (cb__on_worker_thread()) return UV_EBUSY;
  uv_mutex_lock(&srv->api_mu);
  int err = 0;
  if (!srv->down) {
    cb__call_t *calls = malloc((size_t)srv->nworkers * sizeof *calls);
    err = calls ? cb__call_all(srv, down_call, NULL, calls) : UV_ENOMEM;
    free(calls);
    if (err == 0) srv->down = 1;
  }
  uv_mutex_unlock(&srv->api_mu);
  return err;
}

int cb_server_up(cb_server_t *srv) {
  if (srv == NULL) return UV_EINVAL;
  if (cb__on_worker_thread()) return UV_EBUSY;
  uv_mutex_lock(&srv->api_mu);
  int err = 0;
  if (srv->down) {
    /* The same ports again, with the probe that refuses a port someone took meanwhile. */
    cb__lsocks_t *ls = malloc(sizeof *ls);
    err = ls ? open_listeners(srv, srv->port, srv->tls_port, ls) : UV_ENOMEM;
    cb__call_t *calls = NULL;
    if (err == 0) {
      calls = malloc((size_t)srv->nworkers * sizeof *calls);
      err = calls ? cb__call_all(srv, up_call, ls, calls) : UV_ENOMEM;
      for (int i = 0; err == 0 && i < srv->nworkers; i++)
        if (calls[i].err) err = calls[i].err;
      /* A worker that listened took its sockets; one that failed (or never ran the call) left them here. */
      for (int i = 0; calls && i < srv->nworkers; i++)
        if (err == 0 || calls[i].err == 0)
          for (int k = 0; k < ls->n; k++) ls->fd[k][i] = -1;
      if (err) { /* back to down: whoever took its sockets closes them again */
        cb__call_t *undo = malloc((size_t)srv->nworkers * sizeof *undo);
        if (undo) cb__call_all(srv, down_call, NULL, undo);
        free(undo);
      }
      close_lsocks(srv, ls);
    }
    free(calls);
    free(ls);
    if (err == 0) srv->down = 0;
  }
  uv_mutex_unlock(&srv->api_mu);
  return err;
}

static uint64_t load(const uint64_t *p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }

int cb_server_stats(const cb_server_t *srv, cb_stats_t *out) {
  if (srv == NULL || out == NULL) return UV_EINVAL;
  memset(out, 0, sizeof *out);
  /* cb_stats_t is all uint64_t: sum it field by field as an array. */
  size_t n = sizeof *out / sizeof(uint64_t);
  uint64_t *dst = (uint64_t *)out;
  for (int i = 0; i < srv->nworkers; i++) {
    const uint64_t *src = (const uint64_t *)&srv->workers[i]->stats;
    for (size_t k = 0; k < n; k++) dst[k] += load(&src[k]);
  }
  out->conns_open = out->conns_accepted - out->conns_closed;
  /* The TLS context counts handshakes itself: they end in the transport, below the workers' counters. */
  cb__tls_ctx_handshakes(srv->tls, &out->tls_handshakes_full, &out->tls_handshakes_resumed);
  /* The recorder counts under its own lock: recordings are server-wide, not a worker's. */
  cb__record_counts_t rc;
  cb__record_counts(srv, &rc);
  out->recorded = rc.recorded;
  out->recorded_duplicates = rc.duplicates;
  out->record_skipped = rc.skipped;
  return 0;
}
