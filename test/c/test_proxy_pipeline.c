/* HTTP/1.1 upstream pipelining (docs/proxy.md, "Pipelining"): a proxy stub with pipeline N puts bodiless GET and
 * HEAD requests on one upstream connection, up to N in flight, and hands the answers back in order. The upstream
 * here is a scripted one: it holds its first connection's requests until `gather` of them have come (so they can
 * only all arrive if they were pipelined on that connection), then answers them in one write, each with its own
 * target as its body, so that a client handed another's answer shows. Then the cases that end a pipelining
 * connection early (a close, `connection: close`, a client that leaves), and a real cbench upstream under many
 * clients, every answer compared byte for byte. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common.h"
#include "h2client.h"

/* ---- the scripted upstream: one thread, poll over its connections ---- */

#define SU_CONNS 64

typedef struct {
  int lfd, port;
  pthread_t th;
  int gather;      /* the first connection's requests are held until this many are pending (atomic); the other
                    * connections' are answered at once */
  int close_after; /* > 0: the first connection closes after answering this many (the rest of its requests unread) */
  int close_field; /* > 0: the first connection's answer number close_field says `connection: close` and closes */
  pthread_mutex_t mu;
  int conns;        /* connections accepted */
  int requests;     /* whole requests read */
  int most_on_one;  /* the most requests one connection carried */
  int stop;
} su_t;

typedef struct {
  int fd;
  int first;        /* the first connection accepted */
  char in[65536];
  size_t have;
  int answered;     /* answers written on it */
  int count;        /* requests read on it */
} su_conn_t;

/* The answer to one request: 200, its target as the body (a HEAD's announced, not sent). */
static size_t su_answer(char *out, size_t cap, const char *req, size_t len, int close_field) {
  const char *sp = memchr(req, ' ', len);
  const char *sp2 = sp ? memchr(sp + 1, ' ', len - (size_t)(sp + 1 - req)) : NULL;
  if (sp == NULL || sp2 == NULL) return 0;
  int head = sp - req == 4 && memcmp(req, "HEAD", 4) == 0;
  int tn = (int)(sp2 - sp - 1);
  int n = snprintf(out, cap, "HTTP/1.1 200 OK\r\ncontent-length: %d\r\n%s\r\n", tn,
                   close_field ? "connection: close\r\n" : "");
  if (!head) n += snprintf(out + n, cap - (size_t)n, "%.*s", tn, sp + 1);
  return (size_t)n;
}

/* Answers what c may answer now; returns -1 when c is to be closed. */
static int su_serve(su_t *u, su_conn_t *c) {
  for (;;) {
    /* Count the whole requests in; answer them when there are enough. */
    size_t at = 0, ends[64];
    int n = 0;
    while (n < 64) {
      size_t rl = cl_request_len(c->in + at, c->have - at);
      if (rl == 0) break;
      at += rl;
      ends[n++] = at;
    }
    if (n == 0 || (c->first && n < __atomic_load_n(&u->gather, __ATOMIC_ACQUIRE))) return 0;
    char out[65536];
    size_t on = 0, from = 0;
    int closing = 0;
    for (int i = 0; i < n; i++) {
      int k = c->answered + 1;
      int field = c->first && u->close_field == k;
      on += su_answer(out + on, sizeof out - on, c->in + from, ends[i] - from, field);
      from = ends[i];
      c->answered++;
      if (field || (c->first && u->close_after == k)) {
        closing = 1;
        break;
      }
    }
    size_t off = 0;
    while (off < on) {
      ssize_t w = write(c->fd, out + off, on - off);
      if (w <= 0) return -1;
      off += (size_t)w;
    }
    if (closing) return -1;
    memmove(c->in, c->in + from, c->have - from);
    c->have -= from;
  }
}

