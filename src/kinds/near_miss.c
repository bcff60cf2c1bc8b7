/* Near misses (issue 25): for a request that matched no route, the stubs that came closest and the parts of
 * their match it failed. Only the 404 path calls this: a matched request never pays for it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "kinds/kinds.h"

/* ---- the request's query, indexed once ----
 * A query matcher is met by a parameter with its decoded name (and, when it has a value, that decoded value).
 * The dispatch compares each matcher with the parameters in turn, which is right for the few stubs that get that
 * far; scoring a 404 asks every stub, so 100,000 stubs against a 64 KiB query would be billions of decodings for
 * one request. The query is decoded once instead, into a hash set of its names and of its name=value pairs, and
 * each matcher costs one lookup. Work (cb__near_misses): one unit per parameter indexed and one per slot a lookup
 * probes (two keys a parameter), so one 404 costs a few units per parameter and per query matcher. */

typedef struct {
  const char *name, *value; /* decoded, in the index's buffer; value NULL: the name alone */
  size_t name_len, value_len;
  uint64_t hash; /* 0: an empty slot */
} qslot_t;

typedef struct {
  int state;    /* 0: not built yet, 1: built, -1: no memory (the matchers then compare parameters in turn) */
  qslot_t *slots;
  size_t mask;
  char *dec;    /* the decoded names and values */
  uint64_t seed; /* of the hash, per index (see qhash) */
  uint64_t *work;
} qindex_t;

/* FNV-1a over the name, a separator that no length can be confused with, the value; then splitmix64's
 * finaliser. Never 0 (0 marks an empty slot). Seeded per index (from its table's address, as /headers and
 * /cookies seed theirs), so that a client cannot aim its parameters at one run of slots: such a query would cost
 * its worker a probe per earlier parameter for each one, stalling the worker's other connections. */
static uint64_t qhash(uint64_t seed, const char *name, size_t nl, const char *value, size_t vl) {
  uint64_t x = seed ^ 14695981039346656037ull;
  for (size_t i = 0; i < nl; i++) x = (x ^ (uint8_t)name[i]) * 1099511628211ull;
  x = (x ^ (value ? 0x100u + (uint64_t)vl : 0x200u)) * 1099511628211ull;
  for (size_t i = 0; value && i < vl; i++) x = (x ^ (uint8_t)value[i]) * 1099511628211ull;
  return cb__mix64(x) | 1;
}

static int qslot_is(const qslot_t *s, uint64_t h, const char *name, size_t nl, const char *value, size_t vl) {
  return s->hash == h && s->name_len == nl && memcmp(s->name, name, nl) == 0 && (s->value == NULL) == (value == NULL) &&
         (value == NULL || (s->value_len == vl && memcmp(s->value, value, vl) == 0));
}

/* The slot that holds the key, or the empty slot where it would go (h: its hash). */
static qslot_t *qfind(qindex_t *ix, uint64_t h, const char *name, size_t nl, const char *value, size_t vl) {
  for (size_t i = (size_t)h & ix->mask;; i = (i + 1) & ix->mask) {
    if (ix->work) ++*ix->work;
    qslot_t *s = &ix->slots[i];
    if (s->hash == 0 || qslot_is(s, h, name, nl, value, vl)) return s;
  }
}

/* Adds a key once (a parameter repeated adds nothing). */
static void qinsert(qindex_t *ix, const char *name, size_t nl, const char *value, size_t vl) {
  uint64_t h = qhash(ix->seed, name, nl, value, vl);
  qslot_t *s = qfind(ix, h, name, nl, value, vl);
  if (s->hash == 0) *s = (qslot_t){name, value, nl, vl, h};
}

