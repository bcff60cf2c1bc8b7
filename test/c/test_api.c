/* The public C API: configuration, start/stop lifecycle, errors and names. */
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "common.h"

/* GET /hello on a new connection and compare the whole response. */
static void check_hello(int port) {
  buf_t exp = {0};
  int fd = cl_connect(port);
  static const char req[] = "GET /hello HTTP/1.1\r\nhost: x\r\n\r\n";
  ASSERT_EQ(exp_route(&exp, "GET", "/hello", CONN_NONE), 0);
  ROUNDTRIP(fd, req, sizeof req - 1, &exp);
  close(fd);
  buf_free(&exp);
}

TEST(api_config_defaults) {
  cb_config_t cfg;
  memset(&cfg, 0x5a, sizeof cfg);
  cb_config_init(&cfg);
  ASSERT_STR_EQ(cfg.host, "127.0.0.1");
  ASSERT_EQ(cfg.port, 8080);
  ASSERT_EQ(cfg.threads, 0);
  ASSERT_NULL(cfg.cpus);
  ASSERT_EQ(cfg.ncpus, 0);
  ASSERT_EQ(cfg.backlog, 1024);
  ASSERT_EQ(cfg.max_header_bytes, 16384);
  ASSERT_EQ(cfg.max_body_bytes, 10000000);
  ASSERT_EQ(cfg.header_timeout_ms, 10000);
  ASSERT_EQ(cfg.idle_timeout_ms, 60000);
  ASSERT_EQ(cfg.stop_timeout_ms, 5000);
  ASSERT_EQ(cfg.enable_h2, 1);
  ASSERT_EQ(cfg.h2_max_concurrent_streams, 128);
  ASSERT_NULL(cfg.fixture_dir);
}

TEST(api_start_stop) {
  cb_config_t cfg;
  cb_server_t *srv;
  cb_stats_t st;
  test_config(&cfg);
  cfg.threads = 2;
  srv = test_start(&cfg);
  ASSERT_GT(cb_server_port(srv), 0);
  ASSERT_LE(cb_server_port(srv), 65535);
  ASSERT_EQ(cb_server_threads(srv), 2);
  ASSERT_ERR(cb_server_stats(srv, &st), 0);
  ASSERT_EQ(st.conns_accepted, 0);
  ASSERT_EQ(st.requests, 0);
  check_hello(cb_server_port(srv));
  test_stop(srv);
  ASSERT_EQ(count_threads(), 1);
}

TEST(api_threads_default_is_online_cpus) {
  cb_config_t cfg;
  cb_server_t *srv;
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  test_config(&cfg);
  cfg.threads = 0;
  srv = test_start(&cfg);
  ASSERT_EQ(cb_server_threads(srv), ncpu);
  ASSERT_EQ(count_threads(), 1 + ncpu);
  /* Every worker listens on the one port: a few connections land on different workers and all answer. */
  for (int i = 0; i < 8; i++) check_hello(cb_server_port(srv));
  test_stop(srv);
  ASSERT_EQ(count_threads(), 1);
}

TEST(api_restart_in_one_process) {
  cb_config_t cfg;
  cb_server_t *srv;
  int port;
  test_config(&cfg);
  srv = test_start(&cfg);
  port = cb_server_port(srv);
  check_hello(port);
  test_stop(srv);
  /* Again on port 0 ... */
  srv = test_start(&cfg);
  check_hello(cb_server_port(srv));
  test_stop(srv);
  /* ... and on the port of the first run, which must be free again. */
  cfg.port = port;
  srv = test_start(&cfg);
  ASSERT_EQ(cb_server_port(srv), port);
  check_hello(port);
  test_stop(srv);
}

