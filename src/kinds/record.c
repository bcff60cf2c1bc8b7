/* The recorder: proxied exchanges kept as stubs (docs/record.md).
 *
 * A recording is one allocation: the rec_t, its spans, the match key's bytes and the response's bytes, so what
 * the recorder holds is what was recorded plus a few dozen bytes each, an array of pointers in arrival order and
 * an open-addressed table of indexes for the dedup lookup (both doubled as they fill). Nothing is allocated
 * before the first recording, and a server that never records pays nothing per request: only a proxy stub with
 * `record` calls in here, once per complete answer.
 *
 * Workers call cb__record_exchange() and take `mu` for a lookup and an insert only; the key is built and the
 * bytes copied outside it. Readers (cb_server_recorded_json, cb_server_save_stubs) copy the array of pointers
 * under `mu` and write from the copy: a recording never changes once inserted, and `io_mu` keeps
 * cb_server_recorded_clear() from freeing recordings a reader is still writing out. */
#include "kinds/record.h"

#include "core/core.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Bytes inside a recording's allocation. */
typedef struct {
  const char *p;
  uint32_t n;
} span_t;

typedef struct {
  uint64_t hash;       /* of the key */
  uint64_t file_bytes; /* the proxy's record_body_file_bytes when it was recorded */
  size_t size;         /* of this allocation */
  int status;
  uint32_t nq, nh, nres; /* query matchers, header matchers, response headers */
  span_t method, path, body;
  span_t *q, *h, *res; /* pairs: [2i] the name, [2i + 1] the value */
  const char *key;     /* the match as bytes: what two recordings must share to be one */
  size_t key_len;
} rec_t;

struct cb__recorder_s {
  uv_mutex_t mu;    /* items, table and the counts: workers insert under it */
  uv_mutex_t io_mu; /* readers against clear */
  rec_t **items;    /* arrival order */
  size_t n, cap;
  uint32_t *table;  /* index + 1 into items, 0: empty; tcap a power of two, at most half full */
  size_t tcap;
  uint64_t dups, skipped, rec_bytes;
  char *file; /* cfg.record_to */
};

int cb__recorder_new(const char *record_to, cb__recorder_t **out) {
  cb__recorder_t *r = calloc(1, sizeof *r);
  if (r == NULL) return UV_ENOMEM;
  if (record_to != NULL && (r->file = strdup(record_to)) == NULL) {
    free(r);
    return UV_ENOMEM;
  }
  if (uv_mutex_init(&r->mu) != 0) {
    free(r->file);
    free(r);
    return UV_ENOMEM;
  }
  if (uv_mutex_init(&r->io_mu) != 0) {
    uv_mutex_destroy(&r->mu);
    free(r->file);
    free(r);
    return UV_ENOMEM;
  }
  *out = r;
  return 0;
}

static void drop_all(rec_t **items, size_t n, uint32_t *table) {
  for (size_t i = 0; i < n; i++) free(items[i]);
  free(items);
  free(table);
}

void cb__recorder_free(cb__recorder_t *r) {
  if (r == NULL) return;
  drop_all(r->items, r->n, r->table);
  uv_mutex_destroy(&r->mu);
  uv_mutex_destroy(&r->io_mu);
  free(r->file);
  free(r);
}

const char *cb__recorder_file(const cb__recorder_t *r) { return r ? r->file : NULL; }

void cb__record_counts(const cb_server_t *srv, cb__record_counts_t *out) {
  memset(out, 0, sizeof *out);
  cb__recorder_t *r = srv ? srv->recorder : NULL;
  if (r == NULL) return;
  uv_mutex_lock(&r->mu);
  out->recorded = r->n;
  out->duplicates = r->dups;
  out->skipped = r->skipped;
  out->bytes = r->rec_bytes + r->cap * sizeof *r->items + r->tcap * sizeof *r->table;
  uv_mutex_unlock(&r->mu);
}

/* ---- what a stub can say ---- */

/* Valid UTF-8 without NUL: what a JSON string of the stub file carries (jansson refuses the rest, and the
 * loader refuses \u0000). Overlong forms, surrogates and code points above U+10FFFF are not UTF-8. */
