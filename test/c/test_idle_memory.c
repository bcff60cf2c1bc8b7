/* Memory per idle connection (issue 11): a connection that waits for its next request holds no buffer.
 *
 * The server runs in a child process (one worker, default settings), so that its resident memory (VmRSS of
 * /proc/PID/status) holds nothing of the client's. The test warms the server up (the journal's rings filled to
 * their bound, the allocator's first pages touched), reads the RSS, opens many connections that each do what
 * the bound is stated for, lets them go idle, reads the RSS again, and asserts the growth per connection:
 *   - HTTP/1.1: 10,000 connections, one GET /hello each (answer checked byte for byte), then idle: <= 1 KiB;
 *   - h2c: 5,000 connections after the preface and SETTINGS (the server's SETTINGS, WINDOW_UPDATE and ACK
 *     read, ours acknowledged): <= 4 KiB (measured 1,202 with the engine's own HTTP/2 session; 1,136 with
 *     nghttp2's session parked, 3,975 before parking);
 *   - over TLS 1.3 (issue 24), 2,000 connections each after a full handshake and one GET /hello: HTTP/1.1
 *     (ALPN http/1.1) <= 20 KiB, h2 (ALPN h2) <= 20 KiB. Measured 15,452 and 16,871 bytes: mostly OpenSSL's
 *     session state, which the connection needs for its next record (docs/tls.md "Idle connections"); an idle
 *     h2 connection's HPACK decoder is given back (parking, proto/http2.c). Without
 *     SSL_MODE_RELEASE_BUFFERS 24,518 and 35,006; h2 was 22,003 before parking.
 * These are bounds on memory, never on time. Under AddressSanitizer (redzones, quarantine) the connections are
 * still made and checked, but the bound is only printed. The file descriptor limit is raised to what the test
 * needs; where the system refuses, fewer connections are opened (at least 1,000) and the log says so. */
#include <errno.h>
#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <openssl/ssl.h>

#include "common.h"
#include "engine.h"

#if defined(__SANITIZE_ADDRESS__)
#define IDLE_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define IDLE_SANITIZED 1
#endif
#endif
#ifndef IDLE_SANITIZED
#define IDLE_SANITIZED 0
#endif

#define BATCH 500

typedef struct {
  pid_t pid;
  int port;
  int stop_fd; /* closing it stops the server; a byte 'm' asks for its allocator's figures (heap_report) */
  int info_fd; /* where the child writes them */
} child_t;

/* What the child's allocator says (glibc's mallinfo2 over all arenas), as the child sends it. */
typedef struct {
  size_t arena, ordblks, hblks, hblkhd, uordblks, fordblks, keepcost;
} heap_info_t;

/* Writes the allocator's figures, then malloc_info(3)'s XML (its length first), to fd. */
static void heap_report(int fd) {
  struct mallinfo2 mi = mallinfo2();
  heap_info_t h = {mi.arena, mi.ordblks, mi.hblks, mi.hblkhd, mi.uordblks, mi.fordblks, mi.keepcost};
  char *xml = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&xml, &len);
  if (f != NULL) {
    malloc_info(0, f);
    fclose(f);
  }
  if (write(fd, &h, sizeof h) != (ssize_t)sizeof h || write(fd, &len, sizeof len) != (ssize_t)sizeof len) _exit(5);
  for (size_t o = 0; o < len;) {
    ssize_t n = write(fd, xml + o, len - o);
    if (n <= 0) _exit(5);
    o += (size_t)n;
  }
  free(xml);
}

/* The server in a child process: it writes its port to a pipe and stops when the other pipe closes. With tls, its
 * one listener speaks TLS (the test certificates made at start). */