TEST(api_port_in_use_by_other_socket) {
  struct sockaddr_in sa;
  socklen_t salen = sizeof sa;
  cb_config_t cfg;
  cb_server_t *srv = NULL;
  int fd = socket(AF_INET, SOCK_STREAM, 0), fds_before, threads_before;
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  ASSERT_EQ(listen(fd, 16), 0);
  ASSERT_EQ(getsockname(fd, (struct sockaddr *)&sa, &salen), 0);
  fds_before = count_fds();
  threads_before = count_threads();
  test_config(&cfg);
  cfg.threads = 2;
  cfg.port = ntohs(sa.sin_port);
  ASSERT_ERR(cb_server_start(&cfg, &srv), UV_EADDRINUSE);
  ASSERT_NULL(srv);
  /* A failed start leaves nothing behind. */
  ASSERT_EQ(count_fds(), fds_before);
  ASSERT_EQ(count_threads(), threads_before);
  close(fd);
}

TEST(api_port_in_use_by_other_server) {
  cb_config_t cfg;
  cb_server_t *a, *b = NULL;
  test_config(&cfg);
  a = test_start(&cfg);
  cfg.port = cb_server_port(a);
  /* SO_REUSEPORT must not let a second server silently share the port of a running one. */
  ASSERT_ERR(cb_server_start(&cfg, &b), UV_EADDRINUSE);
  ASSERT_NULL(b);
  check_hello(cfg.port);
  test_stop(a);
}

typedef struct {
  const char *what;
  void (*set)(cb_config_t *);
  int err;
} bad_config_t;

static void bad_threads_neg(cb_config_t *c) { c->threads = -1; }
static void bad_threads_huge(cb_config_t *c) { c->threads = 100000; }
static void bad_threads_max1(cb_config_t *c) { c->threads = CB_MAX_THREADS + 1; }
static void bad_cpu_huge(cb_config_t *c) {
  static const int cpus[] = {100000};
  c->cpus = cpus;
  c->ncpus = 1;
}
static void bad_cpu_neg(cb_config_t *c) {
  static const int cpus[] = {-1};
  c->cpus = cpus;
  c->ncpus = 1;
}
static void bad_ncpus(cb_config_t *c) {
  static const int cpus[] = {0};
  c->cpus = cpus;
  c->ncpus = -1;
}
static void bad_host_name(cb_config_t *c) { c->host = "not-an-address"; }
static void bad_host_empty(cb_config_t *c) { c->host = ""; }
static void bad_host_v4(cb_config_t *c) { c->host = "127.0.0.256"; }
static void bad_host_long(cb_config_t *c) { c->host = "a123456789.b123456789.c123456789.d123456789.e123456789.f123456789.invalid"; }
static void bad_backlog(cb_config_t *c) { c->backlog = 0; }
static void bad_max_header_huge(cb_config_t *c) { c->max_header_bytes = (1u << 24) + 1; }
static void bad_streams_huge(cb_config_t *c) { c->h2_max_concurrent_streams = (1u << 20) + 1; }
static void bad_enable_h2(cb_config_t *c) { c->enable_h2 = 2; }
static void bad_port_neg(cb_config_t *c) { c->port = -1; }
static void bad_port_huge(cb_config_t *c) { c->port = 65536; }
static void bad_max_header(cb_config_t *c) { c->max_header_bytes = 0; }
static void bad_max_body(cb_config_t *c) { c->max_body_bytes = 0; }
static void bad_header_timeout(cb_config_t *c) { c->header_timeout_ms = 0; }
static void bad_idle_timeout(cb_config_t *c) { c->idle_timeout_ms = 0; }

static const bad_config_t bad_configs[] = {
    {"threads -1", bad_threads_neg, CB_ETHREADS},
    {"threads 100000", bad_threads_huge, CB_ETHREADS},
    {"threads CB_MAX_THREADS+1", bad_threads_max1, CB_ETHREADS},
    {"cpu 100000", bad_cpu_huge, CB_ETHREADS},
    {"cpu -1", bad_cpu_neg, CB_ETHREADS},
    {"ncpus -1", bad_ncpus, CB_ETHREADS},
    {"host not-an-address", bad_host_name, CB_EAI_NONAME},
    {"host empty", bad_host_empty, UV_EINVAL},
    {"host 127.0.0.256", bad_host_v4, CB_EAI_NONAME},
    {"host too long", bad_host_long, UV_EINVAL},
    {"backlog 0", bad_backlog, UV_EINVAL},
    {"max_header_bytes 2^24+1", bad_max_header_huge, CB_ELIMIT},
    {"h2_max_concurrent_streams 2^20+1", bad_streams_huge, CB_ELIMIT},
    {"enable_h2 2", bad_enable_h2, UV_EINVAL},
    {"port -1", bad_port_neg, UV_EINVAL},
    {"port 65536", bad_port_huge, UV_EINVAL},
    {"max_header_bytes 0", bad_max_header, CB_ELIMIT},
    {"max_body_bytes 0", bad_max_body, CB_ELIMIT},
    {"header_timeout_ms 0", bad_header_timeout, CB_ELIMIT},
    {"idle_timeout_ms 0", bad_idle_timeout, CB_ELIMIT},
};

