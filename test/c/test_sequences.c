/* Sequences, scenarios and delay distributions on stubs (issue 25): a stub with responses answers them in
 * turn, then as `after` says; a scenario's state gates stubs and is moved by their answers; a drawn delay is
 * reproducible from its seed and journaled. Exact bytes; timings are never asserted. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "common.h"
#include "engine.h"

static cb_response_t resp(int status, const char *body) {
  cb_response_t r;
  memset(&r, 0, sizeof r);
  r.status = status;
  r.body_kind = CB_BODY_BYTES;
  r.body = (cb_str_t){body, strlen(body)};
  return r;
}

static cb_stub_t on(const char *path) {
  cb_stub_t st;
  memset(&st, 0, sizeof st);
  st.match.path = (cb_str_t){path, strlen(path)};
  st.response = resp(200, "");
  return st;
}

/* GET target on fd: exactly `status` with `body`; when body is NULL, a 404 whose near misses (docs/routes.md) are
 * the lines `near` (or the fixture table's empty 404 when near is NULL too). */
static void expect_near(int fd, const char *target, int status, const char *body, const char *near) {
  buf_t e = {0}, req = {0};
  if (body != NULL) {
    exp_head(&e, status, NULL, NULL, (long)strlen(body), CONN_NONE);
    buf_adds(&e, body);
  } else if (near != NULL) {
    exp_near404(&e, "GET", target, near, CONN_NONE);
  } else {
    exp_route(&e, "GET", target, CONN_NONE);
  }
  buf_addf(&req, "GET %s HTTP/1.1\r\nhost: x\r\n\r\n", target);
  ROUNDTRIP(fd, req.p, req.len, &e);
  buf_free(&e);
  buf_free(&req);
}

static void expect(int fd, const char *target, int status, const char *body) {
  expect_near(fd, target, status, body, NULL);
}

#define UNAVAILABLE "unavailable (spent, or another scenario state)"

static cb_server_t *start2(void) {
  cb_config_t cfg;
  test_config(&cfg);
  cfg.threads = 2;
  return test_start(&cfg);
}

/* 503, 503, then 200 for ever: what a client's retry meets. Over two connections (so both workers may count):
 * the answers follow one server-wide order. */
TEST(seq_503_503_200_then_last) {
  cb_server_t *srv = start2();
  cb_response_t rs[] = {resp(503, "busy1"), resp(503, "busy2"), resp(200, "ok")};
  cb_stub_t st = on("/retry");
  st.responses = rs;
  st.nresponses = 3;
  uint64_t id;
  ASSERT_EQ(cb_server_route_add(srv, &st, &id), 0);
  int a = cl_connect(cb_server_port(srv)), b = cl_connect(cb_server_port(srv));
  expect(a, "/retry", 503, "busy1");
  expect(b, "/retry", 503, "busy2");
  expect(a, "/retry", 200, "ok");
  expect(b, "/retry", 200, "ok");
  close(a);
  close(b);
  cb_stub_list_t *list;
  ASSERT_EQ(cb_server_stubs(srv, &list), 0);
  ASSERT_EQ(list->count, 1u);
  ASSERT_EQ(list->items[0].status, 503);
  ASSERT_EQ(list->items[0].hits, 4u);
  cb_stub_list_free(list);
  test_stop(srv);
}

TEST(seq_cycle_and_not_found) {
  cb_server_t *srv = start2();
  cb_response_t rs[] = {resp(200, "x"), resp(201, "y")};
  cb_stub_t c = on("/cycle"), n = on("/once");
  c.responses = n.responses = rs;
  c.nresponses = n.nresponses = 2;
  c.after = CB_AFTER_CYCLE;
  n.after = CB_AFTER_NOT_FOUND;
  uint64_t id;
  ASSERT_EQ(cb_server_route_add(srv, &c, &id), 0);
  ASSERT_EQ(cb_server_route_add(srv, &n, &id), 0);
  int fd = cl_connect(cb_server_port(srv));
  expect(fd, "/cycle", 200, "x");
  expect(fd, "/cycle", 201, "y");
  expect(fd, "/cycle", 200, "x");
  expect(fd, "/once", 200, "x");
  expect(fd, "/once", 201, "y");
  /* Spent: a 404 that says so (every part of /once matched), the other stub by its path. */
  expect_near(fd, "/once", 0, NULL, "  stub_2 (id 2): " UNAVAILABLE "\n  stub_1 (id 1): path\n");
  close(fd);
  test_stop(srv);
}

