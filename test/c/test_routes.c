/* Routes as data (issue 9): stubs added, matched, answered and removed at run time, over HTTP/1.1 and h2c,
 * byte for byte; bad stubs; the route table swapped under load; down and up. The journal has its own file
 * (test_journal.c). */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#include "common.h"
#include "h2client.h"
#include "testing.h"

static cb_server_t *start_threads(int threads) {
  cb_config_t cfg;
  test_config(&cfg);
  cfg.threads = threads;
  return test_start(&cfg);
}

static uint64_t add(cb_server_t *srv, const cb_stub_t *st) {
  uint64_t id = 0;
  ASSERT_ERR(cb_server_route_add(srv, st, &id), 0);
  ASSERT_GT(id, 0);
  return id;
}

/* A stub answering `status` with a body and no headers of its own. */
static cb_stub_t simple(unsigned methods, const char *path, int status, const char *body) {
  cb_stub_t st;
  memset(&st, 0, sizeof st);
  st.match.methods = methods;
  st.match.path = (cb_str_t){path, strlen(path)};
  st.response.status = status;
  st.response.body_kind = CB_BODY_BYTES;
  st.response.body = (cb_str_t){body, strlen(body)};
  return st;
}

/* The expected HTTP/1.1 answer: a head with `extra` header lines and content-length, then the body. */
static void exp_simple(buf_t *b, int status, const char *extra, const char *body, int head) {
  exp_head(b, status, NULL, extra, (long)strlen(body), CONN_NONE);
  if (!head) buf_adds(b, body);
}

/* One request on a new HTTP/1.1 connection (req: the head lines after the request line, may be ""). */
static void h1_check(int port, const char *method, const char *target, const char *hdrs, const buf_t *exp) {
  buf_t req = {0};
  buf_addf(&req, "%s %s HTTP/1.1\r\nhost: 127.0.0.1\r\n%s\r\n", method, target, hdrs);
  cbt_log("h1 %s %s", method, target);
  int fd = cl_connect(port);
  ROUNDTRIP(fd, req.p, req.len, exp);
  EXPECT_QUIET(fd, 20);
  close(fd);
  buf_free(&req);
}

/* The same request over h2c (prior knowledge), compared with the HTTP/2 form of the HTTP/1.1 expectation. */
static h2resp_t *h2_check_on(h2cl_t *cl, int32_t sid, const char *method, const char *target,
                             const char *const *extra, size_t nextra, const buf_t *exp) {
  buf_t head = {0}, body = {0};
  char what[256];
  h2resp_t *r = h2_request(cl, sid, method, target, extra, nextra, NULL, 0);
  h2_wait1(cl, r, 15000);
  h2_expect_from_h1(exp, &head, &body);
  snprintf(what, sizeof what, "h2 %s %s", method, target);
  h2_assert_resp(r, &head, &body, what);
  buf_free(&head);
  buf_free(&body);
  return r;
}

static void h2_check(int port, const char *method, const char *target, const char *const *extra, size_t nextra,
                     const buf_t *exp) {
  h2cl_t *cl = h2_open(port);
  h2_handshake(cl);
  h2_check_on(cl, 1, method, target, extra, nextra, exp);
  h2_free(cl);
}

/* Both protocols. h1hdrs and the h2 extra list name the same request headers. */
static void both(int port, const char *method, const char *target, const char *h1hdrs, const char *const *extra,
                 size_t nextra, const buf_t *exp) {
  h1_check(port, method, target, h1hdrs, exp);
  h2_check(port, method, target, extra, nextra, exp);
}

/* ---- a stub, every part of it ---- */

TEST(routes_stub_answers_byte_for_byte) {
  cb_server_t *srv = start_threads(1);
  int port = cb_server_port(srv);
  static const cb_header_t hdrs[] = {{CB_S("Content-Type"), CB_S("application/json")},
                                     {CB_S("x-trace"), CB_S("a")},
                                     {CB_S("x-trace"), CB_S("b")}};
  cb_stub_t st = simple(CB_METHOD_GET, "/api/users/42", 201, "{\"id\":42}");
  st.response.headers = hdrs;
  st.response.nheaders = 3;
  add(srv, &st);
  buf_t exp = {0};
  const char *extra = "content-type: application/json\r\nx-trace: a\r\nx-trace: b\r\n";
  exp_simple(&exp, 201, extra, "{\"id\":42}", 0);
  both(port, "GET", "/api/users/42", "", NULL, 0, &exp);
  buf_reset(&exp);
  exp_simple(&exp, 201, extra, "{\"id\":42}", 1); /* HEAD: the GET's head, no body */
  both(port, "HEAD", "/api/users/42", "", NULL, 0, &exp);
  buf_reset(&exp);
  exp_head(&exp, 405, NULL, "allow: GET, HEAD\r\n", 0, CONN_NONE);
  both(port, "POST", "/api/users/42", "content-length: 0\r\n", NULL, 0, &exp);
  buf_reset(&exp);
  exp_near404(&exp, "GET", "/api/users/43", "  stub_1 (id 1): path\n", CONN_NONE);
  both(port, "GET", "/api/users/43", "", NULL, 0, &exp);
  buf_free(&exp);
  test_stop(srv);
}

/* HTTP/1.1 reuses the heads it made (a per-worker memo): stubs with different headers but the same status and
 * length, and stubs with the same headers, asked in turn on one connection of one worker, each get their own
 * head; and a streamed head made for an HTTP/1.1 client that closes (chunked) is not the one an HTTP/1.0 client
 * gets for the same route (no chunked coding there). */
