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

typedef struct {
  buf_t out;
} sinkbuf_t;

static void sink_buf(void *arg, const char *data, size_t len) { buf_add(&((sinkbuf_t *)arg)->out, data, len); }

/* The 404 body on the wire: plain text, JSON with accept: application/json (escaped), HEAD's head alone. */
TEST(near_miss_404_bodies) {
  sinkbuf_t s = {{0}};
  cb__testconn_t *tc = cb__testconn_new(NULL, sink_buf, &s);
  ASSERT_NOT_NULL(tc);
  static const cb_matcher_t q[] = {{CB_S("a%22b"), {NULL, 0}}};
  stub(tc, "orders", CB_METHOD_POST, "/orders/{id}", NULL, 0, q, 1, 0, NULL);
  static const struct {
    const char *req, *exp;
  } cs[] = {
      {"GET /orders/1?x=\"\\ HTTP/1.1\r\nhost: x\r\n\r\n",
       "HTTP/1.1 404 Not Found\r\ndate: " DATE_MASK "\r\ncontent-type: text/plain\r\ncontent-length: 88\r\n\r\n"
       "No stub matched GET /orders/1?x=\"\\x5c\nClosest stubs:\n  orders (id 1): method, query a\"b\n"},
      {"GET /orders/1?x=\"\\ HTTP/1.1\r\nhost: x\r\nAccept: text/html, application/json;q=0.9\r\n\r\n",
       "HTTP/1.1 404 Not Found\r\ndate: " DATE_MASK "\r\ncontent-type: application/json\r\ncontent-length: 120\r\n\r\n"
       "{\"method\":\"GET\",\"target\":\"/orders/1?x=\\\"\\\\\",\"near_misses\":[{\"name\":\"orders\",\"id\":1,"
       "\"differs\":[\"method\",\"query a\\\"b\"]}]}\n"},
      {"HEAD /x HTTP/1.1\r\nhost: x\r\n\r\n",
       "HTTP/1.1 404 Not Found\r\ndate: " DATE_MASK "\r\ncontent-type: text/plain\r\ncontent-length: 80\r\n\r\n"},
  };
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
    buf_reset(&s.out);
    ASSERT_EQ(cb__testconn_feed(tc, cs[i].req, strlen(cs[i].req)), 0);
    mask_dates(s.out.p, s.out.len);
    ASSERT_MEM_EQ(s.out.p, s.out.len, cs[i].exp, strlen(cs[i].exp));
  }
  ASSERT_EQ(cb__testconn_free(tc), 0);
  buf_free(&s.out);
}