static void *su_main(void *arg) {
  su_t *u = arg;
  su_conn_t *cs = calloc(SU_CONNS, sizeof *cs);
  int nc = 0;
  while (!__atomic_load_n(&u->stop, __ATOMIC_ACQUIRE)) {
    struct pollfd pf[SU_CONNS + 1];
    pf[0] = (struct pollfd){u->lfd, POLLIN, 0};
    for (int i = 0; i < nc; i++) pf[i + 1] = (struct pollfd){cs[i].fd, POLLIN, 0};
    if (poll(pf, (nfds_t)nc + 1, 50) <= 0) continue;
    if ((pf[0].revents & POLLIN) && nc < SU_CONNS) {
      int fd = accept(u->lfd, NULL, NULL);
      if (fd >= 0) {
        pthread_mutex_lock(&u->mu);
        cs[nc] = (su_conn_t){.fd = fd, .first = u->conns == 0};
        u->conns++;
        pthread_mutex_unlock(&u->mu);
        nc++;
      }
    }
    for (int i = nc - 1; i >= 0; i--) {
      if (!(pf[i + 1].revents & (POLLIN | POLLHUP | POLLERR)) || pf[i + 1].fd != cs[i].fd) continue;
      su_conn_t *c = &cs[i];
      ssize_t r = read(c->fd, c->in + c->have, sizeof c->in - c->have);
      int drop = r <= 0;
      if (r > 0) {
        size_t before = c->have;
        c->have += (size_t)r;
        /* Count the requests completed by this read. */
        size_t at = 0;
        int whole = 0, was = 0;
        for (size_t rl; (rl = cl_request_len(c->in + at, c->have - at)) > 0; at += rl) {
          whole++;
          if (at + rl <= before) was++;
        }
        pthread_mutex_lock(&u->mu);
        u->requests += whole - was;
        c->count += whole - was;
        if (c->count > u->most_on_one) u->most_on_one = c->count;
        pthread_mutex_unlock(&u->mu);
        drop = su_serve(u, c) < 0;
      }
      if (drop) {
        close(c->fd);
        cs[i] = cs[--nc];
      }
    }
  }
  for (int i = 0; i < nc; i++) close(cs[i].fd);
  free(cs);
  return NULL;
}

static void su_start(su_t *u, int gather) {
  memset(u, 0, sizeof *u);
  pthread_mutex_init(&u->mu, NULL);
  u->gather = gather;
  u->lfd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  ASSERT_EQ(bind(u->lfd, (struct sockaddr *)&a, sizeof a), 0);
  ASSERT_EQ(listen(u->lfd, 64), 0);
  socklen_t al = sizeof a;
  getsockname(u->lfd, (struct sockaddr *)&a, &al);
  u->port = ntohs(a.sin_port);
  ASSERT_EQ(pthread_create(&u->th, NULL, su_main, u), 0);
}

static void su_stop(su_t *u) {
  __atomic_store_n(&u->stop, 1, __ATOMIC_RELEASE);
  pthread_join(u->th, NULL);
  close(u->lfd);
}

static int su_get(su_t *u, int *field) {
  pthread_mutex_lock(&u->mu);
  int v = *field;
  pthread_mutex_unlock(&u->mu);
  return v;
}

/* ---- the proxy ---- */

static cb_server_t *pipe_proxy(int port, unsigned pipeline, int protocol) {
  cb_config_t cfg;
  test_config(&cfg); /* one worker: its pool holds every upstream connection */
  cb_server_t *srv = test_start(&cfg);
  char to[64];
  snprintf(to, sizeof to, "http://127.0.0.1:%d", port);
  cb_proxy_t px = {.to = {to, strlen(to)}, .pipeline = pipeline, .protocol = protocol};
  cb_stub_t st;
  memset(&st, 0, sizeof st);
  st.match.path = CB_S("/*");
  st.response.proxy = &px;
  uint64_t id = 0;
  ASSERT_EQ(cb_server_route_add(srv, &st, &id), 0);
  return srv;
}

/* The answer the proxy passes on for the scripted upstream's answer to target. */
static void exp_su(buf_t *b, const char *method, const char *target) {
  buf_addf(b, "HTTP/1.1 200 OK\r\ndate: " DATE_MASK "\r\ncontent-length: %zu\r\n\r\n%s", strlen(target),
           strcmp(method, "HEAD") == 0 ? "" : target);
}

