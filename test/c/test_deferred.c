/* Deferred routes (issue 14): requests handed to another thread and answered with cb_server_reply(), over
 * HTTP/1.1 and h2c, byte for byte; streaming; 503 (refused, target gone), 504; stale references. The Erlang
 * handlers built on this are tested in the CT suites (test/cbench_handler_SUITE.erl). */
#include <arpa/inet.h>
#include <pthread.h>
#include <sched.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "h2client.h"
#include "testing.h"
#include "base/base.h"

/* The handler thread: takes what deliver queued and answers according to the path. */
typedef struct item_s {
  struct item_s *next;
  cb_reqref_t ref;
  char path[64];
  char body[256];
  size_t body_len;
  size_t batch; /* the size of the deliver call it came in */
} item_t;

static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  item_t *head, *tail;
  int stop;
  cb_server_t *srv;
  int twice_result;     /* the result of a second reply to one request */
  int gone_after_close; /* the result of a reply to a request whose client left */
  int delivered;
  size_t max_batch;
  int streamed; /* /f/stream answers begun */
} hq = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, NULL, 0, NULL, 1, 1, 0, 0, 0};

static int deliver(void *ud, const cb_deferred_req_t *reqs, size_t n) {
  (void)ud;
  pthread_mutex_lock(&hq.mu);
  for (size_t k = 0; k < n; k++) {
    item_t *it = calloc(1, sizeof *it);
    it->ref = reqs[k].ref;
    snprintf(it->path, sizeof it->path, "%.*s", (int)reqs[k].path.len, reqs[k].path.ptr);
    it->body_len = reqs[k].body.len < sizeof it->body ? reqs[k].body.len : sizeof it->body;
    memcpy(it->body, reqs[k].body.ptr, it->body_len);
    it->batch = n;
    if (hq.tail) hq.tail->next = it; else hq.head = it;
    hq.tail = it;
    hq.delivered++;
    if (n > hq.max_batch) hq.max_batch = n;
  }
  pthread_cond_broadcast(&hq.cv);
  pthread_mutex_unlock(&hq.mu);
  return 0;
}

static int refuse(void *ud, const cb_deferred_req_t *reqs, size_t n) {
  (void)ud, (void)reqs, (void)n;
  return -1;
}

static int reply1(cb_reqref_t ref, cb_reply_op op, int status, const cb_header_t *h, size_t nh, const char *body) {
  cb_reply_t r = {.ref = ref, .op = op, .status = status, .headers = h, .nheaders = nh,
                  .body = body ? (cb_str_t){body, strlen(body)} : (cb_str_t){NULL, 0}};
  ASSERT_ERR(cb_server_reply(hq.srv, &r, 1), 0);
  return r.result;
}

static void answer(item_t *it) {
  static const cb_header_t hdrs[] = {{CB_S("Content-Type"), CB_S("text/plain")}, {CB_S("x-a"), CB_S("1")}};
  if (strcmp(it->path, "/h/full") == 0) {
    ASSERT_ERR(reply1(it->ref, CB_REPLY_FULL, 200, hdrs, 2, "Hello, Joe!"), 0);
  } else if (strcmp(it->path, "/h/stream") == 0) {
    /* A piece or an end before the head: refused, and the request still takes its answer (issue 21: this was
     * CB_EGONE, as if the request were over). */
    ASSERT_ERR(reply1(it->ref, CB_REPLY_SEND, 0, NULL, 0, "early"), CB_ENOTSTREAMING);
    ASSERT_ERR(reply1(it->ref, CB_REPLY_FINISH, 0, NULL, 0, NULL), CB_ENOTSTREAMING);
    ASSERT_ERR(reply1(it->ref, CB_REPLY_STREAM, 200, hdrs + 1, 1, NULL), 0);
    ASSERT_ERR(reply1(it->ref, CB_REPLY_SEND, 0, NULL, 0, "abc"), 0);
    ASSERT_ERR(reply1(it->ref, CB_REPLY_SEND, 0, NULL, 0, "defg"), 0);
    ASSERT_ERR(reply1(it->ref, CB_REPLY_FINISH, 0, NULL, 0, NULL), 0);
    ASSERT_ERR(reply1(it->ref, CB_REPLY_SEND, 0, NULL, 0, "late"), CB_EGONE);
  } else if (strcmp(it->path, "/h/twice") == 0) {
    ASSERT_ERR(reply1(it->ref, CB_REPLY_FULL, 201, NULL, 0, "a"), 0);
    hq.twice_result = reply1(it->ref, CB_REPLY_FULL, 202, NULL, 0, "b");
  } else if (strcmp(it->path, "/h/echo") == 0) {
    cb_reply_t r = {.ref = it->ref, .op = CB_REPLY_FULL, .status = 200, .body = {it->body, it->body_len}};
    ASSERT_ERR(cb_server_reply(hq.srv, &r, 1), 0);
    ASSERT_ERR(r.result, 0);
  } else if (strcmp(it->path, "/h/nocontent") == 0) {
    ASSERT_ERR(reply1(it->ref, CB_REPLY_FULL, 204, NULL, 0, NULL), 0);
    ASSERT_ERR(reply1(it->ref, CB_REPLY_FULL, 200, hdrs, 1, "x"), CB_EGONE);
  } else if (strcmp(it->path, "/h/bad") == 0) {
    static const cb_header_t bad[] = {{CB_S("content-length"), CB_S("3")}};
    ASSERT_ERR(reply1(it->ref, CB_REPLY_FULL, 200, bad, 1, "abc"), CB_EINVAL); /* the engine frames bodies */
    ASSERT_ERR(reply1(it->ref, CB_REPLY_FULL, 99, NULL, 0, NULL), CB_EINVAL);
    ASSERT_ERR(reply1(it->ref, CB_REPLY_FULL, 204, NULL, 0, "x"), CB_EINVAL);
    ASSERT_ERR(reply1(it->ref, CB_REPLY_FULL, 200, NULL, 0, "ok"), 0);
  } else if (strcmp(it->path, "/h/batch") == 0) {
    /* A SEND whose header count is garbage (SEND carries no headers), then the FULL answer, in one call. The
     * count was summed into the command's size anyway: this one wraps the sum to 2 header entries short, and
     * the FULL item's headers were written past the end (ASan: heap-buffer-overflow in cb_server_reply). */
    cb_reply_t rs[2] = {
        {.ref = it->ref, .op = CB_REPLY_SEND, .headers = NULL,
         .nheaders = ((size_t)0 - 2 * sizeof(cb__hdr_t)) / sizeof(cb__hdr_t), .body = CB_S("x")},
        {.ref = it->ref, .op = CB_REPLY_FULL, .status = 200, .headers = hdrs, .nheaders = 2, .body = CB_S("ok")}};
    ASSERT_ERR(cb_server_reply(hq.srv, rs, 2), 0);
    ASSERT_ERR(rs[0].result, CB_ENOTSTREAMING); /* the request was not streaming yet */
    ASSERT_ERR(rs[1].result, 0);
  } else if (strcmp(it->path, "/h/late") == 0) {
    sleep_ms(300); /* the client has closed by now (the test waits for that before it releases the request) */
    hq.gone_after_close = reply1(it->ref, CB_REPLY_FULL, 200, NULL, 0, "late");
  } else if (strcmp(it->path, "/f/stream") == 0) { /* begun, never finished: cut by deferred_fail */
    ASSERT_ERR(reply1(it->ref, CB_REPLY_STREAM, 200, NULL, 0, NULL), 0);
    ASSERT_ERR(reply1(it->ref, CB_REPLY_SEND, 0, NULL, 0, "abc"), 0);
    pthread_mutex_lock(&hq.mu);
    hq.streamed++;
    pthread_mutex_unlock(&hq.mu);
  }
  /* Anything else (/h/none, /f/...) is left unanswered: 504, or 503 from cb_server_deferred_fail. */
}

static void *handler_main(void *arg) {
  (void)arg;
  pthread_mutex_lock(&hq.mu);
  while (!hq.stop) {
    item_t *it = hq.head;
    if (it == NULL) {
      pthread_cond_wait(&hq.cv, &hq.mu);
      continue;
    }
    hq.head = it->next;
    if (hq.head == NULL) hq.tail = NULL;
    pthread_mutex_unlock(&hq.mu);
    answer(it);
    free(it);
    pthread_mutex_lock(&hq.mu);
  }
  pthread_mutex_unlock(&hq.mu);
  return NULL;
}

static uint64_t add_deferred(cb_server_t *srv, const char *name, const char *path, cb_deliver_fn fn, unsigned tmo,
                             int batch) {
  cb_deferred_t d;
  memset(&d, 0, sizeof d);
  d.name = name ? (cb_str_t){name, strlen(name)} : (cb_str_t){NULL, 0};
  d.match.path = (cb_str_t){path, strlen(path)};
  d.deliver = fn;
  d.timeout_ms = tmo;
  d.batch = batch;
  uint64_t id = 0;
  ASSERT_ERR(cb_server_deferred_add(srv, &d, &id), 0);
  ASSERT_GT(id, 0);
  return id;
}

static pthread_t start_handler(cb_server_t *srv) {
  hq.srv = srv;
  hq.stop = 0;
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, NULL, handler_main, NULL), 0);
  return t;
}

static void stop_handler(pthread_t t) {
  pthread_mutex_lock(&hq.mu);
  hq.stop = 1;
  pthread_cond_broadcast(&hq.cv);
  pthread_mutex_unlock(&hq.mu);
  pthread_join(t, NULL);
  while (hq.head) {
    item_t *n = hq.head->next;
    free(hq.head);
    hq.head = n;
  }
  hq.tail = NULL;
}

static void h1_check(int port, const char *method, const char *target, const char *hdrs, const char *body,
                     const buf_t *exp) {
  buf_t req = {0};
  buf_addf(&req, "%s %s HTTP/1.1\r\nhost: 127.0.0.1\r\n%s\r\n%s", method, target, hdrs, body ? body : "");
  cbt_log("h1 %s %s", method, target);
  int fd = cl_connect(port);
  ROUNDTRIP(fd, req.p, req.len, exp);
  EXPECT_QUIET(fd, 20);
  close(fd);
  buf_free(&req);
}

