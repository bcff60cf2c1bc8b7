/* The NIF glue: Erlang terms to engine calls, the server resource, and owner monitoring (nif.h lists the
 * other files: the control plane over the codec, what the worker threads send).
 *
 * A server is a resource (nif_server_t) that owns one cb_server_t. The engine is stopped exactly once, by
 * whichever comes first: stop_nif/1 (a dirty I/O NIF, so joining the engine's threads never blocks a normal
 * scheduler), the owner's death (the monitor's down callback), or the destructor when the last reference is
 * garbage collected. The down callback and the destructor run on normal schedulers, so they do not stop the
 * engine themselves: they hand it to the reaper, one thread of this library that stops engines in the
 * background. unload joins the reaper after it has drained its queue, so no engine thread outlives the code it
 * runs (OTP 25 has no halt callback; the application's stop and these paths are the only way out).
 */
#include <stdio.h>
#include <string.h>

#include "nif.h"

#define DEFINE_ATOM(name) ERL_NIF_TERM atom_##name;
NIF_ATOMS(DEFINE_ATOM)
#undef DEFINE_ATOM

/* Option names come from the engine's option table: an option added there is decoded here without an edit. */
#define MAX_OPTIONS 64 /* room for the table's rows; load fails (LOAD_ATOMS) if it ever has more */
static const cb_option_t *options;
static int noptions;
static ERL_NIF_TERM atom_option[MAX_OPTIONS];

static ErlNifResourceType *server_type;

/* ---- The reaper: stops engines handed over by the down callback and the destructor. ---- */

typedef struct reap_s {
  struct reap_s *next;
  cb_server_t *srv;
  nif_listener_t *listener; /* the engine may call it until it is stopped: freed after */
} reap_t;

/* One reaper per mapping of this library: the statics are shared by every load of the same .so (load and
 * upgrade of the same path), so `users` counts the loads and the last unload joins the thread. */
static struct {
  ErlNifMutex *mu;
  ErlNifCond *cv;
  ErlNifTid tid;
  reap_t *head;
  int users;
  int quit;
  int running;
} reaper;

static void *reaper_main(void *arg) {
  (void)arg;
  enif_mutex_lock(reaper.mu);
  for (;;) {
    while (reaper.head == NULL && !reaper.quit) enif_cond_wait(reaper.cv, reaper.mu);
    reap_t *r = reaper.head;
    if (r == NULL) break; /* quit, and the queue is empty */
    reaper.head = r->next;
    enif_mutex_unlock(reaper.mu);
    cb_server_stop(r->srv);
    if (r->listener != NULL) enif_free(r->listener);
    enif_free(r);
    enif_mutex_lock(reaper.mu);
  }
  enif_mutex_unlock(reaper.mu);
  return NULL;
}

static int reaper_acquire(void) {
  if (reaper.mu == NULL) {
    /* First load of this mapping. Loads are serialised by the code server, so this check does not race. */
    reaper.mu = enif_mutex_create("cbench_reaper");
    reaper.cv = enif_cond_create("cbench_reaper");
    if (reaper.mu == NULL || reaper.cv == NULL) return -1;
  }
  enif_mutex_lock(reaper.mu);
  int err = 0;
  if (!reaper.running) {
    reaper.quit = 0;
    if (enif_thread_create("cbench_reaper", &reaper.tid, reaper_main, NULL, NULL) == 0)
      reaper.running = 1;
    else
      err = -1;
  }
  if (!err) reaper.users++;
  enif_mutex_unlock(reaper.mu);
  return err;
}

static void reaper_release(void) {
  enif_mutex_lock(reaper.mu);
  int join = --reaper.users == 0 && reaper.running;
  if (join) {
    reaper.quit = 1;
    reaper.running = 0;
    enif_cond_signal(reaper.cv);
  }
  enif_mutex_unlock(reaper.mu);
  if (join) enif_thread_join(reaper.tid, NULL);
}