static void read_exact(int fd, const buf_t *exp, const char *what) {
  buf_t got = {0};
  int r = cl_read_n(fd, &got, exp->len, 5000);
  if (r != CL_OK) FAIL("%s: %s after %zu of %zu bytes", what, cl_status_name(r), got.len, exp->len);
  mask_dates(got.p, got.len);
  if (got.len != exp->len || memcmp(got.p, exp->p, exp->len) != 0)
    FAIL("%s: got\n%.*s\nexpected\n%.*s", what, (int)got.len, got.p, (int)exp->len, exp->p);
  buf_free(&got);
}

static int proxied_at_least(const cb_stats_t *s, const void *arg) {
  return s->proxy_upstream_connects + s->proxy_upstream_reused >= *(const uint64_t *)arg;
}

/* Four clients' requests, sent before any answer: the upstream answers only once four are pending on one
 * connection, so they come back only if all four went on one connection. Each client gets the answer to its own
 * request (its target as the body; a HEAD's announced), in one upstream write. */
TEST(proxy_pipeline_one_connection_in_order) {
  su_t u;
  su_start(&u, 4);
  cb_server_t *px = pipe_proxy(u.port, 4, CB_PROXY_HTTP1);
  static const char *methods[4] = {"GET", "HEAD", "GET", "GET"};
  static const char *targets[4] = {"/a0", "/b1?q=1", "/c2", "/d3"};
  int fds[4];
  for (int i = 0; i < 4; i++) {
    fds[i] = cl_connect(cb_server_port(px));
    char req[128];
    snprintf(req, sizeof req, "%s %s HTTP/1.1\r\nhost: x\r\n\r\n", methods[i], targets[i]);
    cl_sends(fds[i], req);
  }
  for (int i = 0; i < 4; i++) {
    buf_t exp = {0};
    exp_su(&exp, methods[i], targets[i]);
    read_exact(fds[i], &exp, targets[i]);
    buf_free(&exp);
  }
  ASSERT_EQ(su_get(&u, &u.conns), 1);
  ASSERT_EQ(su_get(&u, &u.most_on_one), 4);
  cb_stats_t st;
  ASSERT_EQ(cb_server_stats(px, &st), 0);
  ASSERT_EQ(st.proxy_upstream_connects, 1);
  ASSERT_EQ(st.proxy_upstream_reused, 3);
  ASSERT_EQ(st.proxy_502, 0);
  /* The connection is kept once its queue is empty: the next request reuses it (gather 4: send four more). */
  for (int i = 0; i < 4; i++) cl_sends(fds[i], "GET /again HTTP/1.1\r\nhost: x\r\n\r\n");
  for (int i = 0; i < 4; i++) {
    buf_t exp = {0};
    exp_su(&exp, "GET", "/again");
    read_exact(fds[i], &exp, "/again");
    buf_free(&exp);
    close(fds[i]);
  }
  ASSERT_EQ(su_get(&u, &u.conns), 1);
  test_stop(px);
  su_stop(&u);
}

/* pipeline 3 with 5 requests, the first connection holding its requests until 4 have come: three wait on it, the
 * fourth and fifth go on a second connection and are answered at once. The first connection's answers never
 * come: at the exchange timeout its head gets 504, and the two behind it, which had no byte of an answer, go
 * again on connections of their own and are answered. */