static void h2_check(int port, const char *method, const char *target, const buf_t *exp) {
  h2cl_t *cl = h2_open(port);
  h2_handshake(cl);
  buf_t head = {0}, body = {0};
  h2resp_t *r = h2_request(cl, 1, method, target, NULL, 0, NULL, 0);
  h2_wait1(cl, r, 15000);
  h2_expect_from_h1(exp, &head, &body);
  h2_assert_resp(r, &head, &body, target);
  buf_free(&head);
  buf_free(&body);
  h2_free(cl);
}

static void both(int port, const char *method, const char *target, const buf_t *exp) {
  h1_check(port, method, target, "", NULL, exp);
  h2_check(port, method, target, exp);
}

TEST_T(deferred_reply_forms, 60000) {
  cb_config_t cfg;
  test_config(&cfg);
  cfg.threads = 2;
  cfg.journal = 100;
  cb_server_t *srv = test_start(&cfg);
  int port = cb_server_port(srv);
  pthread_t t = start_handler(srv);
  add_deferred(srv, "erl", "/h/*", deliver, 500, 1);
  add_deferred(srv, "nobody", "/x/*", refuse, 0, 0);
  buf_t exp = {0};
  exp_head(&exp, 200, NULL, "content-type: text/plain\r\nx-a: 1\r\n", 11, CONN_NONE);
  buf_adds(&exp, "Hello, Joe!");
  both(port, "GET", "/h/full", &exp);
  buf_reset(&exp);
  exp_head(&exp, 200, NULL, "content-type: text/plain\r\nx-a: 1\r\n", 11, CONN_NONE);
  both(port, "HEAD", "/h/full", &exp);
  buf_reset(&exp);
  exp_head(&exp, 200, NULL, "x-a: 1\r\n", CL_CHUNKED, CONN_NONE);
  exp_chunk(&exp, "abc", 3);
  exp_chunk(&exp, "defg", 4);
  exp_last_chunk(&exp);
  both(port, "GET", "/h/stream", &exp);
  buf_reset(&exp);
  exp_head(&exp, 201, NULL, NULL, 1, CONN_NONE);
  buf_adds(&exp, "a");
  both(port, "GET", "/h/twice", &exp);
  ASSERT_ERR(hq.twice_result, CB_EGONE);
  buf_reset(&exp);
  exp_head(&exp, 204, NULL, NULL, CL_NONE, CONN_NONE);
  both(port, "GET", "/h/nocontent", &exp);
  buf_reset(&exp);
  exp_head(&exp, 200, NULL, NULL, 2, CONN_NONE);
  buf_adds(&exp, "ok");
  both(port, "GET", "/h/bad", &exp);
  buf_reset(&exp);
  exp_head(&exp, 200, NULL, "content-type: text/plain\r\nx-a: 1\r\n", 2, CONN_NONE);
  buf_adds(&exp, "ok");
  both(port, "GET", "/h/batch", &exp); /* the header count of an op without headers is not counted */
  buf_reset(&exp);
  exp_head(&exp, 200, NULL, NULL, 5, CONN_NONE);
  buf_adds(&exp, "12345");
  h1_check(port, "POST", "/h/echo", "content-length: 5\r\n", "12345", &exp);
  buf_reset(&exp);
  exp_head(&exp, 504, NULL, NULL, 0, CONN_NONE);
  both(port, "GET", "/h/none", &exp);
  buf_reset(&exp);
  exp_head(&exp, 503, NULL, NULL, 0, CONN_NONE);
  both(port, "GET", "/x/y", &exp);
  cb_stats_t st;
  ASSERT_ERR(cb_server_stats(srv, &st), 0);
  ASSERT_EQ(st.handler_timeouts, 2);
  ASSERT_EQ(st.handler_unavailable, 2);
  /* The journal records what was sent. */
  cb_request_filter_t f = {.path = CB_S("/h/none")};
  cb_request_list_t *list;
  ASSERT_ERR(cb_server_requests(srv, &f, &list), 0);
  ASSERT_EQ(list->count, 2);
  ASSERT_EQ(list->items[0].status, 504);
  ASSERT_STR_EQ(list->items[0].route.ptr, "erl");
  cb_request_list_free(list);
  /* A deferred route is listed with the stubs, status 0. */
  cb_stub_list_t *stubs;
  ASSERT_ERR(cb_server_stubs(srv, &stubs), 0);
  ASSERT_EQ(stubs->count, 2);
  ASSERT_EQ(stubs->items[0].status, 0);
  cb_stub_list_free(stubs);
  buf_free(&exp);
  test_stop(srv);
  stop_handler(t);
}

static int delivered(void) {
  pthread_mutex_lock(&hq.mu);
  int n = hq.delivered;
  pthread_mutex_unlock(&hq.mu);
  return n;
}

static void wait_delivered(int n) {
  for (int i = 0; i < 1000 && delivered() < n; i++) sleep_ms(10);
  ASSERT_GE(delivered(), n);
}