static void qindex_build(qindex_t *ix, const cb__match_in_t *in) {
  size_t nparams = 1;
  for (size_t i = 0; i < in->query_len; i++) nparams += in->query[i] == '&';
  size_t cap = 16;
  while (cap < 4 * nparams) cap *= 2; /* two keys a parameter, the table at most half full */
  ix->slots = calloc(cap, sizeof *ix->slots);
  ix->dec = malloc(in->query_len ? in->query_len : 1);
  if (ix->slots == NULL || ix->dec == NULL) {
    free(ix->slots);
    free(ix->dec);
    ix->slots = NULL;
    ix->dec = NULL;
    ix->state = -1;
    return;
  }
  ix->mask = cap - 1;
  ix->seed = (uint64_t)(uintptr_t)ix->slots * 0x9e3779b97f4a7c15ull;
  ix->state = 1;
  char *o = ix->dec;
  const char *p = in->query, *end = in->query + in->query_len;
  while (p < end) {
    const char *amp = memchr(p, '&', (size_t)(end - p));
    const char *pe = amp ? amp : end;
    const char *eq = memchr(p, '=', (size_t)(pe - p));
    const char *ne = eq ? eq : pe;
    const char *v = eq ? eq + 1 : pe; /* a name alone has the empty value, as the dispatch compares it */
    char *name = o;
    size_t nl = cb__url_decode(name, p, (size_t)(ne - p));
    char *value = name + nl;
    size_t vl = cb__url_decode(value, v, (size_t)(pe - v));
    o = value + vl;
    qinsert(ix, name, nl, NULL, 0);
    qinsert(ix, name, nl, value, vl);
    p = pe + 1;
  }
}

static void qindex_free(qindex_t *ix) {
  free(ix->slots);
  free(ix->dec);
}

/* Whether query matcher i of rt is met, the index built at the first matcher that asks. */
static int query_ok(qindex_t *ix, const cb__route_t *rt, int i, const cb__match_in_t *in) {
  if (in->query == NULL) return 0; /* no '?' at all */
  if (ix->state == 0) qindex_build(ix, in);
  if (ix->state < 0) return cb__route_query_ok(rt, i, in);
  const cb__matcher_t *m = &rt->query[i];
  return qfind(ix, qhash(ix->seed, m->name, m->name_len, m->value, m->value_len), m->name, m->name_len, m->value,
               m->value_len)->hash != 0;
}

static unsigned score_route(const cb__route_t *rt, cb__req_t *r, const cb__match_in_t *in, qindex_t *ix,
                            cb__near_t *n) {
  memset(n, 0, sizeof *n);
  n->route = rt;
  if (!cb__route_match_path(rt, r, in)) {
    n->flags |= CB__NEAR_PATH;
    n->score += 4;
  }
  if (rt->methods != 0 && !(rt->mmask & in->mbit)) {
    n->flags |= CB__NEAR_METHOD;
    n->score += 2;
  }
  for (int i = 0; i < rt->nheaders; i++)
    if (!cb__route_header_ok(rt, i, r)) {
      n->headers |= 1u << i;
      n->score++;
    }
  for (int i = 0; i < rt->nquery; i++)
    if (!query_ok(ix, rt, i, in)) {
      n->query |= 1u << i;
      n->score++;
    }
  if (rt->body != NULL) {
    if (!r->body_known) {
      n->flags |= CB__NEAR_BODY | CB__NEAR_BODY_UNCHECKED;
      n->score++;
    } else if (!cb__body_match(rt->body, r)) {
      n->flags |= CB__NEAR_BODY;
      n->score++;
    }
  }
  if (n->score == 0) n->flags |= CB__NEAR_SPENT;
  return n->score;
}