TEST(api_bad_config) {
  size_t i;
  int fds = count_fds();
  for (i = 0; i < sizeof bad_configs / sizeof bad_configs[0]; i++) {
    cb_config_t cfg;
    cb_server_t *srv = NULL;
    int r;
    test_config(&cfg);
    bad_configs[i].set(&cfg);
    r = cb_server_start(&cfg, &srv);
    if (r != bad_configs[i].err) {
      if (r == 0) cb_server_stop(srv);
      FAIL("%s: cb_server_start returned %d (%s), expected %d (%s)", bad_configs[i].what, r, cb_err_name(r),
           bad_configs[i].err, cb_err_name(bad_configs[i].err));
    }
    ASSERT_NULL(srv);
    ASSERT_EQ(count_threads(), 1);
    ASSERT_EQ(count_fds(), fds);
  }
}

TEST(api_ipv6_host) {
  cb_config_t cfg;
  cb_server_t *srv = NULL;
  int r;
  test_config(&cfg);
  cfg.host = "::1";
  r = cb_server_start(&cfg, &srv);
  if (r == UV_EADDRNOTAVAIL || r == UV_EAFNOSUPPORT) return; /* no IPv6 loopback here */
  ASSERT_ERR(r, 0);
  ASSERT_GT(cb_server_port(srv), 0);
  test_stop(srv);
}

TEST(api_null_args) {
  cb_config_t cfg;
  cb_server_t *srv = NULL;
  cb_stats_t st;
  test_config(&cfg);
  ASSERT_ERR(cb_server_start(NULL, &srv), UV_EINVAL);
  ASSERT_NULL(srv);
  ASSERT_ERR(cb_server_start(&cfg, NULL), UV_EINVAL);
  ASSERT_ERR(cb_server_stats(NULL, &st), UV_EINVAL);
  ASSERT_ERR(cb_server_stop(NULL), UV_EINVAL);
  srv = test_start(&cfg);
  ASSERT_ERR(cb_server_stats(srv, NULL), UV_EINVAL);
  ASSERT_EQ(cb_server_worker_cpu(srv, -1), -1);
  ASSERT_EQ(cb_server_worker_cpu(srv, 1), -1);
  ASSERT_EQ(cb_server_worker_cpu(srv, 0), -1); /* not pinned */
  test_stop(srv);
  ASSERT_EQ(count_threads(), 1);
}