TEST(routes_head_memo_keys) {
  cb_server_t *srv = start_threads(1);
  int port = cb_server_port(srv);
  /* More stubs than the memo has slots (pigeonhole: some share a slot), each with its own header, and two
   * more with the headers of the first (names lowercased as sent). */
  enum { N = 12 };
  char names[N + 2][16], values[N + 2][16], paths[N + 2][24], lines[N + 2][40];
  cb_header_t hdrs[N + 2];
  for (int i = 0; i < N + 2; i++) {
    int v = i < N ? i : 0;
    snprintf(names[i], sizeof names[i], i == N ? "X-Memo" : "x-memo");
    snprintf(values[i], sizeof values[i], "%d", v);
    snprintf(paths[i], sizeof paths[i], "/memo/%d", i);
    snprintf(lines[i], sizeof lines[i], "x-memo: %d\r\n", v);
    hdrs[i] = (cb_header_t){{names[i], strlen(names[i])}, {values[i], strlen(values[i])}};
    cb_stub_t st = simple(CB_METHOD_GET, paths[i], 200, "same");
    st.response.headers = &hdrs[i];
    st.response.nheaders = 1;
    add(srv, &st);
  }
  int fd = cl_connect(port);
  for (int k = 0; k < 3 * (N + 2); k++) {
    int i = (k * 5) % (N + 2);
    buf_t req = {0}, exp = {0};
    buf_addf(&req, "GET %s HTTP/1.1\r\nhost: x\r\n\r\n", paths[i]);
    exp_simple(&exp, 200, lines[i], "same", 0);
    cbt_log("GET %s", paths[i]);
    ROUNDTRIP(fd, req.p, req.len, &exp);
    buf_free(&req);
    buf_free(&exp);
  }
  close(fd);

  buf_t got = {0};
  for (int round = 0; round < 2; round++) {
    fd = cl_connect(port);
    cl_sends(fd, "GET /stream/small HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    buf_reset(&got);
    ASSERT_EQ(cl_read_close(fd, &got, 10000), CL_EOF);
    close(fd);
    mask_dates(got.p, got.len);
    const char *h11 = "HTTP/1.1 200 OK\r\ndate: " DATE_MASK "\r\n"
                      "content-type: application/octet-stream\r\ntransfer-encoding: chunked\r\n"
                      "connection: close\r\n\r\n";
    ASSERT_GE(got.len, strlen(h11));
    ASSERT_MEM_EQ(got.p, strlen(h11), h11, strlen(h11));
    fd = cl_connect(port);
    cl_sends(fd, "GET /stream/small HTTP/1.0\r\n\r\n");
    buf_reset(&got);
    ASSERT_EQ(cl_read_close(fd, &got, 10000), CL_EOF);
    close(fd);
    mask_dates(got.p, got.len);
    const char *h10 = "HTTP/1.1 200 OK\r\ndate: " DATE_MASK "\r\n"
                      "content-type: application/octet-stream\r\nconnection: close\r\n\r\n";
    ASSERT_GE(got.len, strlen(h10));
    ASSERT_MEM_EQ(got.p, strlen(h10), h10, strlen(h10));
  }
  buf_free(&got);
  test_stop(srv);
}

/* ---- matchers ---- */

typedef struct {
  const char *method, *target, *h1hdrs;
  const char *h2name, *h2value; /* one request header over h2, or NULL */
  int status;
  const char *body;  /* NULL: empty; for a 404, the near misses' lines (exp_near404) */
  const char *extra; /* expected header lines (allow) */
} case_t;

static void run_cases(int port, const case_t *cs, size_t n) {
  for (size_t i = 0; i < n; i++) {
    buf_t exp = {0};
    const case_t *c = &cs[i];
    if (c->status == 404) /* body: the near misses' lines */
      exp_near404(&exp, c->method, c->target, c->body ? c->body : "", CONN_NONE);
    else
      exp_simple(&exp, c->status, c->extra, c->body ? c->body : "", !strcmp(c->method, "HEAD"));
    const char *extra[2] = {c->h2name, c->h2value};
    both(port, c->method, c->target, c->h1hdrs ? c->h1hdrs : "", extra, c->h2name ? 1 : 0, &exp);
    buf_free(&exp);
  }
}

TEST_T(routes_matchers, 60000) {
  cb_server_t *srv = start_threads(1);
  int port = cb_server_port(srv);
  cb_stub_t st;
  st = simple(CB_METHOD_GET, "/files/*", 200, "prefix");
  add(srv, &st);
  st = simple(CB_METHOD_GET, "/users/{id}/posts/{post}", 200, "params");
  add(srv, &st);
  /* Header matchers: present, or equal; the most specific stub gets a higher priority. */
  st = simple(CB_METHOD_GET, "/h", 200, "plain");
  add(srv, &st);
  static const cb_matcher_t has_key[] = {{CB_S("X-Key"), {NULL, 0}}};
  st = simple(CB_METHOD_GET, "/h", 200, "keyed");
  st.match.headers = has_key;
  st.match.nheaders = 1;
  st.match.priority = 5;
  add(srv, &st);
  static const cb_matcher_t key_v1[] = {{CB_S("x-key"), CB_S("v1")}};
  st = simple(CB_METHOD_GET, "/h", 200, "v1");
  st.match.headers = key_v1;
  st.match.nheaders = 1;
  st.match.priority = 10;
  add(srv, &st);
  /* Query matchers compare decoded names and values. */
  static const cb_matcher_t q[] = {{CB_S("a"), CB_S("1 2")}, {CB_S("flag"), {NULL, 0}}};
  st = simple(CB_METHOD_GET, "/q", 200, "query");
  st.match.query = q;
  st.match.nquery = 2;
  add(srv, &st);
  /* Methods: 405 allow is the union of the routes whose path matched. */
  st = simple(CB_METHOD_PUT, "/m", 200, "put");
  add(srv, &st);
  st = simple(CB_METHOD_DELETE | CB_METHOD_PATCH, "/m", 200, "delete");
  add(srv, &st);
  st = simple(0, "/any", 200, "any method");
  add(srv, &st);
  /* Newest first among equal priorities; a higher priority beats newer. */
  st = simple(CB_METHOD_GET, "/order", 200, "old");
  add(srv, &st);
  st = simple(CB_METHOD_GET, "/order", 200, "new");
  add(srv, &st);
  st = simple(CB_METHOD_GET, "/prio", 200, "high");
  st.match.priority = 1;
  add(srv, &st);
  st = simple(CB_METHOD_GET, "/prio", 200, "newer but low");
  add(srv, &st);
  /* A stub in front of a fixture route. */
  st = simple(CB_METHOD_GET, "/json", 200, "stubbed json");
  add(srv, &st);

  /* A 404 lists the three closest stubs: the path weighs 4, a header or query matcher 1; equal scores in
   * matching order (/prio's priority 1 first, then the newest). */
#define P2 "  stub_12 (id 12): path\n  stub_14 (id 14): path\n"
#define P3 P2 "  stub_13 (id 13): path\n"
  static const case_t cases[] = {
      {"GET", "/files/a/b.txt", NULL, NULL, NULL, 200, "prefix", NULL},
      {"GET", "/files/", NULL, NULL, NULL, 200, "prefix", NULL},
      {"GET", "/files", NULL, NULL, NULL, 404, P3, NULL},
      {"GET", "/users/7/posts/9", NULL, NULL, NULL, 200, "params", NULL},
      {"GET", "/users/7/posts/9?x=1", NULL, NULL, NULL, 200, "params", NULL},
      {"GET", "/users//posts/9", NULL, NULL, NULL, 404, P3, NULL},
      {"GET", "/users/7/posts", NULL, NULL, NULL, 404, P3, NULL},
      {"GET", "/users/7/posts/9/x", NULL, NULL, NULL, 404, P3, NULL},
      {"GET", "/h", NULL, NULL, NULL, 200, "plain", NULL},
      {"GET", "/h", "x-key: other\r\n", "x-key", "other", 200, "keyed", NULL},
      {"GET", "/h", "X-KEY: v1\r\n", "x-key", "v1", 200, "v1", NULL},
      {"GET", "/q?a=1+2&flag", NULL, NULL, NULL, 200, "query", NULL},
      {"GET", "/q?flag=&a=1%202", NULL, NULL, NULL, 200, "query", NULL},
      {"GET", "/q?a=12&flag", NULL, NULL, NULL, 404, "  stub_6 (id 6): query a\n" P2, NULL},
      {"GET", "/q?a=1+2", NULL, NULL, NULL, 404, "  stub_6 (id 6): query flag\n" P2, NULL},
      {"GET", "/q", NULL, NULL, NULL, 404, "  stub_6 (id 6): query a, query flag\n" P2, NULL}, /* no query at all */
      {"PUT", "/m", "content-length: 0\r\n", NULL, NULL, 200, "put", NULL},
      {"PATCH", "/m", "content-length: 0\r\n", NULL, NULL, 200, "delete", NULL},
      {"GET", "/m", NULL, NULL, NULL, 405, NULL, "allow: PUT, DELETE, PATCH\r\n"},
      {"OPTIONS", "/any", NULL, NULL, NULL, 200, "any method", NULL},
      {"DELETE", "/any", NULL, NULL, NULL, 200, "any method", NULL},
      {"GET", "/order", NULL, NULL, NULL, 200, "new", NULL},
      {"GET", "/prio", NULL, NULL, NULL, 200, "high", NULL},
      {"GET", "/json", NULL, NULL, NULL, 200, "stubbed json", NULL},
      {"HEAD", "/json", NULL, NULL, NULL, 200, "stubbed json", NULL},
      {"GET", "/nothing/here", NULL, NULL, NULL, 404, P3, NULL},
  };
#undef P2
#undef P3
  run_cases(port, cases, sizeof cases / sizeof cases[0]);
  test_stop(srv);
}

/* ---- response kinds ---- */

static void write_file(const char *path, size_t n) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  for (size_t i = 0; i < n; i++) {
    char ch = (char)('a' + i % 26);
    ASSERT_EQ(write(fd, &ch, 1), 1);
  }
  close(fd);
}