TEST(proxy_pipeline_depth_bounds_a_connection) {
  su_t u;
  su_start(&u, 4);
  cb_config_t cfg;
  test_config(&cfg);
  cb_server_t *px = test_start(&cfg);
  char to[64];
  snprintf(to, sizeof to, "http://127.0.0.1:%d", u.port);
  cb_proxy_t pxo = {.to = {to, strlen(to)}, .pipeline = 3, .timeout_ms = 1000};
  cb_stub_t st0;
  memset(&st0, 0, sizeof st0);
  st0.match.path = CB_S("/*");
  st0.response.proxy = &pxo;
  uint64_t id;
  ASSERT_EQ(cb_server_route_add(px, &st0, &id), 0);
  int fds[5];
  cb_stats_t st;
  for (int i = 0; i < 5; i++) {
    fds[i] = cl_connect(cb_server_port(px));
    char req[64];
    snprintf(req, sizeof req, "GET /n%d HTTP/1.1\r\nhost: x\r\n\r\n", i);
    cl_sends(fds[i], req);
    uint64_t want = (uint64_t)i + 1; /* in order: the first three are the first connection's */
    wait_stats(px, &st, proxied_at_least, &want, 5000);
  }
  for (int i = 3; i < 5; i++) {
    char t[16];
    snprintf(t, sizeof t, "/n%d", i);
    buf_t exp = {0};
    exp_su(&exp, "GET", t);
    read_exact(fds[i], &exp, t);
    buf_free(&exp);
  }
  buf_t got = {0};
  ASSERT_EQ(cl_read_n(fds[0], &got, 12, 5000), CL_OK);
  ASSERT_EQ(memcmp(got.p, "HTTP/1.1 504", 12), 0);
  buf_free(&got);
  for (int i = 1; i < 3; i++) {
    char t[16];
    snprintf(t, sizeof t, "/n%d", i);
    buf_t exp = {0};
    exp_su(&exp, "GET", t);
    read_exact(fds[i], &exp, t);
    buf_free(&exp);
  }
  for (int i = 0; i < 5; i++) close(fds[i]);
  ASSERT_EQ(su_get(&u, &u.conns), 4);
  ASSERT_EQ(cb_server_stats(px, &st), 0);
  ASSERT_EQ(st.proxy_upstream_connects, 4);
  ASSERT_EQ(st.proxy_upstream_reused, 3);
  ASSERT_EQ(st.proxy_504, 1);
  ASSERT_EQ(st.proxy_502, 0);
  test_stop(px);
  su_stop(&u);
}

/* The upstream answers the first of three pipelined requests and closes (or says `connection: close` on it): the
 * two behind it had no byte of their answer, so each goes again, once, on a connection of its own, and every
 * client gets its own answer. */
static void requeue_case(int close_after, int close_field) {
  su_t u;
  su_start(&u, 3);
  u.close_after = close_after;
  u.close_field = close_field;
  cb_server_t *px = pipe_proxy(u.port, 3, CB_PROXY_HTTP1);
  int fds[3];
  for (int i = 0; i < 3; i++) {
    fds[i] = cl_connect(cb_server_port(px));
    char req[64];
    snprintf(req, sizeof req, "GET /r%d HTTP/1.1\r\nhost: x\r\n\r\n", i);
    cl_sends(fds[i], req);
  }
  /* The first connection's three go as one batch; the requests sent again are answered on their own. */
  for (int i = 0; i < 3; i++) {
    char t[16];
    snprintf(t, sizeof t, "/r%d", i);
    buf_t exp = {0};
    exp_su(&exp, "GET", t);
    read_exact(fds[i], &exp, t);
    buf_free(&exp);
  }
  for (int i = 0; i < 3; i++) close(fds[i]);
  cb_stats_t st;
  uint64_t want = 5;
  wait_stats(px, &st, proxied_at_least, &want, 5000);
  ASSERT_EQ(st.proxy_upstream_connects, 3); /* the pipelining one, then one for each request sent again */
  ASSERT_EQ(st.proxy_upstream_reused, 2);
  ASSERT_EQ(st.proxy_502, 0);
  ASSERT_EQ(su_get(&u, &u.conns), 3);
  test_stop(px);
  su_stop(&u);
}

TEST(proxy_pipeline_close_sends_the_rest_again) { requeue_case(1, 0); }
TEST(proxy_pipeline_connection_close_sends_the_rest_again) { requeue_case(0, 1); }

/* A client whose request waits in the queue leaves: its answer is still read (and dropped), the clients before
 * and after it get theirs, and the connection is kept for the next request. */
