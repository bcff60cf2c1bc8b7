/* Route tables and the registry they are built from.
 *
 * A table is an immutable value: the routes in matching order (explicit priority, then newest first, the
 * fixture routes last) and two hash indexes, built off the loops and handed to every worker through its
 * command queue. Dispatch reads it without a lock or an atomic read-modify-write.
 *
 * Lifetime: each worker counts the requests it dispatched under a table in its own cache line of that table
 * (non-atomic: only that worker writes it). A request's use ends once its response has left the connection's
 * output queue (a CB__OUT_CALL entry queued behind the response, run when the bytes are written or the
 * connection closes), because responses reference the table's bytes (stub bodies) without copying them. A
 * request answered by a fixture route takes no use at all: its route is the registry's for the server's life and
 * its answer references nothing of the table (static payloads, copies, fixture files). A
 * worker that has switched to a newer table and has no use left of the old one lets go of it: one atomic
 * decrement per worker per table; the last worker to let go frees it.
 *
 * Publishing is lazy, so that adding N stubs one call at a time costs O(N) and not N table builds: a change
 * to the registry hands every worker a stand-in (a lazy table: no routes, nothing built) and returns once every
 * worker holds it; further changes while every worker still holds that stand-in only change the registry. The
 * first request a worker dispatches under the stand-in builds the real table from the registry as it is then
 * (under the registry's lock, once for all workers: the others adopt the same table), so a request sent after a
 * change returned sees it, and a loop of N adds followed by requests builds one table. A table is still
 * immutable once built and read without a lock; the stand-in costs the dispatch one test of a field that
 * dispatch_lookup reads anyway (the path that remembers the last route never sees a stand-in: it has none).
 * Each worker keeps the table it held before the stand-in until it has built or adopted the new one: if the
 * build fails (out of memory), it goes on with that one until the next change.
 *
 * Lookup: exact routes are indexed by their whole path, prefix and {param} routes by their first path segment
 * when it is literal; the few others (a first segment that is a parameter, a prefix that ends inside the first
 * segment) are always candidates. The candidate lists are kept in table order and merged, so the first route
 * that matches is the same as in a scan of the whole table, at the cost of one or two hash probes.
 *
 * Counters: every route has a slot; every worker has its counter chunks, written only by itself (relaxed
 * stores, like cb_stats_t) and summed by readers. Slots are recycled when a route is freed (no table lists it
 * any more, so no worker writes it) and zeroed when handed out again. */
#include <stdlib.h>
#include <string.h>

#include "routes/routes.h"

#define CHUNK_BITS 10
#define CHUNK (1u << CHUNK_BITS)
#define MAX_CHUNKS 256 /* 2 counters per slot: up to 131072 slots, above CB_MAX_ROUTES plus the fixtures */

struct cb__routes_s {
  uv_mutex_t mu;
  int nworkers;
  cb__route_t **fixtures;
  int nfixtures;
  cb__route_t *not_found;
  cb__route_t **stubs; /* in order of addition */
  int nstubs, stubs_cap;
  uint64_t next_id, next_seq;
  uint32_t *free_slots;
  uint32_t nfree, free_cap;
  uint32_t next_slot;
  uint64_t ***chunks; /* [worker][chunk] */
  cb__rtable_t *pending; /* the stand-in every worker holds and none has built yet; NULL when none */
  cb__scenarios_t *scenarios; /* the server's scenario states (scenario.c) */
};

typedef struct {
  uint64_t uses;   /* requests dispatched under the table whose output has not left yet */
  uint8_t retired; /* the worker has moved to a newer table */
  cb__rtable_t *t;
  /* The exact route that answered the worker's last request when it was the first candidate for its path and
   * matches on nothing but path and method (no header or query matcher, no claim): a request with the same
   * path and an allowed method gets it without the lookup. NULL when none. */
  const cb__route_t *last;
  uint64_t *last_count; /* the worker's answered counter of `last` (counter chunks never move) */
  /* A stand-in only: the table the worker held before it (kept until the worker moves to the built one), and
   * whether the worker adopted the built table (under the registry's lock). */
  cb__rtable_t *prev;
  uint8_t adopted;
  char pad[64 - 3 * sizeof(uint64_t) - 4 * sizeof(void *)];
} use_t;
_Static_assert(sizeof(use_t) == 64, "one cache line per worker");

typedef struct {
  const char *key; /* NULL: empty bucket */
  uint32_t klen, hash;
  uint32_t start, len; /* in the index's list */
} bucket_t;