/* A sequence with times: times bounds the answers in all. Each response has its own headers and status. */
TEST(seq_times_and_headers) {
  cb_server_t *srv = start2();
  cb_header_t h[] = {{CB_S("x-step"), CB_S("one")}};
  cb_response_t rs[] = {resp(200, "a"), resp(202, "b")};
  rs[0].headers = h;
  rs[0].nheaders = 1;
  cb_stub_t st = on("/t");
  st.responses = rs;
  st.nresponses = 2;
  st.response.times = 3;
  uint64_t id;
  ASSERT_EQ(cb_server_route_add(srv, &st, &id), 0);
  int fd = cl_connect(cb_server_port(srv));
  buf_t e = {0};
  exp_head(&e, 200, NULL, "x-step: one\r\n", 1, CONN_NONE);
  buf_adds(&e, "a");
  ROUNDTRIP_S(fd, "GET /t HTTP/1.1\r\nhost: x\r\n\r\n", &e);
  buf_free(&e);
  expect(fd, "/t", 202, "b");
  expect(fd, "/t", 202, "b");
  expect_near(fd, "/t", 0, NULL, "  stub_1 (id 1): " UNAVAILABLE "\n");
  close(fd);
  test_stop(srv);
}

static void scen(cb_stub_t *st, const char *when, const char *then) {
  st->scenario = CB_S("cart");
  if (when) st->when = (cb_str_t){when, strlen(when)};
  if (then) st->then = (cb_str_t){then, strlen(then)};
}

static void expect_state(cb_server_t *srv, const char *state) {
  char out[CB_MAX_NAME + 1];
  int n = cb_server_scenario(srv, CB_S("cart"), out, sizeof out);
  ASSERT_EQ(n, (int)strlen(state));
  ASSERT_STR_EQ(out, state);
}

/* Three states: started -> added -> paid, each stub answering in its state only; the API reads and sets the
 * state, and cb_server_scenarios_reset puts it back to started. */
TEST(scenario_three_states) {
  cb_server_t *srv = start2();
  cb_stub_t a = on("/cart"), b = on("/cart"), c = on("/cart");
  a.response = resp(200, "added");
  scen(&a, "started", "added");
  b.response = resp(200, "paid");
  scen(&b, "added", "paid");
  c.response = resp(410, "closed");
  scen(&c, "paid", NULL);
  cb_stub_t all[] = {a, b, c};
  uint64_t ids[3];
  ASSERT_EQ(cb_server_route_add_many(srv, all, 3, ids, NULL), 0);
  expect_state(srv, "started");
  int fd = cl_connect(cb_server_port(srv)), fd2 = cl_connect(cb_server_port(srv));
  expect(fd, "/cart", 200, "added");
  expect_state(srv, "added");
  expect(fd2, "/cart", 200, "paid");
  expect(fd, "/cart", 410, "closed");
  expect(fd2, "/cart", 410, "closed");
  expect_state(srv, "paid");
  ASSERT_EQ(cb_server_scenario_set(srv, CB_S("cart"), CB_S("added")), 0);
  expect(fd, "/cart", 200, "paid");
  ASSERT_EQ(cb_server_scenarios_reset(srv), 0);
  expect_state(srv, "started");
  expect(fd, "/cart", 200, "added");
  /* A state no stub names: no stub of the scenario matches. */
  ASSERT_EQ(cb_server_scenario_set(srv, CB_S("cart"), CB_S("elsewhere")), 0);
  expect_near(fd, "/cart", 0, NULL,
              "  stub_3 (id 3): " UNAVAILABLE "\n  stub_2 (id 2): " UNAVAILABLE "\n  stub_1 (id 1): " UNAVAILABLE "\n");
  char out[4];
  ASSERT_EQ(cb_server_scenario(srv, CB_S("cart"), out, sizeof out), UV_ENOBUFS);
  ASSERT_EQ(cb_server_scenario(srv, CB_S("never used"), out, sizeof out), UV_EINVAL);
  char big[CB_MAX_NAME + 1];
  ASSERT_EQ(cb_server_scenario(srv, CB_S("never_used"), big, sizeof big), 7);
  ASSERT_STR_EQ(big, "started");
  close(fd);
  close(fd2);
  test_stop(srv);
}