TEST(proxy_pipeline_client_leaves_while_queued) {
  su_t u;
  su_start(&u, 3);
  cb_server_t *px = pipe_proxy(u.port, 3, CB_PROXY_HTTP1);
  int fds[3];
  for (int i = 0; i < 2; i++) {
    fds[i] = cl_connect(cb_server_port(px));
    char req[64];
    snprintf(req, sizeof req, "GET /g%d HTTP/1.1\r\nhost: x\r\n\r\n", i);
    cl_sends(fds[i], req);
  }
  /* Two requests are held upstream; the second client resets, then the third client's request completes the
   * batch. */
  cb_stats_t st;
  uint64_t want = 2;
  wait_stats(px, &st, proxied_at_least, &want, 5000);
  cl_reset(fds[1]);
  sleep_ms(100); /* (the order only matters for which path is taken; both must answer the others right) */
  fds[2] = cl_connect(cb_server_port(px));
  cl_sends(fds[2], "GET /g2 HTTP/1.1\r\nhost: x\r\n\r\n");
  const int live[2] = {0, 2};
  for (int k = 0; k < 2; k++) {
    int i = live[k];
    char t[16];
    snprintf(t, sizeof t, "/g%d", i);
    buf_t exp = {0};
    exp_su(&exp, "GET", t);
    read_exact(fds[i], &exp, t);
    buf_free(&exp);
  }
  ASSERT_EQ(su_get(&u, &u.conns), 1);
  ASSERT_EQ(su_get(&u, &u.most_on_one), 3);
  /* Kept: the next request goes on the same connection. */
  __atomic_store_n(&u.gather, 1, __ATOMIC_RELEASE);
  cl_sends(fds[0], "GET /k HTTP/1.1\r\nhost: x\r\n\r\n");
  buf_t exp = {0};
  exp_su(&exp, "GET", "/k");
  read_exact(fds[0], &exp, "/k");
  buf_free(&exp);
  ASSERT_EQ(su_get(&u, &u.conns), 1);
  ASSERT_EQ(cb_server_stats(px, &st), 0);
  ASSERT_EQ(st.proxy_upstream_connects, 1);
  ASSERT_EQ(st.proxy_502, 0);
  close(fds[0]);
  close(fds[2]);
  test_stop(px);
  su_stop(&u);
}

/* A POST (a body) and a GET with a body are never pipelined: each goes on a connection of its own and is answered
 * at once, while the bodiless GETs wait together on the pipelining connection (a request pipelined behind /x1
 * would complete its batch, and /x1 would come back early). */
TEST(proxy_pipeline_bodies_go_alone) {
  su_t u;
  su_start(&u, 2);
  cb_server_t *px = pipe_proxy(u.port, 4, CB_PROXY_HTTP1);
  int a = cl_connect(cb_server_port(px)), b = cl_connect(cb_server_port(px)), p = cl_connect(cb_server_port(px));
  cl_sends(a, "GET /x1 HTTP/1.1\r\nhost: x\r\n\r\n");
  cb_stats_t st;
  uint64_t want = 1;
  wait_stats(px, &st, proxied_at_least, &want, 5000);
  cl_sends(p, "POST /post HTTP/1.1\r\nhost: x\r\ncontent-length: 3\r\n\r\nabc");
  buf_t exp = {0};
  exp_su(&exp, "POST", "/post");
  read_exact(p, &exp, "/post");
  buf_reset(&exp);
  cl_sends(p, "GET /gb HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n1\r\nz\r\n0\r\n\r\n");
  exp_su(&exp, "GET", "/gb");
  read_exact(p, &exp, "/gb");
  buf_reset(&exp);
  EXPECT_QUIET(a, 200); /* /x1 is still held: it is alone on the first connection */
  cl_sends(b, "GET /x2 HTTP/1.1\r\nhost: x\r\n\r\n");
  exp_su(&exp, "GET", "/x1");
  read_exact(a, &exp, "/x1");
  buf_reset(&exp);
  exp_su(&exp, "GET", "/x2");
  read_exact(b, &exp, "/x2");
  buf_free(&exp);
  ASSERT_EQ(su_get(&u, &u.most_on_one), 2);
  ASSERT_EQ(cb_server_stats(px, &st), 0);
  ASSERT_EQ(st.proxy_upstream_connects, 2); /* the pipelining one; the POST's, kept and reused by /gb */
  ASSERT_EQ(st.proxy_502, 0);
  close(p);
  close(a);
  close(b);
  test_stop(px);
  su_stop(&u);
}

