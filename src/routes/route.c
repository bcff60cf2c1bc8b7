/* One route: its match compiled from the public cb_match_t (the fixture routes and the stubs go through the
 * same code), matching a request against it, and dispatching a request through the worker's table. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "routes/routes.h"

/* ---- compiling ---- */

static char *dup_bytes(const char *p, size_t n) {
  char *d = malloc(n + 1);
  if (d == NULL) return NULL;
  if (n) memcpy(d, p, n);
  d[n] = '\0';
  return d;
}

static int compile_matchers(const cb_matcher_t *in, size_t n, int header, cb__matcher_t **out, int *nout) {
  cb_field_id field = header ? CB_FIELD_MATCH_HEADERS : CB_FIELD_MATCH_QUERY;
  *out = NULL;
  *nout = 0;
  if (n == 0) return 0;
  if (in == NULL) return cb__bad_number(field, -1, CB_WHY_NULL_POINTER, (long long)n);
  if (n > CB_MAX_MATCHERS) return cb__bad_number(field, -1, CB_WHY_TOO_MANY, (long long)n);
  for (size_t i = 0; i < n; i++) { /* checked whole first: nothing to free on the way out */
    const cb_matcher_t *x = &in[i];
    int why = header ? cb__header_name_why(x->name.ptr, x->name.len)
              : x->name.ptr == NULL && x->name.len > 0 ? CB_WHY_NULL_POINTER
              : x->name.len == 0 ? CB_WHY_EMPTY
              : x->name.len > 256 ? CB_WHY_TOO_LONG : 0;
    if (why) return cb__bad_bytes(field, (long)i, why, x->name.ptr, x->name.len);
    if (x->value.ptr == NULL && x->value.len != 0)
      return cb__bad_bytes(field, (long)i, CB_WHY_NULL_POINTER, NULL, 0);
    why = x->value.len > 8192 ? CB_WHY_TOO_LONG
          : header && x->value.ptr ? cb__header_value_why(x->value.ptr, x->value.len) : 0;
    if (why) return cb__bad_bytes(field, (long)i, why, x->value.ptr, x->value.len);
  }
  cb__matcher_t *m = calloc(n, sizeof *m);
  if (m == NULL) return UV_ENOMEM;
  *out = m;
  for (size_t i = 0; i < n; i++) {
    const cb_matcher_t *x = &in[i];
    m[i].name = dup_bytes(x->name.ptr, x->name.len);
    m[i].name_len = x->name.len;
    if (m[i].name == NULL) return UV_ENOMEM;
    if (header) {
      for (size_t k = 0; k < m[i].name_len; k++)
        if (m[i].name[k] >= 'A' && m[i].name[k] <= 'Z') m[i].name[k] += 32;
    }
    if (x->value.ptr) {
      m[i].value = dup_bytes(x->value.ptr, x->value.len);
      if (m[i].value == NULL) return UV_ENOMEM;
      m[i].value_len = x->value.len;
    }
    (*nout)++;
  }
  return 0;
}

static int param_char(char ch) {
  return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_';
}

/* Why a path pattern is refused, in the order cbench_spec checks it (so every engine names the same first
 * fault): 0 when it is good. The bytes first, then the star, then each segment from the left. */
static int path_why(const char *p, size_t n) {
  if (n == 0) return CB_WHY_EMPTY;
  if (p[0] != '/') return CB_WHY_NO_LEADING_SLASH;
  if (n > CB_MAX_PATH) return CB_WHY_TOO_LONG;
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)p[i];
    if (ch <= 0x20 || ch >= 0x7f || ch == '?' || ch == '#') return CB_WHY_BAD_CHAR;
  }
  int braces = memchr(p, '{', n) != NULL || memchr(p, '}', n) != NULL;
  const char *star = memchr(p, '*', n);
  if (star != NULL) {
    if (star != p + n - 1 || p[n - 2] != '/') return CB_WHY_MISPLACED_STAR; /* "/files/" "*" only */
    return braces ? CB_WHY_STAR_WITH_PARAM : 0;
  }
  int nparams = 0;
  for (size_t i = 1; i <= n;) {
    size_t start = i;
    while (i < n && p[i] != '/') i++;
    size_t len = i - start;
    const char *seg = p + start;
    int open = memchr(seg, '{', len) != NULL, close = memchr(seg, '}', len) != NULL;
    if (open && !close) return CB_WHY_UNCLOSED_BRACE;
    if (close && !open) return CB_WHY_STRAY_BRACE;
    if (open) {
      if (seg[0] != '{' || seg[len - 1] != '}') return CB_WHY_PARAM_NOT_SEGMENT;
      if (len == 2) return CB_WHY_EMPTY_PARAM_NAME;
      for (size_t k = 1; k + 1 < len; k++)
        if (!param_char(seg[k])) return CB_WHY_BAD_PARAM_NAME;
      if (++nparams > CB_MAX_PATH_PARAMS) return CB_WHY_TOO_MANY_PARAMS;
    }
    i++; /* the '/' */
  }
  return 0;
}

