/* Near misses (issue 25, src/near_miss.c): for a request no stub matched, the three closest stubs and the
 * parts of their match it failed, in order (lowest score first, then matching order: newest first among equal
 * priorities). */
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "testing.h"

static void stub(cb__testconn_t *tc, const char *name, unsigned methods, const char *path, const cb_matcher_t *h,
                 size_t nh, const cb_matcher_t *q, size_t nq, int body_kind, const char *body) {
  cb_stub_t st;
  memset(&st, 0, sizeof st);
  st.name = (cb_str_t){name, strlen(name)};
  st.match.methods = methods;
  st.match.path = (cb_str_t){path, strlen(path)};
  st.match.headers = h;
  st.match.nheaders = nh;
  st.match.query = q;
  st.match.nquery = nq;
  st.match.body.kind = body_kind;
  st.match.body.value = (cb_str_t){body, body ? strlen(body) : 0};
  st.response.status = 200;
  uint64_t id;
  ASSERT_ERR(cb__testconn_route_add(tc, &st, &id), 0);
}

static void sink(void *arg, const char *data, size_t len) {
  (void)arg;
  (void)data;
  (void)len;
}

TEST(near_miss_best_three) {
  cb__testconn_t *tc = cb__testconn_new(NULL, sink, NULL);
  ASSERT_NOT_NULL(tc);
  static const cb_matcher_t tenant[] = {{CB_S("x-tenant"), CB_S("acme")}, {CB_S("x-key"), {NULL, 0}}};
  static const cb_matcher_t verbose[] = {{CB_S("verbose"), CB_S("1")}};
  stub(tc, "orders_get", CB_METHOD_GET, "/orders/{id}", tenant, 2, NULL, 0, 0, NULL);
  stub(tc, "users", 0, "/users/{id}", NULL, 0, NULL, 0, 0, NULL);
  stub(tc, "orders_put", CB_METHOD_PUT, "/orders/{id}", NULL, 0, verbose, 1, CB_MATCH_BODY_JSON_SUBSET, "{\"a\":1}");
  stub(tc, "orders_post", CB_METHOD_POST, "/orders/{id}", tenant, 1, NULL, 0, 0, NULL);
  char out[3][256];
  static const char *const hdrs[] = {"x-tenant:other", "host:x"};
  int n = cb__testconn_near(tc, "POST", "/orders/1?verbose=0", hdrs, 2, out, 3);
  ASSERT_EQ(n, 3);
  /* Newest first among equal priorities: orders_post, orders_put, users, orders_get in matching order. */
  ASSERT_STR_EQ(out[0], "orders_post 1: header x-tenant");
  ASSERT_STR_EQ(out[1], "orders_put 4: method, query verbose, body (not read)");
  ASSERT_STR_EQ(out[2], "users 4: path"); /* orders_get (4 too) comes after it in matching order */
  /* The path weighs most (4), then the method (2), each other part 1: orders_put (8) is left out. */
  n = cb__testconn_near(tc, "GET", "/users", NULL, 0, out, 3);
  ASSERT_EQ(n, 3);
  ASSERT_STR_EQ(out[0], "users 4: path");
  ASSERT_STR_EQ(out[1], "orders_get 6: path, header x-tenant, header x-key");
  ASSERT_STR_EQ(out[2], "orders_post 7: method, path, header x-tenant");
  ASSERT_EQ(cb__testconn_free(tc), 0);
}

/* No stub: nothing near (the fixture routes are not scored). */
TEST(near_miss_no_stubs) {
  cb__testconn_t *tc = cb__testconn_new(NULL, sink, NULL);
  ASSERT_NOT_NULL(tc);
  char out[3][256];
  ASSERT_EQ(cb__testconn_near(tc, "GET", "/nope", NULL, 0, out, 3), 0);
  ASSERT_EQ(cb__testconn_free(tc), 0);
}