/* Two requests at once on one transition: exactly one takes it (the compare-and-swap), the other passes the
 * stub over and meets the next state's stub, over 200 rounds on two workers. */
TEST_T(scenario_race_one_winner, 60000) {
  cb_server_t *srv = start2();
  cb_stub_t a = on("/r"), b = on("/r");
  a.response = resp(200, "A");
  scen(&a, "started", "moved");
  b.response = resp(200, "B");
  scen(&b, "moved", NULL);
  cb_stub_t all[] = {a, b};
  uint64_t ids[2];
  ASSERT_EQ(cb_server_route_add_many(srv, all, 2, ids, NULL), 0);
  for (int round = 0; round < 200; round++) {
    ASSERT_EQ(cb_server_scenarios_reset(srv), 0);
    int x = cl_connect(cb_server_port(srv)), y = cl_connect(cb_server_port(srv));
    cl_sends(x, "GET /r HTTP/1.1\r\nhost: x\r\n\r\n");
    cl_sends(y, "GET /r HTTP/1.1\r\nhost: x\r\n\r\n");
    buf_t gx = {0}, gy = {0};
    buf_t e = {0};
    exp_head(&e, 200, NULL, NULL, 1, CONN_NONE);
    ASSERT_EQ(cl_read_n(x, &gx, e.len + 1, 15000), CL_OK);
    ASSERT_EQ(cl_read_n(y, &gy, e.len + 1, 15000), CL_OK);
    char cx = gx.p[gx.len - 1], cy = gy.p[gy.len - 1];
    ASSERT_EQ((cx == 'A') + (cy == 'A'), 1);
    ASSERT_EQ((cx == 'B') + (cy == 'B'), 1);
    buf_free(&gx);
    buf_free(&gy);
    buf_free(&e);
    close(x);
    close(y);
  }
  test_stop(srv);
}

/* n requests to target; the journal's delay_ms of each, in order. */
static void delays(cb_server_t *srv, const char *target, int n, unsigned *out) {
  int fd = cl_connect(cb_server_port(srv));
  ASSERT_EQ(cb_server_requests_clear(srv), 0);
  for (int i = 0; i < n; i++) expect(fd, target, 200, "d");
  close(fd);
  cb_request_filter_t f;
  memset(&f, 0, sizeof f);
  cb_request_list_t *list = wait_journal(srv, &f, (size_t)n, 15000);
  ASSERT_EQ(list->count, (size_t)n);
  for (int i = 0; i < n; i++) out[i] = list->items[i].delay_ms;
  cb_request_list_free(list);
}

/* Uniform and lognormal delays: the n-th answer waits the n-th draw of the seed, the delay fault's own draws
 * (cb__fault_delay_ms), recorded in the journal; another server with the same seed draws the same. A fixed
 * delay_ms is journaled as it is. */
TEST_T(delay_distributions_seeded, 60000) {
  enum { N = 6 };
  unsigned first[N], second[N], fixed[2];
  for (int run = 0; run < 2; run++) {
    cb_server_t *srv = start2();
    cb_stub_t u = on("/u"), l = on("/l"), x = on("/x");
    u.response = resp(200, "d");
    u.response.delay_dist = CB_DELAY_UNIFORM;
    u.response.delay_ms = 1;
    u.response.delay_max_ms = 25;
    u.response.delay_seed = 7;
    l.response = resp(200, "d");
    l.response.delay_dist = CB_DELAY_LOGNORMAL;
    l.response.delay_ms = 4;
    l.response.delay_sigma = 0.5;
    l.response.delay_seed = 7;
    x.response = resp(200, "d");
    x.response.delay_ms = 3;
    cb_stub_t all[] = {u, l, x};
    uint64_t ids[3];
    ASSERT_EQ(cb_server_route_add_many(srv, all, 3, ids, NULL), 0);
    delays(srv, "/u", N, run ? second : first);
    cb__fault_t f;
    memset(&f, 0, sizeof f);
    f.dist = 1;
    f.ms = 1;
    f.max_ms = 25;
    f.seed = 7;
    for (int i = 0; i < N; i++) {
      ASSERT_EQ((run ? second : first)[i], cb__fault_delay_ms(&f, (uint64_t)i, 3600000));
      ASSERT_GE((run ? second : first)[i], 1u);
      ASSERT_LE((run ? second : first)[i], 25u);
    }
    unsigned ln[N];
    delays(srv, "/l", N, ln);
    f.dist = 2;
    f.ms = 4;
    f.sigma = 0.5;
    for (int i = 0; i < N; i++) ASSERT_EQ(ln[i], cb__fault_delay_ms(&f, (uint64_t)i, 3600000));
    delays(srv, "/x", 2, fixed);
    ASSERT_EQ(fixed[0], 3u);
    ASSERT_EQ(fixed[1], 3u);
    test_stop(srv);
  }
  ASSERT_MEM_EQ(first, sizeof first, second, sizeof second);
}