int cb__near_misses_of(cb__route_t *const *routes, int nroutes, cb__req_t *r, cb__near_t out[CB__NEAR_MAX],
                       uint64_t *work) {
  int kept = 0;
  cb__match_in_t in;
  cb__match_in(r, &in);
  qindex_t ix = {.work = work};
  for (int i = 0; i < nroutes; i++) {
    const cb__route_t *rt = routes[i];
    if (rt->fixture || rt->stub_id == 0) continue;
    cb__near_t n;
    score_route(rt, r, &in, &ix, &n);
    /* Insert in order: a later route with an equal score stays after the earlier one. */
    int at = kept;
    while (at > 0 && out[at - 1].score > n.score) at--;
    if (at >= CB__NEAR_MAX) continue;
    int last = kept < CB__NEAR_MAX ? kept : CB__NEAR_MAX - 1;
    memmove(&out[at + 1], &out[at], (size_t)(last - at) * sizeof *out);
    out[at] = n;
    if (kept < CB__NEAR_MAX) kept++;
  }
  qindex_free(&ix);
  return kept;
}

int cb__near_misses(const cb__rtable_t *t, cb__req_t *r, cb__near_t out[CB__NEAR_MAX], uint64_t *work) {
  int nroutes;
  cb__route_t *const *routes = cb__rtable_routes(t, &nroutes);
  return cb__near_misses_of(routes, nroutes, r, out, work);
}

/* Calls fn once for each differing part of a near miss, in the order every writer lists them: the part is
 * prefix followed by the bytes p[0..n) (a matcher's name, or nothing). */
typedef void (*part_fn)(void *ud, const char *prefix, const char *p, size_t n);

static void each_part(const cb__near_t *n, part_fn fn, void *ud) {
  const cb__route_t *rt = n->route;
  if (n->flags & CB__NEAR_METHOD) fn(ud, "method", "", 0);
  if (n->flags & CB__NEAR_PATH) fn(ud, "path", "", 0);
  for (int i = 0; i < rt->nheaders; i++)
    if (n->headers & (1u << i)) fn(ud, "header ", rt->headers[i].name, rt->headers[i].name_len);
  for (int i = 0; i < rt->nquery; i++)
    if (n->query & (1u << i)) fn(ud, "query ", rt->query[i].name, rt->query[i].name_len);
  if (n->flags & CB__NEAR_BODY) fn(ud, n->flags & CB__NEAR_BODY_UNCHECKED ? "body (not read)" : "body", "", 0);
  if (n->flags & CB__NEAR_SPENT) fn(ud, "unavailable (spent, or another scenario state)", "", 0);
}

static size_t put(char *buf, size_t cap, size_t o, const char *p, size_t n) {
  if (o + 1 >= cap) return o;
  if (n > cap - 1 - o) n = cap - 1 - o;
  memcpy(buf + o, p, n);
  buf[o + n] = '\0';
  return o + n;
}

typedef struct {
  char *buf;
  size_t cap, o;
  const char *sep;
} text_t;

static void text_part(void *ud, const char *prefix, const char *p, size_t n) {
  text_t *t = ud;
  t->o = put(t->buf, t->cap, t->o, t->sep, strlen(t->sep));
  t->o = put(t->buf, t->cap, t->o, prefix, strlen(prefix));
  t->o = put(t->buf, t->cap, t->o, p, n);
  t->sep = ", ";
}

size_t cb__near_text(const cb__near_t *n, char *buf, size_t cap) {
  if (cap == 0) return 0;
  buf[0] = '\0';
  text_t t = {buf, cap, 0, ""};
  each_part(n, text_part, &t);
  return t.o;
}

/* ---- the 404 body ---- */

typedef struct {
  char *p;
  size_t len, cap;
  int oom;
} sbuf_t;

static void sb_add(sbuf_t *b, const char *p, size_t n) {
  if (b->oom) return;
  if (b->len + n > b->cap) {
    size_t cap = b->cap ? b->cap : 512;
    while (cap < b->len + n) cap *= 2;
    char *q = realloc(b->p, cap);
    if (q == NULL) {
      b->oom = 1;
      return;
    }
    b->p = q;
    b->cap = cap;
  }
  memcpy(b->p + b->len, p, n);
  b->len += n;
}