static int json_text_ok(const char *s, size_t n) {
  const unsigned char *p = (const unsigned char *)s;
  size_t i = 0;
  while (i < n) {
    unsigned c = p[i];
    if (c == 0) return 0;
    if (c < 0x80) {
      i++;
      continue;
    }
    size_t k;
    unsigned cp;
    if (c >= 0xc2 && c <= 0xdf) {
      k = 1;
      cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
      k = 2;
      cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      k = 3;
      cp = c & 0x07;
    } else {
      return 0;
    }
    if (n - i <= k) return 0;
    for (size_t j = 1; j <= k; j++) {
      if ((p[i + j] & 0xc0) != 0x80) return 0;
      cp = cp << 6 | (p[i + j] & 0x3f);
    }
    if ((k == 2 && cp < 0x800) || (k == 3 && (cp < 0x10000 || cp > 0x10ffff)) || (cp >= 0xd800 && cp <= 0xdfff))
      return 0;
    i += k + 1;
  }
  return 1;
}

/* A request path that a stub's pattern reads literally: '/' first, printable ASCII without space, '?', '#',
 * and without '*', '{' and '}', which a pattern reads as a prefix or a parameter. */
static int literal_path(const char *p, size_t n) {
  if (n == 0 || n > CB_MAX_PATH || p[0] != '/') return 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)p[i];
    if (c <= 0x20 || c >= 0x7f || c == '?' || c == '#' || c == '*' || c == '{' || c == '}') return 0;
  }
  return 1;
}


static int same_name(const char *a, size_t an, const char *b, size_t bn) {
  if (an != bn) return 0;
  for (size_t i = 0; i < an; i++) {
    char x = a[i] >= 'A' && a[i] <= 'Z' ? (char)(a[i] + 32) : a[i];
    char y = b[i] >= 'A' && b[i] <= 'Z' ? (char)(b[i] + 32) : b[i];
    if (x != y) return 0;
  }
  return 1;
}

static int span_cmp(const char *a, size_t an, const char *b, size_t bn) {
  int c = memcmp(a, b, an < bn ? an : bn);
  return c ? c : an < bn ? -1 : an > bn;
}

/* ---- the key ----
 * method, path, the count and the pairs of the query matchers (sorted by name, the first value of each name),
 * the count and pairs of the header matchers (in record_headers' order); a field is a 4-byte length and the
 * bytes, a count 4 bytes. Two exchanges with equal keys replay from one
 * stub, so they are one recording. */

typedef struct {
  char *p;
  size_t len, cap;
} kbuf_t;

static void put(kbuf_t *k, const char *p, size_t n) {
  uint32_t n32 = (uint32_t)n;
  memcpy(k->p + k->len, &n32, 4);
  if (n) memcpy(k->p + k->len + 4, p, n);
  k->len += 4 + n;
}

static void put_count(kbuf_t *k, size_t n) {
  uint32_t n32 = (uint32_t)n;
  memcpy(k->p + k->len, &n32, 4);
  k->len += 4;
}

static uint64_t fnv1a(const char *p, size_t n) {
  uint64_t h = 14695981039346656037ull;
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)p[i]) * 1099511628211ull;
  return h;
}

/* Walks a key from pos: the next field. */
static span_t next_field(const char *key, size_t *pos) {
  uint32_t n;
  memcpy(&n, key + *pos, 4);
  span_t s = {key + *pos + 4, n};
  *pos += 4 + n;
  return s;
}

/* Under mu: the index of the recording with this key, or -1. */
static long lookup(const cb__recorder_t *r, uint64_t hash, const char *key, size_t len) {
  if (r->tcap == 0) return -1;
  size_t mask = r->tcap - 1;
  for (size_t i = hash & mask; r->table[i] != 0; i = (i + 1) & mask) {
    const rec_t *x = r->items[r->table[i] - 1];
    if (x->hash == hash && x->key_len == len && memcmp(x->key, key, len) == 0) return (long)(r->table[i] - 1);
  }
  return -1;
}