/* Stops srv in the background; without a reaper (only after the last unload) it stops it here, blocking. */
static void reap(cb_server_t *srv, nif_listener_t *listener) {
  reap_t *r = enif_alloc(sizeof *r);
  enif_mutex_lock(reaper.mu);
  if (r != NULL && reaper.running) {
    r->srv = srv;
    r->listener = listener;
    r->next = reaper.head;
    reaper.head = r;
    enif_cond_signal(reaper.cv);
    srv = NULL;
  }
  enif_mutex_unlock(reaper.mu);
  if (srv != NULL) {
    if (r != NULL) enif_free(r);
    cb_server_stop(srv);
    if (listener != NULL) enif_free(listener);
  }
}

/* Takes the engine (and the listener it may call) out of the resource; the caller stops it, then frees the
 * listener. srv is NULL when someone else already did. */
static cb_server_t *unhook(nif_server_t *res, nif_listener_t **listener) {
  enif_rwlock_rwlock(res->lock);
  cb_server_t *srv = res->srv;
  *listener = res->listener;
  res->srv = NULL;
  res->listener = NULL;
  enif_rwlock_rwunlock(res->lock);
  return srv;
}

static void server_dtor(ErlNifEnv *env, void *obj) {
  (void)env;
  nif_server_t *res = obj;
  if (res->lock == NULL) return; /* start failed before the lock existed */
  nif_listener_t *l;
  cb_server_t *srv = unhook(res, &l);
  if (srv != NULL) reap(srv, l);
  enif_rwlock_destroy(res->lock);
}

static void server_down(ErlNifEnv *env, void *obj, ErlNifPid *pid, ErlNifMonitor *mon) {
  (void)env;
  (void)pid;
  (void)mon;
  nif_listener_t *l;
  cb_server_t *srv = unhook(obj, &l);
  if (srv != NULL) reap(srv, l);
}

/* ---- Terms ---- */

ERL_NIF_TERM nif_error(ErlNifEnv *env, int err) {
  char name[64];
  cb_codec_error_name(err, name, sizeof name);
  return enif_make_tuple2(env, atom_error, enif_make_atom(env, name));
}

ERL_NIF_TERM nif_written(cb_enif_out_t *w) {
  ERL_NIF_TERM t;
  return cb_enif_out_term(w, &t) == 0 ? t : enif_make_tuple2(w->env, atom_error, atom_enomem);
}

ERL_NIF_TERM nif_stopped(ErlNifEnv *env) { return enif_make_tuple2(env, atom_error, atom_stopped); }

ERL_NIF_TERM nif_binary(ErlNifEnv *env, const char *p, size_t n) {
  ERL_NIF_TERM t;
  unsigned char *buf = enif_make_new_binary(env, n, &t);
  if (n > 0) memcpy(buf, p, n);
  return t;
}

/* The fixture names (see nif.h). Written once, by the first start of this load, before any reader can exist
 * (readers need a started server); the mutex orders that first write against concurrent starts. */
static struct {
  ErlNifMutex *mu;
  int known;
  cb_codec_fixture_t names;
} fixture;

static void nif_fixture_names(const cb_route_counts_t *rc) {
  enif_mutex_lock(fixture.mu);
  if (!fixture.known) {
    cb_codec_fixture_take(&fixture.names, rc);
    __atomic_store_n(&fixture.known, 1, __ATOMIC_RELEASE);
  }
  enif_mutex_unlock(fixture.mu);
}

const cb_codec_fixture_t *nif_fixture(void) {
  return __atomic_load_n(&fixture.known, __ATOMIC_ACQUIRE) ? &fixture.names : NULL;
}