/* Splits a checked pattern (path_why) into segments; "{name}" segments are parameters. */
static int compile_params(cb__route_t *rt) {
  const char *p = rt->pattern;
  size_t n = rt->pattern_len;
  int nsegs = 0, nparams = 0;
  for (size_t i = 0; i < n; i++) nsegs += p[i] == '/';
  rt->segs = calloc((size_t)nsegs, sizeof *rt->segs);
  if (rt->segs == NULL) return UV_ENOMEM;
  size_t i = 1;
  for (int k = 0; k < nsegs; k++) {
    size_t start = i;
    while (i < n && p[i] != '/') i++;
    size_t len = i - start;
    cb__seg_t *s = &rt->segs[k];
    s->off = (uint16_t)start;
    s->len = (uint16_t)len;
    if (len > 0 && p[start] == '{') {
      s->param = 1;
      nparams++;
    }
    i++; /* the '/' */
  }
  rt->nsegs = nsegs;
  if (nparams == 0) { /* no parameter after all: an exact path */
    free(rt->segs);
    rt->segs = NULL;
    rt->nsegs = 0;
    rt->path_kind = CB__PATH_EXACT;
  }
  return 0;
}

static void route_free(cb__route_t *rt) {
  if (rt->kind && rt->kind->free_arg) rt->kind->free_arg(rt->arg);
  for (int i = 0; i < rt->nheaders; i++) {
    free(rt->headers[i].name);
    free(rt->headers[i].value);
  }
  for (int i = 0; i < rt->nquery; i++) {
    free(rt->query[i].name);
    free(rt->query[i].value);
  }
  cb__body_match_free(rt->body);
  free(rt->headers);
  free(rt->query);
  free(rt->segs);
  free(rt->pattern);
  free(rt->name);
  free(rt);
}

int cb__route_new(const cb_match_t *m, const char *name, size_t name_len, const cb__route_kind_t *kind,
                  const cb__handler_t *handler, void *arg, cb__route_t **out) {
  *out = NULL;
  if (m == NULL) return UV_EINVAL;
  if (m->path.ptr == NULL) return cb__bad_bytes(CB_FIELD_PATH, -1, m->path.len ? CB_WHY_NULL_POINTER : CB_WHY_MISSING,
                                                NULL, 0);
  int why = path_why(m->path.ptr, m->path.len);
  if (why) return cb__bad_bytes(CB_FIELD_PATH, -1, why, m->path.ptr, m->path.len);
  if (m->methods & ~(unsigned)CB_METHOD_ALL)
    return cb__bad_number(CB_FIELD_METHODS, -1, CB_WHY_UNKNOWN_METHOD, (long long)m->methods);
  cb__route_t *rt = calloc(1, sizeof *rt);
  if (rt == NULL) return UV_ENOMEM;
  rt->refs = 1;
  rt->kind = kind;
  rt->handler = handler;
  rt->priority = m->priority;
  rt->methods = m->methods;
  rt->mmask = m->methods == 0 ? (unsigned)CB_METHOD_ALL
                              : (m->methods | ((m->methods & CB_METHOD_GET) ? (unsigned)CB_METHOD_HEAD : 0u));
  rt->name = dup_bytes(name, name_len);
  rt->name_len = name_len;
  rt->pattern = dup_bytes(m->path.ptr, m->path.len);
  rt->pattern_len = m->path.len;
  int err = rt->name && rt->pattern ? 0 : UV_ENOMEM;
  if (err == 0) {
    const char *p = rt->pattern;
    size_t n = rt->pattern_len;
    rt->path = p;
    rt->path_len = n;
    if (p[n - 1] == '*') { /* a prefix of what precedes the star (path_why let no other star through) */
      rt->path_kind = CB__PATH_PREFIX;
      rt->path_len = n - 1;
    } else if (memchr(p, '{', n)) {
      rt->path_kind = CB__PATH_PARAMS;
      err = compile_params(rt);
    } else {
      rt->path_kind = CB__PATH_EXACT;
    }
  }
  if (err == 0) err = compile_matchers(m->headers, m->nheaders, 1, &rt->headers, &rt->nheaders);
  if (err == 0) err = compile_matchers(m->query, m->nquery, 0, &rt->query, &rt->nquery);
  if (err == 0) err = cb__body_match_new(&m->body, &rt->body);
  if (err == 0) {
    /* Query names and values are compared decoded: decode the matchers' too, once. */
    for (int i = 0; i < rt->nquery; i++) {
      rt->query[i].name_len = cb__url_decode(rt->query[i].name, rt->query[i].name, rt->query[i].name_len);
      if (rt->query[i].value)
        rt->query[i].value_len = cb__url_decode(rt->query[i].value, rt->query[i].value, rt->query[i].value_len);
    }
  }
  if (err) {
    rt->kind = NULL; /* arg stays the caller's on failure */
    route_free(rt);
    return err;
  }
  rt->arg = arg;
  *out = rt;
  return 0;
}

void cb__route_ref(cb__route_t *rt) { __atomic_add_fetch(&rt->refs, 1, __ATOMIC_RELAXED); }