static child_t server_child_tls(int tls) {
  int up[2], down[2];
  ASSERT_EQ(pipe(up), 0);
  ASSERT_EQ(pipe(down), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(up[0]);
    close(down[1]);
    cb_config_t cfg;
    test_config(&cfg);
    cfg.tls = tls;
    cb_server_t *srv = NULL;
    if (cb_server_start(&cfg, &srv) != 0) _exit(3);
    int port = cb_server_port(srv);
    if (write(up[1], &port, sizeof port) != (ssize_t)sizeof port) _exit(4);
    for (;;) {
      char ch;
      ssize_t n = read(down[0], &ch, 1);
      if (n < 0 && errno == EINTR) continue;
      if (n != 1) break;
      if (ch == 'm') heap_report(up[1]);
    }
    cb_server_stop(srv);
    _exit(0);
  }
  close(up[1]);
  close(down[0]);
  child_t ch = {pid, 0, down[1], up[0]};
  ASSERT_EQ(read(up[0], &ch.port, sizeof ch.port), (ssize_t)sizeof ch.port);
  return ch;
}

static child_t server_child(void) { return server_child_tls(0); }

static void read_all(int fd, void *p, size_t n) {
  for (size_t o = 0; o < n;) {
    ssize_t r = read(fd, (char *)p + o, n - o);
    if (r < 0 && errno == EINTR) continue;
    ASSERT_GT(r, 0);
    o += (size_t)r;
  }
}

static void child_stop(child_t *ch) {
  close(ch->info_fd);
  close(ch->stop_fd);
  int st = 0;
  ASSERT_EQ(waitpid(ch->pid, &st, 0), ch->pid);
  ASSERT(WIFEXITED(st));
  ASSERT_EQ(WEXITSTATUS(st), 0);
}

static long rss_kb_of(pid_t pid) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  ASSERT_NOT_NULL(f);
  long kb = -1;
  while (fgets(line, sizeof line, f))
    if (strncmp(line, "VmRSS:", 6) == 0) kb = atol(line + 6);
  fclose(f);
  ASSERT_GT(kb, 0);
  return kb;
}

/* Raises the descriptor limit so that `want` descriptors fit (the child inherits it); returns how many
 * connections the granted limit allows, at most n. */
static int connections_allowed(int n) {
  struct rlimit rl;
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &rl), 0);
  rlim_t want = (rlim_t)n + 256;
  if (rl.rlim_max < want) {
    struct rlimit up = {want, want};
    if (setrlimit(RLIMIT_NOFILE, &up) == 0) rl = up;
  }
  rl.rlim_cur = rl.rlim_max < want ? rl.rlim_max : want;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &rl), 0);
  int allowed = rl.rlim_cur > 256 + 1000 ? (int)(rl.rlim_cur - 256) : 1000;
  if (allowed < n) cbt_log("descriptor limit %ld: %d connections instead of %d", (long)rl.rlim_cur, allowed, n);
  ASSERT_GE(rl.rlim_cur, (rlim_t)1256);
  return allowed < n ? allowed : n;
}

/* ---- what grew, for a failure on another host: the child's mappings and its allocator ---- */

#define MAX_MAPS 4096

typedef struct {
  unsigned long start, end;
  long rss_kb, anon_kb;
  char name[80];
} map_t;

/* One reading of the server: its RSS, its mappings (/proc/PID/smaps) and its allocator's figures. */
typedef struct {
  long rss_kb;
  map_t *maps;
  int nmaps;
  heap_info_t heap;
  char *xml;
} snap_t;

static int read_maps(pid_t pid, map_t *maps) {
  char path[64], line[512];
  snprintf(path, sizeof path, "/proc/%d/smaps", (int)pid);
  FILE *f = fopen(path, "r");
  ASSERT_NOT_NULL(f);
  int n = -1;
  while (fgets(line, sizeof line, f)) {
    unsigned long a, b;
    int off = 0;
    if (sscanf(line, "%lx-%lx %*s %*s %*s %*s%n", &a, &b, &off) == 2 && strchr(line, ':') != NULL &&
        line[strspn(line, "0123456789abcdef")] == '-') {
      if (n + 1 >= MAX_MAPS) break;
      map_t *m = &maps[++n];
      memset(m, 0, sizeof *m);
      m->start = a;
      m->end = b;
      const char *name = line + off;
      while (*name == ' ') name++;
      snprintf(m->name, sizeof m->name, "%.*s", (int)strcspn(name, "\n"), name);
      /* glibc's heaps of a thread's arena are 64 MiB-aligned reservations (HEAP_MAX_SIZE); the other anonymous
       * mappings of the server are h2_mem.c's (frame buffers, stream maps, HPACK slots: adjacent ones merge). */
      if (m->name[0] == '\0')
        snprintf(m->name, sizeof m->name, (a & ((64ul << 20) - 1)) == 0 ? "[arena heap]" : "[anon: mmap]");
    } else if (n >= 0 && strncmp(line, "Rss:", 4) == 0) {
      maps[n].rss_kb = atol(line + 4);
    } else if (n >= 0 && strncmp(line, "Anonymous:", 10) == 0) {
      maps[n].anon_kb = atol(line + 10);
    }
  }
  fclose(f);
  return n + 1;
}