static void refused(cb_server_t *srv, const cb_stub_t *st, int field, int why) {
  uint64_t id;
  ASSERT_EQ(cb_server_route_add(srv, st, &id), UV_EINVAL);
  const cb_error_detail_t *d = cb_error_detail();
  ASSERT_EQ(d->field, field);
  ASSERT_EQ(d->why, why);
}

TEST(seq_scenario_delay_refused) {
  cb_server_t *srv = start2();
  cb_response_t rs[2] = {resp(200, "a"), resp(99, "b")};
  cb_stub_t st = on("/bad");
  st.responses = rs;
  st.nresponses = 2;
  refused(srv, &st, CB_FIELD_STATUS, CB_WHY_OUT_OF_RANGE); /* an item's field, as a single response's */
  st.nresponses = CB_MAX_RESPONSES + 1;
  refused(srv, &st, CB_FIELD_RESPONSES, CB_WHY_TOO_MANY);
  st.nresponses = 1;
  st.responses = NULL;
  refused(srv, &st, CB_FIELD_RESPONSES, CB_WHY_NULL_POINTER);
  st.responses = rs;
  st.after = (cb_after)3;
  refused(srv, &st, CB_FIELD_AFTER, CB_WHY_OUT_OF_RANGE);
  st = on("/bad");
  st.when = CB_S("s");
  refused(srv, &st, CB_FIELD_WHEN, CB_WHY_NEEDS_SCENARIO);
  st.when = (cb_str_t){NULL, 0};
  st.then = CB_S("s");
  refused(srv, &st, CB_FIELD_THEN, CB_WHY_NEEDS_SCENARIO);
  st.scenario = CB_S("a b");
  refused(srv, &st, CB_FIELD_SCENARIO, CB_WHY_BAD_CHAR);
  st.scenario = CB_S("ok");
  st.then = (cb_str_t){"", 0};
  refused(srv, &st, CB_FIELD_THEN, CB_WHY_EMPTY);
  ASSERT_STR_EQ(cb_error_detail()->field_name, "then");
  st = on("/bad");
  st.response.delay_dist = CB_DELAY_UNIFORM;
  st.response.delay_ms = 10;
  st.response.delay_max_ms = 5;
  refused(srv, &st, CB_FIELD_DELAY, CB_WHY_MIN_ABOVE_MAX);
  ASSERT_STR_EQ(cb_error_detail()->why_name, "min_above_max");
  st.response.delay_max_ms = 3600001;
  refused(srv, &st, CB_FIELD_DELAY, CB_WHY_OUT_OF_RANGE);
  st.response.delay_dist = CB_DELAY_LOGNORMAL;
  st.response.delay_sigma = 0;
  refused(srv, &st, CB_FIELD_DELAY, CB_WHY_OUT_OF_RANGE);
  st.response.delay_sigma = 10.5;
  refused(srv, &st, CB_FIELD_DELAY, CB_WHY_OUT_OF_RANGE);
  st.response.delay_dist = (cb_delay_dist)9;
  refused(srv, &st, CB_FIELD_DELAY, CB_WHY_OUT_OF_RANGE);
  ASSERT_EQ(cb_server_scenario_set(srv, CB_S("x"), CB_S("")), UV_EINVAL);
  ASSERT_EQ(cb_server_scenario_set(srv, CB_S(""), CB_S("y")), UV_EINVAL);
  test_stop(srv);
}

/* Templates: every placeholder in the body and a header, over keep-alive requests; a missing value is empty;
 * {{seq}} counts this response's answers; an untemplated body keeps its "{{" as bytes. */
