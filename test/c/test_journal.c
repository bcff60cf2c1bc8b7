/* The request journal (issue 9): its exact content for known requests over both protocols, body truncation,
 * order across workers, the ring bound, filters, clear, the listener, and a disabled journal. */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "common.h"
#include "h2client.h"

static cb_server_t *start_journal(int threads, unsigned journal, size_t body_bytes) {
  cb_config_t cfg;
  test_config(&cfg);
  cfg.threads = threads;
  cfg.journal = journal;
  cfg.journal_body_bytes = body_bytes;
  return test_start(&cfg);
}

static void assert_str(cb_str_t got, const char *want) {
  ASSERT_EQ(got.len, strlen(want));
  ASSERT_EQ(got.ptr[got.len], '\0');
  ASSERT_STR_EQ(got.ptr, want);
}

static void assert_header(const cb_request_t *r, size_t i, const char *name, const char *value) {
  ASSERT_LT(i, r->nheaders);
  assert_str(r->headers[i].name, name);
  assert_str(r->headers[i].value, value);
}

TEST(journal_http1_exact) {
  cb_server_t *srv = start_journal(1, 100, 4);
  int fd = cl_connect(cb_server_port(srv));
  buf_t got = {0};
  static const char req[] = "POST /echo?a=1&b HTTP/1.1\r\nHost: example\r\nX-A: 1\r\nx-a: 2\r\n"
                            "Content-Length: 10\r\n\r\n0123456789";
  cl_send(fd, req, sizeof req - 1);
  while (cl_response_len(got.p, got.len, 0) == 0) ASSERT_EQ(cl_read_n(fd, &got, got.len + 1, 10000), CL_OK);
  cl_sends(fd, "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n");
  cb_request_list_t *list = wait_journal(srv, NULL, 2, 5000);
  ASSERT_EQ(list->count, 2);
  const cb_request_t *r = &list->items[0];
  ASSERT_EQ(r->seq, 1);
  ASSERT_EQ(r->proto, CB_PROTO_HTTP1);
  ASSERT_EQ(r->conn_id, 1);
  ASSERT_EQ(r->stream_id, 0);
  ASSERT(strncmp(r->peer.ptr, "127.0.0.1:", 10) == 0);
  assert_str(r->method, "POST");
  assert_str(r->path, "/echo");
  assert_str(r->query, "a=1&b");
  ASSERT_EQ(r->nheaders, 4);
  assert_header(r, 0, "host", "example");
  assert_header(r, 1, "x-a", "1");
  assert_header(r, 2, "x-a", "2");
  assert_header(r, 3, "content-length", "10");
  assert_str(r->body, "0123"); /* journal_body_bytes = 4 */
  ASSERT_EQ(r->body_len, 10);
  assert_str(r->route, "echo");
  ASSERT_EQ(r->stub_id, 0);
  ASSERT_EQ(r->status, 200);
  ASSERT_EQ(r->bytes_out, 10);
  ASSERT_GT(r->time_us, 1700000000LL * 1000000);
  r = &list->items[1];
  ASSERT_EQ(r->seq, 2);
  ASSERT_EQ(r->conn_id, 1);
  assert_str(r->method, "GET");
  assert_str(r->query, "");
  ASSERT_EQ(r->nheaders, 1);
  assert_header(r, 0, "host", "x");
  assert_str(r->route, "not_found");
  ASSERT_EQ(r->status, 404);
  ASSERT_EQ(r->body_len, 0);
  ASSERT_GE(list->items[1].time_us, list->items[0].time_us);
  cb_request_list_free(list);
  close(fd);
  buf_free(&got);
  test_stop(srv);
}

/* The journal's clock is read once per loop iteration (docs/routes.md): requests that arrive in one read share
 * their time, and an answer complete in the iteration of its request lasted 0 us; an answer from a timer, later. */
TEST(journal_clock_per_iteration) {
  cb_server_t *srv = start_journal(1, 100, 4);
  int fd = cl_connect(cb_server_port(srv));
  /* Three requests in one segment: one read, one iteration. */
  static const char three[] = "GET /hello HTTP/1.1\r\nHost: x\r\n\r\nGET /json HTTP/1.1\r\nHost: x\r\n\r\n"
                              "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  cl_send(fd, three, sizeof three - 1);
  cb_request_list_t *list = wait_journal(srv, NULL, 3, 5000);
  ASSERT_EQ(list->count, 3);
  for (size_t i = 0; i < 3; i++) {
    ASSERT_EQ(list->items[i].time_us, list->items[0].time_us);
    ASSERT_EQ(list->items[i].duration_us, 0);
  }
  int64_t first = list->items[0].time_us;
  cb_request_list_free(list);
  cl_sends(fd, "GET /delay/20 HTTP/1.1\r\nHost: x\r\n\r\n");
  list = wait_journal(srv, NULL, 4, 5000);
  ASSERT_EQ(list->count, 4);
  const cb_request_t *r = &list->items[3];
  assert_str(r->path, "/delay/20");
  ASSERT_GE(r->time_us, first);
  ASSERT_GT(r->duration_us, 0); /* answered from a timer, in a later iteration */
  cb_request_list_free(list);
  close(fd);
  test_stop(srv);
}