/* What an option accepts, the same term on every engine (erl/cbench_schema.erl has it for each option). */
static ERL_NIF_TERM allowed_term(ErlNifEnv *env, const cb_option_t *o) {
  switch (o->type) {
    case CB_OPT_UINT:
      return enif_make_tuple3(env, atom_integer, enif_make_uint64(env, o->min), enif_make_uint64(env, o->max));
    case CB_OPT_BOOL: return atom_boolean;
    case CB_OPT_HOST: return atom_address;
    case CB_OPT_STRING: return enif_make_tuple2(env, atom_string, enif_make_uint64(env, o->max));
    case CB_OPT_CPUS:
      return enif_make_tuple2(env, atom_list, enif_make_tuple3(env, atom_integer, enif_make_uint64(env, o->min),
                                                                 enif_make_uint64(env, o->max)));
    case CB_OPT_ENUM: {
      ERL_NIF_TERM l = enif_make_list(env, 0);
      int n = 0;
      while (o->names[n] != NULL) n++;
      for (int i = n - 1; i >= 0; i--) l = enif_make_list_cell(env, enif_make_atom(env, o->names[i]), l);
      return enif_make_tuple2(env, atom_one_of, l);
    }
  }
  return atom_error;
}

/* The option names the engine takes, for the answer to an unknown key. */
static ERL_NIF_TERM known_term(ErlNifEnv *env) {
  ERL_NIF_TERM l = enif_make_list(env, 0);
  for (int i = noptions - 1; i >= 0; i--)
    if (!(options[i].flags & CB_OPT_F_EHTTPD_ONLY)) l = enif_make_list_cell(env, atom_option[i], l);
  return enif_make_tuple2(env, atom_known, l);
}

static ERL_NIF_TERM bad_option(ErlNifEnv *env, ERL_NIF_TERM key, ERL_NIF_TERM value, ERL_NIF_TERM allowed) {
  return enif_make_tuple2(env, atom_error, enif_make_tuple4(env, atom_bad_option, key, value, allowed));
}

/* The string options' bytes (the host, the TLS certificate and key files), each NUL-terminated, for cfg's
 * pointers while the server starts: room for every string option of the table at its longest. */
typedef struct {
  char buf[64 + 2 * 4096 + 256];
  size_t used;
} opt_strings_t;

/* Sets one option of cfg from its term. 0 when the term is of the option's type and within its bounds. */
static int decode_option(ErlNifEnv *env, const cb_option_t *o, ERL_NIF_TERM v, cb_config_t *cfg,
                         opt_strings_t *strs, int *cpus) {
  ErlNifUInt64 u;
  ErlNifBinary bin;
  unsigned len;
  switch (o->type) {
    case CB_OPT_UINT: return enif_get_uint64(env, v, &u) && cb_config_set_uint(cfg, o, u) == 0 ? 0 : -1;
    case CB_OPT_BOOL:
      if (!enif_is_identical(v, atom_true) && !enif_is_identical(v, atom_false)) return -1;
      return cb_config_set_uint(cfg, o, enif_is_identical(v, atom_true));
    case CB_OPT_HOST:
    case CB_OPT_STRING: {
      /* A binary, as cbench_opts makes it and the port program takes it. */
      if (!enif_inspect_binary(env, v, &bin) || bin.size < o->min || bin.size > o->max ||
          bin.size >= sizeof strs->buf - strs->used || memchr(bin.data, 0, bin.size) != NULL)
        return -1;
      char *s = strs->buf + strs->used;
      memcpy(s, bin.data, bin.size);
      s[bin.size] = '\0';
      strs->used += bin.size + 1;
      memcpy((char *)cfg + o->offset, &s, sizeof s);
      return 0;
    }
    case CB_OPT_ENUM: {
      char name[32];
      if (enif_get_atom(env, v, name, sizeof name, ERL_NIF_LATIN1) <= 0) return -1;
      for (int i = 0; o->names[i] != NULL; i++)
        if (strcmp(name, o->names[i]) == 0) return cb_config_set_uint(cfg, o, (uint64_t)i);
      return -1;
    }
    case CB_OPT_CPUS: {
      if (!enif_get_list_length(env, v, &len) || len > CB_MAX_THREADS) return -1;
      ERL_NIF_TERM head, tail = v;
      for (unsigned i = 0; i < len; i++) {
        if (!enif_get_list_cell(env, tail, &head, &tail) || !enif_get_uint64(env, head, &u) || u < o->min ||
            u > o->max)
          return -1;
        cpus[i] = (int)u;
      }
      cfg->cpus = len ? cpus : NULL;
      cfg->ncpus = (int)len;
      return 0;
    }
  }
  return -1;
}