/* Under mu: appends x (a new key). 0 or UV_ENOMEM (then nothing changed). */
static int insert(cb__recorder_t *r, rec_t *x) {
  if (r->n == UINT32_MAX - 1) return UV_ENOMEM;
  if (r->n == r->cap) {
    size_t cap = r->cap ? r->cap * 2 : 64;
    rec_t **items = realloc(r->items, cap * sizeof *items);
    if (items == NULL) return UV_ENOMEM;
    r->items = items;
    r->cap = cap;
  }
  if ((r->n + 1) * 2 > r->tcap) {
    size_t tcap = r->tcap ? r->tcap * 2 : 128;
    uint32_t *t = calloc(tcap, sizeof *t);
    if (t == NULL) return UV_ENOMEM;
    for (size_t i = 0; i < r->n; i++) {
      size_t j = r->items[i]->hash & (tcap - 1);
      while (t[j] != 0) j = (j + 1) & (tcap - 1);
      t[j] = (uint32_t)(i + 1);
    }
    free(r->table);
    r->table = t;
    r->tcap = tcap;
  }
  size_t j = x->hash & (r->tcap - 1);
  while (r->table[j] != 0) j = (j + 1) & (r->tcap - 1);
  r->items[r->n] = x;
  r->table[j] = (uint32_t)(++r->n);
  r->rec_bytes += x->size;
  return 0;
}

static void count_skipped(cb__recorder_t *r) {
  uv_mutex_lock(&r->mu);
  r->skipped++;
  uv_mutex_unlock(&r->mu);
}

typedef struct {
  const char *name, *value; /* decoded, in the decode buffer */
  size_t name_len, value_len;
} qpair_t;