typedef struct {
  bucket_t *b;
  uint32_t mask;
  uint32_t *list; /* route ranks, ascending within a bucket */
} index_t;

struct cb__rtable_s {
  int workers_left; /* atomic; for a stand-in, under the registry's lock */
  int nworkers;
  int lazy;            /* a stand-in: built from the registry at the first dispatch under it */
  cb__rtable_t *built; /* a stand-in: the table built for it (under the registry's lock), or NULL */
  cb__routes_t *reg;
  cb__route_t **routes;
  int n;
  cb__route_t *not_found;
  index_t exact, seg;
  uint32_t *wild; /* ranks of routes that are candidates for every path */
  int nwild;
  uint32_t first_nonexact; /* the rank of the first route that is not an exact path (n when none) */
  use_t *use; /* one cache line per worker */
};

/* ---- the registry ---- */

void cb__routes_lock(cb__routes_t *reg) { uv_mutex_lock(&reg->mu); }
void cb__routes_unlock(cb__routes_t *reg) { uv_mutex_unlock(&reg->mu); }
uint64_t **cb__routes_counters(cb__routes_t *reg, int worker) { return reg->chunks[worker]; }
cb__route_t *cb__routes_not_found(cb__routes_t *reg) { return reg->not_found; }
cb__route_t *const *cb__rtable_routes(const cb__rtable_t *t, int *n) {
  *n = t->lazy ? 0 : t->n;
  return t->lazy ? NULL : t->routes;
}
uint64_t cb__routes_next_id(cb__routes_t *reg) { return ++reg->next_id; }

cb__route_t **cb__routes_stubs(cb__routes_t *reg, int *n) {
  *n = reg->nstubs;
  return reg->stubs;
}

cb__route_t **cb__routes_fixtures(cb__routes_t *reg, int *n) {
  *n = reg->nfixtures;
  return reg->fixtures;
}

uint64_t cb__routes_count(cb__routes_t *reg, uint32_t idx) {
  uint64_t sum = 0;
  for (int w = 0; w < reg->nworkers; w++) {
    uint64_t *c = __atomic_load_n(&reg->chunks[w][idx >> CHUNK_BITS], __ATOMIC_ACQUIRE);
    if (c != NULL) sum += __atomic_load_n(&c[idx & (CHUNK - 1)], __ATOMIC_RELAXED);
  }
  return sum;
}

int cb__routes_slot(cb__routes_t *reg, cb__route_t *rt) {
  int err = 0;
  uint32_t slot;
  uv_mutex_lock(&reg->mu);
  if (reg->nfree > 0) {
    slot = reg->free_slots[--reg->nfree];
  } else if ((reg->next_slot + 1) * 2 + 1 >= MAX_CHUNKS * CHUNK) {
    err = CB_ELIMIT;
  } else {
    slot = ++reg->next_slot; /* slot 0 is never given: 0 means "none" */
    uint32_t chunk = (2 * slot) >> CHUNK_BITS;
    for (int w = 0; w < reg->nworkers && err == 0; w++) {
      if (reg->chunks[w][chunk] != NULL) continue;
      uint64_t *c = calloc(CHUNK, sizeof *c);
      if (c == NULL)
        err = UV_ENOMEM;
      else
        __atomic_store_n(&reg->chunks[w][chunk], c, __ATOMIC_RELEASE);
    }
    if (err) reg->next_slot--;
  }
  if (err == 0) {
    /* A recycled slot was last written by a worker before the table that listed its route was freed, which
     * happened before the slot came back here (under this lock): these stores cannot race with it. */
    for (int w = 0; w < reg->nworkers; w++) {
      uint64_t *c = reg->chunks[w][(2 * slot) >> CHUNK_BITS];
      __atomic_store_n(&c[(2 * slot) & (CHUNK - 1)], 0, __ATOMIC_RELAXED);
      __atomic_store_n(&c[(2 * slot + 1) & (CHUNK - 1)], 0, __ATOMIC_RELAXED);
    }
    rt->slot = slot;
  }
  uv_mutex_unlock(&reg->mu);
  return err;
}

void cb__routes_slot_free(cb__routes_t *reg, uint32_t slot) {
  uv_mutex_lock(&reg->mu);
  if (reg->nfree == reg->free_cap) {
    uint32_t cap = reg->free_cap ? 2 * reg->free_cap : 64;
    uint32_t *a = realloc(reg->free_slots, cap * sizeof *a);
    if (a == NULL) { /* the slot is lost, not reused: harmless */
      uv_mutex_unlock(&reg->mu);
      return;
    }
    reg->free_slots = a;
    reg->free_cap = cap;
  }
  reg->free_slots[reg->nfree++] = slot;
  uv_mutex_unlock(&reg->mu);
}