static snap_t snapshot(child_t *ch) {
  snap_t s = {0};
  s.rss_kb = rss_kb_of(ch->pid);
  s.maps = malloc(MAX_MAPS * sizeof *s.maps);
  ASSERT_NOT_NULL(s.maps);
  s.nmaps = read_maps(ch->pid, s.maps);
  ASSERT_EQ(write(ch->stop_fd, "m", 1), 1);
  size_t len;
  read_all(ch->info_fd, &s.heap, sizeof s.heap);
  read_all(ch->info_fd, &len, sizeof len);
  s.xml = malloc(len + 1);
  ASSERT_NOT_NULL(s.xml);
  read_all(ch->info_fd, s.xml, len);
  s.xml[len] = '\0';
  return s;
}

static void snap_free(snap_t *s) {
  free(s->maps);
  free(s->xml);
}

/* The mapping of `before` that holds address a, or NULL. */
static const map_t *map_at(const snap_t *s, unsigned long a) {
  for (int i = 0; i < s->nmaps; i++)
    if (s->maps[i].start <= a && a < s->maps[i].end) return &s->maps[i];
  return NULL;
}

/* malloc_info's per-arena lines that say how much memory each heap has: <heap nr=..>, <system type="current">,
 * <total type="fast"|"rest"> (free chunks). */
static void print_arenas(const char *xml) {
  for (const char *p = xml; (p = strstr(p, "<heap nr=")) != NULL; p++) {
    const char *end = strstr(p, "</heap>");
    if (end == NULL) break;
    const char *cur = strstr(p, "<system type=\"current\" size=\"");
    const char *rest = strstr(p, "<total type=\"rest\" count=\"");
    const char *fast = strstr(p, "<total type=\"fast\" count=\"");
    fprintf(stderr, "    arena %ld: system %ld, free chunks %ld (fast) + %ld (rest) bytes\n", atol(p + 10),
            cur && cur < end ? atol(cur + 29) : -1L, fast && fast < end ? atol(strstr(fast, "size=\"") + 6) : -1L,
            rest && rest < end ? atol(strstr(rest, "size=\"") + 6) : -1L);
  }
}

/* Says where the growth went: the mappings whose resident size grew the most (kernel view), and the allocator's
 * figures before and after (glibc's view: in-use bytes, free bytes kept, its own mmaps), so that a failure on
 * another host names the mapping (a thread's arena, the merged per-session mappings of h2_mem.c, the main heap)
 * and whether the bytes are in use, kept free, or pages that were written and not given back. */