/* Through a real cbench upstream: 32 clients, each sending 12 requests at once (GET and HEAD of fixture routes,
 * bodies and no bodies, 204 and 304), with pipeline 8. Every answer is exactly what the upstream answers itself
 * (dates masked), on every client, and fewer upstream connections than clients were opened. */
TEST_T(proxy_pipeline_many_clients_byte_exact, 60000) {
  cb_config_t ucfg;
  test_config(&ucfg);
  cb_server_t *up = test_start(&ucfg);
  cb_server_t *px = pipe_proxy(cb_server_port(up), 8, CB_PROXY_HTTP1);
  static const char *const reqs[][2] = {{"GET", "/hello"},        {"HEAD", "/json"},       {"GET", "/file/small"},
                                        {"GET", "/status/204"},   {"GET", "/status/304"},  {"HEAD", "/hello"},
                                        {"GET", "/json"},         {"GET", "/status/503"},  {"GET", "/file/tiny"},
                                        {"HEAD", "/file/small"},  {"GET", "/hello"},       {"GET", "/headers"}};
  enum { CLIENTS = 32, EACH = sizeof reqs / sizeof *reqs };
  int fds[CLIENTS];
  for (int i = 0; i < CLIENTS; i++) {
    fds[i] = cl_connect(cb_server_port(px));
    buf_t all = {0};
    for (int k = 0; k < EACH; k++) {
      const char *const *q = reqs[(i + k) % EACH];
      buf_addf(&all, "%s %s HTTP/1.1\r\nhost: x\r\n\r\n", q[0], q[1]);
    }
    cl_send(fds[i], all.p, all.len);
    buf_free(&all);
  }
  for (int i = 0; i < CLIENTS; i++) {
    buf_t got = {0};
    /* Read answer by answer; /headers' body names the proxy's added fields, so only its status is checked. */
    size_t at = 0;
    buf_t want = {0};
    for (int k = 0; k < EACH; k++) {
      const char *const *q = reqs[(i + k) % EACH];
      long n;
      while ((n = cl_response_len(got.p + at, got.len - at, strcmp(q[0], "HEAD") == 0)) <= 0) {
        ASSERT_EQ(n, 0);
        ASSERT_EQ(cl_read_n(fds[i], &got, got.len + 1, 5000), CL_OK);
      }
      if (strcmp(q[1], "/headers") == 0) {
        ASSERT_EQ(memcmp(got.p + at, "HTTP/1.1 200 OK\r\n", 17), 0);
      } else {
        buf_reset(&want);
        exp_route(&want, q[0], q[1], CONN_NONE);
        mask_dates(got.p + at, (size_t)n);
        if ((size_t)n != want.len || memcmp(got.p + at, want.p, want.len) != 0)
          FAIL("client %d answer %d (%s %s): got\n%.*s\nexpected\n%.*s", i, k, q[0], q[1], (int)n, got.p + at,
               (int)want.len, want.p);
      }
      at += (size_t)n;
    }
    ASSERT_EQ(at, got.len);
    buf_free(&want);
    buf_free(&got);
    close(fds[i]);
  }
  cb_stats_t st;
  ASSERT_EQ(cb_server_stats(px, &st), 0);
  ASSERT_EQ(st.proxy_requests, CLIENTS * EACH);
  ASSERT_EQ(st.proxy_upstream_connects + st.proxy_upstream_reused, CLIENTS * EACH);
  ASSERT_EQ(st.proxy_502 + st.proxy_504, 0);
  cbt_log("upstream connections: %llu for %d clients", (unsigned long long)st.proxy_upstream_connects, CLIENTS);
  ASSERT_LT(st.proxy_upstream_connects, CLIENTS);
  test_stop(px);
  test_stop(up);
}

/* A client that does not read its big answer must not hold up the requests pipelined behind it: once its output is
 * full, those go again on connections of their own (their answers on the first connection are read and dropped
 * later), and nothing joins the blocked connection. B gets /hello while A has not read a byte of /file/big; then
 * A reads its answer whole. */