TEST(api_error_names) {
  static const struct {
    int code;
    const char *name;
  } own[] = {
      {CB_EFIXTURE, "CB_EFIXTURE"},
      {CB_ESTOPPED, "CB_ESTOPPED"},
      {CB_ETHREADS, "CB_ETHREADS"},
      {CB_ELIMIT, "CB_ELIMIT"},
      {CB_EGONE, "CB_EGONE"},
      {CB_ENOTSTREAMING, "CB_ENOTSTREAMING"},
  };
  size_t i, k;
  for (i = 0; i < sizeof own / sizeof own[0]; i++) {
    const char *text = cb_strerror(own[i].code);
    ASSERT_STR_EQ(cb_err_name(own[i].code), own[i].name);
    ASSERT_NOT_NULL(text);
    ASSERT_GT(strlen(text), 0);
    for (k = 0; k < i; k++) ASSERT(strcmp(text, cb_strerror(own[k].code)) != 0);
  }
  /* Every libuv code is named as libuv names it. */
#define XX(code, _)                                                                                       \
  ASSERT_STR_EQ(cb_err_name(UV_##code), #code);                                                           \
  ASSERT_NOT_NULL(cb_strerror(UV_##code));                                                                \
  ASSERT_GT(strlen(cb_strerror(UV_##code)), 0);
  UV_ERRNO_MAP(XX)
#undef XX
  /* Codes nobody defines still get some text. */
  ASSERT_NOT_NULL(cb_err_name(-29999));
  ASSERT_NOT_NULL(cb_strerror(-29999));
  ASSERT_NOT_NULL(cb_err_name(12345));
  ASSERT_NOT_NULL(cb_strerror(12345));
  ASSERT_NOT_NULL(cb_err_name(0));
  ASSERT_NOT_NULL(cb_strerror(0));
}

TEST(api_proto_names) {
  ASSERT_STR_EQ(cb_proto_name(CB_PROTO_HTTP1), "http1");
  ASSERT_STR_EQ(cb_proto_name(CB_PROTO_H2C_PRIOR), "h2c_prior");
  ASSERT_STR_EQ(cb_proto_name(CB_PROTO_H2C_UPGRADE), "h2c_upgrade");
  ASSERT_STR_EQ(cb_proto_name(CB_PROTO_H1_TLS), "h1_tls");
  ASSERT_STR_EQ(cb_proto_name(CB_PROTO_H2_TLS), "h2_tls");
  ASSERT_NULL(cb_proto_name(-1));
  ASSERT_NULL(cb_proto_name(CB_PROTO_COUNT));
}

TEST(api_version) {
  char v[32];
  snprintf(v, sizeof v, "%d.%d.%d", CBENCH_VERSION_MAJOR, CBENCH_VERSION_MINOR, CBENCH_VERSION_PATCH);
  ASSERT_STR_EQ(cb_version(), v);
}

TEST_T(api_many_start_stop_cycles, 90000) {
  int fds, i;
  {
    /* libuv opens a few process-wide descriptors with the first loop (its signal pipe): count after it. */
    cb_config_t cfg;
    test_config(&cfg);
    test_stop(test_start(&cfg));
  }
  fds = count_fds();
  for (i = 0; i < 25; i++) {
    cb_config_t cfg;
    cb_server_t *srv;
    test_config(&cfg);
    cfg.threads = 1 + i % 3;
    srv = test_start(&cfg);
    if (i % 5 == 0) check_hello(cb_server_port(srv));
    test_stop(srv);
    ASSERT_EQ(count_threads(), 1);
    ASSERT_EQ(count_fds(), fds);
  }
}

/* The option table is what cb_config_init() and the checks use: every default comes from it, every UINT bound
 * is enforced at exactly min and max, and cb_config_check() names the row of a bad value. */
TEST(api_option_table) {
  int n = 0;
  const cb_option_t *opts = cb_config_options(&n);
  cb_config_t cfg;
  ASSERT_GE(n, 13);
  cb_config_init(&cfg);
  ASSERT_ERR(cb_config_check(&cfg, NULL), 0);
  for (int i = 0; i < n; i++) {
    const cb_option_t *o = &opts[i];
    const cb_option_t *bad = NULL;
    ASSERT_EQ(cb_config_option(o->name), o);
    if (o->erl_key != NULL) ASSERT_EQ(cb_config_option(o->erl_key), o);
    if (o->flags & CB_OPT_F_EHTTPD_ONLY) {
      ASSERT_ERR(cb_config_set_uint(&cfg, o, 0), UV_EINVAL); /* no field to set */
      continue;
    }
    if (o->type != CB_OPT_UINT && o->type != CB_OPT_BOOL) continue;
    ASSERT_EQ(cb_config_get_uint(&cfg, o), o->def);
    ASSERT_ERR(cb_config_set_uint(&cfg, o, o->max), 0);
    ASSERT_EQ(cb_config_get_uint(&cfg, o), o->max);
    ASSERT_ERR(cb_config_check(&cfg, NULL), 0);
    ASSERT_ERR(cb_config_set_uint(&cfg, o, o->min), 0);
    ASSERT_EQ(cb_config_get_uint(&cfg, o), o->min);
    ASSERT_ERR(cb_config_check(&cfg, NULL), 0);
    ASSERT_ERR(cb_config_set_uint(&cfg, o, o->max + 1), o->err);
    if (o->min > 0) ASSERT_ERR(cb_config_set_uint(&cfg, o, o->min - 1), o->err);
    ASSERT_EQ(cb_config_get_uint(&cfg, o), o->min); /* a rejected value changes nothing */
    /* Written past the setter, an out-of-range value is caught by the check, which names the option (a
     * 32-bit field whose bound is UINT32_MAX cannot hold one). */
    cb_config_t raw = cfg;
    if (o->size == sizeof(size_t)) {
      size_t v = (size_t)o->max + 1;
      memcpy((char *)&raw + o->offset, &v, sizeof v);
    } else if (o->max < 0x7fffffff) {
      int v = (int)o->max + 1;
      memcpy((char *)&raw + o->offset, &v, sizeof v);
    }
    if (o->size == sizeof(size_t) || o->max < 0x7fffffff) {
      ASSERT_ERR(cb_config_check(&raw, &bad), o->err);
      ASSERT_NOT_NULL(bad);
      ASSERT_STR_EQ(bad->name, o->name);
    }
    cb_config_set_uint(&cfg, o, o->def);
  }
  ASSERT_NULL(cb_config_option("no_such_option"));
  ASSERT_STR_EQ(cb_config_option("ip")->name, "host");
}

/* A pin the kernel refuses (a CPU this process may not run on) fails the start with CB_ETHREADS, and nothing
 * is left running: the handshake waits for every worker's pin. */
TEST(api_cpu_pin_refused) {
  int allowed[CB_MAX_THREADS];
  int nallowed = cb_cpus_allowed(allowed, CB_MAX_THREADS);
  int cpus[2] = {-1, -1};
  cb_config_t cfg;
  cb_server_t *srv = NULL;
  int fds;
  ASSERT_GT(nallowed, 0);
  /* libuv opens its process-wide descriptors with the first loop: count after one server has run. */
  test_config(&cfg);
  test_stop(test_start(&cfg));
  fds = count_fds();
  for (int cpu = 1023; cpu >= 0 && cpus[1] < 0; cpu--) {
    int ok = 0;
    for (int i = 0; i < nallowed && i < CB_MAX_THREADS; i++) ok |= allowed[i] == cpu;
    if (!ok) cpus[1] = cpu;
  }
  ASSERT_GE(cpus[1], 0);
  cpus[0] = allowed[0]; /* worker 0 pins fine, worker 1 does not: worker 0 must be stopped too */
  test_config(&cfg);
  cfg.threads = 2;
  cfg.cpus = cpus;
  cfg.ncpus = 2;
  ASSERT_ERR(cb_config_check(&cfg, NULL), 0);
  ASSERT_ERR(cb_server_start(&cfg, &srv), CB_ETHREADS);
  ASSERT_NULL(srv);
  ASSERT_EQ(count_threads(), 1);
  ASSERT_EQ(count_fds(), fds);
}

/* A host name is resolved; "localhost" binds its IPv4 address. */
TEST(api_host_name) {
  cb_config_t cfg;
  cb_server_t *srv;
  test_config(&cfg);
  cfg.host = "localhost";
  srv = test_start(&cfg);
  check_hello(cb_server_port(srv));
  test_stop(srv);
}

TEST(api_cpu_pinning) {
  static const int cpus[] = {0};
  cb_config_t cfg;
  cb_server_t *srv;
  test_config(&cfg);
  cfg.threads = 2;
  cfg.cpus = cpus;
  cfg.ncpus = 1;
  srv = test_start(&cfg);
  /* Read back from the kernel after pinning. */
  ASSERT_EQ(cb_server_worker_cpu(srv, 0), 0);
  ASSERT_EQ(cb_server_worker_cpu(srv, 1), 0);
  ASSERT_EQ(cb_server_worker_cpu(srv, 2), -1);
  check_hello(cb_server_port(srv));
  test_stop(srv);
}

static void check_file(const char *dir, const char *name, size_t size) {
  char path[512];
  buf_t exp = {0}, got = {0};
  FILE *f;
  char tmp[65536];
  size_t n;
  snprintf(path, sizeof path, "%s/%s", dir, name);
  f = fopen(path, "rb");
  if (f == NULL) FAIL("fixture file %s is missing", path);
  while ((n = fread(tmp, 1, sizeof tmp, f)) > 0) buf_add(&got, tmp, n);
  fclose(f);
  exp_file_bytes(&exp, size);
  ASSERT_MEM_EQ(got.p, got.len, exp.p, exp.len);
  buf_free(&exp);
  buf_free(&got);
}

TEST(api_fixture_dir) {
  char tmpdir[] = "/tmp/cbench-test-XXXXXX", dir[64], cmd[256];
  cb_config_t cfg;
  cb_server_t *srv;
  ASSERT_NOT_NULL(mkdtemp(tmpdir));
  /* Without fixture_dir nothing is written to disk ($TMPDIR stays empty). */
  setenv("TMPDIR", tmpdir, 1);
  test_config(&cfg);
  srv = test_start(&cfg);
  check_hello(cb_server_port(srv));
  snprintf(cmd, sizeof cmd, "test -z \"$(ls -A %s)\"", tmpdir);
  ASSERT_EQ(system(cmd), 0);
  test_stop(srv);
  /* With one, the files are written there (the directory is made), served, and left for others after stop. */
  snprintf(dir, sizeof dir, "%s/fx", tmpdir);
  cfg.fixture_dir = dir;
  srv = test_start(&cfg);
  test_stop(srv);
  check_file(dir, "tiny", FILE_TINY);
  check_file(dir, "small", FILE_SMALL);
  check_file(dir, "big", FILE_BIG);
  /* A second server reuses them. */
  srv = test_start(&cfg);
  {
    buf_t exp = {0};
    int fd = cl_connect(cb_server_port(srv));
    exp_route(&exp, "GET", "/file/small", CONN_NONE);
    ROUNDTRIP_S(fd, "GET /file/small HTTP/1.1\r\nhost: x\r\n\r\n", &exp);
    close(fd);
    buf_free(&exp);
  }
  test_stop(srv);
  /* A fixture_dir that cannot be made: CB_EFIXTURE, nothing left running. */
  cfg.fixture_dir = "/proc/cbench-no-such-dir";
  srv = NULL;
  ASSERT_ERR(cb_server_start(&cfg, &srv), CB_EFIXTURE);
  ASSERT_NULL(srv);
  ASSERT_EQ(count_threads(), 1);
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
  ASSERT_EQ(system(cmd), 0);
}

TEST(api_stop_with_open_connections) {
  cb_config_t cfg;
  cb_server_t *srv;
  int fds[10], busy, i, port;
  buf_t got = {0};
  uint64_t t0;
  test_config(&cfg);
  cfg.stop_timeout_ms = 300;
  srv = test_start(&cfg);
  port = cb_server_port(srv);
  for (i = 0; i < 10; i++) fds[i] = cl_connect(port);
  check_hello(port); /* the idle connections above were accepted before this one was answered */
  busy = cl_connect(port);
  cl_sends(busy, "GET /delay/60000 HTTP/1.1\r\nhost: x\r\n\r\n");
  sleep_ms(50);
  t0 = now_ms();
  test_stop(srv);
  /* The in-flight request could not finish within stop_timeout_ms: stop did not wait 60 s for it. */
  ASSERT_LT(now_ms() - t0, 10000);
  for (i = 0; i < 10; i++) {
    EXPECT_CLOSED(fds[i], 2000);
    close(fds[i]);
  }
  ASSERT_NE(cl_read_close(busy, &got, 2000), CL_TIMEOUT);
  close(busy);
  buf_free(&got);
  ASSERT_EQ(count_threads(), 1);
}
