/* Near misses (issue 25, src/kinds/near_miss.c): for a request no stub matched, the three closest stubs and the
 * parts of their match it failed, in order (lowest score first, then matching order: newest first among equal
 * priorities). */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

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

/* ---- cb_server_near_misses(): the journal's 404s, scored against the stubs now ---- */

static void srv_stub(cb_server_t *srv, const char *name, unsigned methods, const char *path, const cb_matcher_t *h,
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
  ASSERT_ERR(cb_server_route_add(srv, &st, &id), 0);
}

/* One request on its own connection, read to the close; returns the status. */
static int one_request(int port, const char *req) {
  int fd = cl_connect(port);
  cl_sends(fd, req);
  buf_t got = {0};
  ASSERT_EQ(cl_read_close(fd, &got, 10000), CL_EOF);
  close(fd);
  int status = 0;
  ASSERT_EQ(sscanf(got.p, "HTTP/1.1 %d", &status), 1);
  buf_free(&got);
  return status;
}

/* A list as one line per 404: "seq METHOD path ?query: name#id[part|part] ...". */
static void near_list_text(const cb_near_miss_list_t *l, buf_t *b) {
  for (size_t i = 0; i < l->count; i++) {
    const cb_near_miss_t *x = &l->items[i];
    buf_addf(b, "%llu %s %s ?%s:", (unsigned long long)x->seq, x->method.ptr, x->path.ptr, x->query.ptr);
    for (size_t k = 0; k < x->count; k++) {
      const cb_near_stub_t *s = &x->near[k];
      ASSERT_EQ(strlen(s->name.ptr), s->name.len);
      buf_addf(b, " %s#%llu[", s->name.ptr, (unsigned long long)s->id);
      for (size_t p = 0; p < s->ndiffers; p++) {
        ASSERT_EQ(strlen(s->differs[p].ptr), s->differs[p].len);
        buf_addf(b, "%s%s", p ? "|" : "", s->differs[p].ptr);
      }
      buf_adds(b, "]");
    }
    buf_adds(b, "\n");
  }
}

static void expect_near_list(cb_server_t *srv, const char *want) {
  cb_near_miss_list_t *l = NULL;
  ASSERT_ERR(cb_server_near_misses(srv, &l), 0);
  buf_t got = {0};
  near_list_text(l, &got);
  buf_add(&got, "", 1);
  ASSERT_STR_EQ(got.p, want);
  buf_free(&got);
  cb_near_miss_list_free(l);
}

TEST(near_miss_list_from_journal) {
  cb_config_t cfg;
  test_config(&cfg);
  cfg.journal = 100;
  cfg.journal_body_bytes = 8; /* a longer body is not whole in the journal: "body (not read)" */
  cb_server_t *srv = test_start(&cfg);
  int port = cb_server_port(srv);
  static const cb_matcher_t tenant[] = {{CB_S("x-tenant"), CB_S("acme")}};
  static const cb_matcher_t verbose[] = {{CB_S("verbose"), CB_S("1")}};
  srv_stub(srv, "orders_post", CB_METHOD_POST, "/orders/{id}", tenant, 1, NULL, 0, CB_MATCH_BODY_JSON_SUBSET,
           "{\"a\":1}");
  srv_stub(srv, "users", 0, "/users/{id}", NULL, 0, NULL, 0, 0, NULL);
  srv_stub(srv, "orders_get", CB_METHOD_GET, "/orders/{id}", NULL, 0, verbose, 1, 0, NULL);
  ASSERT_EQ(one_request(port, "POST /orders/1?verbose=0 HTTP/1.1\r\nhost: x\r\nx-tenant: other\r\n"
                              "content-length: 7\r\nconnection: close\r\n\r\n{\"a\":2}"),
            404);
  ASSERT_EQ(one_request(port, "POST /orders/2 HTTP/1.1\r\nhost: x\r\nx-tenant: acme\r\n"
                              "content-length: 14\r\nconnection: close\r\n\r\n{\"a\":2,\"bb\":2}"),
            404);
  ASSERT_EQ(one_request(port, "GET /users/1 HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"), 200);
  ASSERT_EQ(one_request(port, "GET /nope HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"), 404);
  /* Scores: the path 4, the method 2, each other part 1; equal scores in matching order (newest first). A body
   * whole in the journal is judged (GET /nope's empty body is not JSON); a cut one is not. */
  expect_near_list(srv,
                   "1 POST /orders/1 ?verbose=0: orders_post#1[header x-tenant|body] orders_get#3[method|query "
                   "verbose] users#2[path]\n"
                   "2 POST /orders/2 ?: orders_post#1[body (not read)] orders_get#3[method|query verbose] "
                   "users#2[path]\n"
                   "4 GET /nope ?: users#2[path] orders_get#3[path|query verbose] "
                   "orders_post#1[method|path|header x-tenant|body]\n");
  /* Scored against the stubs now: none left, nothing near; the 404s stay. */
  ASSERT_ERR(cb_server_route_reset(srv), 0);
  expect_near_list(srv, "1 POST /orders/1 ?verbose=0:\n2 POST /orders/2 ?:\n4 GET /nope ?:\n");
  /* A stub named "not_found" answers under that route name: not a 404, not listed. */
  srv_stub(srv, "not_found", 0, "/nf", NULL, 0, NULL, 0, 0, NULL);
  ASSERT_EQ(one_request(port, "GET /nf HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"), 200);
  expect_near_list(srv, "1 POST /orders/1 ?verbose=0: not_found#4[path]\n2 POST /orders/2 ?: not_found#4[path]\n"
                        "4 GET /nope ?: not_found#4[path]\n");
  ASSERT_ERR(cb_server_requests_clear(srv), 0);
  expect_near_list(srv, "");
  cb_near_miss_list_t *l = NULL;
  ASSERT_EQ(cb_server_near_misses(NULL, &l), CB_EINVAL);
  ASSERT_EQ(cb_server_near_misses(srv, NULL), CB_EINVAL);
  cb_near_miss_list_free(NULL);
  test_stop(srv);
}