static void sb_adds(sbuf_t *b, const char *s) { sb_add(b, s, strlen(s)); }

/* Bytes as text: in plain text, bytes outside printable ASCII and '\\' as \xHH; in JSON, '"' and '\\' escaped and
 * bytes outside printable ASCII as \u00HH (cbench_router:near_text/2 writes the same). */
static void sb_esc(sbuf_t *b, const char *p, size_t n, int json) {
  static const char hex[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)p[i];
    char e[8];
    if (json && (ch == '"' || ch == '\\')) {
      e[0] = '\\';
      e[1] = (char)ch;
      sb_add(b, e, 2);
    } else if (ch < 0x20 || ch >= 0x7f || (!json && ch == '\\')) {
      if (json) {
        memcpy(e, "\\u00", 4);
        e[4] = hex[ch >> 4];
        e[5] = hex[ch & 15];
        sb_add(b, e, 6);
      } else {
        e[0] = '\\';
        e[1] = 'x';
        e[2] = hex[ch >> 4];
        e[3] = hex[ch & 15];
        sb_add(b, e, 4);
      }
    } else {
      sb_add(b, (const char *)&ch, 1);
    }
  }
}

typedef struct {
  sbuf_t *b;
  int json, first;
} items_t;

static void item_part(void *ud, const char *prefix, const char *p, size_t n) {
  items_t *it = ud;
  sb_adds(it->b, it->first ? "" : it->json ? "," : ", ");
  if (it->json) sb_adds(it->b, "\"");
  sb_adds(it->b, prefix);
  sb_esc(it->b, p, n, it->json);
  if (it->json) sb_adds(it->b, "\"");
  it->first = 0;
}

/* The differing parts of one near miss, each as its own item (the text of cb__near_text, escaped). */
static void sb_parts(sbuf_t *b, const cb__near_t *n, int json) {
  items_t it = {b, json, 1};
  each_part(n, item_part, &it);
}

static int accepts_json(const cb__req_t *r) {
  for (int i = 0; i < r->nheaders; i++) {
    const cb__hdr_t *h = &r->headers[i];
    if (h->name_len == 6 && strncasecmp(h->name, "accept", 6) == 0 &&
        memmem(h->value, h->value_len, "application/json", 16) != NULL)
      return 1;
  }
  return 0;
}

char *cb__near_body(cb__req_t *r, size_t *len, int *json) {
  cb__near_t near[CB__NEAR_MAX];
  int n = cb__near_misses(r->table, r, near, NULL);
  if (n == 0) return NULL;
  int js = accepts_json(r);
  sbuf_t b = {0};
  char num[32];
  if (js) {
    sb_adds(&b, "{\"method\":\"");
    sb_esc(&b, r->method_str, r->method_len, 1);
    sb_adds(&b, "\",\"target\":\"");
    sb_esc(&b, r->path, r->target_len, 1);
    sb_adds(&b, "\",\"near_misses\":[");
    for (int i = 0; i < n; i++) {
      sb_adds(&b, i ? ",{\"name\":\"" : "{\"name\":\"");
      sb_esc(&b, near[i].route->name, near[i].route->name_len, 1);
      snprintf(num, sizeof num, "\",\"id\":%llu,\"differs\":[", (unsigned long long)near[i].route->stub_id);
      sb_adds(&b, num);
      sb_parts(&b, &near[i], 1);
      sb_adds(&b, "]}");
    }
    sb_adds(&b, "]}\n");
  } else {
    sb_adds(&b, "No stub matched ");
    sb_esc(&b, r->method_str, r->method_len, 0);
    sb_adds(&b, " ");
    sb_esc(&b, r->path, r->target_len, 0);
    sb_adds(&b, "\nClosest stubs:\n");
    for (int i = 0; i < n; i++) {
      sb_adds(&b, "  ");
      sb_esc(&b, near[i].route->name, near[i].route->name_len, 0);
      snprintf(num, sizeof num, " (id %llu): ", (unsigned long long)near[i].route->stub_id);
      sb_adds(&b, num);
      sb_parts(&b, &near[i], 0);
      sb_adds(&b, "\n");
    }
  }
  if (b.oom) {
    free(b.p);
    return NULL;
  }
  *len = b.len;
  *json = js;
  return b.p;
}