/* Fills cfg from an options map (cbench_nif:start/1 builds it from validated options; it is checked again here,
 * against the same table, because a NIF must survive any term). Keys are the table's names; a key that is
 * missing keeps cb_config_init()'s default. Returns 0, or -1 with *err set to {error, {bad_option, Key, Value,
 * Allowed}}. The strings point into strs. */
static int decode_config(ErlNifEnv *env, ERL_NIF_TERM map, cb_config_t *cfg, opt_strings_t *strs,
                         int *cpus, ERL_NIF_TERM *err) {
  ErlNifMapIterator it;
  ERL_NIF_TERM k, v;
  cb_config_init(cfg);
  if (!enif_map_iterator_create(env, map, &it, ERL_NIF_MAP_ITERATOR_FIRST)) {
    *err = enif_make_badarg(env);
    return -1;
  }
  int rc = 0;
  for (; rc == 0 && enif_map_iterator_get_pair(env, &it, &k, &v); enif_map_iterator_next(env, &it)) {
    const cb_option_t *o = NULL;
    for (int i = 0; i < noptions && o == NULL; i++)
      if (enif_is_identical(k, atom_option[i]) && !(options[i].flags & CB_OPT_F_EHTTPD_ONLY)) o = &options[i];
    if (o == NULL) {
      *err = bad_option(env, k, v, known_term(env));
      rc = -1;
    } else if (decode_option(env, o, v, cfg, strs, cpus) != 0) {
      *err = bad_option(env, k, v, allowed_term(env, o));
      rc = -1;
    }
  }
  enif_map_iterator_destroy(env, &it);
  return rc;
}

/* {available, Cpus}: the CPUs this process may run on, for the answer to a pin the kernel refused. */
static ERL_NIF_TERM available_term(ErlNifEnv *env) {
  int cpus[CB_MAX_THREADS];
  int n = cb_cpus_allowed(cpus, CB_MAX_THREADS);
  ERL_NIF_TERM l = enif_make_list(env, 0);
  for (int i = (n < CB_MAX_THREADS ? n : CB_MAX_THREADS) - 1; i >= 0; i--)
    l = enif_make_list_cell(env, enif_make_int(env, cpus[i]), l);
  return enif_make_tuple2(env, atom_available, l);
}

int nif_get_server(ErlNifEnv *env, ERL_NIF_TERM t, nif_server_t **res) {
  return enif_get_resource(env, t, server_type, (void **)res);
}

int nif_lock(ErlNifEnv *env, ERL_NIF_TERM t, nif_server_t **res, cb_server_t **srv) {
  if (!nif_get_server(env, t, res)) return 0;
  enif_rwlock_rlock((*res)->lock);
  *srv = (*res)->srv;
  if (*srv == NULL) {
    enif_rwlock_runlock((*res)->lock);
    return -1;
  }
  return 1;
}

void nif_unlock(nif_server_t *res) { enif_rwlock_runlock(res->lock); }

/* ---- NIFs ---- */

/* start_nif(Opts) -> {ok, Resource} | {error, Reason}. Dirty I/O: binds sockets and starts threads.
 * The calling process becomes the owner: when it dies, the server stops. */