void cb__route_unref(cb__routes_t *reg, cb__route_t *rt) {
  if (rt == NULL || __atomic_sub_fetch(&rt->refs, 1, __ATOMIC_ACQ_REL) != 0) return;
  if (rt->slot != 0) cb__routes_slot_free(reg, rt->slot);
  route_free(rt);
}

/* ---- matching ---- */

static int lower_eq(const char *a, const char *lower, size_t n) {
  for (size_t i = 0; i < n; i++) {
    char ch = a[i];
    if (ch >= 'A' && ch <= 'Z') ch += 32;
    if (ch != lower[i]) return 0;
  }
  return 1;
}

static int header_ok(const cb__matcher_t *m, const cb__req_t *r) {
  for (int i = 0; i < r->nheaders; i++) {
    const cb__hdr_t *h = &r->headers[i];
    if (h->name_len != m->name_len || !lower_eq(h->name, m->name, m->name_len)) continue;
    if (m->value == NULL || (h->value_len == m->value_len && memcmp(h->value, m->value, m->value_len) == 0))
      return 1;
  }
  /* HTTP/2 carries the host as :authority. */
  if (r->authority && m->name_len == 4 && memcmp(m->name, "host", 4) == 0)
    return m->value == NULL ||
           (r->authority_len == m->value_len && memcmp(r->authority, m->value, m->value_len) == 0);
  return 0;
}

/* Compares a raw (encoded) query piece with a decoded matcher string. */
static int decoded_eq(const char *raw, size_t n, const char *want, size_t wn) {
  char tmp[512];
  if (n > sizeof tmp) {
    char *d = malloc(n);
    if (d == NULL) return 0;
    size_t dn = cb__url_decode(d, raw, n);
    int eq = dn == wn && memcmp(d, want, wn) == 0;
    free(d);
    return eq;
  }
  size_t dn = cb__url_decode(tmp, raw, n);
  return dn == wn && memcmp(tmp, want, wn) == 0;
}

static int query_ok(const cb__matcher_t *m, const cb__match_in_t *in) {
  if (in->query == NULL) return 0; /* no '?' at all */
  const char *p = in->query, *end = in->query + in->query_len;
  while (p < end) {
    const char *amp = memchr(p, '&', (size_t)(end - p));
    const char *pe = amp ? amp : end;
    const char *eq = memchr(p, '=', (size_t)(pe - p));
    const char *ne = eq ? eq : pe;
    if (decoded_eq(p, (size_t)(ne - p), m->name, m->name_len)) {
      if (m->value == NULL) return 1;
      const char *v = eq ? eq + 1 : pe;
      if (decoded_eq(v, (size_t)(pe - v), m->value, m->value_len)) return 1;
    }
    p = pe + 1;
  }
  return 0;
}

static int params_match(const cb__route_t *rt, cb__req_t *r, const char *path, size_t len) {
  size_t i = 0;
  int np = 0;
  for (int k = 0; k < rt->nsegs; k++) {
    if (i >= len || path[i] != '/') return 0;
    i++;
    size_t start = i;
    while (i < len && path[i] != '/') i++;
    size_t sl = i - start;
    const cb__seg_t *s = &rt->segs[k];
    if (s->param) {
      if (sl == 0 || sl > UINT16_MAX || start > UINT16_MAX) return 0;
      r->params[np][0] = (uint16_t)start;
      r->params[np][1] = (uint16_t)sl;
      np++;
    } else if (sl != s->len || memcmp(path + start, rt->pattern + s->off, sl) != 0) {
      return 0;
    }
  }
  return i == len;
}

int cb__route_match_path(const cb__route_t *rt, cb__req_t *r, const cb__match_in_t *in) {
  switch (rt->path_kind) {
    case CB__PATH_EXACT:
      return in->path_len == rt->path_len && memcmp(in->path, rt->path, rt->path_len) == 0;
    case CB__PATH_PREFIX:
      return in->path_len >= rt->path_len && memcmp(in->path, rt->path, rt->path_len) == 0;
    default:
      return params_match(rt, r, in->path, in->path_len);
  }
}

int cb__route_header_ok(const cb__route_t *rt, int i, const cb__req_t *r) { return header_ok(&rt->headers[i], r); }
int cb__route_query_ok(const cb__route_t *rt, int i, const cb__match_in_t *in) { return query_ok(&rt->query[i], in); }

int cb__route_match_rest(const cb__route_t *rt, cb__req_t *r, const cb__match_in_t *in) {
  for (int i = 0; i < rt->nheaders; i++)
    if (!header_ok(&rt->headers[i], r)) return 0;
  for (int i = 0; i < rt->nquery; i++)
    if (!query_ok(&rt->query[i], in)) return 0;
  return 1;
}

/* ---- dispatch ---- */

void cb__match_in(const cb__req_t *r, cb__match_in_t *in) {
  in->path = r->path;
  in->path_len = r->path_len;
  in->query = r->target_len > r->path_len ? r->path + r->path_len + 1 : NULL;
  in->query_len = in->query ? r->target_len - r->path_len - 1 : 0;
  in->mbit = r->method;
}
