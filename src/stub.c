/* The stub route kind: a match plus a canned response, added at run time (cb_server_route_add and the rest of
 * the public route API live here too).
 *
 * Everything a stub answers is copied or opened when it is added, then never changes: bodies are referenced
 * from the stub (zero copy) by every response, and the route table that lists the stub keeps it alive until
 * those responses have left (route_table.c). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

#define MAX_BODY_BYTES (1ull << 30)   /* a CB_BODY_BYTES body: copied, so bounded */
#define MAX_GENERATED (1ull << 44)    /* 16 TiB: enough for any test */
#define MAX_DELAY_MS 3600000u
#define MAX_CHUNKS 1000000u
#define MAX_HEADER_BYTES 65536

typedef struct {
  int status;
  cb__hdr_t *headers;
  int nheaders;
  char *hbuf;
  uint64_t head_key; /* names, values and their lengths hashed: the same for every stub with the same headers */
  cb__fixed_t whole; /* the usual stub's whole answer (one_piece), under the stub's id (cb__res_fixed) */
  cb_body_kind kind;
  const char *body; /* BYTES (and small files): the copy; FILE: NULL (sent with sendfile) */
  uint64_t len;
  char *owned;
  int fd;
  unsigned delay_ms, chunks, interval_ms;
  uint64_t times;
  uint64_t claimed; /* atomic: answers given, when times > 0 */
  cb__fault_t fault; /* kind CB__FAULT_NONE: none */
  cb__fault_answer_t answer; /* what the fault departs from: this stub's head and answer */
  uint64_t draws;    /* atomic: the fault's rate draws */
} stub_t;

static void stub_free(void *arg) {
  stub_t *st = arg;
  if (st == NULL) return;
  free(st->headers);
  free(st->hbuf);
  free(st->owned);
  if (st->fd >= 0) close(st->fd);
  cb__fault_free(&st->fault);
  free(st);
}

/* A stub with times > 0 answers that many requests over all workers: one atomic per answer, on this stub. */
static int stub_claim(const cb__route_t *rt) {
  stub_t *st = rt->arg;
  if (st->times == 0) return 1;
  return __atomic_fetch_add(&st->claimed, 1, __ATOMIC_RELAXED) < st->times;
}

/* A stub without times claims nothing: without a claim it is also a route the dispatch may remember (a worker's
 * last route, route_table.c). */
static const cb__route_kind_t stub_kind = {.claim = NULL, .free_arg = stub_free};
static const cb__route_kind_t stub_times_kind = {.claim = stub_claim, .free_arg = stub_free};

/* ---- answering ---- */

static unsigned npieces(const stub_t *st) { return st->chunks ? st->chunks : 1; }

/* Where piece k ends: pieces of nearly equal size. */
static uint64_t piece_end(const stub_t *st, unsigned k) {
  if (st->chunks <= 1) return st->len; /* one piece: no 128-bit division on the common path */
  return (uint64_t)((unsigned __int128)st->len * (k + 1) / st->chunks);
}

static void stub_produce(cb__req_t *r) {
  const stub_t *st = r->route->arg;
  const char *gen = st->kind == CB_BODY_GENERATED ? cb__generated() : NULL;
  r->blocked = 0;
  for (;;) {
    uint64_t end = piece_end(st, r->u.stub.piece);
    int full = 0;
    while (r->u.stub.off < end) {
      uint64_t off = r->u.stub.off, n = end - off;
      if (st->kind == CB_BODY_FILE) {
        full = cb__res_file(r, st->fd, st->body, off, (size_t)n);
      } else if (st->kind == CB_BODY_BYTES) {
        full = cb__res_data(r, st->body + off, (size_t)n, CB__DATA_STATIC | CB__DATA_PIECE_END);
      } else {
        if (gen == NULL) break; /* out of memory at the first generated stub: the response comes short */
        if (n > CB__GEN_SPAN) n = CB__GEN_SPAN;
        full = cb__res_data(r, gen + off % 251, (size_t)n,
                            CB__DATA_STATIC | (off + n == end ? CB__DATA_PIECE_END : 0));
      }
      r->u.stub.off = off + n;
      if (full && r->u.stub.off < end) { /* mid-piece: go on when the output has room */
        r->blocked = 1;
        return;
      }
    }
    r->u.stub.off = end;
    if (++r->u.stub.piece >= npieces(st)) {
      cb__res_end(r);
      return;
    }
    if (st->interval_ms > 0) {
      if (cb__req_timer(r, st->interval_ms, stub_produce) == 0) return;
    }
    if (full) {
      r->blocked = 1;
      return;
    }
  }
}