int cb__routes_append(cb__routes_t *reg, cb__route_t *rt) {
  if (reg->nstubs >= CB_MAX_ROUTES) return CB_ELIMIT;
  if (reg->nstubs == reg->stubs_cap) {
    int cap = reg->stubs_cap ? 2 * reg->stubs_cap : 16;
    cb__route_t **a = realloc(reg->stubs, (size_t)cap * sizeof *a);
    if (a == NULL) return UV_ENOMEM;
    reg->stubs = a;
    reg->stubs_cap = cap;
  }
  rt->seq = ++reg->next_seq;
  reg->stubs[reg->nstubs++] = rt;
  return 0;
}

/* From the newest: a failed add takes back what it appended last, at no cost. */
cb__route_t *cb__routes_take(cb__routes_t *reg, uint64_t id) {
  for (int i = reg->nstubs - 1; i >= 0; i--) {
    cb__route_t *rt = reg->stubs[i];
    if (rt->stub_id != id) continue;
    memmove(&reg->stubs[i], &reg->stubs[i + 1], (size_t)(reg->nstubs - i - 1) * sizeof *reg->stubs);
    reg->nstubs--;
    return rt;
  }
  return NULL;
}

int cb__routes_new(int nworkers, cb__fixtures_fn fixtures, cb__routes_t **out) {
  cb__routes_t *reg = calloc(1, sizeof *reg);
  if (reg == NULL) return UV_ENOMEM;
  if (uv_mutex_init(&reg->mu) != 0) {
    free(reg);
    return UV_ENOMEM;
  }
  reg->nworkers = nworkers;
  reg->chunks = calloc((size_t)nworkers, sizeof *reg->chunks);
  int err = reg->chunks ? 0 : UV_ENOMEM;
  for (int w = 0; w < nworkers && err == 0; w++) {
    reg->chunks[w] = calloc(MAX_CHUNKS, sizeof *reg->chunks[w]);
    if (reg->chunks[w] == NULL) err = UV_ENOMEM;
  }
  if (err == 0) err = fixtures(reg, &reg->fixtures, &reg->nfixtures, &reg->not_found);
  if (err == 0) err = cb__scenarios_new(&reg->scenarios);
  if (err) {
    cb__routes_free(reg);
    return err;
  }
  *out = reg;
  return 0;
}

void cb__routes_free(cb__routes_t *reg) {
  if (reg == NULL) return;
  for (int i = 0; i < reg->nstubs; i++) cb__route_unref(reg, reg->stubs[i]);
  for (int i = 0; i < reg->nfixtures; i++) cb__route_unref(reg, reg->fixtures[i]);
  if (reg->not_found) cb__route_unref(reg, reg->not_found);
  free(reg->stubs);
  free(reg->fixtures);
  free(reg->free_slots);
  for (int w = 0; reg->chunks && w < reg->nworkers; w++) {
    for (int c = 0; reg->chunks[w] && c < MAX_CHUNKS; c++) free(reg->chunks[w][c]);
    free(reg->chunks[w]);
  }
  free(reg->chunks);
  cb__scenarios_free(reg->scenarios);
  uv_mutex_destroy(&reg->mu);
  free(reg);
}

cb__scenarios_t *cb__routes_scenarios(cb__routes_t *reg) { return reg->scenarios; }

/* ---- building a table ---- */

/* A multiplicative hash over 8 bytes at a time: paths are short, and this runs once per request. */
static inline uint32_t hash_bytes(const char *p, size_t n) {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
  while (n >= 8) {
    uint64_t v;
    memcpy(&v, p, 8);
    h = (h ^ v) * 0xff51afd7ed558ccdull;
    h ^= h >> 29;
    p += 8;
    n -= 8;
  }
  if (n > 0) { /* the last 1 to 7 bytes, without a call to memcpy of a variable length */
    uint64_t v;
    if (n >= 4) {
      uint32_t lo, hi;
      memcpy(&lo, p, 4);
      memcpy(&hi, p + n - 4, 4);
      v = lo | (uint64_t)hi << 32;
    } else {
      v = (uint64_t)(unsigned char)p[0] | (uint64_t)(unsigned char)p[n / 2] << 8 |
          (uint64_t)(unsigned char)p[n - 1] << 16;
    }
    h = (h ^ v) * 0xc4ceb9fe1a85ec53ull;
  }
  h ^= h >> 32;
  return (uint32_t)h;
}