static ERL_NIF_TERM start_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  cb_config_t cfg;
  opt_strings_t strs = {.used = 0};
  int cpus[CB_MAX_THREADS];
  ERL_NIF_TERM bad = 0;
  if (!enif_is_map(env, argv[0])) return enif_make_badarg(env);
  if (decode_config(env, argv[0], &cfg, &strs, cpus, &bad) != 0) return bad;

  cb_server_t *srv;
  int err = cb_server_start(&cfg, &srv);
  /* Every bound was checked above, so CB_ETHREADS with a CPU list is a pin the kernel refused. */
  if (err == CB_ETHREADS && cfg.ncpus > 0) {
    ERL_NIF_TERM v;
    enif_get_map_value(env, argv[0], atom_cpus, &v);
    return bad_option(env, atom_cpus, v, available_term(env));
  }
  if (err < 0) return nif_error(env, err);
  cb_route_counts_t *rc;
  if (cb_server_route_counts(srv, &rc) == 0) {
    nif_fixture_names(rc);
    cb_route_counts_free(rc);
  }

  nif_server_t *res = enif_alloc_resource(server_type, sizeof *res);
  if (res == NULL) {
    cb_server_stop(srv);
    return nif_error(env, CB_ENOMEM);
  }
  memset(res, 0, sizeof *res);
  res->lock = enif_rwlock_create("cbench_server");
  if (res->lock == NULL) {
    cb_server_stop(srv);
    enif_release_resource(res);
    return nif_error(env, CB_ENOMEM);
  }
  res->srv = srv;
  res->port = cb_server_port(srv);
  res->admin_port = cb_server_admin_port(srv);
  res->tls_port = cb_server_tls_port(srv);
  res->ktls = cb_server_ktls(srv, res->ktls_why, sizeof res->ktls_why) == 1;
  res->threads = cb_server_threads(srv);
  for (int i = 0; i < res->threads && i < CB_MAX_THREADS; i++) res->cpus[i] = cb_server_worker_cpu(srv, i);

  ErlNifPid self;
  if (enif_self(env, &self) != NULL && enif_monitor_process(env, res, &self, &res->owner) == 0)
    res->monitored = 1;
  ERL_NIF_TERM term = enif_make_resource(env, res);
  enif_release_resource(res); /* the term holds the only reference now */
  return enif_make_tuple2(env, atom_ok, term);
}

/* stop_nif(Resource) -> ok. Dirty I/O: joins the engine's threads. Stopping a stopped server is fine. */
static ERL_NIF_TERM stop_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  nif_server_t *res;
  if (!nif_get_server(env, argv[0], &res)) return enif_make_badarg(env);
  nif_listener_t *l;
  cb_server_t *srv = unhook(res, &l);
  if (srv != NULL) {
    if (res->monitored) enif_demonitor_process(env, res, &res->owner);
    cb_server_stop(srv);
    if (l != NULL) enif_free(l);
  }
  return atom_ok;
}

/* down_nif(Resource) / up_nif(Resource) -> ok | {error, Reason}. Dirty I/O: they close or bind sockets and
 * wait for every worker. */
static ERL_NIF_TERM down_up(ErlNifEnv *env, ERL_NIF_TERM t, int (*fn)(cb_server_t *)) {
  nif_server_t *res;
  cb_server_t *srv;
  int locked = nif_lock(env, t, &res, &srv);
  if (locked == 0) return enif_make_badarg(env);
  if (locked < 0) return nif_stopped(env);
  int err = fn(srv);
  nif_unlock(res);
  return err < 0 ? nif_error(env, err) : atom_ok;
}

static ERL_NIF_TERM down_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  return down_up(env, argv[0], cb_server_down);
}

static ERL_NIF_TERM up_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  return down_up(env, argv[0], cb_server_up);
}

/* stats_nif(Resource) -> Map | {error, stopped}. Microseconds: sums the workers' counters. */
static ERL_NIF_TERM stats_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  nif_server_t *res;
  if (!nif_get_server(env, argv[0], &res)) return enif_make_badarg(env);
  cb_stats_t st;
  cb_route_counts_t *rc = NULL;
  int err = CB_ESTOPPED;
  enif_rwlock_rlock(res->lock);
  if (res->srv != NULL) err = cb_server_stats(res->srv, &st);
  if (err == 0) err = cb_server_route_counts(res->srv, &rc);
  enif_rwlock_runlock(res->lock);
  if (err == CB_ESTOPPED) return nif_stopped(env);
  if (err < 0) return nif_error(env, err);
  cb_enif_out_t w;
  cb_enif_out_init(&w, env);
  cb_codec_stats(&w.out, nif_fixture(), &st, rc);
  cb_route_counts_free(rc);
  return nif_written(&w);
}