static void explain_growth(const snap_t *a, const snap_t *b, int n) {
  fprintf(stderr, "  mappings whose resident size grew (kB, per connection in bytes):\n");
  int shown = 0;
  for (int round = 0; round < 12; round++) {
    long best = 64, bi = -1;
    for (int i = 0; i < b->nmaps; i++) {
      const map_t *m = &b->maps[i];
      const map_t *o = map_at(a, m->start);
      long grew = m->rss_kb - (o != NULL && o->start == m->start ? o->rss_kb : 0);
      if (grew > best && m->name[0] != '\1') {
        best = grew;
        bi = i;
      }
    }
    if (bi < 0) break;
    map_t *m = &b->maps[bi];
    const map_t *o = map_at(a, m->start);
    fprintf(stderr, "    %lx-%lx %-20s size %lu kB, Rss %ld -> %ld kB (anon %ld), +%ld B/conn\n", m->start, m->end,
            m->name, (m->end - m->start) >> 10, o && o->start == m->start ? o->rss_kb : 0, m->rss_kb, m->anon_kb,
            best * 1024 / n);
    m->name[0] = '\1'; /* shown */
    shown++;
  }
  if (shown == 0) fprintf(stderr, "    (none grew by more than 64 kB)\n");
  const heap_info_t *x = &a->heap, *y = &b->heap;
  fprintf(stderr,
          "  malloc (mallinfo2, all arenas), before -> after (per connection):\n"
          "    arena (heap bytes from the system) %zu -> %zu (%+ld B)\n"
          "    in use %zu -> %zu (%+ld B), free kept %zu -> %zu (%+ld B), chunks free %zu -> %zu\n"
          "    malloc's own mmaps %zu (%zu B) -> %zu (%zu B), top releasable %zu -> %zu\n",
          x->arena, y->arena, ((long)y->arena - (long)x->arena) / n, x->uordblks, y->uordblks,
          ((long)y->uordblks - (long)x->uordblks) / n, x->fordblks, y->fordblks,
          ((long)y->fordblks - (long)x->fordblks) / n, x->ordblks, y->ordblks, x->hblks, x->hblkhd, y->hblks,
          y->hblkhd, x->keepcost, y->keepcost);
  fprintf(stderr, "  malloc_info before:\n");
  print_arenas(a->xml);
  fprintf(stderr, "  malloc_info after:\n");
  print_arenas(b->xml);
}

/* Lets the server finish what the last reads caused (its after-event step, and for h2c the rest step that an
 * idle connection takes after CB__REST_MS), then reads its RSS, mappings and allocator. */
static snap_t settled(child_t *ch, int ms) {
  sleep_ms(ms);
  return snapshot(ch);
}

static void check_bound(const char *what, snap_t *before, snap_t *after, int n, long bound) {
  long per = (after->rss_kb - before->rss_kb) * 1024 / n;
  cbt_log("%s: RSS %ld kB -> %ld kB over %d connections: %ld bytes per connection (bound %ld)", what,
          before->rss_kb, after->rss_kb, n, per, bound);
  fprintf(stderr, "%s: %ld bytes per idle connection (%d connections, bound %ld)\n", what, per, n, bound);
  if (per > bound || getenv("CBT_IDLE_EXPLAIN") != NULL) explain_growth(before, after, n);
  snap_free(before);
  snap_free(after);
  if (!IDLE_SANITIZED) ASSERT_LE(per, bound);
}

static const char hello_req[] =
    "GET /hello HTTP/1.1\r\nhost: 127.0.0.1\r\nuser-agent: cbench-idle-test\r\naccept: */*\r\n\r\n";

TEST_T(idle_memory_h1, 300000) {
  int n = connections_allowed(10000);
  child_t ch = server_child();
  buf_t exp = {0}, got = {0};
  ASSERT_EQ(exp_route(&exp, "GET", "/hello", CONN_NONE), 0);

  /* Warm-up: more requests than the journal keeps (10,000), pipelined on one connection, so that its rings have
   * reached their bound before the first reading. */
  int wfd = cl_connect(ch.port);
  buf_t batch = {0};
  for (int i = 0; i < 100; i++) buf_add(&batch, hello_req, sizeof hello_req - 1);
  for (int round = 0; round < 120; round++) {
    cl_send(wfd, batch.p, batch.len);
    buf_reset(&got);
    ASSERT_EQ(cl_read_n(wfd, &got, 100 * exp.len, 30000), CL_OK);
  }
  buf_free(&batch);
  snap_t before = settled(&ch, 300);

  int *fds = malloc((size_t)n * sizeof *fds);
  ASSERT_NOT_NULL(fds);
  for (int b = 0; b < n; b += BATCH) {
    int e = b + BATCH < n ? b + BATCH : n;
    for (int i = b; i < e; i++) {
      fds[i] = cl_connect(ch.port);
      cl_send(fds[i], hello_req, sizeof hello_req - 1);
    }
    for (int i = b; i < e; i++) {
      buf_reset(&got);
      int r = cl_read_n(fds[i], &got, exp.len, 30000);
      if (r != CL_OK) cbt_log("connection %d: %s", i, cl_status_name(r));
      mask_dates(got.p, got.len);
      ASSERT_MEM_EQ(got.p, got.len, exp.p, exp.len);
    }
  }
  snap_t after = settled(&ch, 300);
  check_bound("HTTP/1.1", &before, &after, n, 1024);

  /* Every idle connection still answers. */
  for (int i = 0; i < n; i += n / 10) {
    buf_reset(&got);
    cl_send(fds[i], hello_req, sizeof hello_req - 1);
    ASSERT_EQ(cl_read_n(fds[i], &got, exp.len, 30000), CL_OK);
    mask_dates(got.p, got.len);
    ASSERT_MEM_EQ(got.p, got.len, exp.p, exp.len);
  }
  for (int i = 0; i < n; i++) close(fds[i]);
  close(wfd);
  free(fds);
  buf_free(&exp);
  buf_free(&got);
  child_stop(&ch);
}