TEST_T(proxy_pipeline_unread_answer_stalls_nobody, 30000) {
  cb_config_t ucfg;
  test_config(&ucfg);
  cb_server_t *up = test_start(&ucfg);
  cb_server_t *px = pipe_proxy(cb_server_port(up), 4, CB_PROXY_HTTP1);
  int a = cl_connect(cb_server_port(px));
  cl_sends(a, "GET /file/big HTTP/1.1\r\nhost: x\r\n\r\n");
  for (int round = 0; round < 3; round++) {
    int b = cl_connect(cb_server_port(px));
    cl_sends(b, "GET /hello HTTP/1.1\r\nhost: x\r\n\r\n");
    buf_t exp = {0};
    exp_route(&exp, "GET", "/hello", CONN_NONE);
    read_exact(b, &exp, "/hello behind an unread answer");
    buf_free(&exp);
    close(b);
  }
  buf_t exp = {0};
  exp_route(&exp, "GET", "/file/big", CONN_NONE);
  read_exact(a, &exp, "/file/big");
  buf_free(&exp);
  close(a);
  cb_stats_t st;
  ASSERT_EQ(cb_server_stats(px, &st), 0);
  ASSERT_EQ(st.proxy_502 + st.proxy_504, 0);
  test_stop(px);
  test_stop(up);
}

/* An h2c client's streams are pipelined like HTTP/1.1 clients' requests: six streams, a GET without END_STREAM on
 * its HEADERS among them (it waits for its empty DATA), all on one upstream connection (held until six came), each
 * stream its own answer. Stream 5 is reset while its request waits upstream: its answer is read and dropped, the
 * streams after it get theirs. */
TEST(proxy_pipeline_h2c_streams) {
  su_t u;
  su_start(&u, 6);
  cb_server_t *px = pipe_proxy(u.port, 8, CB_PROXY_HTTP1);
  h2cl_t *cl = h2_open(cb_server_port(px));
  h2_handshake(cl);
  h2resp_t *rs[6];
  char paths[6][16];
  for (int i = 0; i < 6; i++) {
    snprintf(paths[i], sizeof paths[i], "/s%d", i);
    int32_t sid = 1 + 2 * i;
    if (i == 3) { /* HEADERS without END_STREAM, then an empty DATA with it */
      buf_t block = {0};
      h2_encode_request(cl, "GET", paths[i], NULL, 0, &block);
      rs[i] = h2_stream(cl, sid);
      h2_send_frame(cl, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS, sid, block.p, block.len);
      h2_send_frame(cl, NGHTTP2_DATA, NGHTTP2_FLAG_END_STREAM, sid, NULL, 0);
      buf_free(&block);
    } else {
      rs[i] = h2_request(cl, sid, i == 4 ? "HEAD" : "GET", paths[i], NULL, 0, NULL, 0);
    }
    if (i == 2) { /* stream 5 is sent, then reset, while the upstream still holds the batch */
      cb_stats_t st;
      uint64_t want = 3;
      wait_stats(px, &st, proxied_at_least, &want, 5000);
      h2_send_rst(cl, sid, NGHTTP2_CANCEL);
    }
  }
  h2resp_t *live[5] = {rs[0], rs[1], rs[3], rs[4], rs[5]};
  h2_wait(cl, live, 5, 5000);
  for (int i = 0; i < 6; i++) {
    if (i == 2) continue;
    ASSERT_EQ(rs[i]->status, 200);
    ASSERT_EQ(rs[i]->rst, H2_NO_RST);
    const char *want = i == 4 ? "" : paths[i];
    ASSERT_MEM_EQ(rs[i]->body.p, rs[i]->body.len, want, strlen(want));
  }
  ASSERT_EQ(su_get(&u, &u.conns), 1);
  ASSERT_EQ(su_get(&u, &u.most_on_one), 6);
  cb_stats_t st;
  ASSERT_EQ(cb_server_stats(px, &st), 0);
  ASSERT_EQ(st.proxy_upstream_connects, 1);
  ASSERT_EQ(st.proxy_upstream_reused, 5);
  ASSERT_EQ(st.proxy_502 + st.proxy_504, 0);
  h2_free(cl);
  test_stop(px);
  su_stop(&u);
}