/* The literal first segment a route's paths must have ("files" for "/files/x" or "/files/{id}"), or -1. */
static int first_segment(const cb__route_t *rt, const char **key, size_t *klen) {
  const char *p = rt->path;
  size_t n = rt->path_len;
  if (rt->path_kind == CB__PATH_PARAMS) {
    if (rt->segs[0].param) return -1;
    *key = rt->pattern + rt->segs[0].off;
    *klen = rt->segs[0].len;
    return 0;
  }
  /* A prefix fixes the first segment only when it holds the '/' that ends it. */
  const char *slash = n > 1 ? memchr(p + 1, '/', n - 1) : NULL;
  if (slash == NULL) return -1;
  *key = p + 1;
  *klen = (size_t)(slash - p - 1);
  return 0;
}

static inline bucket_t *probe(const index_t *ix, const char *key, size_t klen, uint32_t h) {
  for (uint32_t i = h & ix->mask;; i = (i + 1) & ix->mask) {
    bucket_t *b = &ix->b[i];
    if (b->key == NULL) return b;
    if (b->hash == h && b->klen == klen && cb__same_bytes(b->key, key, klen)) return b;
  }
}

/* Builds an index over the routes for which keyof() gives a key. */
static int index_build(index_t *ix, cb__route_t **routes, int n, int (*keyof)(const cb__route_t *, const char **, size_t *)) {
  uint32_t size = 8;
  while (size < 2u * (uint32_t)n + 1) size *= 2;
  ix->b = calloc(size, sizeof *ix->b);
  ix->list = malloc(((size_t)n + 1) * sizeof *ix->list);
  if (ix->b == NULL || ix->list == NULL) return UV_ENOMEM;
  ix->mask = size - 1;
  /* Count per key, then place the ranks in order. */
  for (int i = 0; i < n; i++) {
    const char *key;
    size_t klen;
    if (keyof(routes[i], &key, &klen) != 0) continue;
    uint32_t h = hash_bytes(key, klen);
    bucket_t *b = probe(ix, key, klen, h);
    if (b->key == NULL) *b = (bucket_t){.key = key, .klen = (uint32_t)klen, .hash = h};
    b->len++;
  }
  uint32_t at = 0;
  for (uint32_t i = 0; i < size; i++) {
    ix->b[i].start = at;
    at += ix->b[i].len;
    ix->b[i].len = 0;
  }
  for (int i = 0; i < n; i++) {
    const char *key;
    size_t klen;
    if (keyof(routes[i], &key, &klen) != 0) continue;
    bucket_t *b = probe(ix, key, klen, hash_bytes(key, klen));
    ix->list[b->start + b->len++] = (uint32_t)i;
  }
  return 0;
}

static int exact_key(const cb__route_t *rt, const char **key, size_t *klen) {
  if (rt->path_kind != CB__PATH_EXACT) return -1;
  *key = rt->path;
  *klen = rt->path_len;
  return 0;
}

static int seg_key(const cb__route_t *rt, const char **key, size_t *klen) {
  if (rt->path_kind == CB__PATH_EXACT) return -1;
  return first_segment(rt, key, klen);
}

/* Matching order: higher priority first, then newer first. */
static int stub_order(const void *a, const void *b) {
  const cb__route_t *x = *(cb__route_t *const *)a, *y = *(cb__route_t *const *)b;
  if (x->priority != y->priority) return x->priority > y->priority ? -1 : 1;
  return x->seq > y->seq ? -1 : (x->seq < y->seq ? 1 : 0);
}

void cb__routes_sort(cb__route_t **routes, int n) {
  if (n > 1) qsort(routes, (size_t)n, sizeof *routes, stub_order);
}

static void table_free(cb__rtable_t *t) {
  for (int i = 0; i < t->n; i++) cb__route_unref(t->reg, t->routes[i]);
  if (t->not_found) cb__route_unref(t->reg, t->not_found);
  free(t->routes);
  free(t->exact.b);
  free(t->exact.list);
  free(t->seg.b);
  free(t->seg.list);
  free(t->wild);
  free(t->use);
  free(t);
}

