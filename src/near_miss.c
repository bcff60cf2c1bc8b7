/* Near misses (issue 25): for a request that matched no route, the stubs that came closest and the parts of
 * their match it failed. Only the 404 path calls this: a matched request never pays for it. */
#include <stdio.h>
#include <string.h>

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
#undef PART
  return o;
}