/* The target goes away with requests parked: 503 for each (over both protocols), and the connections go on. */
TEST_T(deferred_fail_and_gone, 60000) {
  cb_config_t cfg;
  test_config(&cfg);
  cfg.threads = 1;
  cb_server_t *srv = test_start(&cfg);
  int port = cb_server_port(srv);
  pthread_t t = start_handler(srv);
  hq.delivered = 0;
  uint64_t id = add_deferred(srv, NULL, "/f/*", deliver, 30000, 1);
  add_deferred(srv, NULL, "/h/*", deliver, 30000, 0);
  int fd = cl_connect(port);
  cl_sends(fd, "GET /f/1 HTTP/1.1\r\nhost: x\r\n\r\n");
  h2cl_t *cl = h2_open(port);
  h2_handshake(cl);
  h2resp_t *r1 = h2_request(cl, 1, "GET", "/f/2", NULL, 0, NULL, 0);
  h2resp_t *r3 = h2_request(cl, 3, "GET", "/f/3", NULL, 0, NULL, 0);
  wait_delivered(3);
  ASSERT_ERR(cb_server_deferred_fail(srv, id), 0);
  buf_t exp = {0}, got = {0};
  exp_head(&exp, 503, NULL, NULL, 0, CONN_NONE);
  ASSERT_EQ(cl_read_n(fd, &got, exp.len, 10000), 0);
  ASSERT_EQ(mask_dates(got.p, got.len), 1);
  ASSERT(got.len == exp.len && memcmp(got.p, exp.p, exp.len) == 0);
  h2_wait1(cl, r1, 10000);
  h2_wait1(cl, r3, 10000);
  ASSERT_EQ(r1->status, 503);
  ASSERT_EQ(r3->status, 503);
  /* Both connections still serve. */
  buf_reset(&exp);
  exp_head(&exp, 200, NULL, "content-type: text/plain\r\nx-a: 1\r\n", 11, CONN_NONE);
  buf_adds(&exp, "Hello, Joe!");
  ROUNDTRIP(fd, "GET /h/full HTTP/1.1\r\nhost: x\r\n\r\n", 33, &exp);
  h2resp_t *r5 = h2_request(cl, 5, "GET", "/h/full", NULL, 0, NULL, 0);
  h2_wait1(cl, r5, 10000);
  ASSERT_EQ(r5->status, 200);
  /* A reply to a request whose client left: CB_EGONE, nothing sent anywhere. (HTTP/2 reads on while a
   * request waits, so it sees the close; HTTP/1.1 holds its input and learns it when the answer is written.) */
  int before = delivered();
  h2_request(cl, 7, "GET", "/h/late", NULL, 0, NULL, 0);
  wait_delivered(before + 1);
  struct linger lg = {1, 0}; /* close with a reset: the client is gone, not just done sending */
  setsockopt(cl->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  h2_free(cl);
  cl_reset(fd);
  sleep_ms(500);
  stop_handler(t); /* waits for /h/late's answer */
  ASSERT_ERR(hq.gone_after_close, CB_EGONE);
  buf_free(&exp);
  buf_free(&got);
  test_stop(srv);
}

/* Many requests on one worker in one loop iteration reach deliver together when the route batches. */
TEST_T(deferred_batches, 60000) {
  cb_config_t cfg;
  test_config(&cfg);
  cfg.threads = 1;
  cb_server_t *srv = test_start(&cfg);
  int port = cb_server_port(srv);
  hq.max_batch = 0;
  pthread_t t = start_handler(srv);
  add_deferred(srv, NULL, "/h/*", deliver, 0, 1);
  /* 20 streams in one write: parsed in one read, delivered in one call. */
  h2cl_t *cl = h2_open(port);
  h2_handshake(cl);
  h2resp_t *rs[20];
  buf_t all = {0};
  for (int i = 0; i < 20; i++) {
    buf_t block = {0};
    uint8_t hd[9];
    h2_encode_request(cl, "GET", "/h/full", NULL, 0, &block);
    h2_frame_hd(hd, (uint32_t)block.len, 1 /* HEADERS */, 0x4 | 0x1 /* END_HEADERS | END_STREAM */, 1 + 2 * i);
    buf_add(&all, hd, 9);
    buf_add(&all, block.p, block.len);
    buf_free(&block);
    rs[i] = h2_stream(cl, 1 + 2 * i);
  }
  ASSERT_EQ(h2_send_raw(cl, all.p, all.len), 0);
  buf_free(&all);
  for (int i = 0; i < 20; i++) {
    h2_wait1(cl, rs[i], 10000);
    ASSERT_EQ(rs[i]->status, 200);
    ASSERT(rs[i]->body.len == 11 && memcmp(rs[i]->body.p, "Hello, Joe!", 11) == 0);
  }
  h2_free(cl);
  ASSERT_GT(hq.max_batch, 1);
  stop_handler(t);
  test_stop(srv);
}

/* The replies to a connection's streams given in one cb_server_reply() leave in one write: the worker runs the
 * whole post, then the connection's after-step once (cb__conn_after_soon), so nghttp2 serializes the eight
 * answers together. Before, each reply ran its own after-step: eight session sends, eight writes. */
TEST_T(deferred_replies_one_write_per_connection, 60000) {
  cb_config_t cfg;
  test_config(&cfg);
  cfg.threads = 1;
  cb_server_t *srv = test_start(&cfg);
  int port = cb_server_port(srv);
  hq.srv = srv;
  hq.delivered = 0;
  add_deferred(srv, NULL, "/b/*", deliver, 0, 1); /* no handler thread: the test answers */
  h2cl_t *cl = h2_open(port);
  h2_handshake(cl);
  enum { N = 8 };
  h2resp_t *rs[N];
  for (int i = 0; i < N; i++) rs[i] = h2_request(cl, 1 + 2 * i, "GET", "/b/x", NULL, 0, NULL, 0);
  wait_delivered(N);
  sleep_ms(100); /* the client's last frames (its SETTINGS ack) are in: nothing else is written meanwhile */
  cb_reply_t replies[N];
  static const cb_header_t hdrs[] = {{CB_S("content-type"), CB_S("text/plain")}};
  pthread_mutex_lock(&hq.mu);
  for (int i = 0; i < N; i++) {
    item_t *it = hq.head;
    ASSERT(it != NULL);
    hq.head = it->next;
    if (hq.head == NULL) hq.tail = NULL;
    replies[i] = (cb_reply_t){.ref = it->ref, .op = CB_REPLY_FULL, .status = 200, .headers = hdrs, .nheaders = 1,
                              .body = CB_S("Hello, Joe!")};
    free(it);
  }
  pthread_mutex_unlock(&hq.mu);
  uint64_t before = cb__server_flushes(srv);
  ASSERT_ERR(cb_server_reply(srv, replies, N), 0);
  for (int i = 0; i < N; i++) ASSERT_ERR(replies[i].result, 0);
  h2_wait(cl, rs, N, 10000);
  for (int i = 0; i < N; i++) {
    ASSERT_EQ(rs[i]->status, 200);
    ASSERT_MEM_EQ(rs[i]->body.p, rs[i]->body.len, "Hello, Joe!", (size_t)11);
  }
  ASSERT_EQ(cb__server_flushes(srv) - before, 1);
  h2_free(cl);
  test_stop(srv);
}

static int streamed(void) {
  pthread_mutex_lock(&hq.mu);
  int n = hq.streamed;
  pthread_mutex_unlock(&hq.mu);
  return n;
}

/* The target goes away in the middle of a streamed answer: h2c resets that stream (INTERNAL_ERROR) and the
 * connection goes on; HTTP/1.1 closes the connection after the piece sent (no last chunk). */
TEST_T(deferred_fail_mid_stream, 60000) {
  cb_config_t cfg;
  test_config(&cfg);
  cfg.threads = 1;
  cb_server_t *srv = test_start(&cfg);
  int port = cb_server_port(srv);
  hq.streamed = 0;
  pthread_t t = start_handler(srv);
  uint64_t id = add_deferred(srv, NULL, "/f/*", deliver, 30000, 1);
  add_deferred(srv, NULL, "/h/*", deliver, 30000, 1);
  h2cl_t *cl = h2_open(port);
  h2_handshake(cl);
  h2resp_t *r1 = h2_request(cl, 1, "GET", "/f/stream", NULL, 0, NULL, 0);
  int fd = cl_connect(port);
  cl_sends(fd, "GET /f/stream HTTP/1.1\r\nhost: x\r\n\r\n");
  for (int i = 0; i < 1000 && streamed() < 2; i++) sleep_ms(10);
  ASSERT_EQ(streamed(), 2);
  ASSERT_ERR(cb_server_deferred_fail(srv, id), 0);
  h2_wait1(cl, r1, 10000);
  ASSERT_EQ(r1->status, 200);
  ASSERT_EQ(r1->rst, 2); /* INTERNAL_ERROR */
  ASSERT(r1->body.len == 3 && memcmp(r1->body.p, "abc", 3) == 0);
  h2resp_t *r3 = h2_request(cl, 3, "GET", "/h/full", NULL, 0, NULL, 0);
  h2_wait1(cl, r3, 10000);
  ASSERT_EQ(r3->status, 200);
  h2_free(cl);
  buf_t exp = {0}, got = {0};
  exp_head(&exp, 200, NULL, NULL, CL_CHUNKED, CONN_NONE);
  exp_chunk(&exp, "abc", 3);
  ASSERT_EQ(cl_read_close(fd, &got, 10000), CL_EOF);
  mask_dates(got.p, got.len);
  ASSERT(got.len == exp.len && memcmp(got.p, exp.p, exp.len) == 0);
  close(fd);
  cb_stats_t st;
  ASSERT_ERR(cb_server_stats(srv, &st), 0);
  ASSERT_EQ(st.handler_unavailable, 2);
  buf_free(&exp);
  buf_free(&got);
  stop_handler(t);
  test_stop(srv);
}

/* The gone hook and CB_REPLY_UNAVAILABLE (what the port program builds on): a request answered
 * CB_REPLY_UNAVAILABLE gets 503 and is reported gone; one that times out gets 504 and is reported gone; one
 * answered normally is not reported; an UNAVAILABLE to a finished request is CB_EGONE. */
static struct {
  pthread_mutex_t mu;
  cb_reqref_t refs[8];
  int n;
} gone_log = {PTHREAD_MUTEX_INITIALIZER, {0}, 0};

static void on_gone(void *ud, cb_reqref_t ref) {
  (void)ud;
  pthread_mutex_lock(&gone_log.mu);
  if (gone_log.n < 8) gone_log.refs[gone_log.n] = ref;
  gone_log.n++;
  pthread_mutex_unlock(&gone_log.mu);
}

static int gone_count(void) {
  pthread_mutex_lock(&gone_log.mu);
  int n = gone_log.n;
  pthread_mutex_unlock(&gone_log.mu);
  return n;
}

static cb_reqref_t pop_ref(void) {
  pthread_mutex_lock(&hq.mu);
  item_t *it = hq.head;
  ASSERT(it != NULL);
  hq.head = it->next;
  if (hq.head == NULL) hq.tail = NULL;
  pthread_mutex_unlock(&hq.mu);
  cb_reqref_t ref = it->ref;
  free(it);
  return ref;
}

/* Reads one answer from fd within wait_ms and compares it, dates masked, with exp. */
static void expect_answer(int fd, const buf_t *exp, int wait_ms) {
  buf_t got = {0};
  int rc = cl_read_n(fd, &got, exp->len, wait_ms);
  if (rc != 0) cbt_log("got %zu bytes: %.*s", got.len, (int)got.len, got.p);
  ASSERT_EQ(rc, 0);
  ASSERT_EQ(mask_dates(got.p, got.len), 1);
  ASSERT(got.len == exp->len && memcmp(got.p, exp->p, exp->len) == 0);
  buf_free(&got);
}

TEST_T(deferred_gone_hook_unavailable, 60000) {
  cb_config_t cfg;
  test_config(&cfg);
  cfg.threads = 1;
  cb_server_t *srv = test_start(&cfg);
  hq.srv = srv;
  hq.delivered = 0;
  int port = cb_server_port(srv);
  cb_deferred_t d;
  memset(&d, 0, sizeof d);
  d.match.path = CB_S("/g/*");
  d.deliver = deliver;
  d.gone = on_gone;
  d.timeout_ms = 300;
  uint64_t id = 0;
  ASSERT_ERR(cb_server_deferred_add(srv, &d, &id), 0);
  cb_stats_t st0, st1;
  ASSERT_ERR(cb_server_stats(srv, &st0), 0);
  int fd = cl_connect(port);
  buf_t exp = {0};
  /* 1: the caller has no target: 503, reported gone. */
  cl_sends(fd, "GET /g/1 HTTP/1.1\r\nhost: x\r\n\r\n");
  wait_delivered(1);
  cb_reqref_t r1 = pop_ref();
  cb_reply_t u = {.ref = r1, .op = CB_REPLY_UNAVAILABLE};
  ASSERT_ERR(cb_server_reply(srv, &u, 1), 0);
  ASSERT_ERR(u.result, 0);
  exp_head(&exp, 503, NULL, NULL, 0, CONN_NONE);
  expect_answer(fd, &exp, 10000);
  ASSERT_EQ(gone_count(), 1);
  ASSERT(gone_log.refs[0] == r1);
  u.result = 0;
  ASSERT_ERR(cb_server_reply(srv, &u, 1), 0);
  ASSERT_ERR(u.result, CB_EGONE); /* the request is over */
  /* 2: answered: not reported. */
  cl_sends(fd, "GET /g/2 HTTP/1.1\r\nhost: x\r\n\r\n");
  wait_delivered(2);
  ASSERT_ERR(reply1(pop_ref(), CB_REPLY_FULL, 200, NULL, 0, "ok"), 0);
  buf_reset(&exp);
  exp_head(&exp, 200, NULL, NULL, 2, CONN_NONE);
  buf_adds(&exp, "ok");
  expect_answer(fd, &exp, 10000);
  /* 3: no answer within 300 ms: 504, reported gone. */
  cl_sends(fd, "GET /g/3 HTTP/1.1\r\nhost: x\r\n\r\n");
  wait_delivered(3);
  cb_reqref_t r3 = pop_ref();
  buf_reset(&exp);
  exp_head(&exp, 504, NULL, NULL, 0, CONN_NONE);
  expect_answer(fd, &exp, 10000);
  ASSERT_EQ(gone_count(), 2);
  ASSERT(gone_log.refs[1] == r3);
  ASSERT_ERR(cb_server_stats(srv, &st1), 0);
  ASSERT_EQ(st1.handler_unavailable - st0.handler_unavailable, 1);
  ASSERT_EQ(st1.handler_timeouts - st0.handler_timeouts, 1);
  /* 4: the client leaves while the request is parked: reported gone when the connection is freed. */
  cl_sends(fd, "GET /g/4 HTTP/1.1\r\nhost: x\r\n\r\n");
  wait_delivered(4);
  cb_reqref_t r4 = pop_ref();
  cl_reset(fd);
  for (int i = 0; i < 500 && gone_count() < 3; i++) sleep_ms(10);
  ASSERT_EQ(gone_count(), 3);
  ASSERT(gone_log.refs[2] == r4);
  buf_free(&exp);
  test_stop(srv);
}

/* Each request's 504 comes at its own deadline although a slot's timer outlives the request it was started for
 * (deferred.c, arm): on one connection each request takes the slot the one before freed. A request parked where
 * a shorter timer still runs lets it fire early and waits for its own deadline; a request of a route with a
 * shorter timeout restarts a timer due later. The waits leave a wide margin: 200 ms against 5 s. */
TEST_T(deferred_timeout_lazy_deadline, 60000) {
  cb_config_t cfg;
  test_config(&cfg);
  cfg.threads = 1;
  cb_server_t *srv = test_start(&cfg);
  hq.srv = srv;
  hq.delivered = 0;
  int port = cb_server_port(srv);
  add_deferred(srv, NULL, "/short/*", deliver, 200, 0);
  add_deferred(srv, NULL, "/long/*", deliver, 5000, 0);
  cb_stats_t st0, st1;
  ASSERT_ERR(cb_server_stats(srv, &st0), 0);
  int fd = cl_connect(port);
  buf_t ok = {0}, late = {0};
  exp_head(&ok, 200, NULL, NULL, 2, CONN_NONE);
  buf_adds(&ok, "ok");
  exp_head(&late, 504, NULL, NULL, 0, CONN_NONE);
  /* 1: answered at once; the slot's timer stays due in 200 ms. */
  cl_sends(fd, "GET /short/1 HTTP/1.1\r\nhost: x\r\n\r\n");
  wait_delivered(1);
  ASSERT_ERR(reply1(pop_ref(), CB_REPLY_FULL, 200, NULL, 0, "ok"), 0);
  expect_answer(fd, &ok, 10000);
  /* 2: a 5 s request in that slot: the timer fires at 200 ms and waits on; answered after 1 s. */
  cl_sends(fd, "GET /long/2 HTTP/1.1\r\nhost: x\r\n\r\n");
  wait_delivered(2);
  cb_reqref_t r2 = pop_ref();
  sleep_ms(1000);
  ASSERT_ERR(reply1(r2, CB_REPLY_FULL, 200, NULL, 0, "ok"), 0);
  expect_answer(fd, &ok, 10000);
  /* 3: a 200 ms request in the slot whose timer is now due in about 4 s: 504 well before that. */
  cl_sends(fd, "GET /short/3 HTTP/1.1\r\nhost: x\r\n\r\n");
  wait_delivered(3);
  (void)pop_ref();
  expect_answer(fd, &late, 2500);
  ASSERT_ERR(cb_server_stats(srv, &st1), 0);
  ASSERT_EQ(st1.handler_timeouts - st0.handler_timeouts, 1);
  close(fd);
  buf_free(&ok);
  buf_free(&late);
  test_stop(srv);
}

/* A streamed body (cb_deferred_t.body): the request comes at its head with an empty body, then the body's
 * bytes in pieces and one end; the answer echoes them byte for byte, over a keep-alive connection. */
static struct {
  pthread_mutex_t mu;
  char data[200000];
  size_t len;
  int ends, calls;
  cb_reqref_t ref;
} sb = {PTHREAD_MUTEX_INITIALIZER, {0}, 0, 0, 0, 0};

static void on_body_piece(void *ud, cb_reqref_t ref, const char *data, size_t n, int end) {
  (void)ud;
  pthread_mutex_lock(&sb.mu);
  sb.ref = ref;
  if (sb.len + n <= sizeof sb.data) memcpy(sb.data + sb.len, data, n);
  sb.len += n;
  sb.ends += end;
  sb.calls++;
  pthread_mutex_unlock(&sb.mu);
}

static int body_ends(void) {
  pthread_mutex_lock(&sb.mu);
  int n = sb.ends;
  pthread_mutex_unlock(&sb.mu);
  return n;
}

TEST_T(deferred_body_stream, 60000) {
  cb_config_t cfg;
  test_config(&cfg);
  cfg.threads = 1;
  cb_server_t *srv = test_start(&cfg);
  hq.srv = srv;
  hq.delivered = 0;
  int port = cb_server_port(srv);
  cb_deferred_t d;
  memset(&d, 0, sizeof d);
  d.match.path = CB_S("/b");
  d.deliver = deliver;
  d.body = on_body_piece;
  uint64_t id = 0;
  ASSERT_ERR(cb_server_deferred_add(srv, &d, &id), 0);
  static char body[150000];
  for (size_t i = 0; i < sizeof body; i++) body[i] = (char)('a' + i % 26);
  int fd = cl_connect(port);
  cl_sends(fd, "POST /b HTTP/1.1\r\nhost: x\r\ncontent-length: 150000\r\n\r\n");
  wait_delivered(1); /* handed over at its head, before any byte of the body */
  cb_reqref_t ref = pop_ref();
  ASSERT_EQ(body_ends(), 0);
  for (size_t off = 0; off < sizeof body; off += 50000) {
    cl_send(fd, body + off, 50000);
    sleep_ms(20);
  }
  for (int i = 0; i < 500 && body_ends() == 0; i++) sleep_ms(10);
  ASSERT_EQ(body_ends(), 1);
  ASSERT(sb.ref == ref);
  ASSERT_EQ(sb.len, sizeof body);
  ASSERT(memcmp(sb.data, body, sizeof body) == 0);
  ASSERT_GE(sb.calls, 2); /* in pieces, not at once */
  cb_reply_t r = {.ref = ref, .op = CB_REPLY_FULL, .status = 200, .body = {sb.data, sb.len}};
  ASSERT_ERR(cb_server_reply(srv, &r, 1), 0);
  ASSERT_ERR(r.result, 0);
  buf_t exp = {0}, got = {0};
  exp_head(&exp, 200, NULL, NULL, (long)sizeof body, CONN_NONE);
  buf_add(&exp, body, sizeof body);
  ASSERT_EQ(cl_read_n(fd, &got, exp.len, 10000), 0);
  ASSERT_EQ(mask_dates(got.p, got.len), 1);
  ASSERT(got.len == exp.len && memcmp(got.p, exp.p, exp.len) == 0);
  /* No body: the request, then only the end. */
  sb.len = 0;
  sb.ends = 0;
  cl_sends(fd, "GET /b HTTP/1.1\r\nhost: x\r\n\r\n");
  wait_delivered(2);
  ref = pop_ref();
  for (int i = 0; i < 500 && body_ends() == 0; i++) sleep_ms(10);
  ASSERT_EQ(body_ends(), 1);
  ASSERT_EQ(sb.len, 0);
  ASSERT_ERR(reply1(ref, CB_REPLY_FULL, 204, NULL, 0, NULL), 0);
  buf_reset(&exp);
  buf_reset(&got);
  exp_head(&exp, 204, NULL, NULL, CL_NONE, CONN_NONE);
  ASSERT_EQ(cl_read_n(fd, &got, exp.len, 10000), 0);
  ASSERT_EQ(mask_dates(got.p, got.len), 1);
  ASSERT(got.len == exp.len && memcmp(got.p, exp.p, exp.len) == 0);
  close(fd);
  buf_free(&exp);
  buf_free(&got);
  test_stop(srv);
}

/* A deferred route refused for a field says which, like a stub (cb_error_detail()); nothing is added. */
TEST(deferred_bad_fields_detail) {
  cb_config_t cfg;
  test_config(&cfg);
  cfg.threads = 1;
  cb_server_t *srv = test_start(&cfg);
  cb_deferred_t d;
  uint64_t id = 0;
  memset(&d, 0, sizeof d);
  d.match.path = CB_S("/h");
  ASSERT_ERR(cb_server_deferred_add(srv, &d, &id), CB_EINVAL);
  ASSERT_STR_EQ(cb_error_detail()->field_name, "deliver");
  ASSERT_STR_EQ(cb_error_detail()->why_name, "missing");
  d.deliver = deliver;
  d.timeout_ms = 3600001;
  ASSERT_ERR(cb_server_deferred_add(srv, &d, &id), CB_EINVAL);
  ASSERT_STR_EQ(cb_error_detail()->field_name, "timeout_ms");
  ASSERT_STR_EQ(cb_error_detail()->why_name, "out_of_range");
  ASSERT_STR_EQ(cb_error_detail()->text, "3600001");
  d.timeout_ms = 0;
  d.match.path = CB_S("/h/{a}/{b}/{c}/{d}/{e}/{f}/{g}/{h}/{i}");
  ASSERT_ERR(cb_server_deferred_add(srv, &d, &id), CB_EINVAL);
  ASSERT_STR_EQ(cb_error_detail()->field_name, "match.path");
  ASSERT_STR_EQ(cb_error_detail()->why_name, "too_many_params");
  d.match.path = CB_S("/h");
  d.name = CB_S("a\tb");
  ASSERT_ERR(cb_server_deferred_add(srv, &d, &id), CB_EINVAL);
  ASSERT_STR_EQ(cb_error_detail()->field_name, "name");
  ASSERT_STR_EQ(cb_error_detail()->why_name, "bad_char");
  ASSERT_STR_EQ(cb_error_detail()->text, "a\\tb");
  cb_stub_list_t *list;
  ASSERT_ERR(cb_server_stubs(srv, &list), 0);
  ASSERT_EQ(list->count, 0);
  cb_stub_list_free(list);
  test_stop(srv);
}

/* A handler's peer and a proxied request's x-forwarded-for: the address written by hand for IPv4, with the
 * port after it when asked; IPv6 bracketed before a port; no address for another family. */
TEST(peer_text_forms) {
  char buf[CB__PEER_TEXT_MAX];
  const unsigned char v4[4] = {192, 168, 0, 255}, zero[4] = {0, 0, 0, 0};
  ASSERT_EQ(cb__peer_text(AF_INET, v4, -1, buf), 13);
  ASSERT_STR_EQ(buf, "192.168.0.255");
  ASSERT_EQ(cb__peer_text(AF_INET, v4, 65535, buf), 19);
  ASSERT_STR_EQ(buf, "192.168.0.255:65535");
  ASSERT_EQ(cb__peer_text(AF_INET, zero, 0, buf), 9);
  ASSERT_STR_EQ(buf, "0.0.0.0:0");
  unsigned char v6[16];
  ASSERT_EQ(inet_pton(AF_INET6, "2001:db8::1", v6), 1);
  ASSERT_EQ(cb__peer_text(AF_INET6, v6, -1, buf), 11);
  ASSERT_STR_EQ(buf, "2001:db8::1");
  ASSERT_EQ(cb__peer_text(AF_INET6, v6, 443, buf), 17);
  ASSERT_STR_EQ(buf, "[2001:db8::1]:443");
  ASSERT_EQ(cb__peer_text(0, v4, 80, buf), 0);
  ASSERT_STR_EQ(buf, "");
}

/* The 504 comes due after a handler claimed a streamed answer (CB_REPLY_STREAM returned 0) but before the
 * worker ran that head: nothing of the answer was sent, so the client gets the 504 (and the connection goes
 * on), not a cut answer with no head at all (HTTP/1.1: a close; h2c: RST_STREAM before any HEADERS). Under
 * load this is a worker busy with other connections when the deadline passes while the handler's head is
 * posted: at its next libuv turn the timer runs before the command queue. Made certain here by another
 * request's gone hook, which runs on the worker while it serves a connection's events (an h2c client that
 * resets its connection): it claims the stream of the waiting request, then holds the worker past that
 * request's deadline. */
static struct {
  pthread_mutex_t mu;
  cb_reqref_t target; /* the request to claim, 0: none */
  int result;         /* the claim's result */
  int claimed;
} race = {PTHREAD_MUTEX_INITIALIZER, 0, -1, 0};

static void gone_claims_stream(void *ud, cb_reqref_t ref) {
  (void)ud;
  pthread_mutex_lock(&race.mu);
  cb_reqref_t target = race.target;
  if (target == 0 || target == ref) { /* the target's own gone (its 504) */
    pthread_mutex_unlock(&race.mu);
    return;
  }
  race.target = 0;
  pthread_mutex_unlock(&race.mu);
  cb_reply_t r = {.ref = target, .op = CB_REPLY_STREAM, .status = 200};
  ASSERT_ERR(cb_server_reply(hq.srv, &r, 1), 0);
  sleep_ms(1500); /* the target's timeout is 1000 ms */
  pthread_mutex_lock(&race.mu);
  race.result = r.result;
  race.claimed++;
  pthread_mutex_unlock(&race.mu);
}

/* One round: the target request is parked (its client's), then another client's h2c request on the gone hook's
 * route is delivered and its connection reset. */
static cb_reqref_t race_round(int port, int *claimed) {
  cb_reqref_t target = pop_ref();
  h2cl_t *cl = h2_open(port);
  h2_handshake(cl);
  int before = delivered();
  h2_request(cl, 1, "GET", "/g/1", NULL, 0, NULL, 0);
  wait_delivered(before + 1);
  (void)pop_ref();
  pthread_mutex_lock(&race.mu);
  race.target = target;
  race.result = -1;
  pthread_mutex_unlock(&race.mu);
  struct linger lg = {1, 0};
  setsockopt(cl->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  h2_free(cl);
  for (int i = 0; i < 1000; i++) {
    pthread_mutex_lock(&race.mu);
    int n = race.claimed;
    pthread_mutex_unlock(&race.mu);
    if (n > *claimed) break;
    sleep_ms(10);
  }
  (*claimed)++;
  ASSERT_EQ(race.claimed, *claimed);
  ASSERT_ERR(race.result, 0); /* the stream was claimed before the deadline */
  return target;
}

TEST_T(deferred_timeout_before_stream_head, 60000) {
  cb_config_t cfg;
  test_config(&cfg);
  cfg.threads = 1;
  cb_server_t *srv = test_start(&cfg);
  hq.srv = srv;
  hq.delivered = 0;
  int port = cb_server_port(srv);
  add_deferred(srv, NULL, "/s/*", deliver, 1000, 0);
  cb_deferred_t d;
  memset(&d, 0, sizeof d);
  d.match.path = CB_S("/g/*");
  d.deliver = deliver;
  d.gone = gone_claims_stream;
  d.timeout_ms = 30000;
  uint64_t id = 0;
  ASSERT_ERR(cb_server_deferred_add(srv, &d, &id), 0);
  cb_stats_t st0, st1;
  ASSERT_ERR(cb_server_stats(srv, &st0), 0);
  int claimed = 0;
  buf_t exp = {0};
  exp_head(&exp, 504, NULL, NULL, 0, CONN_NONE);
  /* HTTP/1.1: the 504, and the connection serves the next request. */
  int fd = cl_connect(port);
  cl_sends(fd, "GET /s/1 HTTP/1.1\r\nhost: x\r\n\r\n");
  wait_delivered(1);
  cb_reqref_t ref = race_round(port, &claimed);
  expect_answer(fd, &exp, 10000);
  ASSERT_ERR(reply1(ref, CB_REPLY_SEND, 0, NULL, 0, "abc"), CB_EGONE); /* the request is over */
  int before = delivered(); /* read before the request goes: the worker may deliver it before a read after */
  cl_sends(fd, "GET /s/2 HTTP/1.1\r\nhost: x\r\n\r\n");
  wait_delivered(before + 1);
  ASSERT_ERR(reply1(pop_ref(), CB_REPLY_FULL, 200, NULL, 0, "ok"), 0);
  buf_t ok = {0};
  exp_head(&ok, 200, NULL, NULL, 2, CONN_NONE);
  buf_adds(&ok, "ok");
  expect_answer(fd, &ok, 10000);
  close(fd);
  /* h2c: the 504 as a whole answer, no reset. */
  h2cl_t *cl = h2_open(port);
  h2_handshake(cl);
  before = delivered();
  h2resp_t *r1 = h2_request(cl, 1, "GET", "/s/3", NULL, 0, NULL, 0);
  wait_delivered(before + 1);
  (void)race_round(port, &claimed);
  h2_wait1(cl, r1, 10000);
  ASSERT_EQ(r1->status, 504);
  ASSERT_EQ(r1->rst, H2_NO_RST);
  ASSERT_EQ(r1->body.len, 0);
  h2_free(cl);
  ASSERT_ERR(cb_server_stats(srv, &st1), 0);
  ASSERT_EQ(st1.handler_timeouts - st0.handler_timeouts, 2);
  cb_request_filter_t f = {.path = CB_S("/s/1")};
  cb_request_list_t *list;
  ASSERT_ERR(cb_server_requests(srv, &f, &list), 0);
  ASSERT_EQ(list->count, 1);
  ASSERT_EQ(list->items[0].status, 504);
  cb_request_list_free(list);
  buf_free(&exp);
  buf_free(&ok);
  test_stop(srv);
}

/* A streamed answer to a client that does not read: nothing paces the handler's pieces, so the server kept
 * every one (16 MiB and more, queued on the connection or the h2c stream). Now a CB_REPLY_SEND that finds
 * cfg.max_queued_reply_bytes of the answer still unwritten cuts it (HTTP/1.1: the connection closes; h2c:
 * RST_STREAM(INTERNAL_ERROR), the connection goes on), counted in handler_overflows, reported gone; the
 * handler's next reply is CB_EGONE. What is queued never passes the bound by more than one piece. */
#define OVF_LIMIT (1u << 20)
#define OVF_PIECE (64u << 10)
#define OVF_MAX_PIECES 512 /* 32 MiB: far more than the socket buffers and the bound hold */

static char ovf_piece[OVF_PIECE];

/* Streams pieces of ovf_piece to ref until a reply is refused; returns the number taken. */
static int stream_until_cut(cb_server_t *srv, cb_reqref_t ref) {
  ASSERT_ERR(reply1(ref, CB_REPLY_STREAM, 200, NULL, 0, NULL), 0);
  int k = 0;
  for (; k < OVF_MAX_PIECES; k++) {
    cb_reply_t r = {.ref = ref, .op = CB_REPLY_SEND, .body = {ovf_piece, sizeof ovf_piece}};
    ASSERT_ERR(cb_server_reply(srv, &r, 1), 0);
    if (r.result != 0) {
      ASSERT_ERR(r.result, CB_EGONE);
      break;
    }
    size_t q = cb__server_reply_queued(srv, ref); /* after that piece ran on the worker */
    if (q == SIZE_MAX) continue;                  /* cut by this piece: the next reply is refused */
    ASSERT_LT(q, (size_t)OVF_LIMIT + OVF_PIECE + 16); /* 16: a chunk's size line and CRLF */
  }
  ASSERT_LT(k, OVF_MAX_PIECES);
  ASSERT(cb__server_reply_queued(srv, ref) == SIZE_MAX);
  return k;
}

/* One worker, max_queued_reply_bytes OVF_LIMIT, a deferred route on path (gone: its hook, or NULL). */
static cb_server_t *ovf_start(const char *path, void (*gone)(void *, cb_reqref_t)) {
  for (size_t i = 0; i < sizeof ovf_piece; i++) ovf_piece[i] = (char)('a' + i % 26);
  cb_config_t cfg;
  test_config(&cfg);
  cfg.threads = 1;
  cfg.max_queued_reply_bytes = OVF_LIMIT;
  cb_server_t *srv = test_start(&cfg);
  hq.srv = srv;
  hq.delivered = 0;
  cb_deferred_t d;
  memset(&d, 0, sizeof d);
  d.match.path = (cb_str_t){path, strlen(path)};
  d.deliver = deliver;
  d.gone = gone;
  d.timeout_ms = 30000;
  uint64_t id = 0;
  ASSERT_ERR(cb_server_deferred_add(srv, &d, &id), 0);
  return srv;
}

TEST_T(deferred_stream_overflow_cut, 60000) {
  cb_server_t *srv = ovf_start("/o/*", on_gone);
  int port = cb_server_port(srv);
  pthread_mutex_lock(&gone_log.mu);
  gone_log.n = 0;
  pthread_mutex_unlock(&gone_log.mu);
  cb_stats_t st0, st1;
  ASSERT_ERR(cb_server_stats(srv, &st0), 0);
  /* HTTP/1.1, a client that reads nothing (a small receive buffer keeps the kernel's share small). */
  int fd = cl_socket();
  int rcv = 4096;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof rcv);
  ASSERT_EQ(cl_connect_fd(fd, port), fd);
  cl_sends(fd, "GET /o/1 HTTP/1.1\r\nhost: x\r\n\r\n");
  wait_delivered(1);
  cb_reqref_t ref = pop_ref();
  int taken = stream_until_cut(srv, ref);
  cbt_log("HTTP/1.1: %d pieces taken before the cut", taken);
  ASSERT_ERR(reply1(ref, CB_REPLY_FINISH, 0, NULL, 0, NULL), CB_EGONE);
  ASSERT_EQ(gone_count(), 1);
  ASSERT(gone_log.refs[0] == ref);
  /* What the client reads is the answer's beginning, then the close: no last chunk. */
  buf_t exp = {0}, got = {0};
  exp_head(&exp, 200, NULL, NULL, CL_CHUNKED, CONN_NONE);
  for (int k = 0; k < taken; k++) exp_chunk(&exp, ovf_piece, sizeof ovf_piece);
  ASSERT_EQ(cl_read_close(fd, &got, 20000), CL_EOF);
  ASSERT_EQ(mask_dates(got.p, got.len), 1);
  ASSERT_LT(got.len, exp.len);
  ASSERT_GT(got.len, 0);
  ASSERT(memcmp(got.p, exp.p, got.len) == 0);
  close(fd);
  /* h2c: the stream is reset, the connection serves the next one. */
  h2cl_t *cl = h2_open(port);
  h2_handshake(cl);
  h2resp_t *r1 = h2_request(cl, 1, "GET", "/o/2", NULL, 0, NULL, 0);
  wait_delivered(2);
  ref = pop_ref();
  (void)stream_until_cut(srv, ref);
  ASSERT_EQ(gone_count(), 2);
  h2_wait1(cl, r1, 20000);
  ASSERT_EQ(r1->status, 200);
  ASSERT_EQ(r1->rst, 2); /* INTERNAL_ERROR */
  ASSERT_EQ(r1->ended, 0);
  for (size_t off = 0; off < r1->body.len; off += OVF_PIECE) {
    size_t n = r1->body.len - off < OVF_PIECE ? r1->body.len - off : OVF_PIECE;
    ASSERT(memcmp(r1->body.p + off, ovf_piece, n) == 0);
  }
  h2resp_t *r3 = h2_request(cl, 3, "GET", "/o/3", NULL, 0, NULL, 0);
  wait_delivered(3);
  ASSERT_ERR(reply1(pop_ref(), CB_REPLY_FULL, 200, NULL, 0, "ok"), 0);
  h2_wait1(cl, r3, 10000);
  ASSERT_EQ(r3->status, 200);
  ASSERT_MEM_EQ(r3->body.p, r3->body.len, "ok", (size_t)2);
  h2_free(cl);
  ASSERT_ERR(cb_server_stats(srv, &st1), 0);
  ASSERT_EQ(st1.handler_overflows - st0.handler_overflows, 2);
  ASSERT_EQ(st1.handler_timeouts - st0.handler_timeouts, 0);
  ASSERT_EQ(st1.handler_unavailable - st0.handler_unavailable, 0);
  buf_free(&exp);
  buf_free(&got);
  test_stop(srv);
}

/* A burst: the head, 20 pieces of 64 KiB (more than the 1 MiB bound) and the end in one cb_server_reply call,
 * one command-queue post, so all of them are queued before the connection's after-step writes anything. To a
 * client that reads, over HTTP/1.1 and h2c, the whole answer arrives and nothing is cut: at the bound the pieces
 * not yet offered to the socket are offered first. The burst was cut at its 17th piece before a byte was
 * written, the head too: the client saw the connection close and nothing else (cbench_handler_SUITE's
 * stream_overflow on nif, once in CI, where the handler ran ahead of the worker). */
#define BURST_PIECES 20

static void reply_burst(cb_server_t *srv, cb_reqref_t ref) {
  cb_reply_t rs[BURST_PIECES + 2];
  memset(rs, 0, sizeof rs);
  rs[0] = (cb_reply_t){.ref = ref, .op = CB_REPLY_STREAM, .status = 200};
  for (int k = 1; k <= BURST_PIECES; k++)
    rs[k] = (cb_reply_t){.ref = ref, .op = CB_REPLY_SEND, .body = {ovf_piece, sizeof ovf_piece}};
  rs[BURST_PIECES + 1] = (cb_reply_t){.ref = ref, .op = CB_REPLY_FINISH};
  ASSERT_ERR(cb_server_reply(srv, rs, BURST_PIECES + 2), 0);
  for (int k = 0; k < BURST_PIECES + 2; k++) ASSERT_ERR(rs[k].result, 0);
}

TEST_T(deferred_stream_burst_not_cut, 60000) {
  cb_server_t *srv = ovf_start("/b/*", NULL);
  int port = cb_server_port(srv);
  cb_stats_t st0, st1;
  ASSERT_ERR(cb_server_stats(srv, &st0), 0);
  int fd = cl_connect(port);
  cl_sends(fd, "GET /b/1 HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
  wait_delivered(1);
  reply_burst(srv, pop_ref());
  buf_t exp = {0}, got = {0};
  exp_head(&exp, 200, NULL, NULL, CL_CHUNKED, CONN_CLOSE);
  for (int k = 0; k < BURST_PIECES; k++) exp_chunk(&exp, ovf_piece, sizeof ovf_piece);
  exp_last_chunk(&exp);
  ASSERT_EQ(cl_read_close(fd, &got, 20000), CL_EOF);
  ASSERT_EQ(mask_dates(got.p, got.len), 1);
  ASSERT_MEM_EQ(got.p, got.len, exp.p, exp.len);
  close(fd);
  h2cl_t *cl = h2_open(port);
  h2_handshake(cl);
  h2resp_t *r1 = h2_request(cl, 1, "GET", "/b/2", NULL, 0, NULL, 0);
  wait_delivered(2);
  reply_burst(srv, pop_ref());
  h2_wait1(cl, r1, 20000);
  ASSERT_EQ(r1->status, 200);
  ASSERT_EQ(r1->rst, H2_NO_RST);
  ASSERT_EQ(r1->ended, 1);
  ASSERT_EQ(r1->body.len, (size_t)BURST_PIECES * OVF_PIECE);
  for (size_t off = 0; off < r1->body.len; off += OVF_PIECE) ASSERT(memcmp(r1->body.p + off, ovf_piece, OVF_PIECE) == 0);
  h2_free(cl);
  ASSERT_ERR(cb_server_stats(srv, &st1), 0);
  ASSERT_EQ(st1.handler_overflows - st0.handler_overflows, 0);
  buf_free(&exp);
  buf_free(&got);
  test_stop(srv);
}

/* ---- pieces handed over, then a 503 or a 504: the pieces reach the client before the cut ---- */

/* Reads a cut HTTP/1.1 streamed answer: the head, one chunk per piece of `pieces` (NULL-terminated), no last
 * chunk, then the close. */
static void expect_cut_h1(int fd, const char *const *pieces) {
  buf_t exp = {0}, got = {0};
  exp_head(&exp, 200, NULL, NULL, CL_CHUNKED, CONN_NONE);
  for (int k = 0; pieces[k] != NULL; k++) exp_chunk(&exp, pieces[k], strlen(pieces[k]));
  int rc = cl_read_close(fd, &got, 20000);
  if (rc != CL_EOF) cbt_log("reading the answer ended with %s", cl_status_name(rc));
  mask_dates(got.p, got.len);
  ASSERT_MEM_EQ(got.p, got.len, exp.p, exp.len);
  ASSERT_EQ(rc, CL_EOF);
  buf_free(&exp);
  buf_free(&got);
}

/* The same over h2c: the head, the pieces' bytes, then RST_STREAM(INTERNAL_ERROR) and no END_STREAM. */
static void expect_cut_h2(h2cl_t *cl, h2resp_t *r, const char *body) {
  h2_wait1(cl, r, 20000);
  ASSERT_EQ(r->status, 200);
  ASSERT_MEM_EQ(r->body.p, r->body.len, body, strlen(body));
  ASSERT_EQ(r->ended, 0);
  ASSERT_EQ(r->rst, 2); /* INTERNAL_ERROR */
}

/* CB_REPLY_UNAVAILABLE after the head and two pieces, all in one cb_server_reply() call (one command-queue post):
 * the worker runs the four items, then the connection's after-step would write what they queued. The 503 came
 * first and cut the answer while its head and pieces were still in the connection's output: HTTP/1.1 closed the
 * connection with nothing written at all, h2c reset the stream after its HEADERS and before any DATA. Now the
 * output is offered to the socket before the cut (as the proxy does, px_fail), so the client sees the head and
 * the pieces, then the cut. */
static void reply_then_unavailable(cb_server_t *srv, cb_reqref_t ref) {
  cb_reply_t rs[4] = {{.ref = ref, .op = CB_REPLY_STREAM, .status = 200},
                      {.ref = ref, .op = CB_REPLY_SEND, .body = CB_S("abc")},
                      {.ref = ref, .op = CB_REPLY_SEND, .body = CB_S("defg")},
                      {.ref = ref, .op = CB_REPLY_UNAVAILABLE}};
  ASSERT_ERR(cb_server_reply(srv, rs, 4), 0);
  for (int k = 0; k < 4; k++) ASSERT_ERR(rs[k].result, 0);
}

TEST_T(deferred_unavailable_after_pieces, 60000) {
  cb_config_t cfg;
  test_config(&cfg);
  cfg.threads = 1;
  cb_server_t *srv = test_start(&cfg);
  hq.srv = srv;
  hq.delivered = 0;
  int port = cb_server_port(srv);
  add_deferred(srv, NULL, "/u/*", deliver, 30000, 0);
  cb_stats_t st0, st1;
  ASSERT_ERR(cb_server_stats(srv, &st0), 0);
  int fd = cl_connect(port);
  cl_sends(fd, "GET /u/1 HTTP/1.1\r\nhost: x\r\n\r\n");
  wait_delivered(1);
  reply_then_unavailable(srv, pop_ref());
  static const char *const pieces[] = {"abc", "defg", NULL};
  expect_cut_h1(fd, pieces);
  close(fd);
  h2cl_t *cl = h2_open(port);
  h2_handshake(cl);
  h2resp_t *r1 = h2_request(cl, 1, "GET", "/u/2", NULL, 0, NULL, 0);
  wait_delivered(2);
  reply_then_unavailable(srv, pop_ref());
  expect_cut_h2(cl, r1, "abcdefg");
  h2_check_hello(port);
  h2_free(cl);
  ASSERT_ERR(cb_server_stats(srv, &st1), 0);
  ASSERT_EQ(st1.handler_unavailable - st0.handler_unavailable, 2);
  test_stop(srv);
}

/* A piece handed over (its reply returned 0) while the worker is busy, and the request's deadline passes before
 * the worker runs it. A turn of the worker's loop runs libuv's timers before its command queue, so the 504 came
 * first: it took the request back (DONE) and cut the answer, and the piece, still in the command queue, met DONE
 * and was dropped. Now a piece on its way holds the 504 back: when it runs it moves the deadline, as every piece
 * does, and the 504 comes timeout_ms after it, once it has been written. The worker is kept busy in a gone hook
 * (another client's request ends: its connection is reset), which hands the piece over and sleeps past the
 * deadline (a lower bound: the test does not depend on how much longer it takes). */
static struct {
  pthread_mutex_t mu;
  cb_reqref_t target; /* the request to send a piece to, 0: none */
  int result;         /* that reply's result */
  int done;
} busy = {PTHREAD_MUTEX_INITIALIZER, 0, -1, 0};

static void gone_sends_piece(void *ud, cb_reqref_t ref) {
  (void)ud, (void)ref;
  pthread_mutex_lock(&busy.mu);
  cb_reqref_t target = busy.target;
  busy.target = 0;
  pthread_mutex_unlock(&busy.mu);
  if (target == 0) return;
  cb_reply_t r = {.ref = target, .op = CB_REPLY_SEND, .body = CB_S("defg")};
  ASSERT_ERR(cb_server_reply(hq.srv, &r, 1), 0);
  sleep_ms(1500); /* the target's timeout is 1000 ms, counted from before this call */
  pthread_mutex_lock(&busy.mu);
  busy.result = r.result;
  busy.done++;
  pthread_mutex_unlock(&busy.mu);
}

/* Another h2c client's /g/ request is parked first; then the head and "abc" go to target and run (the answer is
 * written by then: its deadline is 1000 ms away), and that client's connection is reset: the worker, in the gone
 * hook, hands "defg" over and sleeps past target's deadline. */
static void piece_while_busy(int port, cb_reqref_t target) {
  h2cl_t *cl = h2_open(port);
  h2_handshake(cl);
  int before = delivered();
  h2_request(cl, 1, "GET", "/g/1", NULL, 0, NULL, 0);
  wait_delivered(before + 1);
  (void)pop_ref();
  cb_reply_t rs[2] = {{.ref = target, .op = CB_REPLY_STREAM, .status = 200},
                      {.ref = target, .op = CB_REPLY_SEND, .body = CB_S("abc")}};
  ASSERT_ERR(cb_server_reply(hq.srv, rs, 2), 0);
  ASSERT_ERR(rs[0].result, 0);
  ASSERT_ERR(rs[1].result, 0);
  ASSERT(cb__server_reply_queued(hq.srv, target) != SIZE_MAX); /* run, and not cut */
  pthread_mutex_lock(&busy.mu);
  int done = busy.done;
  busy.target = target;
  busy.result = -1;
  pthread_mutex_unlock(&busy.mu);
  struct linger lg = {1, 0};
  setsockopt(cl->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  h2_free(cl);
  for (int i = 0; i < 1000; i++) {
    pthread_mutex_lock(&busy.mu);
    int n = busy.done;
    pthread_mutex_unlock(&busy.mu);
    if (n > done) break;
    sleep_ms(10);
  }
  ASSERT_EQ(busy.done, done + 1);
  ASSERT_ERR(busy.result, 0); /* handed over while the request was streaming */
}

TEST_T(deferred_timeout_piece_on_its_way, 60000) {
  cb_config_t cfg;
  test_config(&cfg);
  cfg.threads = 1;
  cb_server_t *srv = test_start(&cfg);
  hq.srv = srv;
  hq.delivered = 0;
  int port = cb_server_port(srv);
  add_deferred(srv, NULL, "/t/*", deliver, 1000, 0);
  cb_deferred_t d;
  memset(&d, 0, sizeof d);
  d.match.path = CB_S("/g/*");
  d.deliver = deliver;
  d.gone = gone_sends_piece;
  d.timeout_ms = 30000;
  uint64_t id = 0;
  ASSERT_ERR(cb_server_deferred_add(srv, &d, &id), 0);
  cb_stats_t st0, st1;
  ASSERT_ERR(cb_server_stats(srv, &st0), 0);
  int fd = cl_connect(port);
  cl_sends(fd, "GET /t/1 HTTP/1.1\r\nhost: x\r\n\r\n");
  wait_delivered(1);
  piece_while_busy(port, pop_ref());
  static const char *const pieces[] = {"abc", "defg", NULL};
  expect_cut_h1(fd, pieces);
  close(fd);
  h2cl_t *cl = h2_open(port);
  h2_handshake(cl);
  int before = delivered();
  h2resp_t *r1 = h2_request(cl, 1, "GET", "/t/2", NULL, 0, NULL, 0);
  wait_delivered(before + 1);
  piece_while_busy(port, pop_ref());
  expect_cut_h2(cl, r1, "abcdefg");
  h2_free(cl);
  ASSERT_ERR(cb_server_stats(srv, &st1), 0);
  ASSERT_EQ(st1.handler_timeouts - st0.handler_timeouts, 2);
  test_stop(srv);
}

/* ---- deferred routes churned while repliers answer (the audit of races between the API and the workers): the
 * route is replaced, failed and removed while requests are parked on it and replies are on their way. Every
 * request gets the reply or a 503 (a route for its path is always there); no callback reaches a route's ud once
 * its free_ud ran. ---- */

#define DCHURN_REQS 200
#define DCHURN_ROUTES 120

typedef struct {
  int freed;   /* atomic: free_ud ran */
  int late;    /* atomic: a callback came after it */
} dchurn_ud_t;

static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  cb_reqref_t *refs;
  size_t n, cap;
  int stop;
  cb_server_t *srv;
  long replied, egone, gone_calls;
} dq = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, 0, 0, 0, NULL, 0, 0, 0};

static void dchurn_check(dchurn_ud_t *u) {
  if (__atomic_load_n(&u->freed, __ATOMIC_ACQUIRE)) __atomic_store_n(&u->late, 1, __ATOMIC_RELEASE);
}

static int dchurn_deliver(void *ud, const cb_deferred_req_t *reqs, size_t n) {
  dchurn_check(ud);
  pthread_mutex_lock(&dq.mu);
  for (size_t k = 0; k < n; k++) {
    if (dq.n == dq.cap) {
      dq.cap = dq.cap ? 2 * dq.cap : 256;
      dq.refs = realloc(dq.refs, dq.cap * sizeof *dq.refs);
      ASSERT_NOT_NULL(dq.refs);
    }
    dq.refs[dq.n++] = reqs[k].ref;
  }
  pthread_cond_broadcast(&dq.cv);
  pthread_mutex_unlock(&dq.mu);
  return 0;
}

static void dchurn_gone(void *ud, cb_reqref_t ref) {
  (void)ref;
  dchurn_check(ud);
  __atomic_add_fetch(&dq.gone_calls, 1, __ATOMIC_RELAXED);
}

static void dchurn_free(void *ud) {
  dchurn_ud_t *u = ud;
  ASSERT_EQ(__atomic_exchange_n(&u->freed, 1, __ATOMIC_ACQ_REL), 0); /* once */
}

static void *dchurn_replier(void *arg) {
  (void)arg;
  pthread_mutex_lock(&dq.mu);
  for (;;) {
    while (dq.n == 0 && !dq.stop) pthread_cond_wait(&dq.cv, &dq.mu);
    if (dq.n == 0) break;
    cb_reqref_t ref = dq.refs[--dq.n];
    pthread_mutex_unlock(&dq.mu);
    cb_reply_t r = {.ref = ref, .op = CB_REPLY_FULL, .status = 200, .body = CB_S("R")};
    ASSERT_ERR(cb_server_reply(dq.srv, &r, 1), 0);
    if (r.result != 0) ASSERT_ERR(r.result, CB_EGONE); /* failed (503) meanwhile */
    __atomic_add_fetch(r.result == 0 ? &dq.replied : &dq.egone, 1, __ATOMIC_RELAXED);
    pthread_mutex_lock(&dq.mu);
  }
  pthread_mutex_unlock(&dq.mu);
  return NULL;
}

typedef struct {
  int port, h2;
  long ok, unavailable, wrong;
} dchurn_cl_t;

static void dchurn_judge(dchurn_cl_t *ck, int status, const char *body, size_t len) {
  if (status == 200 && len == 1 && body[0] == 'R')
    ck->ok++;
  else if (status == 503)
    ck->unavailable++;
  else {
    cbt_log("wrong answer: status %d, %zu bytes of body", status, len);
    ck->wrong++;
  }
}

static void *dchurn_client(void *arg) {
  dchurn_cl_t *ck = arg;
  if (ck->h2) {
    h2cl_t *cl = h2_open(ck->port);
    h2_handshake(cl);
    for (int i = 0; i < DCHURN_REQS; i += 4) {
      h2resp_t *rs[4];
      for (int k = 0; k < 4; k++) rs[k] = h2_request(cl, 2 * (i + k) + 1, "GET", "/dchurn", NULL, 0, NULL, 0);
      h2_wait(cl, rs, 4, 15000);
      for (int k = 0; k < 4; k++) {
        dchurn_judge(ck, rs[k]->rst == H2_NO_RST ? rs[k]->status : -1, rs[k]->body.p, rs[k]->body.len);
        h2_forget(cl, 2 * (i + k) + 1);
      }
    }
    h2_free(cl);
    return NULL;
  }
  int fd = cl_connect(ck->port);
  static const char req[] = "GET /dchurn HTTP/1.1\r\nhost: x\r\n\r\n";
  for (int i = 0; i < DCHURN_REQS; i++) {
    buf_t got = {0};
    cl_send(fd, req, sizeof req - 1);
    long n;
    while ((n = cl_response_len(got.p, got.len, 0)) == 0)
      if (cl_read_n(fd, &got, got.len + 1, 15000) != CL_OK) break;
    int status = 0;
    const char *body = n > 0 ? memmem(got.p, (size_t)n, "\r\n\r\n", 4) : NULL;
    if (body == NULL || sscanf(got.p, "HTTP/1.1 %d", &status) != 1) {
      cbt_log("h1: no complete answer (%zu bytes)", got.len);
      ck->wrong++;
      buf_free(&got);
      break;
    }
    body += 4;
    dchurn_judge(ck, status, body, (size_t)(got.p + n - body));
    ASSERT_EQ((size_t)n, got.len);
    buf_free(&got);
  }
  close(fd);
  return NULL;
}

TEST_T(deferred_churn_fail_remove_reply, 60000) {
  cb_config_t cfg;
  test_config(&cfg);
  cfg.threads = 2;
  cb_server_t *srv = test_start(&cfg);
  int port = cb_server_port(srv);
  dq.srv = srv;
  dq.stop = 0;
  pthread_t rep[3];
  for (int i = 0; i < 3; i++) ASSERT_EQ(pthread_create(&rep[i], NULL, dchurn_replier, NULL), 0);
  static dchurn_ud_t uds[DCHURN_ROUTES];
  memset(uds, 0, sizeof uds);
  uint64_t cur = 0;
  dchurn_cl_t cls[4] = {{.port = port}, {.port = port}, {.port = port, .h2 = 1}, {.port = port, .h2 = 1}};
  pthread_t th[4];
  for (int i = 0; i < DCHURN_ROUTES; i++) {
    cb_deferred_t d;
    memset(&d, 0, sizeof d);
    d.match.path = CB_S("/dchurn");
    d.deliver = dchurn_deliver;
    d.gone = dchurn_gone;
    d.free_ud = dchurn_free;
    d.ud = &uds[i];
    d.timeout_ms = 10000;
    d.batch = i % 2;
    uint64_t id;
    ASSERT_ERR(cb_server_deferred_add(srv, &d, &id), 0);
    if (cur != 0) ASSERT_ERR(cb_server_route_remove(srv, cur), 0);
    cur = id;
    if (i == 0) /* the clients begin once a route is there: a 404 is then a table without one */
      for (int k = 0; k < 4; k++) ASSERT_EQ(pthread_create(&th[k], NULL, dchurn_client, &cls[k]), 0);
    if (i % 5 == 0) ASSERT_ERR(cb_server_deferred_fail(srv, cur), 0);
    if (i % 3 == 0) sched_yield();
  }
  long ok = 0, unavailable = 0;
  for (int i = 0; i < 4; i++) {
    pthread_join(th[i], NULL);
    cbt_log("client %d (%s): %ld replied, %ld 503, %ld wrong", i, cls[i].h2 ? "h2c" : "h1", cls[i].ok,
            cls[i].unavailable, cls[i].wrong);
    ASSERT_EQ(cls[i].wrong, 0);
    ASSERT_EQ(cls[i].ok + cls[i].unavailable, DCHURN_REQS);
    ok += cls[i].ok;
    unavailable += cls[i].unavailable;
  }
  pthread_mutex_lock(&dq.mu);
  dq.stop = 1;
  pthread_cond_broadcast(&dq.cv);
  pthread_mutex_unlock(&dq.mu);
  for (int i = 0; i < 3; i++) pthread_join(rep[i], NULL);
  cbt_log("%ld replied, %ld CB_EGONE, %ld gone calls", dq.replied, dq.egone, dq.gone_calls);
  ASSERT_EQ(dq.replied, ok);
  cb_stats_t st;
  ASSERT_ERR(cb_server_stats(srv, &st), 0);
  ASSERT_EQ(st.handler_unavailable, (uint64_t)unavailable);
  ASSERT_EQ(st.handler_timeouts, 0);
  test_stop(srv);
  for (int i = 0; i < DCHURN_ROUTES; i++) {
    ASSERT_EQ(uds[i].freed, 1);
    ASSERT_EQ(uds[i].late, 0);
  }
  free(dq.refs);
  dq.refs = NULL;
  dq.n = dq.cap = 0;
}

/* ---- down and up while requests are parked and replies are on their way: a parked request whose connection
 * the down closed is gone (its replies CB_EGONE), every other one gets its reply; nothing times out. ---- */

#define DDOWN_CYCLES 20
#define DDOWN_REQS 150

typedef struct {
  int port;
  long ok, cut, wrong;
} ddown_cl_t;

static void *ddown_client(void *arg) {
  ddown_cl_t *ck = arg;
  static const char req[] = "GET /dchurn HTTP/1.1\r\nhost: x\r\n\r\n";
  int fd = -1;
  for (int i = 0; i < DDOWN_REQS; i++) {
    if (fd < 0) {
      fd = cl_socket();
      struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)ck->port),
                               .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
      if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) { /* down: try again in a moment */
        close(fd);
        fd = -1;
        ck->cut++;
        sleep_ms(2);
        continue;
      }
    }
    buf_t got = {0};
    if (send(fd, req, sizeof req - 1, MSG_NOSIGNAL) != (ssize_t)(sizeof req - 1)) {
      ck->cut++;
      close(fd);
      fd = -1;
      continue;
    }
    long n;
    int rr = CL_OK;
    while ((n = cl_response_len(got.p, got.len, 0)) == 0)
      if ((rr = cl_read_n(fd, &got, got.len + 1, 15000)) != CL_OK) break;
    if (n > 0 && got.len >= 15 && memcmp(got.p, "HTTP/1.1 200", 12) == 0 && got.p[n - 1] == 'R')
      ck->ok++;
    else if (n > 0 && memcmp(got.p, "HTTP/1.1 503", 12) == 0)
      ck->wrong++; /* no deferred_fail here */
    else if (n == 0 && (rr == CL_EOF || rr == CL_RESET))
      ck->cut++;
    else {
      cbt_log("wrong: %ld, %s, %zu bytes", n, cl_status_name(rr), got.len);
      ck->wrong++;
    }
    buf_free(&got);
    if (n <= 0) {
      close(fd);
      fd = -1;
    }
  }
  if (fd >= 0) close(fd);
  return NULL;
}