TEST_T(routes_body_kinds, 60000) {
  cb_server_t *srv = start_threads(1);
  int port = cb_server_port(srv);
  cb_stub_t st;
  st = simple(CB_METHOD_GET, "/gen", 200, "");
  st.response.body_kind = CB_BODY_GENERATED;
  st.response.body_size = 100000;
  add(srv, &st);
  char path[256];
  snprintf(path, sizeof path, "%s/cbench-stub-file-%d", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
  write_file(path, 70000);
  st = simple(CB_METHOD_GET, "/file", 200, "");
  st.response.body_kind = CB_BODY_FILE;
  st.response.body = (cb_str_t){path, strlen(path)};
  add(srv, &st);
  unlink(path); /* opened and mapped at add time: the stub keeps serving it */
  st = simple(CB_METHOD_GET, "/small-file", 200, "");
  write_file(path, 100);
  st.response.body_kind = CB_BODY_FILE;
  st.response.body = (cb_str_t){path, strlen(path)};
  add(srv, &st);
  unlink(path);
  char big_path[sizeof path + 8]; /* path and ".big": never truncated (gcc -O1 checks) */
  snprintf(big_path, sizeof big_path, "%s.big", path);
  write_file(big_path, 1200000); /* over 1 MiB: sent with sendfile from the open file */
  st = simple(CB_METHOD_GET, "/big-file", 200, "");
  st.response.body_kind = CB_BODY_FILE;
  st.response.body = (cb_str_t){big_path, strlen(big_path)};
  add(srv, &st);
  st = simple(CB_METHOD_GET, "/empty", 200, "");
  add(srv, &st);
  st = simple(CB_METHOD_GET, "/nocontent", 204, "");
  add(srv, &st);

  buf_t exp = {0};
  exp_head(&exp, 200, NULL, NULL, 100000, CONN_NONE);
  exp_file_bytes(&exp, 100000);
  both(port, "GET", "/gen", "", NULL, 0, &exp);
  buf_reset(&exp);
  exp_head(&exp, 200, NULL, NULL, 70000, CONN_NONE);
  for (size_t i = 0; i < 70000; i++) buf_add(&exp, &(char){(char)('a' + i % 26)}, 1);
  both(port, "GET", "/file", "", NULL, 0, &exp);
  buf_reset(&exp);
  exp_head(&exp, 200, NULL, NULL, 100, CONN_NONE);
  for (size_t i = 0; i < 100; i++) buf_add(&exp, &(char){(char)('a' + i % 26)}, 1);
  both(port, "GET", "/small-file", "", NULL, 0, &exp);
  buf_reset(&exp);
  exp_head(&exp, 200, NULL, NULL, 1200000, CONN_NONE);
  for (size_t i = 0; i < 1200000; i++) buf_add(&exp, &(char){(char)('a' + i % 26)}, 1);
  both(port, "GET", "/big-file", "", NULL, 0, &exp);
  /* Someone truncates it: the answers that reach past the new end are cut short, the server goes on. */
  ASSERT_EQ(truncate(big_path, 1000), 0);
  int fd = cl_connect(port);
  cl_sends(fd, "GET /big-file HTTP/1.1\r\n\r\n");
  buf_t got = {0};
  int r = cl_read_close(fd, &got, 10000);
  ASSERT(r == CL_EOF || r == CL_RESET);
  ASSERT_LT(got.len, exp.len);
  close(fd);
  buf_free(&got);
  h2cl_t *cl = h2_open(port);
  h2_handshake(cl);
  h2_request(cl, 1, "GET", "/big-file", NULL, 0, NULL, 0);
  ASSERT(h2_wait_closed(cl, 10000) != CL_TIMEOUT);
  h2_free(cl);
  unlink(big_path);
  buf_reset(&exp);
  exp_route(&exp, "GET", "/hello", CONN_NONE);
  both(port, "GET", "/hello", "", NULL, 0, &exp);
  buf_reset(&exp);
  exp_head(&exp, 200, NULL, NULL, 0, CONN_NONE);
  both(port, "GET", "/empty", "", NULL, 0, &exp);
  buf_reset(&exp);
  exp_head(&exp, 204, NULL, NULL, CL_NONE, CONN_NONE);
  both(port, "GET", "/nocontent", "", NULL, 0, &exp);
  buf_free(&exp);
  test_stop(srv);
}

/* Pieces: one chunk each over HTTP/1.1, their own DATA frames over h2c. */
TEST_T(routes_chunks_delay_times, 60000) {
  cb_server_t *srv = start_threads(2);
  int port = cb_server_port(srv);
  cb_stub_t st;
  st = simple(CB_METHOD_GET, "/chunks", 200, "abcdefghij");
  st.response.chunks = 3;
  add(srv, &st);
  st = simple(CB_METHOD_GET, "/paced", 200, "abcdefghij");
  st.response.chunks = 3;
  st.response.interval_ms = 20;
  st.response.delay_ms = 30;
  add(srv, &st);
  st = simple(CB_METHOD_GET, "/genchunks", 200, "");
  st.response.body_kind = CB_BODY_GENERATED;
  st.response.body_size = 40000;
  st.response.chunks = 2;
  add(srv, &st);
  st = simple(CB_METHOD_GET, "/twice", 200, "fallback");
  add(srv, &st);
  st = simple(CB_METHOD_GET, "/twice", 200, "limited");
  st.response.times = 2;
  add(srv, &st);

  buf_t exp = {0};
  exp_head(&exp, 200, NULL, NULL, CL_CHUNKED, CONN_NONE);
  exp_chunk(&exp, "abc", 3);
  exp_chunk(&exp, "def", 3);
  exp_chunk(&exp, "ghij", 4);
  exp_last_chunk(&exp);
  h1_check(port, "GET", "/chunks", "", &exp);
  h1_check(port, "GET", "/paced", "", &exp);
  h2cl_t *cl = h2_open(port);
  h2_handshake(cl);
  h2resp_t *r = h2_check_on(cl, 1, "GET", "/chunks", NULL, 0, &exp);
  ASSERT_EQ(r->ndata, 3);
  r = h2_check_on(cl, 3, "GET", "/paced", NULL, 0, &exp);
  ASSERT_EQ(r->ndata, 3);
  buf_reset(&exp);
  exp_head(&exp, 200, NULL, NULL, CL_CHUNKED, CONN_NONE);
  buf_t gen = {0};
  exp_file_bytes(&gen, 40000);
  exp_chunk(&exp, gen.p, 20000);
  exp_chunk(&exp, gen.p + 20000, 20000);
  exp_last_chunk(&exp);
  h1_check(port, "GET", "/genchunks", "", &exp);
  r = h2_check_on(cl, 5, "GET", "/genchunks", NULL, 0, &exp);
  ASSERT_EQ(r->ndata, 4); /* 16384 + 3616 per piece: no frame spans two pieces */
  buf_reset(&exp);
  /* times = 2, over both protocols and both workers: then the older stub answers. */
  exp_simple(&exp, 200, NULL, "limited", 0);
  h1_check(port, "GET", "/twice", "", &exp);
  h2_check_on(cl, 7, "GET", "/twice", NULL, 0, &exp);
  buf_reset(&exp);
  exp_simple(&exp, 200, NULL, "fallback", 0);
  h1_check(port, "GET", "/twice", "", &exp);
  h2_check_on(cl, 9, "GET", "/twice", NULL, 0, &exp);
  h2_free(cl);
  cb_stub_list_t *list;
  ASSERT_ERR(cb_server_stubs(srv, &list), 0);
  ASSERT_EQ(list->count, 5);
  ASSERT_STR_EQ(list->items[0].path.ptr, "/twice"); /* the newest first */
  ASSERT_EQ(list->items[0].times, 2);
  ASSERT_EQ(list->items[0].hits, 2);
  ASSERT_EQ(list->items[0].spent, 1);
  ASSERT_EQ(list->items[1].hits, 2);
  ASSERT_EQ(list->items[1].spent, 0);
  cb_stub_list_free(list);
  buf_free(&gen);
  buf_free(&exp);
  test_stop(srv);
}

/* ---- changes while connections are open ---- */

TEST(routes_add_remove_while_connected) {
  cb_server_t *srv = start_threads(2);
  int port = cb_server_port(srv);
  int fd = cl_connect(port);
  h2cl_t *cl = h2_open(port);
  h2_handshake(cl);
  buf_t e404 = {0}, e200 = {0}, ehello = {0};
  exp_head(&e404, 404, NULL, NULL, 0, CONN_NONE);
  exp_simple(&e200, 200, NULL, "live", 0);
  exp_route(&ehello, "GET", "/hello", CONN_NONE);
  static const char req[] = "GET /live HTTP/1.1\r\nhost: x\r\n\r\n";
  ROUNDTRIP_S(fd, req, &e404);
  h2_check_on(cl, 1, "GET", "/live", NULL, 0, &e404);
  cb_stub_t st = simple(CB_METHOD_GET, "/live", 200, "live");
  uint64_t id = add(srv, &st);
  ROUNDTRIP_S(fd, req, &e200);
  h2_check_on(cl, 3, "GET", "/live", NULL, 0, &e200);
  ASSERT_ERR(cb_server_route_remove(srv, id), 0);
  ASSERT_ERR(cb_server_route_remove(srv, id), UV_ENOENT);
  ROUNDTRIP_S(fd, req, &e404);
  h2_check_on(cl, 5, "GET", "/live", NULL, 0, &e404);
  /* Reset: the fixture table again, its counts kept. */
  st = simple(CB_METHOD_GET, "/hello", 200, "live");
  uint64_t id2 = add(srv, &st);
  ASSERT_GT(id2, id);
  ASSERT_EQ(route_count(srv, "hello"), 0);
  static const char hello[] = "GET /hello HTTP/1.1\r\nhost: x\r\n\r\n";
  ROUNDTRIP_S(fd, hello, &e200);
  ASSERT_ERR(cb_server_route_reset(srv), 0);
  ROUNDTRIP_S(fd, hello, &ehello);
  h2_check_on(cl, 7, "GET", "/hello", NULL, 0, &ehello);
  ASSERT_EQ(route_count(srv, "hello"), 2);
  ASSERT_EQ(route_count(srv, "not_found"), 4);
  cb_stub_list_t *list;
  ASSERT_ERR(cb_server_stubs(srv, &list), 0);
  ASSERT_EQ(list->count, 0);
  cb_stub_list_free(list);
  EXPECT_QUIET(fd, 20);
  close(fd);
  h2_free(cl);
  buf_free(&e404);
  buf_free(&e200);
  buf_free(&ehello);
  test_stop(srv);
}

TEST(routes_names_and_counts) {
  cb_server_t *srv = start_threads(2);
  int port = cb_server_port(srv);
  cb_stub_t st = simple(CB_METHOD_GET, "/a", 200, "a");
  st.name = CB_S("users");
  add(srv, &st);
  st = simple(CB_METHOD_GET, "/b", 200, "b");
  st.name = CB_S("users");
  add(srv, &st);
  st = simple(CB_METHOD_GET, "/c", 200, "c");
  uint64_t idc = add(srv, &st);
  buf_t e = {0};
  exp_simple(&e, 200, NULL, "a", 0);
  h1_check(port, "GET", "/a", "", &e);
  buf_reset(&e);
  exp_simple(&e, 200, NULL, "b", 0);
  h1_check(port, "GET", "/b", "", &e);
  buf_reset(&e);
  exp_head(&e, 405, NULL, "allow: GET, HEAD\r\n", 0, CONN_NONE);
  h1_check(port, "DELETE", "/c", "", &e);
  buf_free(&e);
  ASSERT_EQ(route_count(srv, "users"), 2);
  char name[32];
  snprintf(name, sizeof name, "stub_%llu", (unsigned long long)idc);
  ASSERT_EQ(route_count(srv, name), 1); /* the 405 counts under its route ... */
  cb_stub_list_t *list;
  ASSERT_ERR(cb_server_stubs(srv, &list), 0);
  ASSERT_EQ(list->count, 3);
  ASSERT_STR_EQ(list->items[0].name.ptr, name);
  ASSERT_EQ(list->items[0].hits, 0); /* ... but is no hit of the stub */
  ASSERT_EQ(list->items[0].methods, CB_METHOD_GET);
  ASSERT_EQ(list->items[2].hits, 1);
  cb_stub_list_free(list);
  test_stop(srv);
}

/* Every bad field is UV_EINVAL with a detail that names the field, the item, the reason and the value (escaped):
 * cb_error_detail(), the same reasons the Erlang API and cbench-server --stubs give (docs/routes.md). */
TEST(routes_bad_stubs) {
  cb_server_t *srv = start_threads(1);
  uint64_t id = 0;
  cb_stub_t st;
  const cb_error_detail_t *d;
#define BAD(expr, err_, field_, index_, why_, text_)              \
  do {                                                           \
    st = simple(CB_METHOD_GET, "/ok", 200, "x");                 \
    expr;                                                        \
    cbt_log("bad: %s", #expr);                                   \
    ASSERT_ERR(cb_server_route_add(srv, &st, &id), err_);        \
    d = cb_error_detail();                                       \
    ASSERT_EQ(d->err, err_ == UV_EINVAL ? UV_EINVAL : 0);        \
    ASSERT_STR_EQ(d->field_name, field_);                        \
    ASSERT_EQ(d->index, index_);                                 \
    ASSERT_STR_EQ(d->why_name, why_);                            \
    ASSERT_STR_EQ(d->text, text_);                               \
  } while (0)
  BAD(st.match.path = CB_S("no-slash"), UV_EINVAL, "match.path", -1, "no_leading_slash", "no-slash");
  BAD((st.match.path.ptr = NULL, st.match.path.len = 0), UV_EINVAL, "match.path", -1, "missing", "");
  BAD(st.match.path = CB_S(""), UV_EINVAL, "match.path", -1, "empty", "");
  BAD(st.match.path = CB_S("/a?b"), UV_EINVAL, "match.path", -1, "bad_char", "/a?b");
  BAD(st.match.path = CB_S("/a b"), UV_EINVAL, "match.path", -1, "bad_char", "/a b");
  BAD(st.match.path = CB_S("/a#b"), UV_EINVAL, "match.path", -1, "bad_char", "/a#b");
  BAD(st.match.path = CB_S("/caf\xc3\xa9"), UV_EINVAL, "match.path", -1, "bad_char", "/caf\\xc3\\xa9");
  BAD(st.match.path = CB_S("/a*b"), UV_EINVAL, "match.path", -1, "misplaced_star", "/a*b");
  BAD(st.match.path = CB_S("/a/{id"), UV_EINVAL, "match.path", -1, "unclosed_brace", "/a/{id");
  BAD(st.match.path = CB_S("/a/{id/x}"), UV_EINVAL, "match.path", -1, "unclosed_brace", "/a/{id/x}");
  BAD(st.match.path = CB_S("/a/id}"), UV_EINVAL, "match.path", -1, "stray_brace", "/a/id}");
  BAD(st.match.path = CB_S("/a/x{id}"), UV_EINVAL, "match.path", -1, "param_not_segment", "/a/x{id}");
  BAD(st.match.path = CB_S("/a/{}"), UV_EINVAL, "match.path", -1, "empty_param_name", "/a/{}");
  BAD(st.match.path = CB_S("/a/{i-d}"), UV_EINVAL, "match.path", -1, "bad_param_name", "/a/{i-d}");
  BAD(st.match.path = CB_S("/{a}/*"), UV_EINVAL, "match.path", -1, "star_with_param", "/{a}/*");
  BAD(st.match.path = CB_S("/a\r\nb"), UV_EINVAL, "match.path", -1, "bad_char", "/a\\r\\nb");
  BAD(st.match.path = CB_S("/{a}/{b}/{c}/{d}/{e}/{f}/{g}/{h}/{i}"), UV_EINVAL, "match.path", -1, "too_many_params",
      "/{a}/{b}/{c}/{d}/{e}/{f}/{g}/{h}/{i}");
  static char long_path[CB_MAX_PATH + 2];
  memset(long_path, 'a', sizeof long_path);
  long_path[0] = '/';
  BAD(st.match.path = ((cb_str_t){long_path, CB_MAX_PATH + 1}), UV_EINVAL, "match.path", -1, "too_long",
      "/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa...");
  BAD(st.match.methods = 1u << 12, UV_EINVAL, "match.methods", -1, "unknown_method", "4096");
  static const cb_matcher_t empty_name[] = {{CB_S("x-a"), {NULL, 0}}, {CB_S(""), {NULL, 0}}};
  BAD((st.match.headers = empty_name, st.match.nheaders = 2), UV_EINVAL, "match.headers", 1, "empty", "");
  BAD((st.match.query = empty_name, st.match.nquery = 2), UV_EINVAL, "match.query", 1, "empty", "");
  static const cb_matcher_t bad_hname[] = {{CB_S("a b"), {NULL, 0}}};
  BAD((st.match.headers = bad_hname, st.match.nheaders = 1), UV_EINVAL, "match.headers", 0, "not_a_token", "a b");
  static const cb_matcher_t edge[] = {{CB_S("x-a"), CB_S("v ")}};
  BAD((st.match.headers = edge, st.match.nheaders = 1), UV_EINVAL, "match.headers", 0, "edge_space", "v ");
  BAD(st.match.nheaders = 1, UV_EINVAL, "match.headers", -1, "null_pointer", "1"); /* headers NULL */
  static cb_matcher_t many[CB_MAX_MATCHERS + 1];
  for (int i = 0; i <= CB_MAX_MATCHERS; i++) many[i] = (cb_matcher_t){CB_S("q"), {NULL, 0}};
  BAD((st.match.query = many, st.match.nquery = CB_MAX_MATCHERS + 1), UV_EINVAL, "match.query", -1, "too_many", "33");
  BAD(st.response.status = 199, UV_EINVAL, "response.status", -1, "out_of_range", "199");
  BAD(st.response.status = 600, UV_EINVAL, "response.status", -1, "out_of_range", "600");
  BAD(st.response.status = 204, UV_EINVAL, "response.status", -1, "body_not_allowed", "204"); /* with a body */
  static const cb_header_t cl[] = {{CB_S("x-a"), CB_S("1")}, {CB_S("Content-Length"), CB_S("5")}};
  BAD((st.response.headers = cl, st.response.nheaders = 2), UV_EINVAL, "response.headers", 1, "forbidden_header",
      "Content-Length");
  static const cb_header_t crlf[] = {{CB_S("x-a"), CB_S("a\r\nb: \"c\"\\")}};
  BAD((st.response.headers = crlf, st.response.nheaders = 1), UV_EINVAL, "response.headers", 0, "control_char",
      "a\\r\\nb: \\\"c\\\"\\\\");
  static const cb_header_t nul[] = {{CB_S("x-a"), {"a\0b", 3}}};
  BAD((st.response.headers = nul, st.response.nheaders = 1), UV_EINVAL, "response.headers", 0, "control_char",
      "a\\x00b");
  static const cb_header_t badname[] = {{CB_S("x:a"), CB_S("1")}};
  BAD((st.response.headers = badname, st.response.nheaders = 1), UV_EINVAL, "response.headers", 0, "not_a_token",
      "x:a");
  static char big[8193];
  memset(big, 'v', sizeof big);
  static cb_header_t bigh[1];
  bigh[0] = (cb_header_t){CB_S("x-big"), {big, sizeof big}};
  BAD((st.response.headers = bigh, st.response.nheaders = 1), UV_EINVAL, "response.headers", 0, "too_long",
      "vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv...");
  static cb_header_t lots[CB_MAX_HEADERS];
  for (int i = 0; i < CB_MAX_HEADERS; i++) lots[i] = (cb_header_t){CB_S("x-big"), {big, 8192}};
  BAD((st.response.headers = lots, st.response.nheaders = 9), UV_EINVAL, "response.headers", -1, "too_long", "73773");
  BAD(st.response.chunks = 2, UV_EINVAL, "response.chunks", -1, "chunks_exceed_body", "2"); /* more pieces than bytes */
  BAD(st.response.chunks = 1000001, UV_EINVAL, "response.chunks", -1, "out_of_range", "1000001");
  BAD(st.response.interval_ms = 3600001, UV_EINVAL, "response.interval_ms", -1, "out_of_range", "3600001");
  BAD(st.response.body_kind = (cb_body_kind)7, UV_EINVAL, "response.body", -1, "out_of_range", "7");
  BAD((st.response.body_kind = CB_BODY_FILE, st.response.body = CB_S("/nonexistent/cbench")), UV_ENOENT, "none", -1,
      "none", "");
  BAD((st.response.body_kind = CB_BODY_FILE, st.response.body = CB_S("/")), UV_EISDIR, "none", -1, "none", "");
  BAD((st.response.body_kind = CB_BODY_FILE, st.response.body = CB_S("/dev/null")), UV_EINVAL, "response.body", -1,
      "not_regular", "/dev/null");
  BAD((st.response.body_kind = CB_BODY_FILE, st.response.body = CB_S("")), UV_EINVAL, "response.body", -1, "empty", "");
  BAD(st.response.delay_ms = 3600001, UV_EINVAL, "response.delay_ms", -1, "out_of_range", "3600001");
  BAD(st.response.fault = CB_S("reset?at=nowhere"), UV_EINVAL, "response.fault", -1, "bad_fault", "reset?at=nowhere");
  BAD(st.name = CB_S("with space"), UV_EINVAL, "name", -1, "bad_char", "with space");
  BAD(st.name = CB_S(""), UV_EINVAL, "name", -1, "empty", "");
  /* A good stub clears the detail of the bad one before it. */
  st = simple(CB_METHOD_GET, "/ok", 200, "x");
  ASSERT_ERR(cb_server_route_add(srv, &st, &id), 0);
  ASSERT_EQ(cb_error_detail()->err, 0);
  ASSERT_EQ(cb_error_detail()->field, CB_FIELD_NONE);
  ASSERT_ERR(cb_server_route_remove(srv, id), 0);
#undef BAD
  ASSERT_ERR(cb_server_route_add(NULL, &st, &id), UV_EINVAL);
  ASSERT_EQ(cb_error_detail()->field, CB_FIELD_NONE); /* not a field: no detail */
  ASSERT_ERR(cb_server_route_add(srv, NULL, &id), UV_EINVAL);
  ASSERT_ERR(cb_server_route_remove(srv, 12345), UV_ENOENT);
  cb_stub_list_t *list;
  ASSERT_ERR(cb_server_stubs(srv, &list), 0);
  ASSERT_EQ(list->count, 0); /* nothing half-added */
  cb_stub_list_free(list);
  buf_t e = {0};
  exp_route(&e, "GET", "/hello", CONN_NONE);
  h1_check(cb_server_port(srv), "GET", "/hello", "", &e);
  buf_free(&e);
  test_stop(srv);
}

/* Every field and reason has its name; a reason's name is its enum name in lowercase (the Erlang atom, which
 * test/cbench_stub_SUITE.erl checks against cbench_spec:whys() by reading this header's CB_WHY_ names). */
TEST(routes_detail_names) {
  for (int i = 0; i < CB_WHY_COUNT; i++) ASSERT(strcmp(cb_why_name(i), "?") != 0);
  for (int i = 0; i < CB_FIELD_COUNT; i++) ASSERT(strcmp(cb_field_name(i), "?") != 0);
  ASSERT_STR_EQ(cb_why_name(CB_WHY_COUNT), "?");
  ASSERT_STR_EQ(cb_why_name(-1), "?");
  ASSERT_STR_EQ(cb_why_name(CB_WHY_NOT_A_TOKEN), "not_a_token");
  ASSERT_STR_EQ(cb_why_name(CB_WHY_TOO_MANY_PARAMS), "too_many_params");
  ASSERT_STR_EQ(cb_field_name(CB_FIELD_MATCH_QUERY), "match.query");
  /* A thread that never added a stub reads an empty detail, not garbage. */
  ASSERT_EQ(cb_error_detail()->err, 0);
  ASSERT_STR_EQ(cb_error_detail()->why_name, "none");
}

/* A thousand routes: each answers, and a lookup among them stays right. */
TEST_T(routes_thousand, 60000) {
  cb_server_t *srv = start_threads(1);
  int port = cb_server_port(srv);
  char path[64], body[64];
  for (int i = 0; i < 1000; i++) {
    snprintf(path, sizeof path, i % 3 == 0 ? "/r%d" : i % 3 == 1 ? "/api/r%d" : "/p/{x}/r%d", i);
    snprintf(body, sizeof body, "route %d", i);
    cb_stub_t st = simple(CB_METHOD_GET, path, 200, body);
    add(srv, &st);
  }
  int fd = cl_connect(port);
  for (int i = 0; i < 1000; i += 7) {
    buf_t e = {0}, req = {0};
    snprintf(path, sizeof path, i % 3 == 0 ? "/r%d" : i % 3 == 1 ? "/api/r%d" : "/p/any/r%d", i);
    snprintf(body, sizeof body, "route %d", i);
    exp_simple(&e, 200, NULL, body, 0);
    buf_addf(&req, "GET %s HTTP/1.1\r\nhost: x\r\n\r\n", path);
    ROUNDTRIP(fd, req.p, req.len, &e);
    buf_free(&e);
    buf_free(&req);
  }
  close(fd);
  test_stop(srv);
}

/* ---- socket-less: the same code path under test_proto's feeding ---- */

typedef struct {
  buf_t out;
} sinkbuf_t;

static void sink(void *arg, const char *data, size_t len) { buf_add(&((sinkbuf_t *)arg)->out, data, len); }

TEST(routes_socketless_stub_split_reads) {
  static const char req[] = "GET /users/5?x=1 HTTP/1.1\r\nHost: x\r\nX-Tenant: acme\r\n\r\n";
  buf_t exp = {0};
  exp_simple(&exp, 200, "x-a: 1\r\n", "tenant acme", 0);
  for (size_t split = 0; split < sizeof req - 1; split += 3) {
    sinkbuf_t s = {{0}};
    cb_config_t cfg;
    cb_config_init(&cfg);
    cb__testconn_t *tc = cb__testconn_new(&cfg, sink, &s);
    ASSERT_NOT_NULL(tc);
    static const cb_matcher_t tenant[] = {{CB_S("x-tenant"), CB_S("acme")}};
    static const cb_header_t xa[] = {{CB_S("X-A"), CB_S("1")}};
    cb_stub_t st = simple(CB_METHOD_GET, "/users/{id}", 200, "tenant acme");
    st.match.headers = tenant;
    st.match.nheaders = 1;
    st.response.headers = xa;
    st.response.nheaders = 1;
    uint64_t id;
    ASSERT_ERR(cb__testconn_route_add(tc, &st, &id), 0);
    ASSERT_EQ(cb__testconn_feed(tc, req, split), 0);
    ASSERT_EQ(cb__testconn_feed(tc, req + split, sizeof req - 1 - split), 0);
    mask_dates(s.out.p, s.out.len);
    ASSERT_MEM_EQ(s.out.p, s.out.len, exp.p, exp.len);
    ASSERT_EQ(cb__testconn_free(tc), 0);
    buf_free(&s.out);
  }
  buf_free(&exp);
}

/* A worker remembers the exact route that answered its last request when it was the only thing to check (the
 * first candidate for the path, no header or query matcher, no `times`): requests that take it, and those that
 * must not (another method, another path of the same length, a spent stub), in one sequence on one worker. */
TEST(routes_socketless_last_route) {
  sinkbuf_t s = {{0}};
  cb_config_t cfg;
  cb_config_init(&cfg);
  cb__testconn_t *tc = cb__testconn_new(&cfg, sink, &s);
  ASSERT_NOT_NULL(tc);
  cb_stub_t post = simple(CB_METHOD_POST, "/m", 200, "post");
  cb_stub_t get = simple(CB_METHOD_GET, "/m", 200, "get"); /* newer: first for /m */
  cb_stub_t once = simple(CB_METHOD_GET, "/t", 200, "once");
  once.response.times = 1;
  static const cb_matcher_t xk[] = {{CB_S("x-k"), CB_S("1")}};
  cb_stub_t keyed = simple(CB_METHOD_GET, "/k", 200, "keyed");
  keyed.match.headers = xk;
  keyed.match.nheaders = 1;
  cb_stub_t plain = simple(CB_METHOD_GET, "/k", 200, "plain"); /* older: after the keyed one */
  uint64_t id;
  ASSERT_ERR(cb__testconn_route_add(tc, &plain, &id), 0);
  ASSERT_ERR(cb__testconn_route_add(tc, &keyed, &id), 0);
  ASSERT_ERR(cb__testconn_route_add(tc, &post, &id), 0);
  ASSERT_ERR(cb__testconn_route_add(tc, &get, &id), 0);
  ASSERT_ERR(cb__testconn_route_add(tc, &once, &id), 0);
  static const struct {
    const char *req;
    int status;
    const char *body; /* a 404: the target */
    int head;
    const char *near; /* a 404: the near misses' lines */
  } steps[] = {
      {"GET /m HTTP/1.1\r\nhost: x\r\n\r\n", 200, "get", 0, NULL},
      {"GET /m HTTP/1.1\r\nhost: x\r\n\r\n", 200, "get", 0, NULL},
      {"POST /m HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n", 200, "post", 0, NULL},
      {"HEAD /m HTTP/1.1\r\nhost: x\r\n\r\n", 200, "get", 1, NULL},
      {"GET /n HTTP/1.1\r\nhost: x\r\n\r\n", 404, "/n", 0,
       "  stub_5 (id 5): path\n  stub_4 (id 4): path\n  stub_1 (id 1): path\n"},
      {"GET /m HTTP/1.1\r\nhost: x\r\n\r\n", 200, "get", 0, NULL},
      {"GET /t HTTP/1.1\r\nhost: x\r\n\r\n", 200, "once", 0, NULL},
      {"GET /t HTTP/1.1\r\nhost: x\r\n\r\n", 404, "/t", 0, /* every part matched: spent */
       "  stub_5 (id 5): unavailable (spent, or another scenario state)\n  stub_4 (id 4): path\n  stub_1 (id 1): path\n"},
      {"GET /k HTTP/1.1\r\nhost: x\r\n\r\n", 200, "plain", 0, NULL},
      {"GET /k HTTP/1.1\r\nhost: x\r\nx-k: 1\r\n\r\n", 200, "keyed", 0, NULL},
      {"GET /k HTTP/1.1\r\nhost: x\r\n\r\n", 200, "plain", 0, NULL},
      {"DELETE /m HTTP/1.1\r\nhost: x\r\n\r\n", 405, "", 0, NULL},
  };
  for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
    buf_t exp = {0};
    if (steps[i].status == 404)
      exp_near404(&exp, "GET", steps[i].body, steps[i].near, CONN_NONE);
    else if (steps[i].status == 405)
      exp_head(&exp, 405, NULL, "allow: GET, HEAD, POST\r\n", 0, CONN_NONE);
    else
      exp_simple(&exp, steps[i].status, "", steps[i].body, steps[i].head);
    buf_reset(&s.out);
    ASSERT_EQ(cb__testconn_feed(tc, steps[i].req, strlen(steps[i].req)), 0);
    mask_dates(s.out.p, s.out.len);
    cbt_log("step %zu: %s", i, steps[i].req);
    ASSERT_MEM_EQ(s.out.p, s.out.len, exp.p, exp.len);
    buf_free(&exp);
  }
  ASSERT_EQ(cb__testconn_free(tc), 0);
  buf_free(&s.out);
}

/* ---- down and up ---- */

TEST(routes_down_up) {
  cb_server_t *srv = start_threads(2);
  int port = cb_server_port(srv);
  int fd = cl_connect(port);
  buf_t e = {0};
  exp_route(&e, "GET", "/hello", CONN_NONE);
  static const char hello[] = "GET /hello HTTP/1.1\r\nhost: x\r\n\r\n";
  ROUNDTRIP_S(fd, hello, &e);
  cb_stub_t st = simple(CB_METHOD_GET, "/kept", 200, "kept");
  add(srv, &st);
  ASSERT_ERR(cb_server_down(srv), 0);
  ASSERT_ERR(cb_server_down(srv), 0); /* already down */
  /* The open connection was closed, and nobody listens. */
  buf_t rest = {0};
  int r = cl_read_close(fd, &rest, 5000);
  ASSERT(r == CL_EOF || r == CL_RESET);
  ASSERT_EQ(rest.len, 0);
  close(fd);
  fd = cl_socket();
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  ASSERT_EQ(connect(fd, (struct sockaddr *)&sa, sizeof sa), -1);
  ASSERT_EQ(errno, ECONNREFUSED);
  close(fd);
  /* Someone takes the port meanwhile: up says so and the server stays down. */
  int other = socket(AF_INET, SOCK_STREAM, 0), one = 1;
  setsockopt(other, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one); /* past our closed connections' TIME_WAIT */
  ASSERT_EQ(bind(other, (struct sockaddr *)&sa, sizeof sa), 0);
  ASSERT_EQ(listen(other, 4), 0);
  ASSERT_ERR(cb_server_up(srv), UV_EADDRINUSE);
  close(other);
  ASSERT_ERR(cb_server_up(srv), 0);
  ASSERT_ERR(cb_server_up(srv), 0); /* already up */
  ASSERT_EQ(cb_server_port(srv), port);
  for (int i = 0; i < 4; i++) h1_check(port, "GET", "/hello", "", &e); /* both workers listen again */
  buf_reset(&e);
  exp_simple(&e, 200, NULL, "kept", 0);
  h1_check(port, "GET", "/kept", "", &e);
  h2_check(port, "GET", "/kept", NULL, 0, &e);
  cb_stats_t stats;
  ASSERT_ERR(cb_server_stats(srv, &stats), 0);
  ASSERT_EQ(stats.requests, 7); /* stats survive */
  buf_free(&e);
  buf_free(&rest);
  test_stop(srv);
}

TEST(routes_down_then_stop) {
  cb_server_t *srv = start_threads(2);
  int fd = cl_connect(cb_server_port(srv));
  ASSERT_ERR(cb_server_down(srv), 0);
  close(fd);
  test_stop(srv); /* stop works from down */
  ASSERT_EQ(count_threads(), 1);
}

/* ---- the table swapped under load ---- */

typedef struct {
  int port;
  volatile int stop;
  long answers, wrong;
} checker_t;

static void *check_loop(void *arg) {
  checker_t *ck = arg;
  int fd = cl_connect(ck->port);
  static const char req[] = "GET /swap HTTP/1.1\r\nhost: x\r\n\r\n";
  while (!ck->stop) {
    buf_t got = {0};
    cl_send(fd, req, sizeof req - 1);
    long n = 0;
    while ((n = cl_response_len(got.p, got.len, 0)) == 0) {
      if (cl_read_n(fd, &got, got.len + 1, 10000) != CL_OK) break;
    }
    /* Every answer comes from the old or the new table: body A or body B, never a 404. */
    if (n <= 0 || got.len < 8 || memcmp(got.p, "HTTP/1.1 200", 12) != 0 ||
        (memcmp(got.p + got.len - 8, "AAAAAAAA", 8) != 0 && memcmp(got.p + got.len - 8, "BBBBBBBB", 8) != 0))
      ck->wrong++;
    ck->answers++;
    buf_free(&got);
  }
  close(fd);
  return NULL;
}

/* Runs h2load; returns its exit status, its output in out. */
static int run_h2load(char *const argv[], buf_t *out, pid_t *pid_out, int *fd_out) {
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    dup2(p[1], 1);
    dup2(p[1], 2);
    close(p[0]);
    execvp(argv[0], argv);
    _exit(127);
  }
  close(p[1]);
  *pid_out = pid;
  *fd_out = p[0];
  (void)out;
  return 0;
}