int cb__record_exchange(cb_server_t *srv, const cb__exchange_t *x) {
  if (srv == NULL || x == NULL || srv->recorder == NULL) return UV_EINVAL;
  cb__recorder_t *r = srv->recorder;
  const cb_proxy_t *o = x->opts;
  if (o != NULL && o->nrecord_status > 0) {
    size_t i = 0;
    while (i < o->nrecord_status && o->record_status[i] != x->status) i++;
    if (i == o->nrecord_status) return 0; /* filtered out: not a recording, not counted */
  }
  size_t nrh = o ? o->nrecord_headers : 0;
  const char *q = x->target_len ? memchr(x->target, '?', x->target_len) : NULL;
  size_t path_len = q ? (size_t)(q - x->target) : x->target_len;
  size_t query_len = q ? x->target_len - path_len - 1 : 0;
  /* HEAD: the answer's content-length is the only trace of its body, and a stub's is its own body's (0), so a
   * HEAD recording would replay another head; the GET recording answers HEAD. */
  int method = cb_method_bit((cb_str_t){x->method, x->method_len});
  int ok = method != 0 && method != CB_METHOD_HEAD && x->status >= 200 && x->status <= 599 &&
           literal_path(x->target, path_len) && nrh <= CB_MAX_MATCHERS &&
           !((x->status == 204 || x->status == 304) && x->body_len > 0) && x->nres_headers >= 0 &&
           x->body_len <= UINT32_MAX; /* the proxy's body limit is 1 GiB at most; a span holds 4 GiB */
  if (!ok) {
    count_skipped(r);
    return 0;
  }

  /* The query's parameters, decoded, sorted by name (a stable sort: the first value of a name stays first). */
  qpair_t qp[CB_MAX_MATCHERS];
  size_t nq = 0;
  char *dec = query_len ? malloc(query_len) : NULL;
  if (query_len && dec == NULL) return UV_ENOMEM;
  size_t dlen = 0;
  for (const char *p = q ? q + 1 : NULL, *end = p ? p + query_len : NULL; p != NULL && p < end && ok;) {
    const char *amp = memchr(p, '&', (size_t)(end - p)), *pe = amp ? amp : end;
    const char *eq = memchr(p, '=', (size_t)(pe - p)), *ne = eq ? eq : pe, *v = eq ? eq + 1 : pe;
    qpair_t pr;
    pr.name = dec + dlen;
    pr.name_len = cb__url_decode(dec + dlen, p, (size_t)(ne - p));
    dlen += pr.name_len;
    pr.value = dec + dlen;
    pr.value_len = cb__url_decode(dec + dlen, v, (size_t)(pe - v));
    dlen += pr.value_len;
    p = pe + 1;
    if (pr.name_len == 0) continue; /* "?&" or "?=x": no name for a matcher to give */
    size_t at = nq;
    while (at > 0 && span_cmp(qp[at - 1].name, qp[at - 1].name_len, pr.name, pr.name_len) > 0) at--;
    if (at > 0 && span_cmp(qp[at - 1].name, qp[at - 1].name_len, pr.name, pr.name_len) == 0) continue;
    if (nq == CB_MAX_MATCHERS || pr.name_len > 256 || pr.value_len > 8192 || !json_text_ok(pr.name, pr.name_len) ||
        !json_text_ok(pr.value, pr.value_len)) {
      ok = 0;
      break;
    }
    memmove(&qp[at + 1], &qp[at], (nq - at) * sizeof qp[0]);
    qp[at] = pr;
    nq++;
  }
  /* The chosen request headers, the first field of each name the request has. */
  const cb__hdr_t *hv[CB_MAX_MATCHERS];
  size_t nh = 0, hn_len[CB_MAX_MATCHERS];
  const char *hn[CB_MAX_MATCHERS];
  for (size_t i = 0; i < nrh && ok; i++) {
    cb_str_t name = o->record_headers[i];
    if (cb__header_name_why(name.ptr, name.len) != 0) {
      ok = 0;
      break;
    }
    size_t seen = 0; /* a name given twice is one matcher (a stub's headers object holds a name once) */
    while (seen < i && !same_name(o->record_headers[seen].ptr, o->record_headers[seen].len, name.ptr, name.len))
      seen++;
    if (seen < i) continue;
    for (int k = 0; k < x->nreq_headers; k++) {
      const cb__hdr_t *h = &x->req_headers[k];
      if (!same_name(h->name, h->name_len, name.ptr, name.len)) continue;
      if (cb__header_value_why(h->value, h->value_len) != 0 || !json_text_ok(h->value, h->value_len)) ok = 0;
      hn[nh] = name.ptr;
      hn_len[nh] = name.len;
      hv[nh++] = h;
      break;
    }
  }
  /* The response's headers: those the engine writes itself are dropped (the proxy drops them already). */
  size_t nres = 0, res_bytes = 0;
  for (int i = 0; i < x->nres_headers && ok; i++) {
    const cb__hdr_t *h = &x->res_headers[i];
    if (cb__forbidden_header(h->name, h->name_len)) continue;
    if (cb__header_name_why(h->name, h->name_len) != 0 || cb__header_value_why(h->value, h->value_len) != 0 ||
        !json_text_ok(h->name, h->name_len) || !json_text_ok(h->value, h->value_len) || ++nres > CB_MAX_HEADERS)
      ok = 0;
    res_bytes += h->name_len + h->value_len;
  }
  if (res_bytes > 65536) ok = 0;
  if (!ok) {
    free(dec);
    count_skipped(r);
    return 0;
  }

  kbuf_t k = {.cap = 16 + x->method_len + path_len + dlen + 8 * nq};
  for (size_t i = 0; i < nh; i++) k.cap += 8 + hn_len[i] + hv[i]->value_len;
  k.p = malloc(k.cap);
  if (k.p == NULL) {
    free(dec);
    return UV_ENOMEM;
  }
  put(&k, x->method, x->method_len);
  put(&k, x->target, path_len);
  put_count(&k, nq);
  for (size_t i = 0; i < nq; i++) {
    put(&k, qp[i].name, qp[i].name_len);
    put(&k, qp[i].value, qp[i].value_len);
  }
  put_count(&k, nh);
  for (size_t i = 0; i < nh; i++) {
    put(&k, hn[i], hn_len[i]);
    put(&k, hv[i]->value, hv[i]->value_len);
  }
  free(dec);
  uint64_t hash = fnv1a(k.p, k.len);
  uv_mutex_lock(&r->mu);
  long found = lookup(r, hash, k.p, k.len);
  if (found >= 0) r->dups++;
  uv_mutex_unlock(&r->mu);
  if (found >= 0) {
    free(k.p);
    return 0;
  }

  size_t nspans = 2 * (nq + nh + nres);
  size_t size = sizeof(rec_t) + nspans * sizeof(span_t) + k.len + res_bytes + x->body_len;
  rec_t *rec = malloc(size);
  if (rec == NULL) {
    free(k.p);
    return UV_ENOMEM;
  }
  span_t *spans = (span_t *)(rec + 1);
  char *bytes = (char *)(spans + nspans);
  *rec = (rec_t){.hash = hash, .file_bytes = o ? o->record_body_file_bytes : 0, .size = size,
                 .status = x->status, .nq = (uint32_t)nq, .nh = (uint32_t)nh, .nres = (uint32_t)nres,
                 .q = spans, .h = spans + 2 * nq, .res = spans + 2 * (nq + nh), .key = bytes, .key_len = k.len};
  memcpy(bytes, k.p, k.len);
  free(k.p);
  size_t pos = 0;
  rec->method = next_field(rec->key, &pos);
  rec->path = next_field(rec->key, &pos);
  pos += 4; /* the count */
  for (size_t i = 0; i < 2 * nq; i++) rec->q[i] = next_field(rec->key, &pos);
  pos += 4;
  for (size_t i = 0; i < 2 * nh; i++) rec->h[i] = next_field(rec->key, &pos);
  char *w = bytes + k.len;
  size_t ri = 0;
  for (int i = 0; i < x->nres_headers; i++) {
    const cb__hdr_t *h = &x->res_headers[i];
    if (cb__forbidden_header(h->name, h->name_len)) continue;
    memcpy(w, h->name, h->name_len);
    rec->res[ri++] = (span_t){w, (uint32_t)h->name_len};
    w += h->name_len;
    if (h->value_len) memcpy(w, h->value, h->value_len);
    rec->res[ri++] = (span_t){w, (uint32_t)h->value_len};
    w += h->value_len;
  }
  if (x->body_len) memcpy(w, x->body, x->body_len);
  rec->body = (span_t){w, (uint32_t)x->body_len};

  uv_mutex_lock(&r->mu);
  int err = 0;
  if (lookup(r, hash, rec->key, rec->key_len) >= 0) { /* another worker recorded it meanwhile */
    r->dups++;
    err = 1;
  } else {
    err = insert(r, rec);
  }
  uv_mutex_unlock(&r->mu);
  if (err) free(rec);
  return err > 0 ? 0 : err;
}