int cb__rtable_build(cb__routes_t *reg, cb__rtable_t **out) {
  cb__rtable_t *t = calloc(1, sizeof *t);
  if (t == NULL) return UV_ENOMEM;
  t->reg = reg;
  t->nworkers = reg->nworkers;
  t->workers_left = reg->nworkers;
  int n = reg->nstubs + reg->nfixtures;
  t->routes = malloc(((size_t)n + 1) * sizeof *t->routes);
  t->wild = malloc(((size_t)n + 1) * sizeof *t->wild);
  void *use = NULL;
  if (posix_memalign(&use, 64, (size_t)reg->nworkers * sizeof(use_t)) != 0) use = NULL;
  t->use = use;
  if (t->routes == NULL || t->wild == NULL || t->use == NULL) {
    table_free(t);
    return UV_ENOMEM;
  }
  memset(t->use, 0, (size_t)reg->nworkers * sizeof(use_t));
  for (int i = 0; i < reg->nworkers; i++) t->use[i].t = t;
  if (reg->nstubs > 0) {
    memcpy(t->routes, reg->stubs, (size_t)reg->nstubs * sizeof *t->routes);
    qsort(t->routes, (size_t)reg->nstubs, sizeof *t->routes, stub_order);
  }
  memcpy(t->routes + reg->nstubs, reg->fixtures, (size_t)reg->nfixtures * sizeof *t->routes);
  t->n = n;
  for (int i = 0; i < n; i++) cb__route_ref(t->routes[i]);
  t->not_found = reg->not_found;
  cb__route_ref(t->not_found);
  int err = index_build(&t->exact, t->routes, n, exact_key);
  if (err == 0) err = index_build(&t->seg, t->routes, n, seg_key);
  if (err) {
    table_free(t);
    return err;
  }
  t->first_nonexact = (uint32_t)n;
  for (int i = 0; i < n; i++) {
    const char *key;
    size_t klen;
    if (t->routes[i]->path_kind == CB__PATH_EXACT) continue;
    if ((uint32_t)i < t->first_nonexact) t->first_nonexact = (uint32_t)i;
    if (first_segment(t->routes[i], &key, &klen) != 0) t->wild[t->nwild++] = (uint32_t)i;
  }
  *out = t;
  return 0;
}

/* A stand-in for the table the registry will hold at the first dispatch under it (see the top of this file). */
static int lazy_new(cb__routes_t *reg, cb__rtable_t **out) {
  cb__rtable_t *t = calloc(1, sizeof *t);
  void *use = NULL;
  if (t == NULL || posix_memalign(&use, 64, (size_t)reg->nworkers * sizeof(use_t)) != 0) {
    free(t);
    return UV_ENOMEM;
  }
  memset(use, 0, (size_t)reg->nworkers * sizeof(use_t));
  t->use = use;
  t->reg = reg;
  t->lazy = 1;
  t->nworkers = reg->nworkers;
  t->workers_left = reg->nworkers;
  for (int i = 0; i < reg->nworkers; i++) t->use[i].t = t;
  *out = t;
  return 0;
}

/* ---- lifetime ---- */

static void let_go(cb__rtable_t *t) {
  if (__atomic_sub_fetch(&t->workers_left, 1, __ATOMIC_ACQ_REL) == 0) table_free(t);
}

/* The worker leaves the stand-in t. If it never adopted the table built for t, it lets go of that one too (a
 * worker that left before the build is not counted by it: build_for). */
static void lazy_leave(cb__rtable_t *t, int worker) {
  cb__routes_t *reg = t->reg;
  cb__routes_lock(reg);
  t->use[worker].retired = 1;
  cb__rtable_t *built = t->use[worker].adopted ? NULL : t->built;
  int last = --t->workers_left == 0;
  if (last && reg->pending == t) reg->pending = NULL;
  cb__routes_unlock(reg);
  if (built != NULL) cb__rtable_retire(built, worker);
  if (last) table_free(t);
}

void cb__rtable_retire(cb__rtable_t *t, int worker) {
  if (t == NULL) return;
  if (t->lazy) {
    cb__rtable_t *prev = t->use[worker].prev;
    t->use[worker].prev = NULL;
    cb__rtable_retire(prev, worker);
    lazy_leave(t, worker);
    return;
  }
  t->use[worker].retired = 1;
  if (t->use[worker].uses == 0) let_go(t);
}

/* Builds the table for the stand-in t, under the registry's lock. Workers that have left t already will never
 * adopt it nor let go of it: they are counted out here. */