static int wait_h2load(pid_t pid, int fd, buf_t *out) {
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) buf_add(out, buf, (size_t)n);
  close(fd);
  int status;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  buf_add(out, "", 1);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* The numbers of h2load's "requests:" and "status codes:" lines. */
static void h2load_counts(const char *out, long *done, long *ok, long *failed, long *errored, long *s4xx) {
  const char *p = strstr(out, "requests: ");
  ASSERT_NOT_NULL(p);
  long total, started;
  ASSERT_EQ(sscanf(p, "requests: %ld total, %ld started, %ld done, %ld succeeded, %ld failed, %ld errored", &total,
                   &started, done, ok, failed, errored),
            6);
  p = strstr(out, "status codes: ");
  ASSERT_NOT_NULL(p);
  long s2, s3, s5;
  ASSERT_EQ(sscanf(p, "status codes: %ld 2xx, %ld 3xx, %ld 4xx, %ld 5xx", &s2, &s3, s4xx, &s5), 4);
}

TEST_T(routes_thousand_swaps_under_h2load, 120000) {
  cb_server_t *srv = start_threads(2);
  int port = cb_server_port(srv);
  cb_stub_t a = simple(CB_METHOD_GET, "/swap", 200, "AAAAAAAAAAAAAAAA");
  cb_stub_t b = simple(CB_METHOD_GET, "/swap", 200, "BBBBBBBBBBBBBBBB");
  uint64_t cur = add(srv, &a);
  char url[128], dur[16];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/swap", port);
  snprintf(dur, sizeof dur, "%d", 4);
  char *const argv[] = {"h2load", "-c", "8", "-m", "8", "-t", "1", "-D", dur, url, NULL};
  buf_t out = {0};
  pid_t pid;
  int ofd;
  run_h2load(argv, &out, &pid, &ofd);
  checker_t ck = {.port = port};
  pthread_t th;
  ASSERT_EQ(pthread_create(&th, NULL, check_loop, &ck), 0);
  /* Swap once the load runs: add the other body, then remove the current one (two tables per swap). */
  cb_stats_t st;
  uint64_t t0 = now_ms();
  do {
    ASSERT_ERR(cb_server_stats(srv, &st), 0);
    sleep_ms(5);
  } while (st.requests < 2000 && now_ms() - t0 < 20000);
  uint64_t before = st.requests;
  for (int i = 0; i < 1000; i++) {
    uint64_t next = add(srv, i % 2 ? &a : &b);
    ASSERT_ERR(cb_server_route_remove(srv, cur), 0);
    cur = next;
  }
  ASSERT_ERR(cb_server_stats(srv, &st), 0);
  cbt_log("1000 swaps while %llu requests were answered", (unsigned long long)(st.requests - before));
  int rc = wait_h2load(pid, ofd, &out);
  ck.stop = 1;
  pthread_join(th, NULL);
  cbt_log("%s", out.p);
  ASSERT_EQ(rc, 0);
  long done, ok, failed, errored, s4xx;
  h2load_counts(out.p, &done, &ok, &failed, &errored, &s4xx);
  ASSERT_GT(done, 0);
  ASSERT_EQ(failed, 0);
  ASSERT_EQ(errored, 0);
  ASSERT_EQ(s4xx, 0);
  ASSERT_EQ(ok, done);
  ASSERT_GT(ck.answers, 0);
  ASSERT_EQ(ck.wrong, 0);
  ASSERT_GT(st.requests - before, 0); /* the swaps happened while requests were served */
  cb_stub_list_t *list;
  ASSERT_ERR(cb_server_stubs(srv, &list), 0);
  ASSERT_EQ(list->count, 1);
  cb_stub_list_free(list);
  buf_free(&out);
  test_stop(srv);
}