TEST(template_body_and_header) {
  cb_server_t *srv = start2();
  static const char body[] = "id={{path.id}} q={{query.k}} h={{header.X-K}} m={{method}} s={{seq}} b={{body}}";
  cb_header_t h[] = {{CB_S("x-echo"), CB_S("{{header.x-k}}-{{seq}}")}, {CB_S("x-q"), CB_S("<{{query.k}}>")}};
  cb_stub_t st = on("/users/{id}");
  st.response = resp(200, body);
  st.response.headers = h;
  st.response.nheaders = 2;
  st.response.templated = 1;
  cb_stub_t plain = on("/plain");
  plain.response = resp(200, "{{path.id}}");
  cb_stub_t all[] = {st, plain};
  uint64_t ids[2];
  ASSERT_EQ(cb_server_route_add_many(srv, all, 2, ids, NULL), 0);
  int fd = cl_connect(cb_server_port(srv));
  buf_t e = {0};
  static const char want1[] = "id=42 q=a b h=V m=POST s=1 b=hello";
  exp_head(&e, 200, NULL, "x-echo: V-1\r\nx-q: <a b>\r\n", (long)strlen(want1), CONN_NONE);
  buf_adds(&e, want1);
  ROUNDTRIP_S(fd, "POST /users/42?z=1&k=a%20b HTTP/1.1\r\nhost: x\r\nx-k: V\r\ncontent-length: 5\r\n\r\nhello", &e);
  buf_reset(&e);
  static const char want2[] = "id=7 q= h= m=GET s=2 b=";
  exp_head(&e, 200, NULL, "x-echo: -2\r\nx-q: <>\r\n", (long)strlen(want2), CONN_NONE);
  buf_adds(&e, want2);
  ROUNDTRIP_S(fd, "GET /users/7 HTTP/1.1\r\nhost: x\r\n\r\n", &e);
  /* A value that a header cannot hold loses its control bytes there (no response splitting); the body keeps
   * them. */
  buf_reset(&e);
  static const char want3[] = "id=1 q= a\r\nset-cookie: x h= m=GET s=3 b=";
  exp_head(&e, 200, NULL, "x-echo: -3\r\nx-q: < aset-cookie: x>\r\n", (long)strlen(want3), CONN_NONE);
  buf_adds(&e, want3);
  ROUNDTRIP_S(fd, "GET /users/1?k=+a%0d%0aset-cookie:+x HTTP/1.1\r\nhost: x\r\n\r\n", &e);
  buf_free(&e);
  expect(fd, "/plain", 200, "{{path.id}}");
  close(fd);
  test_stop(srv);
}

/* A header value is cut at 8,192 bytes (docs/routes.md "Templates"), and it is sized only up to the cut: a value
 * of 100 x {{body}} with a 5,000-byte body renders 8,192 bytes, never 500,000, so it is not charged to the echo
 * budget (two 64 KiB bodies here) beyond what it sends and the answer is the 200 with the cut value, not a 503.
 * The cut falls inside the second {{body}}, after the bytes a field cannot hold (0x01 here) are left out. */
TEST(template_header_cut_sized_at_the_cut) {
  cb_config_t cfg;
  test_config(&cfg);
  cfg.max_body_bytes = 65536;
  cb_server_t *srv = test_start(&cfg);
  buf_t tpl = {0}, body = {0}, shown = {0};
  for (int i = 0; i < 100; i++) buf_adds(&tpl, "{{body}}");
  for (int i = 0; i < 5000; i++) {
    char c = i % 1000 == 999 ? '\x01' : (char)('a' + i % 26);
    buf_add(&body, &c, 1);
    if (c != '\x01') buf_add(&shown, &c, 1);
  }
  cb_header_t h[] = {{CB_S("x-b"), {tpl.p, tpl.len}}};
  cb_stub_t st = on("/cut");
  st.response = resp(200, "ok");
  st.response.headers = h;
  st.response.nheaders = 1;
  st.response.templated = 1;
  uint64_t id;
  ASSERT_EQ(cb_server_route_add(srv, &st, &id), 0);
  ASSERT_EQ(shown.len, 4995);
  buf_t want = {0}, e = {0}, req = {0};
  buf_adds(&want, "x-b: ");
  buf_add(&want, shown.p, shown.len);
  buf_add(&want, shown.p, 8192 - shown.len);
  buf_adds(&want, "\r\n");
  exp_head(&e, 200, NULL, want.p, 2, CONN_NONE);
  buf_adds(&e, "ok");
  buf_addf(&req, "POST /cut HTTP/1.1\r\nhost: x\r\ncontent-length: %zu\r\n\r\n", body.len);
  buf_add(&req, body.p, body.len);
  int fd = cl_connect(cb_server_port(srv));
  ROUNDTRIP(fd, req.p, req.len, &e);
  /* Twice on one connection: the first answer gave back what it held. */
  ROUNDTRIP(fd, req.p, req.len, &e);
  close(fd);
  buf_free(&tpl);
  buf_free(&body);
  buf_free(&shown);
  buf_free(&want);
  buf_free(&e);
  buf_free(&req);
  test_stop(srv);
}