/* ---- cb_server_near_misses(): the journal's 404s, scored now ---- */

_Static_assert(CB_MAX_NEAR_STUBS == CB__NEAR_MAX, "the public list holds what the scoring keeps");

/* The list's memory besides its items: the journal read (which method, path and query point into), the
 * names and parts copied out of the stubs, and the parts' array. */
typedef struct {
  cb_request_list_t *reqs;
  sbuf_t text;
  cb_str_t *parts;
  size_t nparts, capparts;
  int oom;
} near_priv_t;

/* Appends one part's text, NUL-terminated, and records its offset (pointers are set once the text stops
 * moving). */
static void list_part(void *ud, const char *prefix, const char *p, size_t n) {
  near_priv_t *pv = ud;
  if (pv->nparts == pv->capparts) {
    size_t cap = pv->capparts ? pv->capparts * 2 : 16;
    cb_str_t *q = realloc(pv->parts, cap * sizeof *q);
    if (q == NULL) {
      pv->oom = 1;
      return;
    }
    pv->parts = q;
    pv->capparts = cap;
  }
  size_t off = pv->text.len;
  sb_adds(&pv->text, prefix);
  sb_add(&pv->text, p, n);
  sb_add(&pv->text, "", 1);
  pv->parts[pv->nparts++] = (cb_str_t){(const char *)(uintptr_t)off, pv->text.len - 1 - off};
}

/* Scores one journaled 404 into x (its strings as offsets into pv->text for now). */
static int score_request(near_priv_t *pv, cb__route_t *const *routes, int nroutes, const cb_request_t *q,
                         cb_near_miss_t *x) {
  char *target = malloc(q->path.len + 1 + q->query.len + 1);
  cb__hdr_t *h = malloc((q->nheaders ? q->nheaders : 1) * sizeof *h);
  if (target == NULL || h == NULL) {
    free(target);
    free(h);
    return UV_ENOMEM;
  }
  memcpy(target, q->path.ptr, q->path.len);
  size_t tlen = q->path.len;
  if (q->query.len > 0) {
    target[tlen++] = '?';
    memcpy(target + tlen, q->query.ptr, q->query.len);
    tlen += q->query.len;
  }
  target[tlen] = '\0';
  for (size_t i = 0; i < q->nheaders; i++)
    h[i] = (cb__hdr_t){q->headers[i].name.ptr, q->headers[i].name.len, q->headers[i].value.ptr,
                       q->headers[i].value.len};
  cb__req_t r;
  memset(&r, 0, sizeof r);
  r.path = target;
  r.path_len = q->path.len;
  r.target_len = tlen;
  r.method_str = q->method.ptr;
  r.method_len = q->method.len;
  r.method = (uint16_t)cb_method_bit(q->method);
  r.headers = h;
  r.nheaders = (int)q->nheaders;
  r.content_length = -1;
  /* The body is judged from the journal's copy when it is whole (a list's copy has a NUL after it, which the
   * regex matchers' sanitizer interceptors want); else it cannot be, as on a 404 whose body was not held. */
  if (q->body.len == q->body_len) {
    r.body_known = 1;
    r.mbody = (char *)q->body.ptr;
    r.mbody_len = q->body.len;
  }
  cb__near_t near[CB__NEAR_MAX];
  int n = cb__near_misses_of(routes, nroutes, &r, near, NULL);
  cb__req_body_json_free(&r);
  x->seq = q->seq;
  x->method = q->method;
  x->path = q->path;
  x->query = q->query;
  x->count = (size_t)n;
  for (int k = 0; k < n; k++) {
    cb_near_stub_t *s = &x->near[k];
    s->id = near[k].route->stub_id;
    size_t off = pv->text.len;
    sb_add(&pv->text, near[k].route->name, near[k].route->name_len);
    sb_add(&pv->text, "", 1);
    s->name = (cb_str_t){(const char *)(uintptr_t)off, near[k].route->name_len};
    size_t first = pv->nparts;
    each_part(&near[k], list_part, pv);
    s->differs = (const cb_str_t *)(uintptr_t)first;
    s->ndiffers = pv->nparts - first;
  }
  free(target);
  free(h);
  return pv->oom || pv->text.oom ? UV_ENOMEM : 0;
}