TEST_T(journal_count_equals_h2load, 120000) {
  cb_config_t cfg;
  test_config(&cfg);
  cfg.threads = 2;
  cfg.journal = 100000;
  cb_server_t *srv = test_start(&cfg);
  char url[128];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/hello", cb_server_port(srv));
  char *const argv[] = {"h2load", "-n", "20000", "-c", "4", "-m", "10", "-t", "1", url, NULL};
  buf_t out = {0};
  pid_t pid;
  int ofd;
  run_h2load(argv, &out, &pid, &ofd);
  ASSERT_EQ(wait_h2load(pid, ofd, &out), 0);
  long done, ok, failed, errored, s4xx;
  h2load_counts(out.p, &done, &ok, &failed, &errored, &s4xx);
  ASSERT_EQ(ok, 20000);
  /* A request is journaled when its stream is released, just after its last frame is written. */
  cb_request_list_t *list = wait_journal(srv, NULL, 20000, 10000);
  ASSERT_EQ(list->count, 20000);
  for (size_t i = 0; i < list->count; i++) {
    ASSERT_EQ(list->items[i].seq, i + 1);
    if (strcmp(list->items[i].route.ptr, "hello") != 0) FAIL("entry %zu: route %s", i, list->items[i].route.ptr);
  }
  cb_request_list_free(list);
  cb_stats_t st;
  ASSERT_ERR(cb_server_stats(srv, &st), 0);
  ASSERT_EQ(st.requests, 20000);
  buf_free(&out);
  test_stop(srv);
}