static void build_for(cb__routes_t *reg, cb__rtable_t *t) {
  /* Whether or not the build succeeds, a worker has left t now (to its build or back to its previous table):
   * the next change needs a new stand-in. */
  if (reg->pending == t) reg->pending = NULL;
  cb__rtable_t *b;
  if (cb__rtable_build(reg, &b) != 0) return; /* each worker tries again, or keeps its previous table */
  for (int i = 0; i < t->nworkers; i++) {
    if (!t->use[i].retired) continue;
    b->use[i].retired = 1;
    b->workers_left--;
  }
  t->built = b;
}

/* The worker's first dispatch under the stand-in t: the table built for it (built now if no worker did yet),
 * or, when it cannot be built, the table the worker held before. Rare (once per worker per burst of changes),
 * so out of the dispatch's way. */
static __attribute__((noinline, cold)) cb__rtable_t *materialize(cb__worker_t *w, cb__rtable_t *t) {
  cb__routes_t *reg = t->reg;
  int me = w->index;
  cb__routes_lock(reg);
  if (t->built == NULL) build_for(reg, t);
  cb__rtable_t *b = t->built;
  if (b != NULL) t->use[me].adopted = 1;
  cb__routes_unlock(reg);
  cb__rtable_t *prev = t->use[me].prev;
  t->use[me].prev = NULL;
  if (b != NULL) {
    w->table = b;
    cb__rtable_retire(prev, me);
  } else {
    w->table = prev;
  }
  lazy_leave(t, me);
  return w->table;
}

/* A request's use ends (its output has left, or its connection closed). */
static void use_release(void *arg, uint32_t n) {
  use_t *u = arg;
  u->uses -= n;
  if (u->uses == 0 && u->retired) let_go(u->t);
}

/* The worker takes the table t. A stand-in: the worker keeps the table it dispatches under until it builds or
 * adopts t's. */
static void swap_call(cb__worker_t *w, cb__call_t *call) {
  cb__rtable_t *old = w->table, *t = call->arg;
  w->table = t;
  if (!t->lazy) {
    cb__rtable_retire(old, w->index);
  } else if (old->lazy) { /* a stand-in it never dispatched under: the table before it is still the one to keep */
    t->use[w->index].prev = old->use[w->index].prev;
    old->use[w->index].prev = NULL;
    cb__rtable_retire(old, w->index);
  } else {
    t->use[w->index].prev = old;
  }
  cb__call_done(call);
}

/* Callers hold srv->api_mu, so publishes do not overlap: when every worker holds a stand-in nobody has built
 * yet (reg->pending), the change is already in what they will build, and nothing needs to be sent. */
static int publish(cb_server_t *srv, int now) {
  cb__routes_t *reg = srv->routes;
  cb__rtable_t *t;
  cb__routes_lock(reg);
  int err;
  if (now) {
    err = cb__rtable_build(reg, &t);
    if (err == 0) reg->pending = NULL; /* a worker may still build the stand-in it holds, to no harm */
  } else {
    err = reg->pending != NULL ? 1 : lazy_new(reg, &t);
    if (err == 0) reg->pending = t;
  }
  cb__routes_unlock(reg);
  if (err) return err > 0 ? 0 : err;
  cb__call_t *calls = malloc((size_t)srv->nworkers * sizeof *calls);
  err = calls ? cb__call_all(srv, swap_call, t, calls) : UV_ENOMEM;
  free(calls);
  if (err) { /* no worker took it */
    cb__routes_lock(reg);
    if (reg->pending == t) reg->pending = NULL;
    cb__routes_unlock(reg);
    table_free(t);
  }
  return err;
}

int cb__routes_publish(cb_server_t *srv) { return publish(srv, 0); }
int cb__routes_publish_now(cb_server_t *srv) { return publish(srv, 1); }

/* ---- dispatch ---- */

static inline uint64_t *counter(cb__worker_t *w, uint32_t idx) {
  return &w->counters[idx >> CHUNK_BITS][idx & (CHUNK - 1)];
}

static inline void bump(uint64_t *c) { __atomic_store_n(c, *c + 1, __ATOMIC_RELAXED); }

static inline void count(cb__worker_t *w, uint32_t idx) { bump(counter(w, idx)); }

static inline const uint32_t *lookup(const index_t *ix, const char *key, size_t klen, uint32_t *len) {
  const bucket_t *b = probe(ix, key, klen, hash_bytes(key, klen));
  *len = b->len;
  return b->key ? ix->list + b->start : NULL;
}