void cb_near_miss_list_free(cb_near_miss_list_t *list) {
  if (list == NULL) return;
  near_priv_t *pv = list->priv_;
  if (pv != NULL) {
    cb_request_list_free(pv->reqs);
    free(pv->text.p);
    free(pv->parts);
    free(pv);
  }
  free(list->items);
  free(list);
}

int cb_server_near_misses(cb_server_t *srv, cb_near_miss_list_t **out) {
  if (srv == NULL || out == NULL) return UV_EINVAL;
  cb_near_miss_list_t *list = calloc(1, sizeof *list);
  near_priv_t *pv = calloc(1, sizeof *pv);
  if (list == NULL || pv == NULL) {
    free(list);
    free(pv);
    return UV_ENOMEM;
  }
  list->priv_ = pv;
  cb_request_filter_t f = {.route = CB_S("not_found")};
  int err = cb_server_requests(srv, &f, &pv->reqs);
  if (err) {
    cb_near_miss_list_free(list);
    return err;
  }
  /* A snapshot of the stubs in matching order, each held by a reference: the lock is not held while scoring,
   * so the API and the workers are not kept waiting, and a stub removed meanwhile stays readable. */
  cb__routes_t *reg = srv->routes;
  cb__routes_lock(reg);
  int nroutes;
  cb__route_t **stubs = cb__routes_stubs(reg, &nroutes);
  cb__route_t **routes = malloc(((size_t)nroutes + 1) * sizeof *routes);
  if (routes != NULL && nroutes > 0) {
    memcpy(routes, stubs, (size_t)nroutes * sizeof *routes);
    for (int i = 0; i < nroutes; i++) cb__route_ref(routes[i]);
  }
  cb__routes_unlock(reg);
  list->items = calloc(pv->reqs->count ? pv->reqs->count : 1, sizeof *list->items);
  err = routes == NULL || list->items == NULL ? UV_ENOMEM : 0;
  if (routes != NULL) cb__routes_sort(routes, nroutes);
  /* A stub named "not_found" answers with that route name too: only the table's own 404s count. */
  for (size_t i = 0; err == 0 && i < pv->reqs->count; i++) {
    const cb_request_t *q = &pv->reqs->items[i];
    if (q->stub_id != 0) continue;
    err = score_request(pv, routes, nroutes, q, &list->items[list->count++]);
  }
  if (routes != NULL)
    for (int i = 0; i < nroutes; i++) cb__route_unref(reg, routes[i]);
  free(routes);
  if (err) {
    cb_near_miss_list_free(list);
    return err;
  }
  /* The text stopped moving: offsets become pointers. */
  for (size_t i = 0; i < pv->nparts; i++) pv->parts[i].ptr = pv->text.p + (uintptr_t)pv->parts[i].ptr;
  for (size_t i = 0; i < list->count; i++)
    for (size_t k = 0; k < list->items[i].count; k++) {
      cb_near_stub_t *s = &list->items[i].near[k];
      s->name.ptr = pv->text.p + (uintptr_t)s->name.ptr;
      s->differs = pv->parts + (uintptr_t)s->differs;
    }
  *out = list;
  return 0;
}