/* The usual stub: a body of bytes, sent in one piece with its length (not chunked). */
static int one_piece(const stub_t *st) {
  return st->kind == CB_BODY_BYTES && st->chunks == 0 && st->len > 0 && st->status != 204 && st->status != 304;
}

static void stub_start(cb__req_t *r) {
  const stub_t *st = r->route->arg;
  int no_body = st->status == 204 || st->status == 304;
  int64_t length = no_body ? CB__NO_BODY : st->chunks ? CB__STREAMED : (int64_t)st->len;
  r->head_key = st->head_key; /* a stub's headers are fixed: its head can be reused */
  if (one_piece(st) && r->method != CB_METHOD_HEAD) {
    /* Its head, its bytes, then the end (which, as in stub_produce, does not wait for the output to drain below
     * its high-water mark), in one step. Nothing touches r after it: the end may free an HTTP/2 stream. */
    r->u.stub.off = st->len;
    r->u.stub.piece = 1;
    cb__res_fixed(r, &st->whole);
    return;
  }
  cb__res_head(r, st->status, NULL, st->headers, st->nheaders, length);
  r->head_key = 0;
  r->u.stub.off = 0;
  r->u.stub.piece = 0;
  if (no_body || r->method == CB_METHOD_HEAD || st->len == 0) {
    cb__res_end(r);
    return;
  }
  if (st->kind == CB_BODY_BYTES && st->chunks <= 1) {
    /* One chunk: its bytes in one piece, then the end. */
    cb__res_data(r, st->body, (size_t)st->len, CB__DATA_STATIC | CB__DATA_PIECE_END);
    r->u.stub.off = st->len;
    r->u.stub.piece = 1;
    cb__res_end(r);
    return;
  }
  stub_produce(r);
}

static void stub_end(cb__req_t *r) {
  stub_t *st = r->route->arg;
  if (st->fault.kind != CB__FAULT_NONE && cb__fault_fires(&st->fault, &st->draws)) {
    cb__fault_start(r, &st->fault, &st->answer);
    return;
  }
  if (st->delay_ms > 0 && cb__req_timer(r, st->delay_ms, stub_start) == 0) return;
  stub_start(r);
}

static const cb__handler_t stub_handler = {.on_end = stub_end, .on_writable = stub_produce};

/* ---- building a stub from its public description ---- */

int cb__forbidden_header(const char *name, size_t n) {
  static const char *const names[] = {"content-length", "transfer-encoding", "connection", "keep-alive",
                                      "upgrade", "te", "proxy-connection", "date"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    if (strlen(names[i]) != n) continue;
    size_t k = 0;
    while (k < n && ((name[k] >= 'A' && name[k] <= 'Z') ? name[k] + 32 : name[k]) == names[i][k]) k++;
    if (k == n) return 1;
  }
  return 0;
}

/* The key under which HTTP/1.1 may reuse a head made with these headers (cb__req_t.head_key): a 64-bit hash of
 * the names, values and lengths (FNV-1a, then splitmix64's finaliser), never 0. Stubs with the same headers
 * share it, so 100 stubs answering alike share one memo; two different header lists would have to collide in
 * 64 bits to be confused (stubs are the test author's, not a client's, so the hash need not resist an
 * adversary). */
static uint64_t headers_key(const cb__hdr_t *h, int n) {
  uint64_t x = 14695981039346656037ull;
#define MIX_BYTE(b) (x = (x ^ (uint8_t)(b)) * 1099511628211ull)
  for (int i = 0; i < n; i++) {
    for (int k = 0; k < 4; k++) MIX_BYTE(h[i].name_len >> 8 * k);
    for (size_t k = 0; k < h[i].name_len; k++) MIX_BYTE(h[i].name[k]);
    for (int k = 0; k < 4; k++) MIX_BYTE(h[i].value_len >> 8 * k);
    for (size_t k = 0; k < h[i].value_len; k++) MIX_BYTE(h[i].value[k]);
  }
#undef MIX_BYTE
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x | 1;
}