TEST_T(deferred_down_up_while_replying, 60000) {
  cb_config_t cfg;
  test_config(&cfg);
  cfg.threads = 2;
  cb_server_t *srv = test_start(&cfg);
  int port = cb_server_port(srv);
  dq.srv = srv;
  dq.stop = 0;
  dq.replied = dq.egone = dq.gone_calls = 0;
  pthread_t rep[3];
  for (int i = 0; i < 3; i++) ASSERT_EQ(pthread_create(&rep[i], NULL, dchurn_replier, NULL), 0);
  static dchurn_ud_t ud;
  memset(&ud, 0, sizeof ud);
  cb_deferred_t d;
  memset(&d, 0, sizeof d);
  d.match.path = CB_S("/dchurn");
  d.deliver = dchurn_deliver;
  d.gone = dchurn_gone;
  d.free_ud = dchurn_free;
  d.ud = &ud;
  d.timeout_ms = 10000;
  uint64_t id;
  ASSERT_ERR(cb_server_deferred_add(srv, &d, &id), 0);
  ddown_cl_t cls[3] = {{.port = port}, {.port = port}, {.port = port}};
  pthread_t th[3];
  for (int i = 0; i < 3; i++) ASSERT_EQ(pthread_create(&th[i], NULL, ddown_client, &cls[i]), 0);
  for (int i = 0; i < DDOWN_CYCLES; i++) {
    sleep_ms(3);
    ASSERT_ERR(cb_server_down(srv), 0);
    ASSERT_ERR(cb_server_up(srv), 0);
  }
  long ok = 0;
  for (int i = 0; i < 3; i++) {
    pthread_join(th[i], NULL);
    cbt_log("client %d: %ld replied, %ld cut, %ld wrong", i, cls[i].ok, cls[i].cut, cls[i].wrong);
    ASSERT_EQ(cls[i].wrong, 0);
    ASSERT_EQ(cls[i].ok + cls[i].cut, DDOWN_REQS);
    ok += cls[i].ok;
  }
  pthread_mutex_lock(&dq.mu);
  dq.stop = 1;
  pthread_cond_broadcast(&dq.cv);
  pthread_mutex_unlock(&dq.mu);
  for (int i = 0; i < 3; i++) pthread_join(rep[i], NULL);
  cbt_log("%ld replied, %ld CB_EGONE, %ld gone calls", dq.replied, dq.egone, dq.gone_calls);
  ASSERT_GE(dq.replied, ok); /* a reply can be taken and its connection closed before it is written */
  cb_stats_t st;
  ASSERT_ERR(cb_server_stats(srv, &st), 0);
  ASSERT_EQ(st.handler_timeouts, 0);
  ASSERT_EQ(st.handler_unavailable, 0);
  test_stop(srv);
  ASSERT_EQ(ud.freed, 1);
  ASSERT_EQ(ud.late, 0);
  free(dq.refs);
  dq.refs = NULL;
  dq.n = dq.cap = 0;
}