/* With the journal off there is nothing to list. */
TEST(near_miss_list_journal_off) {
  cb_config_t cfg;
  test_config(&cfg);
  cfg.journal = 0;
  cb_server_t *srv = test_start(&cfg);
  srv_stub(srv, "users", 0, "/users/{id}", NULL, 0, NULL, 0, 0, NULL);
  ASSERT_EQ(one_request(cb_server_port(srv), "GET /nope HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"), 404);
  expect_near_list(srv, "");
  test_stop(srv);
}

/* The work of scoring one 404 against many stubs with query matchers and a long query (docs/routes.md "Near
 * misses"): each query matcher is looked up in an index of the request's parameters, decoded once, so the work
 * is a few units per parameter (two keys each) and per matcher, not one per matcher and parameter (here 4,000 x
 * 8,329, 33 million). Work is counted, not timed; the near misses are those the scan found. */
TEST(near_miss_query_work_bounded) {
  enum { STUBS = 2000 };
  cb__testconn_t *tc = cb__testconn_new(NULL, sink, NULL);
  ASSERT_NOT_NULL(tc);
  char names[STUBS][16], paths[STUBS][16];
  for (int i = 0; i < STUBS; i++) {
    snprintf(names[i], sizeof names[i], "s%d", i);
    snprintf(paths[i], sizeof paths[i], "/s%d", i);
    /* Stub i wants k<i>=v and dup=3; every 500th p<i>=v and dup=2, which the query has (the second of two dup),
     * but s500 wants p500=w (a value it has not) and s1500 p1500 with any value. */
    char qn[16];
    snprintf(qn, sizeof qn, i % 500 == 0 ? "p%d" : "k%d", i);
    cb_matcher_t q[2] = {{{qn, strlen(qn)}, CB_S("v")}, {CB_S("dup"), i % 500 == 0 ? CB_S("2") : CB_S("3")}};
    if (i == 500) q[0].value = CB_S("w");
    if (i == 1500) q[0].value = (cb_str_t){NULL, 0};
    stub(tc, names[i], 0, paths[i], NULL, 0, q, 2, 0, NULL);
  }
  /* A 64 KiB query: p0=v&p1=v&..., then dup=1&dup=2. */
  buf_t target = {0};
  buf_adds(&target, "/nope?dup=1&dup=2");
  int nparams = 2;
  while (target.len < 65536 - 16) buf_addf(&target, "&p%d=v", nparams++ - 2);
  char out[3][256];
  uint64_t work = 0;
  int n = cb__testconn_near_counted(tc, "GET", target.p, NULL, 0, out, 3, &work);
  ASSERT_EQ(n, 3);
  /* The newest first among equal scores (4, the path alone): s1500, s1000, s0 (s500 differs in p500 too). */
  ASSERT_STR_EQ(out[0], "s1500 4: path");
  ASSERT_STR_EQ(out[1], "s1000 4: path");
  ASSERT_STR_EQ(out[2], "s0 4: path");
  cbt_log("%d stubs x 2 query matchers, %d parameters: %llu units of work", STUBS, nparams,
          (unsigned long long)work);
  if (work > 4ull * (uint64_t)nparams + 4ull * 2 * STUBS)
    FAIL("%llu units of work for %d parameters and %d query matchers: a matcher should be looked up in an index "
         "of the parameters, not compared with each of them",
         (unsigned long long)work, nparams, 2 * STUBS);
  /* A query matcher that is not met is named as before. */
  n = cb__testconn_near_counted(tc, "GET", "/s7?k7=w&dup=3", NULL, 0, out, 3, &work);
  ASSERT_EQ(n, 3);
  ASSERT_STR_EQ(out[0], "s7 1: query k7");
  buf_free(&target);
  ASSERT_EQ(cb__testconn_free(tc), 0);
}