/* The client preface and an empty SETTINGS frame. */
static const char h2_hello[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";
static const char h2_settings_ack[] = "\x00\x00\x00\x04\x01\x00\x00\x00\x00";

/* What the server sends first: its SETTINGS (4 entries), a WINDOW_UPDATE on the connection and the ACK of
 * ours, in the order nghttp2 chooses; checked frame by frame (length, type, flags, stream 0). */
static void read_server_start(int fd) {
  buf_t got = {0};
  ASSERT_EQ(cl_read_n(fd, &got, 33 + 13 + 9, 30000), CL_OK);
  ASSERT_EQ(got.len, 33u + 13 + 9);
  int seen = 0;
  for (size_t o = 0; o < got.len;) {
    const unsigned char *p = (const unsigned char *)got.p + o;
    int len = p[0] << 16 | p[1] << 8 | p[2];
    ASSERT_EQ(p[5] | p[6] | p[7] | p[8], 0);
    if (p[3] == 0x4 && p[4] == 0 && len == 24) seen |= 1;       /* SETTINGS */
    else if (p[3] == 0x8 && len == 4) seen |= 2;                /* WINDOW_UPDATE */
    else if (p[3] == 0x4 && p[4] == 0x1 && len == 0) seen |= 4; /* SETTINGS ACK */
    o += 9 + (size_t)len;
  }
  ASSERT_EQ(seen, 7);
  buf_free(&got);
}

TEST_T(idle_memory_h2c, 300000) {
  int n = connections_allowed(5000);
  child_t ch = server_child();
  /* Warm-up: a few hundred connections through the same steps, kept open (so that the worker's caches stay
   * warm: they are bounded, not per connection, and are emptied only when the last connection closes). */
  int warm[200];
  for (int i = 0; i < 200; i++) {
    warm[i] = cl_connect(ch.port);
    cl_send(warm[i], h2_hello, sizeof h2_hello - 1);
    read_server_start(warm[i]);
    cl_send(warm[i], h2_settings_ack, sizeof h2_settings_ack - 1);
  }
  snap_t before = settled(&ch, CB__REST_MS + 1000);

  int *fds = malloc((size_t)n * sizeof *fds);
  ASSERT_NOT_NULL(fds);
  for (int b = 0; b < n; b += BATCH) {
    int e = b + BATCH < n ? b + BATCH : n;
    for (int i = b; i < e; i++) {
      fds[i] = cl_connect(ch.port);
      cl_send(fds[i], h2_hello, sizeof h2_hello - 1);
    }
    for (int i = b; i < e; i++) {
      read_server_start(fds[i]);
      cl_send(fds[i], h2_settings_ack, sizeof h2_settings_ack - 1);
    }
  }
  snap_t after = settled(&ch, CB__REST_MS + 1000);
  check_bound("h2c", &before, &after, n, 4096);

  /* The idle sessions still work: a PING on some of them is answered. */
  static const char ping[] = "\x00\x00\x08\x06\x00\x00\x00\x00\x00" "abcdefgh";
  for (int i = 0; i < n; i += n / 10) {
    buf_t got = {0};
    cl_send(fds[i], ping, sizeof ping - 1);
    ASSERT_EQ(cl_read_n(fds[i], &got, 17, 30000), CL_OK);
    ASSERT_MEM_EQ(got.p, got.len, "\x00\x00\x08\x06\x01\x00\x00\x00\x00" "abcdefgh", (size_t)17);
    buf_free(&got);
  }
  for (int i = 0; i < n; i++) close(fds[i]);
  for (int i = 0; i < 200; i++) close(warm[i]);
  free(fds);
  child_stop(&ch);
}

/* ---- over TLS (issue 24) ----
 * The same reading for connections over TLS 1.3: each does a full handshake (ALPN http/1.1 or h2), one GET /hello
 * answered in full, and then waits. The client is OpenSSL's, blocking, in this process (its memory is not the
 * server's); it does not verify the certificate, which the tls_listen tests do. */

static SSL_CTX *tls_client_ctx(const char *alpn, unsigned len) {
  SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
  ASSERT_NOT_NULL(ctx);
  ASSERT_EQ(SSL_CTX_set_alpn_protos(ctx, (const unsigned char *)alpn, len), 0);
  SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS); /* thousands of them stay open here too */
  return ctx;
}