static int copy_headers(stub_t *st, const cb_response_t *res) {
  if (res->nheaders == 0) return 0;
  if (res->headers == NULL || res->nheaders > CB_MAX_HEADERS) return UV_EINVAL;
  size_t total = 0;
  for (size_t i = 0; i < res->nheaders; i++) {
    const cb_header_t *h = &res->headers[i];
    if (h->name.ptr == NULL || !cb__is_token(h->name.ptr, h->name.len) || cb__forbidden_header(h->name.ptr, h->name.len))
      return UV_EINVAL;
    if ((h->value.ptr == NULL && h->value.len) || (h->value.ptr && cb__bad_value(h->value.ptr, h->value.len)))
      return UV_EINVAL;
    total += h->name.len + h->value.len;
  }
  if (total > MAX_HEADER_BYTES) return UV_EINVAL;
  st->headers = calloc(res->nheaders, sizeof *st->headers);
  st->hbuf = malloc(total + 1);
  if (st->headers == NULL || st->hbuf == NULL) return UV_ENOMEM;
  char *o = st->hbuf;
  for (size_t i = 0; i < res->nheaders; i++) {
    const cb_header_t *h = &res->headers[i];
    cb__hdr_t *d = &st->headers[i];
    d->name = o;
    d->name_len = h->name.len;
    for (size_t k = 0; k < h->name.len; k++) { /* sent lowercased over both protocols */
      char ch = h->name.ptr[k];
      *o++ = (char)(ch >= 'A' && ch <= 'Z' ? ch + 32 : ch);
    }
    d->value = o;
    d->value_len = h->value.len;
    if (h->value.len) memcpy(o, h->value.ptr, h->value.len);
    o += h->value.len;
  }
  st->nheaders = (int)res->nheaders;
  st->head_key = headers_key(st->headers, st->nheaders);
  return 0;
}

/* Files up to this size are read into memory when the stub is added; bigger ones are sent with sendfile(2).
 * Never mapped: a file someone truncates while it is served would make a read of its mapping fault (SIGBUS,
 * the end of a node that hosts the NIF), where sendfile just comes up short and that connection is closed. */
#define FILE_IN_MEMORY_MAX (1u << 20)

/* A body file is a regular file: a FIFO would block open(2) until a writer came (the CLI before its ready
 * line, a dirty scheduler of the node), a device such as /dev/zero has no size to announce, and a directory
 * has no bytes. It is looked at with stat(2) first, so that nothing else is ever opened (opening a device or a
 * FIFO can have effects of its own), then opened with O_NONBLOCK and looked at again through the descriptor:
 * if the path was replaced between the two, the descriptor is still checked and open(2) could not block. */