/* port_nif(Resource) -> Port. The port stays known after stop. */
static ERL_NIF_TERM port_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  nif_server_t *res;
  if (!nif_get_server(env, argv[0], &res)) return enif_make_badarg(env);
  return enif_make_int(env, res->port);
}

/* info_nif(Resource) -> #{threads => N, cpus => [Cpu | -1]} (and admin_port => P with the admin API on, tls_port
 * => P and ktls => boolean() with TLS on, and ktls_why => Binary when ktls is false): what the engine applied. */
static ERL_NIF_TERM info_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  nif_server_t *res;
  if (!nif_get_server(env, argv[0], &res)) return enif_make_badarg(env);
  ERL_NIF_TERM cpus = enif_make_list(env, 0);
  for (int i = res->threads - 1; i >= 0; i--) cpus = enif_make_list_cell(env, enif_make_int(env, res->cpus[i]), cpus);
  ERL_NIF_TERM keys[6] = {atom_threads, atom_cpus}, vals[6] = {enif_make_int(env, res->threads), cpus};
  unsigned n = 2;
  if (res->admin_port > 0) {
    keys[n] = atom_admin_port;
    vals[n++] = enif_make_int(env, res->admin_port);
  }
  if (res->tls_port > 0) {
    keys[n] = atom_tls_port;
    vals[n++] = enif_make_int(env, res->tls_port);
    keys[n] = atom_ktls;
    vals[n++] = res->ktls ? atom_true : atom_false;
    if (!res->ktls) {
      size_t len = strlen(res->ktls_why);
      unsigned char *p = enif_make_new_binary(env, len, &vals[n]);
      memcpy(p, res->ktls_why, len);
      keys[n++] = atom_ktls_why;
    }
  }
  ERL_NIF_TERM map;
  enif_make_map_from_arrays(env, keys, vals, n, &map);
  return map;
}

/* tls_nif(Resource) -> {ok, CaPem} | {error, no_ca} | {error, stopped}: the test CA a TLS server made at start
 * (cb_server_tls_ca), as PEM. no_ca: the server made none (no TLS, or the user's certificate files). */
static ERL_NIF_TERM tls_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  nif_server_t *res;
  cb_server_t *srv;
  int locked = nif_lock(env, argv[0], &res, &srv);
  if (locked == 0) return enif_make_badarg(env);
  if (locked < 0) return nif_stopped(env);
  char pem[8192];
  int n = cb_server_tls_ca(srv, pem, sizeof pem);
  nif_unlock(res);
  if (n == CB_ENOENT) return enif_make_tuple2(env, atom_error, atom_no_ca);
  if (n < 0) return nif_error(env, n);
  return enif_make_tuple2(env, atom_ok, nif_binary(env, pem, (size_t)n));
}

/* ---- Load ---- */

/* Distinct return values name the failing step in the load error. */
enum { LOAD_OK, LOAD_ATOMS, LOAD_RESOURCE, LOAD_REAPER };

static int setup(ErlNifEnv *env) {
#define MAKE_ATOM(name) atom_##name = enif_make_atom(env, #name);
  NIF_ATOMS(MAKE_ATOM)
#undef MAKE_ATOM
  /* Like the reaper's: loads are serialised by the code server, so this check does not race. */
  if (fixture.mu == NULL && (fixture.mu = enif_mutex_create("cbench_fixture_names")) == NULL) return LOAD_ATOMS;
  options = cb_config_options(&noptions);
  if (noptions > MAX_OPTIONS) return LOAD_ATOMS;
  for (int i = 0; i < noptions; i++) atom_option[i] = enif_make_atom(env, options[i].name);
  ErlNifResourceTypeInit init = {.dtor = server_dtor, .stop = NULL, .down = server_down};
  server_type = enif_open_resource_type_x(env, "cbench_server", &init, ERL_NIF_RT_CREATE | ERL_NIF_RT_TAKEOVER,
                                          NULL);
  if (server_type == NULL) return LOAD_RESOURCE;
  if (reaper_acquire() != 0) return LOAD_REAPER;
  return LOAD_OK;
}