/* Whether rt answers; path_known: the exact index has already compared the path. */
static inline int try_route(const cb__route_t *rt, cb__req_t *r, const cb__match_in_t *in, unsigned *allow,
                            const cb__route_t **first405, int path_known) {
  if (!path_known && !cb__route_match_path(rt, r, in)) return 0;
  if ((rt->nheaders || rt->nquery) && !cb__route_match_rest(rt, r, in)) return 0;
  if (rt->methods != 0 && !(rt->mmask & in->mbit)) {
    *allow |= rt->mmask;
    if (*first405 == NULL) *first405 = rt;
    return 0;
  }
  if (__builtin_expect(rt->body != NULL, 0)) {
    /* At the head the body is not known: the lookup stops here and starts again once it is complete
     * (cb__rtable_dispatch_body), so that a route before this one that answers at the head still wins. */
    if (!r->body_known) {
      r->body_wait = 1;
      return 1;
    }
    if (!cb__body_match(rt->body, r)) return 0;
  }
  return rt->kind->claim == NULL || rt->kind->claim(rt, r);
}

/* Whether rt answers any request with its path and an allowed method, when it is the first candidate. */
static int path_method_only(const cb__route_t *rt) {
  return rt->nheaders == 0 && rt->nquery == 0 && rt->body == NULL && rt->kind->claim == NULL;
}

/* r was dispatched under t: a use of t, unless r's route is a fixture route (see the top of this file). */
static inline void take_use(cb__req_t *r, const cb__route_t *rt, cb__rtable_t *t, use_t *u) {
  if (rt->fixture) return;
  r->table = t;
  u->uses++;
}

/* Whether the worker's last route answers r (see use_t.last). */
static inline int last_answers(const cb__route_t *last, const cb__req_t *r) {
  return r->path_len == last->path_len && (last->mmask & r->method) &&
         cb__same_bytes(r->path, last->path, last->path_len);
}

static inline void answer_last(cb__req_t *r, cb__rtable_t *t, use_t *u, const cb__route_t *last) {
  r->route = last;
  bump(u->last_count);
  take_use(r, last, t, u);
}

static inline void lookup_all(cb__worker_t *w, cb__req_t *r, cb__rtable_t *t, use_t *u);

/* The lookup (and the last route for a path that rtable_dispatch does not compare itself). */
static __attribute__((noinline)) void dispatch_lookup(cb__worker_t *w, cb__req_t *r, cb__rtable_t *t, use_t *u) {
  if (__builtin_expect(t->lazy, 0)) { /* a stand-in (it has no last route): the table built for it */
    t = materialize(w, t);
    u = &t->use[w->index];
  }
  const cb__route_t *last = u->last;
  if (last != NULL && last_answers(last, r)) {
    answer_last(r, t, u, last);
    return;
  }
  lookup_all(w, r, t, u);
}