TEST(template_refused) {
  cb_server_t *srv = start2();
  cb_stub_t st = on("/t/{id}");
  st.response = resp(200, "{{nope}}");
  st.response.templated = 1;
  refused(srv, &st, CB_FIELD_BODY, CB_WHY_BAD_TEMPLATE);
  ASSERT_STR_EQ(cb_error_detail()->why_name, "bad_template");
  st.response = resp(200, "{{path.other}}");
  st.response.templated = 1;
  refused(srv, &st, CB_FIELD_BODY, CB_WHY_BAD_TEMPLATE);
  st.response = resp(200, "{{method");
  st.response.templated = 1;
  refused(srv, &st, CB_FIELD_BODY, CB_WHY_BAD_TEMPLATE);
  cb_header_t h[] = {{CB_S("x-a"), CB_S("ok")}, {CB_S("x-b"), CB_S("{{query}}")}};
  st.response = resp(200, "");
  st.response.templated = 1;
  st.response.headers = h;
  st.response.nheaders = 2;
  refused(srv, &st, CB_FIELD_HEADERS, CB_WHY_BAD_TEMPLATE);
  ASSERT_EQ(cb_error_detail()->index, 1);
  st.response = resp(200, "ab");
  st.response.templated = 1;
  st.response.chunks = 2;
  refused(srv, &st, CB_FIELD_TEMPLATE, CB_WHY_CONFLICT);
  st.response = resp(200, "ab");
  st.response.templated = 1;
  st.response.fault = CB_S("reset");
  refused(srv, &st, CB_FIELD_TEMPLATE, CB_WHY_CONFLICT);
  st.response = resp(200, "");
  st.response.body_kind = CB_BODY_GENERATED;
  st.response.body_size = 10;
  st.response.templated = 1;
  refused(srv, &st, CB_FIELD_TEMPLATE, CB_WHY_CONFLICT);
  test_stop(srv);
}

/* ---- the stub file (c_src/stub_json.c) ---- */

#include <unistd.h>

#include "stub_json.h"

static const char *json_tmp(const char *name) {
  static char p[512];
  const char *t = getenv("TMPDIR");
  snprintf(p, sizeof p, "%s/cbench-seq-%d-%s", t && *t ? t : "/tmp", (int)getpid(), name);
  return p;
}

static int load_json(cb_server_t *srv, const char *text, char *msg, size_t cap) {
  const char *path = json_tmp("stubs.json");
  FILE *f = fopen(path, "w");
  ASSERT_NOT_NULL(f);
  fputs(text, f);
  fclose(f);
  int n = cb_stubs_json_load(srv, path, msg, cap);
  unlink(path);
  return n;
}