static int open_body_file(stub_t *st, cb_str_t path) {
  if (path.ptr == NULL || path.len == 0 || path.len >= 4096 || memchr(path.ptr, '\0', path.len)) return UV_EINVAL;
  char p[4096];
  memcpy(p, path.ptr, path.len);
  p[path.len] = '\0';
  struct stat sb;
  if (stat(p, &sb) != 0) return uv_translate_sys_error(errno);
  if (S_ISDIR(sb.st_mode)) return UV_EISDIR;
  if (!S_ISREG(sb.st_mode)) return UV_EINVAL;
  st->fd = open(p, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (st->fd < 0) return uv_translate_sys_error(errno);
  if (fstat(st->fd, &sb) != 0) return uv_translate_sys_error(errno);
  if (S_ISDIR(sb.st_mode)) return UV_EISDIR;
  if (!S_ISREG(sb.st_mode)) return UV_EINVAL;
  if ((uint64_t)sb.st_size > CB_MAX_BODY_FILE) return UV_EFBIG;
  st->len = (uint64_t)sb.st_size;
  if (st->len > FILE_IN_MEMORY_MAX) return 0;
  /* Small: read once, then served like bytes. */
  st->owned = malloc(st->len ? st->len : 1);
  if (st->owned == NULL) return UV_ENOMEM;
  uint64_t got = 0;
  while (got < st->len) {
    ssize_t n = pread(st->fd, st->owned + got, (size_t)(st->len - got), (off_t)got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return uv_translate_sys_error(errno);
    if (n == 0) break; /* it shrank meanwhile: serve what was there */
    got += (uint64_t)n;
  }
  st->len = got;
  st->body = st->owned;
  st->kind = CB_BODY_BYTES;
  close(st->fd);
  st->fd = -1;
  return 0;
}

static int stub_new(const cb_response_t *res, stub_t **out) {
  *out = NULL;
  stub_t *st = calloc(1, sizeof *st);
  if (st == NULL) return UV_ENOMEM;
  st->fd = -1;
  int err = 0;
  if (res->status < 200 || res->status > 599 || res->delay_ms > MAX_DELAY_MS || res->interval_ms > MAX_DELAY_MS ||
      res->chunks > MAX_CHUNKS)
    err = UV_EINVAL;
  st->status = res->status;
  st->kind = res->body_kind;
  st->delay_ms = res->delay_ms;
  st->chunks = res->chunks;
  st->interval_ms = res->interval_ms;
  st->times = res->times;
  if (err == 0) err = copy_headers(st, res);
  if (err == 0 && (res->fault.ptr != NULL || res->fault.len != 0))
    err = cb__fault_parse(res->fault.ptr, res->fault.len, &st->fault);
  st->answer = (cb__fault_answer_t){st->status, st->headers, st->nheaders, stub_start};
  if (err == 0) {
    switch (res->body_kind) {
      case CB_BODY_BYTES:
        if ((res->body.ptr == NULL && res->body.len) || res->body.len > MAX_BODY_BYTES) {
          err = UV_EINVAL;
          break;
        }
        st->len = res->body.len;
        st->owned = malloc(st->len ? st->len : 1);
        if (st->owned == NULL) {
          err = UV_ENOMEM;
          break;
        }
        if (st->len) memcpy(st->owned, res->body.ptr, st->len);
        st->body = st->owned;
        break;
      case CB_BODY_GENERATED:
        if (res->body_size > MAX_GENERATED) err = UV_EINVAL;
        st->len = res->body_size;
        if (err == 0 && st->len > 0 && cb__generated() == NULL) err = UV_ENOMEM;
        break;
      case CB_BODY_FILE:
        err = open_body_file(st, res->body);
        break;
      default:
        err = UV_EINVAL;
    }
  }
  if (err == 0 && (st->status == 204 || st->status == 304) && (st->len > 0 || st->chunks > 0)) err = UV_EINVAL;
  if (err == 0 && st->chunks > 0 && st->chunks > st->len && !(st->len == 0 && st->chunks == 1)) err = UV_EINVAL;
  if (err) {
    stub_free(st);
    return err;
  }
  *out = st;
  return 0;
}

static int valid_name(cb_str_t name) {
  if (name.ptr == NULL || name.len == 0 || name.len > CB_MAX_NAME) return 0;
  for (size_t i = 0; i < name.len; i++)
    if ((unsigned char)name.ptr[i] <= 0x20 || (unsigned char)name.ptr[i] >= 0x7f) return 0;
  return 1;
}

/* ---- the public API ---- */

int cb__stub_append(cb__routes_t *reg, const cb_stub_t *stub, uint64_t *id) {
  if (stub == NULL || id == NULL) return UV_EINVAL;
  if (stub->name.ptr != NULL && !valid_name(stub->name)) return UV_EINVAL;
  if (stub->name.ptr == NULL && stub->name.len != 0) return UV_EINVAL;
  stub_t *st;
  int err = stub_new(&stub->response, &st);
  if (err) return err;
  cb__routes_lock(reg);
  uint64_t sid = cb__routes_next_id(reg); /* ids are never reused, even when the add fails */
  cb__routes_unlock(reg);
  char defname[32];
  cb_str_t name = stub->name;
  if (name.ptr == NULL) {
    int n = snprintf(defname, sizeof defname, "stub_%llu", (unsigned long long)sid);
    name = (cb_str_t){defname, (size_t)n};
  }
  cb__route_t *rt;
  err = cb__route_new(&stub->match, name.ptr, name.len, st->times > 0 ? &stub_times_kind : &stub_kind,
                      &stub_handler, st, &rt);
  if (err) {
    stub_free(st);
    return err;
  }
  rt->stub_id = sid;
  st->whole = (cb__fixed_t){.status = st->status, .ctype = NULL, .extra = st->headers, .nextra = st->nheaders,
                            .body = st->body, .len = (size_t)st->len, .flags = CB__DATA_STATIC | CB__DATA_PIECE_END,
                            .memo_id = sid};
  err = cb__routes_slot(reg, rt);
  if (err == 0) {
    cb__routes_lock(reg);
    err = cb__routes_append(reg, rt);
    cb__routes_unlock(reg);
  }
  if (err) {
    cb__route_unref(reg, rt);
    return err;
  }
  *id = sid;
  return 0;
}

/* Takes the stubs ids[0..n-1] back out of the registry (the newest last, so each is found at once). */
static void take_back(cb__routes_t *reg, const uint64_t *ids, size_t n) {
  while (n > 0) {
    cb__routes_lock(reg);
    cb__route_t *rt = cb__routes_take(reg, ids[--n]);
    cb__routes_unlock(reg);
    cb__route_unref(reg, rt);
  }
}

int cb_server_route_add_many(cb_server_t *srv, const cb_stub_t *stubs, size_t n, uint64_t *ids, size_t *failed) {
  if (failed != NULL) *failed = n;
  if (srv == NULL || (n > 0 && (stubs == NULL || ids == NULL))) return UV_EINVAL;
  if (cb__on_worker_thread()) return UV_EBUSY;
  if (n == 0) return 0;
  if (n > CB_MAX_ROUTES) return CB_ELIMIT;
  uv_mutex_lock(&srv->api_mu);
  size_t i;
  int err = 0;
  for (i = 0; i < n; i++) {
    err = cb__stub_append(srv->routes, &stubs[i], &ids[i]);
    if (err) break;
  }
  if (err) {
    if (failed != NULL) *failed = i;
  } else {
    err = n > 1 ? cb__routes_publish_now(srv) : cb__routes_publish(srv);
  }
  if (err) take_back(srv->routes, ids, i); /* not in any worker's table yet */
  uv_mutex_unlock(&srv->api_mu);
  return err;
}

int cb_server_route_add(cb_server_t *srv, const cb_stub_t *stub, uint64_t *id) {
  if (srv == NULL || stub == NULL || id == NULL) return UV_EINVAL;
  return cb_server_route_add_many(srv, stub, 1, id, NULL);
}

int cb_server_route_remove(cb_server_t *srv, uint64_t id) {
  if (srv == NULL) return UV_EINVAL;
  if (cb__on_worker_thread()) return UV_EBUSY;
  uv_mutex_lock(&srv->api_mu);
  cb__routes_lock(srv->routes);
  cb__route_t *rt = id ? cb__routes_take(srv->routes, id) : NULL;
  cb__routes_unlock(srv->routes);
  int err = UV_ENOENT;
  if (rt != NULL) {
    /* On failure the workers keep the old table until the next change; the stub is gone from the list. */
    err = cb__routes_publish(srv);
    cb__route_unref(srv->routes, rt);
  }
  uv_mutex_unlock(&srv->api_mu);
  return err;
}

int cb_server_route_reset(cb_server_t *srv) {
  if (srv == NULL) return UV_EINVAL;
  if (cb__on_worker_thread()) return UV_EBUSY;
  uv_mutex_lock(&srv->api_mu);
  int n;
  cb__routes_lock(srv->routes);
  cb__route_t **all = cb__routes_take_all(srv->routes, &n);
  cb__routes_unlock(srv->routes);
  int err = cb__routes_publish(srv);
  for (int i = 0; i < n; i++) cb__route_unref(srv->routes, all[i]);
  free(all);
  uv_mutex_unlock(&srv->api_mu);
  return err;
}

static uint64_t answered(cb__routes_t *reg, const cb__route_t *rt) { return cb__routes_count(reg, 2 * rt->slot); }
static uint64_t all_requests(cb__routes_t *reg, const cb__route_t *rt) {
  return answered(reg, rt) + cb__routes_count(reg, 2 * rt->slot + 1);
}

int cb_server_stubs(cb_server_t *srv, cb_stub_list_t **out) {
  if (srv == NULL || out == NULL) return UV_EINVAL;
  cb__routes_t *reg = srv->routes;
  cb__routes_lock(reg);
  int n;
  cb__route_t **stubs = cb__routes_stubs(reg, &n);
  size_t bytes = 0;
  for (int i = 0; i < n; i++) bytes += stubs[i]->name_len + stubs[i]->pattern_len + 2;
  cb_stub_list_t *list = malloc(sizeof *list + (size_t)n * sizeof(cb_stub_info_t) + bytes);
  if (list == NULL) {
    cb__routes_unlock(reg);
    return UV_ENOMEM;
  }
  list->count = (size_t)n;
  list->items = (cb_stub_info_t *)(list + 1);
  char *b = (char *)(list->items + n);
  for (int i = 0; i < n; i++) {
    const cb__route_t *rt = stubs[i];
    /* NULL: a deferred route (deferred.c) */
    const stub_t *st = rt->kind == &stub_kind || rt->kind == &stub_times_kind ? rt->arg : NULL;
    cb_stub_info_t *x = &list->items[i];
    memcpy(b, rt->name, rt->name_len + 1);
    x->name = (cb_str_t){b, rt->name_len};
    b += rt->name_len + 1;
    memcpy(b, rt->pattern, rt->pattern_len + 1);
    x->path = (cb_str_t){b, rt->pattern_len};
    b += rt->pattern_len + 1;
    x->id = rt->stub_id;
    x->methods = rt->methods;
    x->priority = rt->priority;
    x->status = st ? st->status : 0;
    x->times = st ? st->times : 0;
    x->hits = answered(reg, rt);
    x->spent = st && st->times > 0 && __atomic_load_n(&st->claimed, __ATOMIC_RELAXED) >= st->times;
  }
  cb__routes_unlock(reg);
  /* Matching order, as the table sorts them: priority first, then the newest (ids grow with age). */
  for (int i = 1; i < n; i++) {
    cb_stub_info_t x = list->items[i];
    int k = i;
    while (k > 0 && (list->items[k - 1].priority < x.priority ||
                     (list->items[k - 1].priority == x.priority && list->items[k - 1].id < x.id))) {
      list->items[k] = list->items[k - 1];
      k--;
    }
    list->items[k] = x;
  }
  *out = list;
  return 0;
}

void cb_stub_list_free(cb_stub_list_t *list) { free(list); }

int cb_server_route_counts(cb_server_t *srv, cb_route_counts_t **out) {
  if (srv == NULL || out == NULL) return UV_EINVAL;
  cb__routes_t *reg = srv->routes;
  cb__routes_lock(reg);
  int nf, ns;
  cb__route_t **fx = cb__routes_fixtures(reg, &nf);
  cb__route_t **stubs = cb__routes_stubs(reg, &ns);
  cb__route_t *nfound = cb__routes_not_found(reg);
  size_t n = (size_t)nf + 1 + (size_t)ns, bytes = nfound->name_len + 1;
  for (int i = 0; i < nf; i++) bytes += fx[i]->name_len + 1;
  for (int i = 0; i < ns; i++) bytes += stubs[i]->name_len + 1;
  cb_route_counts_t *list = malloc(sizeof *list + n * sizeof(cb_route_count_t) + bytes);
  if (list == NULL) {
    cb__routes_unlock(reg);
    return UV_ENOMEM;
  }
  list->count = n;
  list->items = (cb_route_count_t *)(list + 1);
  char *b = (char *)(list->items + n);
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    const cb__route_t *rt = i < (size_t)nf ? fx[i] : i == (size_t)nf ? nfound : stubs[i - (size_t)nf - 1];
    memcpy(b, rt->name, rt->name_len + 1);
    list->items[k].name = (cb_str_t){b, rt->name_len};
    list->items[k].requests = all_requests(reg, rt);
    b += rt->name_len + 1;
    k++;
  }
  cb__routes_unlock(reg);
  *out = list;
  return 0;
}

void cb_route_counts_free(cb_route_counts_t *counts) { free(counts); }
