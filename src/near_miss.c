/* Near misses (issue 25): for a request that matched no route, the stubs that came closest and the parts of
 * their match it failed. Only the 404 path calls this: a matched request never pays for it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "internal.h"

static unsigned score_route(const cb__route_t *rt, cb__req_t *r, const cb__match_in_t *in, cb__near_t *n) {
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
    if (!cb__route_query_ok(rt, i, in)) {
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

int cb__near_misses(const cb__rtable_t *t, cb__req_t *r, cb__near_t out[CB__NEAR_MAX]) {
  int nroutes, kept = 0;
  cb__route_t *const *routes = cb__rtable_routes(t, &nroutes);
  cb__match_in_t in;
  cb__match_in(r, &in);
  for (int i = 0; i < nroutes; i++) {
    const cb__route_t *rt = routes[i];
    if (rt->fixture || rt->stub_id == 0) continue;
    cb__near_t n;
    score_route(rt, r, &in, &n);
    /* Insert in order: a later route with an equal score stays after the earlier one. */
    int at = kept;
    while (at > 0 && out[at - 1].score > n.score) at--;
    if (at >= CB__NEAR_MAX) continue;
    int last = kept < CB__NEAR_MAX ? kept : CB__NEAR_MAX - 1;
    memmove(&out[at + 1], &out[at], (size_t)(last - at) * sizeof *out);
    out[at] = n;
    if (kept < CB__NEAR_MAX) kept++;
  }
  return kept;
}

static size_t put(char *buf, size_t cap, size_t o, const char *p, size_t n) {
  if (o + 1 >= cap) return o;
  if (n > cap - 1 - o) n = cap - 1 - o;
  memcpy(buf + o, p, n);
  buf[o + n] = '\0';
  return o + n;
}

size_t cb__near_text(const cb__near_t *n, char *buf, size_t cap) {
  size_t o = 0;
  if (cap == 0) return 0;
  buf[0] = '\0';
  const cb__route_t *rt = n->route;
  const char *sep = "";
#define PART(p, len)                         \
  do {                                       \
    o = put(buf, cap, o, sep, strlen(sep));  \
    o = put(buf, cap, o, (p), (len));        \
    sep = ", ";                              \
  } while (0)
  if (n->flags & CB__NEAR_METHOD) PART("method", 6);
  if (n->flags & CB__NEAR_PATH) PART("path", 4);
  for (int i = 0; i < rt->nheaders; i++)
    if (n->headers & (1u << i)) {
      PART("header ", 7);
      o = put(buf, cap, o, rt->headers[i].name, rt->headers[i].name_len);
    }
  for (int i = 0; i < rt->nquery; i++)
    if (n->query & (1u << i)) {
      PART("query ", 6);
      o = put(buf, cap, o, rt->query[i].name, rt->query[i].name_len);
    }
  if (n->flags & CB__NEAR_BODY) PART(n->flags & CB__NEAR_BODY_UNCHECKED ? "body (not read)" : "body", n->flags & CB__NEAR_BODY_UNCHECKED ? 15 : 4);
  if (n->flags & CB__NEAR_SPENT) PART("unavailable (spent, or another scenario state)", 46);
#undef PART
  return o;
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

/* The differing parts of one near miss, each as its own item (the text of cb__near_text, split). */
static void sb_parts(sbuf_t *b, const cb__near_t *n, int json) {
  const cb__route_t *rt = n->route;
  int first = 1;
#define ITEM(prefix, p, len)                        \
  do {                                              \
    sb_adds(b, first ? "" : json ? "," : ", ");     \
    if (json) sb_adds(b, "\"");                     \
    sb_adds(b, prefix);                             \
    sb_esc(b, (p), (len), json);                    \
    if (json) sb_adds(b, "\"");                     \
    first = 0;                                      \
  } while (0)
  if (n->flags & CB__NEAR_METHOD) ITEM("method", "", 0);
  if (n->flags & CB__NEAR_PATH) ITEM("path", "", 0);
  for (int i = 0; i < rt->nheaders; i++)
    if (n->headers & (1u << i)) ITEM("header ", rt->headers[i].name, rt->headers[i].name_len);
  for (int i = 0; i < rt->nquery; i++)
    if (n->query & (1u << i)) ITEM("query ", rt->query[i].name, rt->query[i].name_len);
  if (n->flags & CB__NEAR_BODY) ITEM(n->flags & CB__NEAR_BODY_UNCHECKED ? "body (not read)" : "body", "", 0);
  if (n->flags & CB__NEAR_SPENT) ITEM("unavailable (spent, or another scenario state)", "", 0);
#undef ITEM
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
  int n = cb__near_misses(r->table, r, near);
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