/* A sequence, a scenario, a seeded delay and a template from one file answer as their C counterparts. */
TEST(seq_json_file) {
  cb_server_t *srv = start2();
  char msg[1024] = "";
  static const char text[] =
      "[{\"match\": {\"path\": \"/r\"}, \"response\": {\"responses\": [{\"status\": 503, \"body\": \"b\"},\n"
      "   {\"status\": 200, \"body\": \"ok\"}], \"after\": \"cycle\"}},\n"
      " {\"match\": {\"path\": \"/c\", \"scenario\": \"s\", \"when\": \"started\", \"then\": \"two\"},\n"
      "  \"response\": {\"body\": \"one\"}},\n"
      " {\"match\": {\"path\": \"/c\", \"scenario\": \"s\", \"when\": \"two\"}, \"response\": {\"body\": \"two\"}},\n"
      " {\"match\": {\"path\": \"/d\"}, \"response\": {\"delay\": {\"uniform\": [1, 20]}, \"delay_seed\": 7,\n"
      "  \"body\": \"d\"}},\n"
      " {\"match\": {\"path\": \"/u/{id}\"}, \"response\": {\"template\": true, \"body\": \"<{{path.id}}>\",\n"
      "  \"headers\": {\"x-m\": \"{{method}}\"}}}]\n";
  ASSERT_EQ(load_json(srv, text, msg, sizeof msg), 5);
  int fd = cl_connect(cb_server_port(srv));
  expect(fd, "/r", 503, "b");
  expect(fd, "/r", 200, "ok");
  expect(fd, "/r", 503, "b");
  expect(fd, "/c", 200, "one");
  expect(fd, "/c", 200, "two");
  expect(fd, "/c", 200, "two");
  buf_t e = {0};
  exp_head(&e, 200, NULL, "x-m: GET\r\n", 4, CONN_NONE);
  buf_adds(&e, "<42>");
  ROUNDTRIP_S(fd, "GET /u/42 HTTP/1.1\r\nhost: x\r\n\r\n", &e);
  buf_free(&e);
  close(fd);
  unsigned got[3];
  delays(srv, "/d", 3, got);
  cb__fault_t f;
  memset(&f, 0, sizeof f);
  f.dist = 1;
  f.ms = 1;
  f.max_ms = 20;
  f.seed = 7;
  for (int i = 0; i < 3; i++) ASSERT_EQ(got[i], cb__fault_delay_ms(&f, (uint64_t)i, 3600000));
  test_stop(srv);
}

TEST(seq_json_errors) {
  static const struct {
    const char *text, *msg;
  } cases[] = {
      {"[{\"match\": {\"path\": \"/a\"},\n \"response\": {\"responses\": []}}]",
       "stubs[0].response.responses: empty: a sequence has at least one response"},
      {"[{\"match\": {\"path\": \"/a\"},\n \"response\": {\"responses\": [{}], \"status\": 200}}]",
       "stubs[0].response.status: unknown_key: a sequence takes responses, after and times"},
      {"[{\"match\": {\"path\": \"/a\"},\n \"response\": {\"responses\": [{}, {\"times\": 2}]}}]",
       "stubs[0].response.responses[1].times: unknown_key: unknown field"},
      {"[{\"match\": {\"path\": \"/a\"},\n \"response\": {\"responses\": [{\"status\": 99}]}}]",
       "stubs[0].response.responses[0].status: out_of_range: must be an integer from 200 to 599"},
      {"[{\"match\": {\"path\": \"/a\"},\n \"response\": {\"responses\": [{}], \"after\": \"never\"}}]",
       "stubs[0].response.after: out_of_range: must be \"last\", \"cycle\" or \"not_found\""},
      {"[{\"match\": {\"path\": \"/a\", \"when\": \"x\"}}]", "stubs[0].match.when: needs_scenario: \"x\" (docs/routes.md)"},
      {"[{\"match\": {\"path\": \"/a\", \"scenario\": 1}}]", "stubs[0].match.scenario: wrong_type: must be a string"},
      {"[{\"match\": {\"path\": \"/a\"},\n \"response\": {\"delay\": {\"uniform\": [9, 3]}}}]",
       "stubs[0].response.delay: min_above_max: the lower end is above the upper end"},
      {"[{\"match\": {\"path\": \"/a\"},\n \"response\": {\"delay\": {\"lognormal\": [9, 0]}}}]",
       "stubs[0].response.delay: out_of_range: milliseconds from 0 to 3600000, a sigma above 0 and at most 10"},
      {"[{\"match\": {\"path\": \"/a\"},\n \"response\": {\"delay\": 3, \"delay_ms\": 3}}]",
       "stubs[0].response.delay_ms: conflict: give delay or delay_ms, not both"},
      {"[{\"match\": {\"path\": \"/a\"},\n \"response\": {\"template\": true, \"body\": \"{{x}}\"}}]",
       "stubs[0].response.body: bad_template: \"{{x}}\" (docs/routes.md)"},
      {"[{\"match\": {\"path\": \"/a\"},\n \"response\": {\"template\": 1}}]",
       "stubs[0].response.template: wrong_type: must be true or false"},
  };
  cb_server_t *srv = start2();
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char msg[1024] = "";
    ASSERT_EQ(load_json(srv, cases[i].text, msg, sizeof msg), -1);
    const char *m = strstr(msg, ": stubs");
    ASSERT_NOT_NULL(m);
    ASSERT_STR_EQ(m + 2, cases[i].msg);
  }
  test_stop(srv);
}