TEST(journal_h2_exact) {
  cb_server_t *srv = start_journal(1, 100, 65536);
  cb_stub_t st;
  memset(&st, 0, sizeof st);
  st.name = CB_S("created");
  st.match.methods = CB_METHOD_POST;
  st.match.path = CB_S("/items/{id}");
  st.response.status = 201;
  uint64_t id;
  ASSERT_ERR(cb_server_route_add(srv, &st, &id), 0);
  h2cl_t *cl = h2_open(cb_server_port(srv));
  h2_handshake(cl);
  static const char *const extra[] = {"x-b", "3", "x-b", "4"};
  h2resp_t *r1 = h2_request(cl, 1, "GET", "/hello?x=1", extra, 2, NULL, 0);
  h2_wait1(cl, r1, 10000);
  h2resp_t *r3 = h2_request(cl, 3, "POST", "/items/7", NULL, 0, "payload", 7);
  h2_wait1(cl, r3, 10000);
  ASSERT_EQ(r3->status, 201);
  cb_request_list_t *list = wait_journal(srv, NULL, 2, 5000);
  ASSERT_EQ(list->count, 2);
  const cb_request_t *r = &list->items[0];
  ASSERT_EQ(r->proto, CB_PROTO_H2C_PRIOR);
  ASSERT_EQ(r->stream_id, 1);
  assert_str(r->method, "GET");
  assert_str(r->path, "/hello");
  assert_str(r->query, "x=1");
  ASSERT_EQ(r->nheaders, 3); /* :authority as host, then the regular fields in order */
  char host[64];
  snprintf(host, sizeof host, "127.0.0.1:%d", cb_server_port(srv));
  assert_header(r, 0, "host", host);
  assert_header(r, 1, "x-b", "3");
  assert_header(r, 2, "x-b", "4");
  assert_str(r->route, "hello");
  ASSERT_EQ(r->status, 200);
  ASSERT_EQ(r->bytes_out, 11);
  r = &list->items[1];
  ASSERT_EQ(r->stream_id, 3);
  assert_str(r->method, "POST");
  assert_str(r->path, "/items/7");
  assert_str(r->route, "created");
  ASSERT_EQ(r->stub_id, id);
  ASSERT_EQ(r->status, 201);
  assert_str(r->body, "payload");
  ASSERT_EQ(r->body_len, 7);
  ASSERT_EQ(r->conn_id, list->items[0].conn_id);
  cb_request_list_free(list);
  h2_free(cl);
  test_stop(srv);
}

/* Two workers, many connections: one list in sequence order, every request once. */
TEST(journal_order_two_workers) {
  cb_server_t *srv = start_journal(2, 1000, 65536);
  int port = cb_server_port(srv);
  char req[64];
  for (int i = 0; i < 40; i++) {
    int fd = cl_connect(port);
    snprintf(req, sizeof req, "GET /status/2%02d HTTP/1.1\r\nHost: x\r\nconnection: close\r\n\r\n", i % 100);
    cl_sends(fd, req);
    buf_t got = {0};
    cl_read_close(fd, &got, 5000);
    buf_free(&got);
    close(fd);
  }
  cb_request_list_t *list = wait_journal(srv, NULL, 40, 5000);
  ASSERT_EQ(list->count, 40);
  for (int i = 0; i < 40; i++) {
    const cb_request_t *r = &list->items[i];
    ASSERT_EQ(r->seq, (uint64_t)i + 1);
    snprintf(req, sizeof req, "/status/2%02d", i);
    assert_str(r->path, req);
    ASSERT_EQ(r->status, 200 + i);
    ASSERT_EQ(r->conn_id, (uint64_t)i + 1);
  }
  cb_request_list_free(list);
  test_stop(srv);
}