/* ---- writing the stubs ---- */

static json_t *text(const span_t *s) { return json_stringn(s->p, s->n); }

/* A decoded query name or value as a matcher: the loader percent-decodes matchers (routes.md), so '%' and '+'
 * are written %25 and %2B, which decode back to themselves; every other byte as it is. */
static json_t *query_text(const span_t *s) {
  size_t extra = 0;
  for (uint32_t i = 0; i < s->n; i++) extra += s->p[i] == '%' || s->p[i] == '+';
  if (extra == 0) return text(s);
  char *b = malloc(s->n + 2 * extra + 1), *o = b;
  if (b == NULL) return NULL;
  for (uint32_t i = 0; i < s->n; i++) {
    char c = s->p[i];
    if (c == '%' || c == '+') {
      memcpy(o, c == '%' ? "%25" : "%2B", 3);
      o += 3;
    } else {
      *o++ = c;
    }
  }
  *o = '\0';
  json_t *j = json_stringn(b, (size_t)(o - b));
  free(b);
  return j;
}

/* One recording as a stub object. file: the body file's name relative to the stub file, or NULL (inline). */
static json_t *rec_json(const rec_t *x, size_t pos, const char *file) {
  char name[32];
  snprintf(name, sizeof name, "rec_%zu", pos);
  json_t *st = json_object(), *m = json_object(), *res = json_object();
  if (st == NULL || m == NULL || res == NULL) goto oom;
  json_object_set_new(st, "name", json_string(name));
  json_object_set_new(m, "method", text(&x->method));
  json_object_set_new(m, "path", text(&x->path));
  if (x->nq) {
    json_t *qo = json_object();
    for (uint32_t i = 0; i < x->nq; i++) {
      json_t *nj = query_text(&x->q[2 * i]);
      if (nj) json_object_set_new(qo, json_string_value(nj), query_text(&x->q[2 * i + 1]));
      json_decref(nj);
    }
    json_object_set_new(m, "query", qo);
  }
  if (x->nh) {
    json_t *ho = json_object();
    for (uint32_t i = 0; i < x->nh; i++) {
      char n[260];
      size_t l = x->h[2 * i].n;
      for (size_t k = 0; k < l; k++) {
        char c = x->h[2 * i].p[k];
        n[k] = c >= 'A' && c <= 'Z' ? (char)(c + 32) : c;
      }
      n[l] = '\0';
      json_object_set_new(ho, n, text(&x->h[2 * i + 1]));
    }
    json_object_set_new(m, "headers", ho);
  }
  if (x->nq + x->nh) json_object_set_new(m, "priority", json_integer((json_int_t)(x->nq + x->nh)));
  json_object_set_new(st, "match", m);
  m = NULL;
  json_object_set_new(res, "status", json_integer(x->status));
  if (x->nres) {
    json_t *hl = json_array();
    for (uint32_t i = 0; i < x->nres; i++)
      json_array_append_new(hl, json_pack("[o, o]", text(&x->res[2 * i]), text(&x->res[2 * i + 1])));
    json_object_set_new(res, "headers", hl);
  }
  if (file != NULL) {
    json_object_set_new(res, "body", json_pack("{s:s}", "file", file));
  } else if (x->body.n > 0 && json_text_ok(x->body.p, x->body.n)) {
    json_object_set_new(res, "body", text(&x->body));
  } else if (x->body.n > 0) {
    size_t cap = 4 * ((x->body.n + 2) / 3) + 1;
    unsigned char *b64 = malloc(cap);
    if (b64 == NULL) goto oom;
    int n = EVP_EncodeBlock(b64, (const unsigned char *)x->body.p, (int)x->body.n);
    json_object_set_new(res, "body", json_pack("{s:o}", "base64", json_stringn((const char *)b64, (size_t)n)));
    free(b64);
  }
  json_object_set_new(st, "response", res);
  return st;
oom:
  json_decref(st);
  json_decref(m);
  json_decref(res);
  return NULL;
}