static SSL *tls_open(SSL_CTX *ctx, int port) {
  int fd = cl_connect(port);
  struct timeval tv = {.tv_sec = 30};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  SSL *ssl = SSL_new(ctx);
  ASSERT_NOT_NULL(ssl);
  SSL_set_fd(ssl, fd);
  SSL_set_tlsext_host_name(ssl, "localhost");
  int rc = SSL_connect(ssl);
  if (rc != 1) FAIL("TLS handshake with port %d: SSL_connect %d, SSL_get_error %d", port, rc, SSL_get_error(ssl, rc));
  return ssl;
}

static void tls_close_conn(SSL *ssl) {
  int fd = SSL_get_fd(ssl);
  SSL_free(ssl);
  close(fd);
}

static void tls_send(SSL *ssl, const void *p, size_t n) {
  size_t k = 0;
  ASSERT_EQ(SSL_write_ex(ssl, p, n, &k), 1);
  ASSERT_EQ(k, n);
}

static void tls_read_n(SSL *ssl, buf_t *b, size_t n) {
  char tmp[4096];
  while (b->len < n) {
    size_t want = n - b->len < sizeof tmp ? n - b->len : sizeof tmp, k = 0;
    if (SSL_read_ex(ssl, tmp, want, &k) != 1) FAIL("TLS read: %zu of %zu bytes came", b->len, n);
    buf_add(b, tmp, k);
  }
}

/* GET /hello over HTTP/1.1, answered byte for byte. */
static void tls_h1_hello(SSL *ssl, const buf_t *exp) {
  buf_t got = {0};
  tls_send(ssl, hello_req, sizeof hello_req - 1);
  tls_read_n(ssl, &got, exp->len);
  mask_dates(got.p, got.len);
  ASSERT_MEM_EQ(got.p, got.len, exp->p, exp->len);
  buf_free(&got);
}

/* The preface, an empty SETTINGS and GET /hello on stream 1 (HPACK: :method GET, :scheme https, :path /hello and
 * :authority localhost, the last two literal without indexing), in one write. */
static const char h2_tls_hello[] =
    "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00"
    "\x00\x00\x15\x01\x05\x00\x00\x00\x01\x82\x87\x04\x06/hello\x01\x09localhost";

/* Reads frames until stream 1 ends and the server's SETTINGS came: the answer must be :status 200 (0x88 first)
 * and "Hello, Joe!"; then acknowledges the SETTINGS. */