TEST(journal_bound_filter_clear) {
  cb_server_t *srv = start_journal(2, 10, 65536);
  int fd = cl_connect(cb_server_port(srv));
  buf_t got = {0};
  for (int i = 0; i < 30; i++) {
    cl_sends(fd, i % 3 ? "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n" : "HEAD /json HTTP/1.1\r\nHost: x\r\n\r\n");
  }
  cb_stats_t st;
  do {
    sleep_ms(2);
    ASSERT_ERR(cb_server_stats(srv, &st), 0);
  } while (st.requests < 30);
  /* The newest 10 only. */
  cb_request_list_t *list = wait_journal(srv, NULL, 10, 5000);
  ASSERT_EQ(list->count, 10);
  ASSERT_EQ(list->items[0].seq, 21);
  ASSERT_EQ(list->items[9].seq, 30);
  cb_request_list_free(list);
  cb_request_filter_t f = {.method = CB_S("HEAD")};
  list = wait_journal(srv, &f, 3, 5000);
  ASSERT_EQ(list->count, 3); /* 22, 25, 28 */
  ASSERT_EQ(list->items[0].seq, 22);
  assert_str(list->items[0].route, "json");
  ASSERT_EQ(list->items[0].bytes_out, 0);
  cb_request_list_free(list);
  f = (cb_request_filter_t){.path = CB_S("/hello"), .since = 26, .limit = 2};
  list = wait_journal(srv, &f, 2, 5000);
  ASSERT_EQ(list->count, 2);
  ASSERT_EQ(list->items[0].seq, 27);
  ASSERT_EQ(list->items[1].seq, 29);
  cb_request_list_free(list);
  f = (cb_request_filter_t){.route = CB_S("json"), .stub_id = 5};
  list = wait_journal(srv, &f, 0, 5000);
  ASSERT_EQ(list->count, 0);
  cb_request_list_free(list);
  ASSERT_ERR(cb_server_requests_clear(srv), 0);
  list = wait_journal(srv, NULL, 0, 5000);
  ASSERT_EQ(list->count, 0);
  cb_request_list_free(list);
  cl_sends(fd, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
  list = wait_journal(srv, NULL, 1, 5000);
  ASSERT_EQ(list->count, 1);
  ASSERT_EQ(list->items[0].seq, 31); /* sequence numbers go on */
  cb_request_list_free(list);
  close(fd);
  buf_free(&got);
  test_stop(srv);
}

/* A request recorded after newer ones (its answer ended later: here its body came later) whose number is no
 * longer among the server's newest `journal` is dropped at once: in the worker's ring, which is in the order of
 * recording, it took a slot from one that is among them (the ring, full, dropped its head: /hello #2), and was
 * never read. One worker, journal 3: the POST is #1, three /hello #2..#4, then the POST ends. */
TEST(journal_late_entry_outside_bound) {
  cb_server_t *srv = start_journal(1, 3, 65536);
  int post = cl_connect(cb_server_port(srv));
  cl_sends(post, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n");
  cb_stats_t st;
  do {
    sleep_ms(2);
    ASSERT_ERR(cb_server_stats(srv, &st), 0);
  } while (st.requests < 1); /* dispatched: numbered */
  int fd = cl_connect(cb_server_port(srv));
  for (int i = 0; i < 3; i++) cl_sends(fd, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
  cb_request_list_t *list = wait_journal(srv, NULL, 3, 5000);
  ASSERT_EQ(list->count, 3);
  cb_request_list_free(list);
  cl_sends(post, "abcde");
  buf_t got = {0};
  while (got.len < 5 || memcmp(got.p + got.len - 5, "abcde", 5) != 0)
    ASSERT_EQ(cl_read_n(post, &got, got.len + 1, 5000), CL_OK); /* the answer's end: recorded */
  list = wait_journal(srv, NULL, 3, 5000);
  ASSERT_EQ(list->count, 3);
  for (size_t i = 0; i < 3; i++) {
    ASSERT_EQ(list->items[i].seq, i + 2);
    assert_str(list->items[i].path, "/hello");
  }
  cb_request_list_free(list);
  buf_free(&got);
  close(fd);
  close(post);
  test_stop(srv);
}

/* ---- requests answered out of order: the ring lists the newest `journal` by seq ----
 * A deferred route /held parks its requests; the test answers them when it chooses, so that a request is
 * recorded after newer ones (late) at a known point. One worker: seqs are given in the order the test sends. */

static struct {
  pthread_mutex_t mu;
  cb_reqref_t last; /* the newest one's reference */
  int n;            /* how many were delivered */
} held = {PTHREAD_MUTEX_INITIALIZER, 0, 0};

static int hold(void *ud, const cb_deferred_req_t *reqs, size_t n) {
  (void)ud;
  pthread_mutex_lock(&held.mu);
  held.last = reqs[n - 1].ref;
  held.n += (int)n;
  pthread_mutex_unlock(&held.mu);
  return 0;
}

static cb_server_t *start_held(unsigned journal) {
  pthread_mutex_lock(&held.mu);
  held.n = 0;
  pthread_mutex_unlock(&held.mu);
  cb_server_t *srv = start_journal(1, journal, 65536);
  cb_deferred_t d = {.match = {.path = CB_S("/held")}, .timeout_ms = 600000, .deliver = hold};
  uint64_t id;
  ASSERT_ERR(cb_server_deferred_add(srv, &d, &id), 0);
  return srv;
}

/* A request to /held on a connection of its own, once parked (numbered): its reference. */
static cb_reqref_t send_held(int port, int *fd) {
  pthread_mutex_lock(&held.mu);
  int before = held.n;
  pthread_mutex_unlock(&held.mu);
  *fd = cl_connect(port);
  cl_sends(*fd, "GET /held HTTP/1.1\r\nHost: x\r\n\r\n");
  for (uint64_t t0 = now_ms();; sleep_ms(1)) {
    pthread_mutex_lock(&held.mu);
    int n = held.n;
    pthread_mutex_unlock(&held.mu);
    if (n > before) break;
    if (now_ms() - t0 > 10000) FAIL("/held was not delivered");
  }
  pthread_mutex_lock(&held.mu);
  cb_reqref_t ref = held.last;
  pthread_mutex_unlock(&held.mu);
  return ref;
}

/* Reads one whole response from fd: once it has ended, its request is recorded. */
static void read_whole(int fd) {
  buf_t got = {0};
  while (cl_response_len(got.p, got.len, 0) == 0) ASSERT_EQ(cl_read_n(fd, &got, got.len + 1, 10000), CL_OK);
  ASSERT_GT(cl_response_len(got.p, got.len, 0), 0);
  buf_free(&got);
}

static void answer_held(cb_server_t *srv, cb_reqref_t ref, int fd) {
  cb_reply_t r = {.ref = ref, .op = CB_REPLY_FULL, .status = 200, .body = CB_S("late")};
  ASSERT_ERR(cb_server_reply(srv, &r, 1), 0);
  ASSERT_ERR(r.result, 0);
  read_whole(fd);
}

static void get_hello(int fd) {
  cl_sends(fd, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
  read_whole(fd);
}

/* docs/erlang.md's example: journal 3, one worker. /held is #1; /hello #2 and #3; #1 answered (recorded behind
 * them, still among the newest 3); /hello #4. The newest 3 are #2..#4: the ring, full, dropped its head (#2)
 * and kept #1, which no read lists (seq 3 and 4 were listed). */
TEST(journal_late_entry_full_ring) {
  cb_server_t *srv = start_held(3);
  int port = cb_server_port(srv), hfd;
  cb_reqref_t ref = send_held(port, &hfd);
  int fd = cl_connect(port);
  get_hello(fd);
  get_hello(fd);
  answer_held(srv, ref, hfd);
  cb_request_list_t *list;
  ASSERT_ERR(cb_server_requests(srv, NULL, &list), 0);
  ASSERT_EQ(list->count, 3);
  for (size_t i = 0; i < 3; i++) ASSERT_EQ(list->items[i].seq, i + 1);
  assert_str(list->items[0].path, "/held");
  cb_request_list_free(list);
  get_hello(fd);
  ASSERT_ERR(cb_server_requests(srv, NULL, &list), 0);
  ASSERT_EQ(list->count, 3);
  for (size_t i = 0; i < 3; i++) {
    ASSERT_EQ(list->items[i].seq, i + 2);
    assert_str(list->items[i].path, "/hello");
  }
  cb_request_list_free(list);
  close(fd);
  close(hfd);
  test_stop(srv);
}

/* A fixed seed drives /hello requests, parked /held ones, answers to them in random order and clears; after
 * each step the journal must list exactly what a model lists: of the requests recorded, those whose seq is among
 * the server's newest `journal` (seq > numbered - journal) and above the last clear's floor, by seq. */
TEST(journal_late_entries_random) {
  enum { JOURNAL = 5, STEPS = 600, MAX_HELD = 6 };
  cb_server_t *srv = start_held(JOURNAL);
  int port = cb_server_port(srv), fd = cl_connect(port);
  static char recorded[STEPS + 1], is_held[STEPS + 1]; /* by seq */
  memset(recorded, 0, sizeof recorded);
  memset(is_held, 0, sizeof is_held);
  struct {
    cb_reqref_t ref;
    int fd;
    uint64_t seq;
  } waiting[MAX_HELD];
  int nwaiting = 0;
  uint64_t numbered = 0, floor = 0, rng = 0x9E3779B97F4A7C15ull;
  for (int step = 0; step < STEPS; step++) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17; /* xorshift64 */
    unsigned r = (unsigned)(rng >> 32) % 100;
    if (r < 35 && nwaiting < MAX_HELD) {
      waiting[nwaiting].ref = send_held(port, &waiting[nwaiting].fd);
      waiting[nwaiting++].seq = ++numbered;
      is_held[numbered] = 1;
    } else if (r < 70 && nwaiting > 0) {
      int k = (int)((rng >> 8) % (uint64_t)nwaiting);
      answer_held(srv, waiting[k].ref, waiting[k].fd);
      close(waiting[k].fd);
      recorded[waiting[k].seq] = 1;
      waiting[k] = waiting[--nwaiting];
    } else if (r < 97) {
      get_hello(fd);
      recorded[++numbered] = 1;
    } else {
      ASSERT_ERR(cb_server_requests_clear(srv), 0);
      floor = numbered;
    }
    cb_request_list_t *list;
    ASSERT_ERR(cb_server_requests(srv, NULL, &list), 0);
    size_t k = 0;
    for (uint64_t s = numbered > JOURNAL ? numbered - JOURNAL + 1 : 1; s <= numbered; s++) {
      if (!recorded[s] || s <= floor) continue;
      if (k >= list->count) FAIL("step %d: seq %llu is missing (%zu listed)", step, (unsigned long long)s,
                                 list->count);
      if (list->items[k].seq != s)
        FAIL("step %d: seq %llu listed where %llu was due", step, (unsigned long long)list->items[k].seq,
             (unsigned long long)s);
      assert_str(list->items[k].path, is_held[s] ? "/held" : "/hello");
      k++;
    }
    if (k != list->count) FAIL("step %d: %zu listed, %zu due", step, list->count, k);
    cb_request_list_free(list);
  }
  for (int k = 0; k < nwaiting; k++) close(waiting[k].fd);
  close(fd);
  test_stop(srv);
}

TEST(journal_disabled) {
  cb_server_t *srv = start_journal(1, 0, 65536);
  int fd = cl_connect(cb_server_port(srv));
  buf_t e = {0};
  exp_route(&e, "GET", "/hello", CONN_NONE);
  ROUNDTRIP_S(fd, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n", &e);
  cb_request_list_t *list;
  ASSERT_ERR(cb_server_requests(srv, NULL, &list), 0);
  ASSERT_EQ(list->count, 0);
  cb_request_list_free(list);
  ASSERT_ERR(cb_server_requests_clear(srv), 0);
  close(fd);
  buf_free(&e);
  test_stop(srv);
}

/* Waits (up to 5 s) until a listener has been called `want` times; returns how many times it was. */
static int wait_calls(int *calls, int want) {
  uint64_t t0 = now_ms();
  while (__atomic_load_n(calls, __ATOMIC_ACQUIRE) < want && now_ms() - t0 < 5000) sleep_ms(1);
  return __atomic_load_n(calls, __ATOMIC_ACQUIRE);
}

typedef struct {
  cb_server_t *srv;
  int calls;    /* atomic */
  int nested;   /* what a blocking call answered inside the listener */
  char path[64];
} listen_t;

static void on_request(void *ud, const cb_request_t *r) {
  listen_t *l = ud;
  snprintf(l->path, sizeof l->path, "%.*s", (int)r->path.len, r->path.ptr);
  l->nested = cb_server_requests_clear(l->srv);
  __atomic_add_fetch(&l->calls, 1, __ATOMIC_RELEASE);
}

TEST(journal_listener) {
  cb_server_t *srv = start_journal(2, 100, 65536);
  listen_t l = {.srv = srv};
  ASSERT_ERR(cb_server_set_journal_listener(srv, on_request, &l), 0);
  int fd = cl_connect(cb_server_port(srv));
  cl_sends(fd, "GET /json?z HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_EQ(wait_calls(&l.calls, 1), 1);
  ASSERT_STR_EQ(l.path, "/json");
  ASSERT_ERR(l.nested, UV_EBUSY);
  ASSERT_ERR(cb_server_set_journal_listener(srv, NULL, NULL), 0);
  cl_sends(fd, "GET /json HTTP/1.1\r\nHost: x\r\n\r\n");
  cb_request_list_t *list = wait_journal(srv, NULL, 2, 5000);
  ASSERT_EQ(list->count, 2);
  cb_request_list_free(list);
  ASSERT_EQ(__atomic_load_n(&l.calls, __ATOMIC_ACQUIRE), 1); /* cleared: not called again */
  close(fd);
  test_stop(srv);
}

/* Header names as the listener sees them (views into the ring) and as a read copies them out: lowercase both
 * ways, whether the entry was recorded while a listener was set (names lowercased then) or not (lowercased
 * when read). The method too, which a known method's entry takes from the method's name. */
typedef struct {
  int calls; /* atomic */
  char method[16];
  char names[128];
} names_t;

static void on_request_names(void *ud, const cb_request_t *r) {
  names_t *l = ud;
  snprintf(l->method, sizeof l->method, "%.*s", (int)r->method.len, r->method.ptr);
  size_t k = 0;
  for (size_t i = 0; i < r->nheaders; i++) {
    int n = snprintf(l->names + k, sizeof l->names - k, "%.*s;", (int)r->headers[i].name.len, r->headers[i].name.ptr);
    if (n > 0 && (size_t)n < sizeof l->names - k) k += (size_t)n;
  }
  __atomic_add_fetch(&l->calls, 1, __ATOMIC_RELEASE);
}

TEST(journal_names_lowercase_listener_and_read) {
  cb_server_t *srv = start_journal(1, 100, 65536);
  names_t l = {0};
  ASSERT_ERR(cb_server_set_journal_listener(srv, on_request_names, &l), 0);
  int fd = cl_connect(cb_server_port(srv));
  cl_sends(fd, "HEAD /hello HTTP/1.1\r\nHOST: x\r\nX-Mixed-Case-Name-Longer-Than-16: 1\r\nAb: 2\r\n\r\n");
  ASSERT_EQ(wait_calls(&l.calls, 1), 1);
  ASSERT_STR_EQ(l.method, "HEAD");
  ASSERT_STR_EQ(l.names, "host;x-mixed-case-name-longer-than-16;ab;");
  ASSERT_ERR(cb_server_set_journal_listener(srv, NULL, NULL), 0);
  cl_sends(fd, "GET /hello HTTP/1.1\r\nHoSt: y\r\nUSER-AGENT: Test/1.0\r\nA: 3\r\n\r\n");
  cb_request_list_t *list = wait_journal(srv, NULL, 2, 5000);
  ASSERT_EQ(list->count, 2);
  const cb_request_t *r = &list->items[0];
  assert_str(r->method, "HEAD");
  ASSERT_EQ(r->nheaders, 3);
  assert_header(r, 0, "host", "x");
  assert_header(r, 1, "x-mixed-case-name-longer-than-16", "1");
  assert_header(r, 2, "ab", "2");
  r = &list->items[1];
  assert_str(r->method, "GET");
  ASSERT_EQ(r->nheaders, 3);
  assert_header(r, 0, "host", "y");
  assert_header(r, 1, "user-agent", "Test/1.0"); /* values as received */
  assert_header(r, 2, "a", "3");
  cb_request_list_free(list);
  ASSERT_EQ(__atomic_load_n(&l.calls, __ATOMIC_ACQUIRE), 1);
  close(fd);
  test_stop(srv);
}

/* Sends requests first..last on fd, one at a time, each with a header of a different length (so that the byte
 * ring pads and wraps), and reads each answer. */
static void send_padded(int fd, int first, int last) {
  char req[2048], value[1500];
  buf_t got = {0};
  for (int i = first; i <= last; i++) {
    int vlen = 200 + (i * 137) % 1200;
    for (int k = 0; k < vlen; k++) value[k] = (char)('a' + (i + k) % 26);
    value[vlen] = '\0';
    snprintf(req, sizeof req, "GET /hello?n=%d HTTP/1.1\r\nHost: x\r\nX-Pad: %s\r\n\r\n", i, value);
    cl_sends(fd, req);
    buf_reset(&got);
    while (cl_response_len(got.p, got.len, 0) == 0) ASSERT_EQ(cl_read_n(fd, &got, got.len + 1, 10000), CL_OK);
  }
  buf_free(&got);
}

/* A clear moves both rings' heads forward, so that they wrap before they are full and then grow while wrapped:
 * the entries' two runs and the live bytes' two pieces must move to their new places. `before` requests, a
 * clear, then up to 200: with 10 before, the entries' front run is the shorter (it follows the old end); with
 * 50, the back run is (it moves to the new end). Every entry comes back whole. */
static void grow_wrapped(int before) {
  enum { LAST = 200 };
  cb_server_t *srv = start_journal(1, LAST, 16);
  int fd = cl_connect(cb_server_port(srv));
  send_padded(fd, 1, before);
  cb_request_list_t *list = wait_journal(srv, NULL, (size_t)before, 5000);
  ASSERT_EQ(list->count, (size_t)before);
  cb_request_list_free(list);
  ASSERT_ERR(cb_server_requests_clear(srv), 0);
  send_padded(fd, before + 1, LAST);
  list = wait_journal(srv, NULL, (size_t)(LAST - before), 5000);
  ASSERT_EQ(list->count, (size_t)(LAST - before));
  char want[64], value[1500];
  for (size_t e = 0; e < list->count; e++) {
    const cb_request_t *r = &list->items[e];
    int i = before + 1 + (int)e;
    ASSERT_EQ(r->seq, (uint64_t)i);
    snprintf(want, sizeof want, "n=%d", i);
    assert_str(r->query, want);
    int vlen = 200 + (i * 137) % 1200;
    for (int k = 0; k < vlen; k++) value[k] = (char)('a' + (i + k) % 26);
    value[vlen] = '\0';
    ASSERT_EQ(r->nheaders, 2);
    assert_header(r, 0, "host", "x");
    assert_header(r, 1, "x-pad", value);
    assert_str(r->route, "hello");
  }
  cb_request_list_free(list);
  close(fd);
  test_stop(srv);
}

TEST(journal_grow_wrapped_front_run) { grow_wrapped(10); }

TEST(journal_grow_wrapped_back_run) { grow_wrapped(50); }

/* Entries far bigger than the per-worker byte budget: the oldest give way, the newest are whole. */
TEST(journal_big_bodies) {
  cb_config_t cfg;
  test_config(&cfg);
  cfg.journal = 4;
  cfg.journal_body_bytes = 100000;
  cfg.max_body_bytes = 200000;
  cb_server_t *srv = test_start(&cfg);
  int fd = cl_connect(cb_server_port(srv));
  char *body = malloc(150000);
  for (int i = 0; i < 150000; i++) body[i] = (char)('a' + i % 26);
  buf_t got = {0};
  for (int i = 0; i < 12; i++) {
    cl_sends(fd, "POST /echo HTTP/1.1\r\nHost: x\r\ncontent-length: 150000\r\n\r\n");
    cl_send(fd, body, 150000);
    buf_reset(&got);
    long n;
    while ((n = cl_response_len(got.p, got.len, 0)) == 0) ASSERT_EQ(cl_read_n(fd, &got, got.len + 1, 10000), CL_OK);
    ASSERT_GT(n, 150000);
  }
  cb_request_list_t *list = wait_journal(srv, NULL, 1, 5000);
  ASSERT_GE(list->count, 1);
  ASSERT_LE(list->count, 4);
  const cb_request_t *r = &list->items[list->count - 1];
  ASSERT_EQ(r->seq, 12);
  ASSERT_EQ(r->body_len, 150000);
  ASSERT_MEM_EQ(r->body.ptr, r->body.len, body, (size_t)100000);
  cb_request_list_free(list);
  free(body);
  buf_free(&got);
  close(fd);
  test_stop(srv);
}

/* Many more entries than the ring keeps, of every string length the copy paths distinguish (1, 2 to 3, 4 to 7,
 * 8 to 16, 17 to 32 and longer; header names lowercased in each when read): the entry ring and the byte ring
 * wrap many times, and the newest entries come back whole. */
TEST(journal_rings_wrap) {
  enum { KEEP = 300, SENT = 3000 };
  cb_server_t *srv = start_journal(1, KEEP, 16);
  int fd = cl_connect(cb_server_port(srv));
  buf_t got = {0};
  char req[1024], name[64], value[512];
  for (int i = 1; i <= SENT; i++) {
    int nlen = 1 + i % 40, vlen = i % 300;
    for (int k = 0; k < nlen; k++) name[k] = (char)((k % 2 ? 'A' : 'a') + (i + k) % 26);
    name[nlen] = '\0';
    for (int k = 0; k < vlen; k++) value[k] = (char)('0' + (i * 7 + k) % 10);
    value[vlen] = '\0';
    snprintf(req, sizeof req, "GET /hello?%.*s HTTP/1.1\r\nHost: x\r\n%s: %s\r\n\r\n", i % 37, value, name, value);
    cl_sends(fd, req);
    if (i % 50 == 0 || i == SENT) { /* read what is answered now and then, so neither side's buffer fills */
      buf_reset(&got);
      long total = 0;
      for (int n = 0; n < (i % 50 ? i % 50 : 50);) {
        long len;
        while ((len = cl_response_len(got.p + total, got.len - (size_t)total, 0)) == 0)
          ASSERT_EQ(cl_read_n(fd, &got, got.len + 1, 10000), CL_OK);
        total += len;
        n++;
      }
    }
  }
  cb_request_list_t *list = wait_journal(srv, NULL, KEEP, 5000);
  ASSERT_EQ(list->count, KEEP);
  for (size_t e = 0; e < KEEP; e++) {
    const cb_request_t *r = &list->items[e];
    int i = SENT - KEEP + 1 + (int)e;
    ASSERT_EQ(r->seq, (uint64_t)i);
    int nlen = 1 + i % 40, vlen = i % 300;
    for (int k = 0; k < nlen; k++) name[k] = (char)('a' + (i + k) % 26);
    name[nlen] = '\0';
    for (int k = 0; k < vlen; k++) value[k] = (char)('0' + (i * 7 + k) % 10);
    value[vlen] = '\0';
    assert_str(r->method, "GET");
    assert_str(r->path, "/hello");
    ASSERT_EQ(r->query.len, (size_t)(i % 37 < vlen ? i % 37 : vlen));
    ASSERT_MEM_EQ(r->query.ptr, r->query.len, value, r->query.len);
    ASSERT_EQ(r->nheaders, 2);
    assert_header(r, 0, "host", "x");
    assert_header(r, 1, name, value);
  }
  cb_request_list_free(list);
  buf_free(&got);
  close(fd);
  test_stop(srv);
}

/* ---- the journal's promise (issue 21): once a client can see the end of its response, its entry is there ----
 * Each fault kind is a stub; the client reads until the end is observable (EOF, reset, the last byte, END_STREAM,
 * RST_STREAM, GOAWAY) and reads the journal at once, without waiting and without closing its socket first (a close
 * would let the server's connection end, which journals late entries too, only sooner). Before the fix, a fault
 * that closes with FIN (empty, garbage, hang, truncated, ...) left its request out of the journal until the
 * connection was freed, CB__LINGER_MS later or when the client closed: such a read missed it every time. Nothing
 * here depends on timing: the entry exists before the server's socket call that ends the response. */

static const char *const promise_faults[] = {
    "reset",           "reset?at=head",      "reset?at=body&length=100&bytes=10",
    "empty",           "hang?ms=30",         "hang?ms=30&at=head",
    "garbage",         "truncated",          "overlong",
    "malformed_chunk", "missing_last_chunk", "raw?close=0&data=HTTP%2F1.1%20200%20OK%0D%0Acontent-length%3A%202%0D%0A%0D%0Aok",
    "raw?preset=http10_no_length",           "delay?ms=5",
    "dribble?ms=10&pieces=2&length=10",      "drip?ms=10&pieces=2&length=10",
    "rst_stream",      "rst_stream?at=head", "goaway",
    "goaway?last=2147483647&code=2",         "settings?window=1000",
    "violation?ms=10", "trailers",           "slow_head?ms=10&pieces=2"};
#define NPROMISE (sizeof promise_faults / sizeof *promise_faults)

static void promise_stubs(cb_server_t *srv) {
  for (size_t i = 0; i < NPROMISE; i++) {
    char path[32];
    snprintf(path, sizeof path, "/p%zu", i);
    cb_stub_t st = {.match = {.path = {path, strlen(path)}},
                    .response = {.status = 200, .body_kind = CB_BODY_BYTES, .body = CB_S("stub body"),
                                 .fault = {promise_faults[i], strlen(promise_faults[i])}}};
    uint64_t id;
    cbt_log("stub %s: %s", path, promise_faults[i]);
    ASSERT_ERR(cb_server_route_add(srv, &st, &id), 0);
  }
}

/* The entries of path right now: one read, no wait. */
static size_t entries_now(cb_server_t *srv, const char *path) {
  cb_request_filter_t f = {.path = {path, strlen(path)}};
  cb_request_list_t *list = NULL;
  ASSERT_ERR(cb_server_requests(srv, &f, &list), 0);
  size_t n = list->count;
  cb_request_list_free(list);
  return n;
}

TEST(journal_promise_faults_http1) {
  cb_server_t *srv = start_journal(2, 1000, 64);
  promise_stubs(srv);
  int port = cb_server_port(srv);
  for (int round = 0; round < 3; round++) {
    for (size_t i = 0; i < NPROMISE; i++) {
      char req[96], path[32];
      snprintf(path, sizeof path, "/p%zu", i);
      snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", path);
      int fd = cl_connect(port);
      cl_sends(fd, req);
      buf_t got = {0};
      int end = cl_read_close(fd, &got, 10000); /* every answer ends with EOF or a reset here */
      if (end != CL_EOF && end != CL_RESET) FAIL("%s: %s", promise_faults[i], cl_status_name(end));
      size_t n = entries_now(srv, path);
      if (n != (size_t)round + 1)
        FAIL("%s (%s after %zu bytes): %zu entries, want %d", promise_faults[i], cl_status_name(end), got.len, n,
             round + 1);
      close(fd);
      buf_free(&got);
    }
  }
  cb_server_stop(srv);
}

static int promise_end(h2cl_t *cl, const void *arg) {
  const h2resp_t *r = arg;
  return r->ended || r->rst != H2_NO_RST || cl->goaway > 0 || cl->closed;
}

TEST(journal_promise_faults_h2c) {
  cb_server_t *srv = start_journal(2, 1000, 64);
  promise_stubs(srv);
  int port = cb_server_port(srv);
  for (int round = 0; round < 3; round++) {
    for (size_t i = 0; i < NPROMISE; i++) {
      char path[32];
      snprintf(path, sizeof path, "/p%zu", i);
      h2cl_t *cl = h2_open(port);
      h2_handshake(cl);
      h2resp_t *r = h2_request(cl, 1, "GET", path, NULL, 0, NULL, 0);
      int end = h2_run(cl, promise_end, r, 10000);
      if (end != CL_OK) FAIL("%s: %s", promise_faults[i], cl_status_name(end));
      size_t n = entries_now(srv, path);
      if (n != (size_t)round + 1)
        FAIL("%s (ended %d, rst %u, goaway %d, closed %d): %zu entries, want %d", promise_faults[i], r->ended,
             r->rst, cl->goaway, cl->closed, n, round + 1);
      h2_free(cl);
    }
  }
  cb_server_stop(srv);
}

/* ---- the listener set and cleared in a loop under load (the audit of races between the API and the workers):
 * once a clear returns, the fn it cleared is not running and is never called again; reads and clears of the
 * journal meanwhile. ---- */

#define LCHURN_ROUNDS 150
#define LCHURN_REQS 400

typedef struct {
  int cleared; /* atomic: the clear that ended this listener returned */
  int running; /* atomic: calls in progress */
  int late;    /* atomic: calls that began after, or were still running at, the clear's return */
  int calls;   /* atomic */
} lchurn_t;

static void lchurn_fn(void *ud, const cb_request_t *r) {
  lchurn_t *l = ud;
  (void)r;
  __atomic_add_fetch(&l->running, 1, __ATOMIC_ACQ_REL);
  if (__atomic_load_n(&l->cleared, __ATOMIC_ACQUIRE)) __atomic_add_fetch(&l->late, 1, __ATOMIC_RELAXED);
  __atomic_add_fetch(&l->calls, 1, __ATOMIC_RELAXED);
  sched_yield(); /* stay inside a moment: a clear racing it must wait for this */
  __atomic_sub_fetch(&l->running, 1, __ATOMIC_ACQ_REL);
}

typedef struct {
  int port, h2;
  long ok;
} lchurn_cl_t;

static void *lchurn_client(void *arg) {
  lchurn_cl_t *ck = arg;
  if (ck->h2) {
    h2cl_t *cl = h2_open(ck->port);
    h2_handshake(cl);
    for (int i = 0; i < LCHURN_REQS; i += 4) {
      h2resp_t *rs[4];
      for (int k = 0; k < 4; k++) rs[k] = h2_request(cl, 2 * (i + k) + 1, "GET", "/hello", NULL, 0, NULL, 0);
      h2_wait(cl, rs, 4, 15000);
      for (int k = 0; k < 4; k++) {
        if (rs[k]->status == 200 && rs[k]->rst == H2_NO_RST) ck->ok++;
        h2_forget(cl, 2 * (i + k) + 1);
      }
    }
    h2_free(cl);
    return NULL;
  }
  int fd = cl_connect(ck->port);
  static const char req[] = "GET /hello HTTP/1.1\r\nhost: x\r\n\r\n";
  for (int i = 0; i < LCHURN_REQS; i++) {
    buf_t got = {0};
    cl_send(fd, req, sizeof req - 1);
    long n;
    while ((n = cl_response_len(got.p, got.len, 0)) == 0)
      if (cl_read_n(fd, &got, got.len + 1, 15000) != CL_OK) break;
    if (n > 0 && (size_t)n == got.len && memcmp(got.p, "HTTP/1.1 200", 12) == 0) ck->ok++;
    buf_free(&got);
  }
  close(fd);
  return NULL;
}

TEST_T(journal_listener_clear_under_load, 60000) {
  cb_server_t *srv = start_journal(2, 200, 64);
  int port = cb_server_port(srv);
  lchurn_cl_t cls[3] = {{.port = port}, {.port = port}, {.port = port, .h2 = 1}};
  pthread_t th[3];
  for (int i = 0; i < 3; i++) ASSERT_EQ(pthread_create(&th[i], NULL, lchurn_client, &cls[i]), 0);
  static lchurn_t ls[LCHURN_ROUNDS];
  memset(ls, 0, sizeof ls);
  for (int i = 0; i < LCHURN_ROUNDS; i++) {
    ASSERT_ERR(cb_server_set_journal_listener(srv, lchurn_fn, &ls[i]), 0);
    if (i % 2) sched_yield();
    if (i % 3 == 0) ASSERT_ERR(cb_server_set_journal_listener(srv, lchurn_fn, &ls[i]), 0); /* set again */
    ASSERT_ERR(cb_server_set_journal_listener(srv, NULL, NULL), 0);
    /* The clear returned: no call of ls[i]'s is running, and none begins from here on. */
    ASSERT_EQ(__atomic_load_n(&ls[i].running, __ATOMIC_ACQUIRE), 0);
    __atomic_store_n(&ls[i].cleared, 1, __ATOMIC_RELEASE);
    if (i % 10 == 0) {
      cb_request_list_t *list;
      ASSERT_ERR(cb_server_requests(srv, NULL, &list), 0);
      for (size_t k = 1; k < list->count; k++) ASSERT_GT(list->items[k].seq, list->items[k - 1].seq);
      cb_request_list_free(list);
      ASSERT_ERR(cb_server_requests_clear(srv), 0);
    }
  }
  long calls = 0;
  for (int i = 0; i < 3; i++) {
    pthread_join(th[i], NULL);
    ASSERT_EQ(cls[i].ok, LCHURN_REQS);
  }
  for (int i = 0; i < LCHURN_ROUNDS; i++) {
    ASSERT_EQ(__atomic_load_n(&ls[i].late, __ATOMIC_ACQUIRE), 0);
    calls += __atomic_load_n(&ls[i].calls, __ATOMIC_ACQUIRE);
  }
  cbt_log("%ld listener calls over %d rounds", calls, LCHURN_ROUNDS);
  test_stop(srv);
}