/* The recordings as they stand: a copy of the array (the recordings themselves stay the recorder's; io_mu,
 * which the caller holds, keeps clear from freeing them). */
static int snapshot(cb__recorder_t *r, rec_t ***items, size_t *n) {
  uv_mutex_lock(&r->mu);
  *n = r->n;
  *items = malloc((r->n + 1) * sizeof **items);
  if (*items != NULL && r->n) memcpy(*items, r->items, r->n * sizeof **items);
  uv_mutex_unlock(&r->mu);
  return *items ? 0 : UV_ENOMEM;
}

/* Where the text goes: a growing buffer or a file. */
typedef struct {
  char *p;
  size_t len, cap;
  FILE *f;
  int failed;
} out_t;

static int emit(const char *p, size_t n, void *ud) {
  out_t *o = ud;
  if (o->failed) return -1;
  if (o->f != NULL) {
    if (fwrite(p, 1, n, o->f) != n) o->failed = 1;
    return o->failed ? -1 : 0;
  }
  if (o->len + n + 1 > o->cap) {
    size_t cap = (o->len + n + 1) * 2;
    char *q = realloc(o->p, cap);
    if (q == NULL) {
      o->failed = 1;
      return -1;
    }
    o->p = q;
    o->cap = cap;
  }
  memcpy(o->p + o->len, p, n);
  o->len += n;
  o->p[o->len] = '\0';
  return 0;
}

/* file_of(i): the body file's name for recording i (NULL: inline). Returns 0 or UV_ENOMEM / the write's error. */
static int write_stubs(rec_t **items, size_t n, out_t *o, const char *const *files) {
  static const char head[] = "{\"stubs\": [\n", tail[] = "\n]}\n";
  emit(head, sizeof head - 1, o);
  for (size_t i = 0; i < n && !o->failed; i++) {
    json_t *st = rec_json(items[i], i + 1, files ? files[i] : NULL);
    if (st == NULL) return UV_ENOMEM;
    if (i > 0) emit(",\n", 2, o);
    /* One stub a line: a file that diffs well, and the same text every time (jansson keeps insertion order). */
    if (json_dump_callback(st, emit, o, 0) != 0) o->failed = 1;
    json_decref(st);
  }
  emit(tail, sizeof tail - 1, o);
  return o->failed ? (o->f ? UV_EIO : UV_ENOMEM) : 0;
}

int cb_server_recorded_json(cb_server_t *srv, char **json, size_t *len) {
  if (srv == NULL || json == NULL || srv->recorder == NULL) return UV_EINVAL;
  cb__recorder_t *r = srv->recorder;
  rec_t **items;
  size_t n;
  uv_mutex_lock(&r->io_mu);
  int err = snapshot(r, &items, &n);
  out_t o = {0};
  if (err == 0) err = write_stubs(items, n, &o, NULL);
  uv_mutex_unlock(&r->io_mu);
  free(items);
  if (err) {
    free(o.p);
    return err;
  }
  *json = o.p;
  if (len != NULL) *len = o.len;
  return 0;
}