/* ---- a stub added and removed in a loop while clients use it (the audit of races between the API and the
 * workers): every answer is the stub's or the 404, over HTTP/1.1 keep-alive and h2c, and the counts add up ---- */

#define CHURN_REQS 300

typedef struct {
  int port;
  int h2;
  long ok, nf, wrong; /* the stub's answer, 404, anything else */
} churn_cl_t;

static void churn_judge(churn_cl_t *ck, int status, const char *body, size_t len) {
  if (status == 200 && len == 7 && (memcmp(body, "CHURN-A", 7) == 0 || memcmp(body, "CHURN-B", 7) == 0))
    ck->ok++;
  else if (status == 404)
    ck->nf++;
  else
    ck->wrong++;
}

static void *churn_client(void *arg) {
  churn_cl_t *ck = arg;
  if (ck->h2) {
    h2cl_t *cl = h2_open(ck->port);
    h2_handshake(cl);
    for (int i = 0; i < CHURN_REQS; i += 4) { /* four streams at a time */
      h2resp_t *rs[4];
      for (int k = 0; k < 4; k++) rs[k] = h2_request(cl, 2 * (i + k) + 1, "GET", "/churn", NULL, 0, NULL, 0);
      h2_wait(cl, rs, 4, 15000);
      for (int k = 0; k < 4; k++) {
        churn_judge(ck, rs[k]->rst == H2_NO_RST ? rs[k]->status : -1, rs[k]->body.p, rs[k]->body.len);
        h2_forget(cl, 2 * (i + k) + 1);
      }
    }
    h2_free(cl);
    return NULL;
  }
  int fd = cl_connect(ck->port);
  static const char req[] = "GET /churn HTTP/1.1\r\nhost: x\r\n\r\n";
  for (int i = 0; i < CHURN_REQS; i++) {
    buf_t got = {0};
    cl_send(fd, req, sizeof req - 1);
    long n;
    while ((n = cl_response_len(got.p, got.len, 0)) == 0)
      if (cl_read_n(fd, &got, got.len + 1, 15000) != CL_OK) break;
    int status = 0;
    const char *body = n > 0 ? memmem(got.p, (size_t)n, "\r\n\r\n", 4) : NULL;
    if (body == NULL || sscanf(got.p, "HTTP/1.1 %d", &status) != 1) {
      ck->wrong++;
      buf_free(&got);
      break;
    }
    body += 4;
    churn_judge(ck, status, body, (size_t)(got.p + n - body));
    ASSERT_EQ((size_t)n, got.len); /* nothing after the answer */
    buf_free(&got);
  }
  close(fd);
  return NULL;
}