static void tls_h2_hello(SSL *ssl) {
  tls_send(ssl, h2_tls_hello, sizeof h2_tls_hello - 1);
  buf_t body = {0};
  int settings = 0, status = 0, ended = 0;
  while (!ended || !settings) {
    buf_t f = {0};
    tls_read_n(ssl, &f, 9);
    const unsigned char *h = (const unsigned char *)f.p;
    size_t len = (size_t)(h[0] << 16 | h[1] << 8 | h[2]);
    int type = h[3], flags = h[4];
    uint32_t sid = (uint32_t)(h[5] & 0x7f) << 24 | (uint32_t)h[6] << 16 | (uint32_t)h[7] << 8 | h[8];
    tls_read_n(ssl, &f, 9 + len);
    const char *payload = f.p + 9;
    if (type == 0x4 && !(flags & 0x1)) settings = 1;
    if (sid == 1 && type == 0x1) status = len > 0 && (unsigned char)payload[0] == 0x88;
    if (sid == 1 && type == 0x0) buf_add(&body, payload, len);
    if (sid == 1 && (type == 0x0 || type == 0x1) && (flags & 0x1)) ended = 1;
    ASSERT(type != 0x3 && type != 0x7); /* no RST_STREAM, no GOAWAY */
    buf_free(&f);
  }
  ASSERT(status);
  ASSERT_MEM_EQ(body.p, body.len, "Hello, Joe!", (size_t)11);
  buf_free(&body);
  tls_send(ssl, h2_settings_ack, sizeof h2_settings_ack - 1);
}

static void idle_tls(const char *what, int h2, int count, long bound) {
  int n = connections_allowed(count);
  child_t ch = server_child_tls(1);
  buf_t exp = {0};
  ASSERT_EQ(exp_route(&exp, "GET", "/hello", CONN_NONE), 0);
  SSL_CTX *ctx1 = tls_client_ctx("\x08http/1.1", 9), *ctx = h2 ? tls_client_ctx("\x02h2", 3) : ctx1;

  /* Warm-up: the journal's rings filled to their bound (12,000 requests pipelined on one connection), and 200
   * connections made as the measured ones are, kept open (the worker's caches and the allocator's first pages). */
  SSL *w = tls_open(ctx1, ch.port);
  buf_t batch = {0}, got = {0};
  for (int i = 0; i < 100; i++) buf_add(&batch, hello_req, sizeof hello_req - 1);
  for (int round = 0; round < 120; round++) {
    tls_send(w, batch.p, batch.len);
    buf_reset(&got);
    tls_read_n(w, &got, 100 * exp.len);
  }
  buf_free(&batch);
  buf_free(&got);
  SSL *warm[200];
  for (int i = 0; i < 200; i++) {
    warm[i] = tls_open(ctx, ch.port);
    if (h2) tls_h2_hello(warm[i]);
    else tls_h1_hello(warm[i], &exp);
  }
  snap_t before = settled(&ch, CB__REST_MS + 1000);

  SSL **conns = malloc((size_t)n * sizeof *conns);
  ASSERT_NOT_NULL(conns);
  for (int i = 0; i < n; i++) {
    conns[i] = tls_open(ctx, ch.port);
    if (h2) tls_h2_hello(conns[i]);
    else tls_h1_hello(conns[i], &exp);
  }
  snap_t after = settled(&ch, CB__REST_MS + 1000);
  check_bound(what, &before, &after, n, bound);

  /* Every idle connection still answers: HTTP/1.1 another request, h2 a PING. */
  static const char ping[] = "\x00\x00\x08\x06\x00\x00\x00\x00\x00" "abcdefgh";
  for (int i = 0; i < n; i += n / 10) {
    if (!h2) {
      tls_h1_hello(conns[i], &exp);
      continue;
    }
    buf_t pong = {0};
    tls_send(conns[i], ping, sizeof ping - 1);
    tls_read_n(conns[i], &pong, 17);
    ASSERT_MEM_EQ(pong.p, pong.len, "\x00\x00\x08\x06\x01\x00\x00\x00\x00" "abcdefgh", (size_t)17);
    buf_free(&pong);
  }
  for (int i = 0; i < n; i++) tls_close_conn(conns[i]);
  for (int i = 0; i < 200; i++) tls_close_conn(warm[i]);
  tls_close_conn(w);
  free(conns);
  if (ctx != ctx1) SSL_CTX_free(ctx);
  SSL_CTX_free(ctx1);
  buf_free(&exp);
  child_stop(&ch);
}

TEST_T(idle_memory_tls, 300000) { idle_tls("HTTP/1.1 over TLS", 0, 2000, 20480); }

TEST_T(idle_memory_tls_h2, 300000) { idle_tls("h2 over TLS", 1, 2000, 20480); }