/* Writes n bytes to path through path.tmp and a rename: a reader sees the old file or the whole new one. */
static int write_atomic(const char *path, const char *data, size_t n) {
  size_t plen = strlen(path);
  char *tmp = malloc(plen + 8);
  if (tmp == NULL) return UV_ENOMEM;
  snprintf(tmp, plen + 8, "%s.tmp", path);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644), err = 0;
  if (fd < 0) err = -errno;
  for (size_t off = 0; err == 0 && off < n;) {
    ssize_t w = write(fd, data + off, n - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) err = w < 0 ? -errno : UV_EIO;
    else off += (size_t)w;
  }
  if (fd >= 0 && close(fd) != 0 && err == 0) err = -errno;
  if (err == 0 && rename(tmp, path) != 0) err = -errno;
  if (err) unlink(tmp);
  free(tmp);
  return err;
}

int cb_server_save_stubs(cb_server_t *srv, const char *path, char *msg, size_t msgcap) {
  if (srv == NULL || path == NULL || path[0] == '\0' || msg == NULL || msgcap == 0 || srv->recorder == NULL)
    return UV_EINVAL;
  msg[0] = '\0';
  cb__recorder_t *r = srv->recorder;
  rec_t **items = NULL;
  size_t n = 0;
  char **files = NULL;
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  size_t plen = strlen(path), blen = strlen(base);
  char *dir = malloc(plen + 8), *tmp = malloc(plen + 8), *bf = malloc(plen + 40);
  FILE *f = NULL;
  const char *what = path;
  uv_mutex_lock(&r->io_mu);
  int err = dir && tmp && bf ? snapshot(r, &items, &n) : UV_ENOMEM;
  if (err == 0 && (files = calloc(n + 1, sizeof *files)) == NULL) err = UV_ENOMEM;
  if (err == 0) {
    snprintf(dir, plen + 8, "%s.bodies", path);
    snprintf(tmp, plen + 8, "%s.tmp", path);
  }
  /* Bodies above the proxy's record_body_file_bytes go to PATH.bodies/N.bin (N: the stub's place), each
   * written whole before the stub file names it. */
  for (size_t i = 0; err == 0 && i < n; i++) {
    const rec_t *x = items[i];
    if (x->file_bytes == 0 || x->body.n <= x->file_bytes) continue;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
      err = -errno;
      what = dir;
      break;
    }
    snprintf(bf, plen + 40, "%s/%zu.bin", dir, i + 1);
    if ((err = write_atomic(bf, x->body.p, x->body.n)) != 0) {
      what = bf;
      break;
    }
    size_t fl = blen + 40;
    if ((files[i] = malloc(fl)) == NULL) {
      err = UV_ENOMEM;
      break;
    }
    snprintf(files[i], fl, "%s.bodies/%zu.bin", base, i + 1);
  }
  if (err == 0 && (f = fopen(tmp, "we")) == NULL) {
    err = -errno;
    what = tmp;
  }
  if (err == 0) {
    out_t o = {.f = f};
    err = write_stubs(items, n, &o, (const char *const *)files);
    if (err == UV_EIO) err = errno ? -errno : UV_EIO;
    what = tmp;
  }
  if (f != NULL && fclose(f) != 0 && err == 0) err = -errno;
  if (err == 0 && rename(tmp, path) != 0) err = -errno;
  if (err && f != NULL) unlink(tmp);
  uv_mutex_unlock(&r->io_mu);
  if (err) snprintf(msg, msgcap, "%s: %s", what, err == UV_ENOMEM ? "out of memory" : strerror(-err));
  for (size_t i = 0; files && i < n; i++) free(files[i]);
  free(files);
  free(items);
  free(dir);
  free(tmp);
  free(bf);
  return err ? err : (int)(n > INT32_MAX ? INT32_MAX : n);
}

void cb_server_recorded_clear(cb_server_t *srv) {
  if (srv == NULL || srv->recorder == NULL) return;
  cb__recorder_t *r = srv->recorder;
  uv_mutex_lock(&r->io_mu);
  uv_mutex_lock(&r->mu);
  rec_t **items = r->items;
  size_t n = r->n;
  uint32_t *table = r->table;
  r->items = NULL;
  r->table = NULL;
  r->n = r->cap = r->tcap = 0;
  r->dups = r->skipped = r->rec_bytes = 0;
  uv_mutex_unlock(&r->mu);
  uv_mutex_unlock(&r->io_mu);
  drop_all(items, n, table);
}