/* The lookup proper: u is NULL when it runs again with the body known (nothing remembered, the use taken). */
static inline __attribute__((always_inline)) void lookup_all(cb__worker_t *w, cb__req_t *r, cb__rtable_t *t,
                                                              use_t *u) {
  cb__match_in_t in_req;
  const cb__match_in_t *in = &in_req;
  cb__match_in(r, &in_req);
  /* Scenario states read now: a lookup that finds nothing while they moved looks again (below). */
  uint64_t *moves = cb__scenarios_moves(t->reg->scenarios);
  uint64_t moved = __atomic_load_n(moves, __ATOMIC_ACQUIRE);
  int again = 8;
look:;
  uint32_t na, nb, nc = (uint32_t)t->nwild, ia = 0, ib = 0, ic = 0;
  const uint32_t *a = lookup(&t->exact, in->path, in->path_len, &na);
  const uint32_t *b = NULL;
  const cb__route_t *hit = NULL, *first405 = NULL;
  unsigned allow = 0;
  /* The common case: an exact route that comes before every prefix or {param} route answers, and the other
   * indexes need not be looked at. */
  while (ia < na && a[ia] < t->first_nonexact) {
    const cb__route_t *rt = t->routes[a[ia++]];
    if (try_route(rt, r, in, &allow, &first405, 1)) {
      hit = rt;
      if (ia == 1 && u != NULL && path_method_only(rt)) {
        u->last = rt;
        u->last_count = counter(w, 2 * rt->slot);
      }
      goto found;
    }
  }
  nb = 0;
  if (in->path_len > 0 && in->path[0] == '/') {
    const char *seg = in->path + 1, *end = in->path + in->path_len;
    const char *slash = memchr(seg, '/', (size_t)(end - seg));
    b = lookup(&t->seg, seg, (size_t)((slash ? slash : end) - seg), &nb);
  }
  const uint32_t *c = t->wild;
  /* The three candidate lists are each in table order: merge them. */
  for (;;) {
    uint32_t next = UINT32_MAX;
    if (ia < na && a[ia] < next) next = a[ia];
    if (ib < nb && b[ib] < next) next = b[ib];
    if (ic < nc && c[ic] < next) next = c[ic];
    if (next == UINT32_MAX) break;
    if (ia < na && a[ia] == next) ia++;
    if (ib < nb && b[ib] == next) ib++;
    if (ic < nc && c[ic] == next) ic++;
    const cb__route_t *rt = t->routes[next];
    if (try_route(rt, r, in, &allow, &first405, 0)) {
      hit = rt;
      break;
    }
  }
found:
  if (hit == NULL && again-- > 0) {
    /* Nothing answered, and a scenario's state moved while the stubs were looked at (another request took a
     * transition): some were judged against the old state, the others against the new one, so the request
     * looks again against the new one. Two requests racing for one transition then get its two answers, never
     * a 404 (docs/routes.md, "Scenarios"). A few rounds at most: each one means another request went on. */
    uint64_t now = __atomic_load_n(moves, __ATOMIC_ACQUIRE);
    if (now != moved) {
      moved = now;
      goto look;
    }
  }
  if (__builtin_expect(r->body_wait, 0) && !r->body_known) { /* counted when it is chosen, with the body */
    r->route = hit;
    take_use(r, hit, t, u);
    return;
  }
  if (hit != NULL) {
    r->route = hit;
    count(w, 2 * hit->slot);
  } else if (first405 != NULL) {
    r->route = first405;
    r->allow = (uint16_t)allow;
    count(w, 2 * first405->slot + 1);
  } else {
    r->route = t->not_found;
    count(w, 2 * t->not_found->slot);
    /* A 404 holds the table it was dispatched under (a fixture route would not): its answer scores the
     * table's stubs (near_miss.c) when the request ends. Only the 404 path pays for it. */
    if (u != NULL) {
      r->table = t;
      u->uses++;
    }
    return;
  }
  if (u != NULL) take_use(r, r->route, t, u);
}

void cb__rtable_dispatch_body(cb__req_t *r) {
  r->body_known = 1;
  r->allow = 0;
  lookup_all(r->conn->w, r, r->table, NULL);
}

/* ---- the router: the core's way to the table (core.h, cb__router_t) ---- */

static void rtable_dispatch(cb__worker_t *w, cb__req_t *r) {
  cb__rtable_t *t = w->table;
  use_t *u = &t->use[w->index];
  const cb__route_t *last = u->last;
  /* Paths of 4 to 16 bytes (most) here, compared without a call; the others in dispatch_lookup. */
  if (last != NULL && last->path_len - 4 <= 16 - 4 && last_answers(last, r))
    answer_last(r, t, u, last);
  else
    dispatch_lookup(w, r, t, u);
  if (__builtin_expect(r->body_wait, 0))
    r->handler = &cb__h_body_wait; /* the route is chosen when the body is complete (body_match.c) */
  else
    r->handler = r->allow ? &cb__h_method_not_allowed : r->route->handler;
}

static void rtable_release(cb__req_t *r) {
  if (__builtin_expect(r->mbody != NULL || r->mjson != NULL, 0)) cb__req_body_free(r); /* body_match.c */
  cb__rtable_t *t = r->table;
  if (t == NULL) return;
  r->table = NULL;
  use_t *u = &t->use[r->conn->w->index];
  cb__conn_release_after(r->conn, use_release, u);
}

static uint64_t rtable_identify(const cb__req_t *r, const char **name, size_t *name_len) {
  *name = r->route->name;
  *name_len = r->route->name_len;
  return r->route->stub_id;
}

static void rtable_retire_worker(cb__worker_t *w) {
  cb__rtable_retire(w->table, w->index);
  w->table = NULL;
}

const cb__router_t cb__router = {
    .dispatch = rtable_dispatch,
    .release = rtable_release,
    .identify = rtable_identify,
    .retire = rtable_retire_worker,
};

cb__route_t **cb__routes_take_all(cb__routes_t *reg, int *n) {
  cb__route_t **all = reg->stubs;
  *n = reg->nstubs;
  reg->stubs = NULL;
  reg->nstubs = reg->stubs_cap = 0;
  return all;
}