TEST_T(routes_stub_churn_keepalive_and_h2c, 60000) {
  cb_config_t cfg;
  test_config(&cfg);
  cfg.threads = 2;
  cfg.journal = 1000;
  cb_server_t *srv = test_start(&cfg);
  int port = cb_server_port(srv);
  /* A stub without claims (the worker remembers it as its last route) and one with times (a claim per request). */
  cb_stub_t a = simple(CB_METHOD_GET, "/churn", 200, "CHURN-A");
  cb_stub_t b = simple(CB_METHOD_GET, "/churn", 200, "CHURN-B");
  b.response.times = 1000000;
  churn_cl_t cls[4] = {{.port = port}, {.port = port}, {.port = port, .h2 = 1}, {.port = port, .h2 = 1}};
  pthread_t th[4];
  for (int i = 0; i < 4; i++) ASSERT_EQ(pthread_create(&th[i], NULL, churn_client, &cls[i]), 0);
  for (int i = 0; i < 400; i++) {
    uint64_t id = add(srv, i % 2 ? &a : &b);
    if (i % 3 == 0) sched_yield();
    ASSERT_ERR(cb_server_route_remove(srv, id), 0);
    if (i % 20 == 0) { /* the readers of what the workers use */
      cb_stub_list_t *sl;
      ASSERT_ERR(cb_server_stubs(srv, &sl), 0);
      cb_stub_list_free(sl);
      cb_route_counts_t *rc;
      ASSERT_ERR(cb_server_route_counts(srv, &rc), 0);
      cb_route_counts_free(rc);
      cb_near_miss_list_t *nm;
      ASSERT_ERR(cb_server_near_misses(srv, &nm), 0);
      cb_near_miss_list_free(nm);
    }
  }
  long ok = 0, nf = 0;
  for (int i = 0; i < 4; i++) {
    pthread_join(th[i], NULL);
    cbt_log("client %d (%s): %ld stub, %ld 404, %ld wrong", i, cls[i].h2 ? "h2c" : "h1", cls[i].ok, cls[i].nf,
            cls[i].wrong);
    ASSERT_EQ(cls[i].wrong, 0);
    ASSERT_EQ(cls[i].ok + cls[i].nf, CHURN_REQS);
    ok += cls[i].ok;
    nf += cls[i].nf;
  }
  ASSERT_EQ((uint64_t)nf, route_count(srv, "not_found"));
  cb_stats_t st;
  ASSERT_ERR(cb_server_stats(srv, &st), 0);
  ASSERT_EQ(st.requests, (uint64_t)(4 * CHURN_REQS));
  (void)ok;
  test_stop(srv);
}