static int load(ErlNifEnv *env, void **priv, ERL_NIF_TERM info) {
  (void)priv;
  (void)info;
  return setup(env);
}

static int upgrade(ErlNifEnv *env, void **priv, void **old_priv, ERL_NIF_TERM info) {
  (void)priv;
  (void)old_priv;
  (void)info;
  return setup(env);
}

static void unload(ErlNifEnv *env, void *priv) {
  (void)env;
  (void)priv;
  reaper_release();
}

static ErlNifFunc funcs[] = {
    {"start_nif", 1, start_nif, ERL_NIF_DIRTY_JOB_IO_BOUND},
    {"stop_nif", 1, stop_nif, ERL_NIF_DIRTY_JOB_IO_BOUND},
    {"stats_nif", 1, stats_nif, 0},
    {"port_nif", 1, port_nif, 0},
    {"info_nif", 1, info_nif, 0},
    {"tls_nif", 1, tls_nif, 0},
    /* Everything that goes through the workers' command queues waits for them: dirty I/O. */
    {"down_nif", 1, down_nif, ERL_NIF_DIRTY_JOB_IO_BOUND},
    {"up_nif", 1, up_nif, ERL_NIF_DIRTY_JOB_IO_BOUND},
    {"route_add_nif", 3, nif_route_add, ERL_NIF_DIRTY_JOB_IO_BOUND},
    {"route_remove_nif", 2, nif_route_remove, ERL_NIF_DIRTY_JOB_IO_BOUND},
    {"route_reset_nif", 1, nif_route_reset, ERL_NIF_DIRTY_JOB_IO_BOUND},
    /* Proportional to the stubs (up to 100,000): dirty CPU, as the size is known only once they are copied. */
    {"stubs_nif", 1, nif_stubs, ERL_NIF_DIRTY_JOB_CPU_BOUND},
    {"requests_nif", 2, nif_requests, ERL_NIF_DIRTY_JOB_IO_BOUND},
    {"requests_clear_nif", 1, nif_requests_clear, ERL_NIF_DIRTY_JOB_IO_BOUND},
    {"journal_listen_nif", 2, nif_journal_listen, ERL_NIF_DIRTY_JOB_IO_BOUND},
    {"handler_add_nif", 4, nif_handler_add, ERL_NIF_DIRTY_JOB_IO_BOUND},
    {"handler_fail_nif", 2, nif_handler_fail, 0},
    {"reply_nif", 2, nif_reply, 0},
    {"reply_dirty_nif", 2, nif_reply_dirty, ERL_NIF_DIRTY_JOB_CPU_BOUND}, /* big replies (nif_calls.c) */
    {"dirty_replies_nif", 0, nif_dirty_replies, 0},
    {"scenario_nif", 2, nif_scenario, 0},
    {"scenario_set_nif", 3, nif_scenario_set, 0},
    {"scenarios_reset_nif", 1, nif_scenarios_reset, 0},
    {"client_ca_nif", 1, nif_client_ca, 0},
    {"client_cert_nif", 2, nif_client_cert, ERL_NIF_DIRTY_JOB_CPU_BOUND}, /* a key and a signature */
    {"recorded_nif", 1, nif_recorded, ERL_NIF_DIRTY_JOB_CPU_BOUND}, /* JSON of every recording */
    {"save_stubs_nif", 2, nif_save_stubs, ERL_NIF_DIRTY_JOB_IO_BOUND},
    {"load_stubs_nif", 2, nif_load_stubs, ERL_NIF_DIRTY_JOB_IO_BOUND},
    /* Waits for a writer of the recordings (recorded_nif, save_stubs_nif) and frees them all: dirty I/O. */
    {"clear_recorded_nif", 1, nif_clear_recorded, ERL_NIF_DIRTY_JOB_IO_BOUND},
};

ERL_NIF_INIT(cbench_nif, funcs, load, NULL, upgrade, unload)
