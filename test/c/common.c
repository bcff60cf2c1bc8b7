/* Helpers shared by the C tests (see common.h). The expected responses here are written from docs/wire.md,
 * not from the engine's code, so that a test compares the engine against the contract. */
#include "common.h"

#include <arpa/inet.h>
#include <nghttp2/nghttp2.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* ---- byte buffer ---- */

void buf_add(buf_t *b, const void *data, size_t len) {
  if (b->len + len + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + len + 1) cap *= 2;
    b->p = realloc(b->p, cap);
    if (b->p == NULL) FAIL("out of memory");
    b->cap = cap;
  }
  if (len) memcpy(b->p + b->len, data, len);
  b->len += len;
  b->p[b->len] = '\0';
}

void buf_adds(buf_t *b, const char *s) { buf_add(b, s, strlen(s)); }

void buf_addf(buf_t *b, const char *fmt, ...) {
  char tmp[1024];
  va_list ap;
  int n;
  va_start(ap, fmt);
  n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= sizeof tmp) FAIL("buf_addf: too long");
  buf_add(b, tmp, (size_t)n);
}

void buf_reset(buf_t *b) {
  b->len = 0;
  if (b->p) b->p[0] = '\0';
}

void buf_free(buf_t *b) {
  free(b->p);
  b->p = NULL;
  b->len = b->cap = 0;
}

/* ---- the contract ---- */

const char *exp_reason(int status) {
  switch (status) {
  case 100: return "Continue";
  case 101: return "Switching Protocols";
  case 200: return "OK";
  case 201: return "Created";
  case 202: return "Accepted";
  case 203: return "Non-Authoritative Information";
  case 204: return "No Content";
  case 205: return "Reset Content";
  case 206: return "Partial Content";
  case 300: return "Multiple Choices";
  case 301: return "Moved Permanently";
  case 302: return "Found";
  case 303: return "See Other";
  case 304: return "Not Modified";
  case 305: return "Use Proxy";
  case 307: return "Temporary Redirect";
  case 308: return "Permanent Redirect";
  case 400: return "Bad Request";
  case 401: return "Unauthorized";
  case 402: return "Payment Required";
  case 403: return "Forbidden";
  case 404: return "Not Found";
  case 405: return "Method Not Allowed";
  case 406: return "Not Acceptable";
  case 407: return "Proxy Authentication Required";
  case 408: return "Request Timeout";
  case 409: return "Conflict";
  case 410: return "Gone";
  case 411: return "Length Required";
  case 412: return "Precondition Failed";
  case 413: return "Content Too Large";
  case 414: return "URI Too Long";
  case 415: return "Unsupported Media Type";
  case 416: return "Range Not Satisfiable";
  case 417: return "Expectation Failed";
  case 421: return "Misdirected Request";
  case 422: return "Unprocessable Content";
  case 425: return "Too Early";
  case 426: return "Upgrade Required";
  case 428: return "Precondition Required";
  case 429: return "Too Many Requests";
  case 431: return "Request Header Fields Too Large";
  case 451: return "Unavailable For Legal Reasons";
  case 500: return "Internal Server Error";
  case 501: return "Not Implemented";
  case 502: return "Bad Gateway";
  case 503: return "Service Unavailable";
  case 504: return "Gateway Timeout";
  case 505: return "HTTP Version Not Supported";
  case 511: return "Network Authentication Required";
  default: return "Unknown";
  }
}

void exp_head(buf_t *b, int status, const char *ctype, const char *extra, long clen, int conn) {
  buf_addf(b, "HTTP/1.1 %d %s\r\n", status, exp_reason(status));
  buf_adds(b, "date: " DATE_MASK "\r\n");
  if (ctype) buf_addf(b, "content-type: %s\r\n", ctype);
  if (extra) buf_adds(b, extra);
  if (clen >= 0) buf_addf(b, "content-length: %ld\r\n", clen);
  else if (clen == CL_CHUNKED) buf_adds(b, "transfer-encoding: chunked\r\n");
  if (conn == CONN_CLOSE) buf_adds(b, "connection: close\r\n");
  else if (conn == CONN_KEEP_ALIVE) buf_adds(b, "connection: keep-alive\r\n");
  buf_adds(b, "\r\n");
}

void exp_chunk(buf_t *b, const void *data, size_t len) {
  buf_addf(b, "%zx\r\n", len);
  buf_add(b, data, len);
  buf_adds(b, "\r\n");
}

void exp_last_chunk(buf_t *b) { buf_adds(b, "0\r\n\r\n"); }

void exp_file_bytes(buf_t *b, size_t size) {
  size_t i;
  unsigned char block[251];
  for (i = 0; i < sizeof block; i++) block[i] = (unsigned char)i;
  for (i = 0; i < size; i += sizeof block) buf_add(b, block, size - i < sizeof block ? size - i : sizeof block);
}

void exp_error_close(buf_t *b, int status) { exp_head(b, status, NULL, NULL, 0, CONN_CLOSE); }

static int all_digits(const char *s, size_t n) {
  size_t i;
  for (i = 0; i < n; i++)
    if (s[i] < '0' || s[i] > '9') return 0;
  return 1;
}

void exp_near404(buf_t *b, const char *method, const char *target, const char *lines, int conn) {
  buf_t body = {0};
  buf_addf(&body, "No stub matched %s %s\nClosest stubs:\n%s", method, target, lines);
  exp_head(b, 404, "text/plain", NULL, (long)body.len, conn);
  if (strcmp(method, "HEAD") != 0) buf_add(b, body.p, body.len);
  buf_free(&body);
}

int exp_route(buf_t *b, const char *method, const char *path_and_query, int conn) {
  char path[1024];
  const char *q = strchr(path_and_query, '?');
  size_t plen = q ? (size_t)(q - path_and_query) : strlen(path_and_query);
  int head = strcmp(method, "HEAD") == 0, get = strcmp(method, "GET") == 0 || head;
  const char *ctype = NULL, *extra = NULL;
  buf_t body = {0};
  long clen = 0;
  int status = 200, i, chunked = 0;

  if (plen >= sizeof path) return -1;
  memcpy(path, path_and_query, plen);
  path[plen] = '\0';

  if (strcmp(path, "/echo") == 0 || strcmp(path, "/echo/chunked") == 0) {
    if (strcmp(method, "POST") == 0) return -1;
    exp_head(b, 405, NULL, "allow: POST\r\n", 0, conn);
    return 0;
  }
  if (strcmp(path, "/") == 0) {
    buf_adds(&body, "hello world!");
  } else if (strcmp(path, "/hello") == 0) {
    ctype = "text/plain";
    buf_adds(&body, "Hello, Joe!");
  } else if (strcmp(path, "/json") == 0) {
    ctype = "application/json";
    buf_adds(&body, "{\"message\":\"Hello, Joe!\"}");
  } else if (strcmp(path, "/file/tiny") == 0) {
    ctype = "application/octet-stream";
    exp_file_bytes(&body, FILE_TINY);
  } else if (strcmp(path, "/file/small") == 0) {
    ctype = "application/octet-stream";
    exp_file_bytes(&body, FILE_SMALL);
  } else if (strcmp(path, "/file/big") == 0) {
    ctype = "application/octet-stream";
    exp_file_bytes(&body, FILE_BIG);
  } else if (strcmp(path, "/stream") == 0) {
    ctype = "text/plain";
    chunked = 1;
    exp_chunk(&body, "hello, ", 7);
    exp_chunk(&body, "Joe!", 4);
  } else if (strcmp(path, "/stream/small") == 0 || strcmp(path, "/stream/big") == 0) {
    int big = path[8] == 'b';
    ctype = "application/octet-stream";
    chunked = 1;
    for (i = 0; i < (big ? 64 : 100); i++) {
      buf_addf(&body, "%x\r\n", big ? 16384 : 64);
      for (int k = 0; k < (big ? 256 : 1); k++) buf_adds(&body, LINE64);
      buf_adds(&body, "\r\n");
    }
  } else if (strcmp(path, "/sse") == 0 || strcmp(path, "/sse/small") == 0 || strcmp(path, "/sse/big") == 0) {
    int big = strcmp(path, "/sse/big") == 0, n = big ? 64 : strcmp(path, "/sse") == 0 ? 32 : 100;
    ctype = "text/event-stream";
    extra = "cache-control: no-cache\r\n";
    chunked = 1;
    for (i = 0; i < n; i++) {
      buf_addf(&body, "%x\r\nevent: tick\ndata: ", big ? 16404 : 84);
      for (int k = 0; k < (big ? 256 : 1); k++) buf_adds(&body, LINE64);
      buf_adds(&body, "\n\n\r\n");
    }
  } else if (strncmp(path, "/delay/", 7) == 0) {
    const char *ms = path + 7;
    size_t n = strlen(ms);
    if (n >= 1 && n <= 5 && all_digits(ms, n) && atol(ms) <= 60000) {
      ctype = "text/plain";
      buf_adds(&body, "ok");
    } else {
      status = 400;
    }
  } else if (strncmp(path, "/status/", 8) == 0) {
    const char *code = path + 8;
    if (strlen(code) == 3 && all_digits(code, 3) && atoi(code) >= 200 && atoi(code) <= 599) {
      status = atoi(code);
      if (status == 204 || status == 304) clen = CL_NONE;
    } else {
      status = 400;
    }
  } else if (strcmp(path, "/headers") == 0) {
    if (get) return -1;
  } else {
    exp_head(b, 404, NULL, NULL, 0, conn);
    return 0;
  }
  if (!get) {
    exp_head(b, 405, NULL, "allow: GET, HEAD\r\n", 0, conn);
    buf_free(&body);
    return 0;
  }
  if (chunked) {
    exp_last_chunk(&body);
    clen = CL_CHUNKED;
  } else if (clen != CL_NONE) {
    clen = (long)body.len;
  }
  exp_head(b, status, ctype, extra, clen, conn);
  if (!head) buf_add(b, body.p, body.len);
  buf_free(&body);
  return 0;
}

/* Paths of the route table, for the tests that walk all of them. */
const char *const ok_paths[] = {
    "/", "/hello", "/json", "/file/tiny", "/file/small", "/file/big", "/stream", "/stream/small", "/stream/big",
    "/sse", "/sse/small", "/sse/big", "/delay/0", "/delay/1", "/delay/00010", "/status/200", "/status/201",
    "/status/204", "/status/304", "/status/404", "/status/418", "/status/500", "/status/599", "/hello?x=1",
    "/file/tiny?", "/status/302?a=b?c",
};

const char *const not_found_paths[] = {
    "/nope", "/hello/", "/hello%20", "/HELLO", "/hello.txt", "/file", "/file/", "/file/huge", "/stream/",
    "/stream/medium", "/sse/", "/delay", "/status", "/echo/", "/echo/chunked/x", "/headers/", "//hello",
    "/json?/hello",
};

const char *const bad_param_paths[] = {
    "/delay/", "/delay/-1", "/delay/1a", "/delay/000001", "/delay/60001", "/delay/99999", "/delay/5/",
    "/delay/+5", "/status/", "/status/199", "/status/600", "/status/20", "/status/2000",
    "/status/abc", "/status/200/", "/status/-20", "/status/2x0",
};

const size_t n_ok_paths = sizeof ok_paths / sizeof ok_paths[0];
const size_t n_not_found_paths = sizeof not_found_paths / sizeof not_found_paths[0];
const size_t n_bad_param_paths = sizeof bad_param_paths / sizeof bad_param_paths[0];

static int is_fixdate(const char *d) {
  static const char *shape = "Aaa, 00 Aaa 0000 00:00:00 GMT";
  size_t i;
  for (i = 0; i < 29; i++) {
    char s = shape[i], c = d[i];
    if (s == 'A' && !(c >= 'A' && c <= 'Z')) return 0;
    if (s == 'a' && !(c >= 'a' && c <= 'z')) return 0;
    if (s == '0' && !(c >= '0' && c <= '9')) return 0;
    if (s != 'A' && s != 'a' && s != '0' && s != c) return 0;
  }
  return 1;
}

int mask_dates(char *p, size_t len) {
  static const char key[] = "\r\ndate: ";
  size_t i, klen = sizeof key - 1;
  int n = 0;
  if (p == NULL) return 0;
  for (i = 0; i + klen + 29 + 2 <= len; i++) {
    if (p[i] == '\r' && memcmp(p + i, key, klen) == 0 && is_fixdate(p + i + klen) &&
        memcmp(p + i + klen + 29, "\r\n", 2) == 0) {
      memcpy(p + i + klen, DATE_MASK, 29);
      n++;
    }
  }
  return n;
}

/* ---- blocking client ---- */

int cl_socket(void) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) FAIL("socket: %s", strerror(errno));
  return fd;
}

int cl_connect(int port) { return cl_connect_fd(cl_socket(), port); }

int cl_connect_fd(int fd, int port) {
  struct sockaddr_in sa;
  int one = 1;
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) FAIL("connect to port %d: %s", port, strerror(errno));
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

void cl_send(int fd, const void *data, size_t len) {
  const char *p = data;
  while (len > 0) {
    ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) FAIL("send: %s", strerror(errno));
    p += n;
    len -= (size_t)n;
  }
}

void cl_sends(int fd, const char *s) { cl_send(fd, s, strlen(s)); }

static int read_some(int fd, buf_t *b, uint64_t deadline) {
  char tmp[65536];
  for (;;) {
    struct pollfd pfd = {fd, POLLIN, 0};
    uint64_t now = now_ms();
    int r;
    ssize_t n;
    if (now >= deadline) return CL_TIMEOUT;
    r = poll(&pfd, 1, (int)(deadline - now));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) FAIL("poll: %s", strerror(errno));
    if (r == 0) return CL_TIMEOUT;
    n = recv(fd, tmp, sizeof tmp, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == ECONNRESET) return CL_RESET;
    if (n < 0) FAIL("recv: %s", strerror(errno));
    if (n == 0) return CL_EOF;
    buf_add(b, tmp, (size_t)n);
    return CL_OK;
  }
}

const char *cl_status_name(int r) {
  switch (r) {
  case CL_OK: return "ok";
  case CL_EOF: return "EOF (the server closed)";
  case CL_RESET: return "a reset (ECONNRESET)";
  case CL_TIMEOUT: return "a timeout";
  default: return "?";
  }
}

int cl_read_n(int fd, buf_t *b, size_t want, int timeout_ms) {
  uint64_t deadline = now_ms() + (uint64_t)timeout_ms;
  while (b->len < want) {
    int r = read_some(fd, b, deadline);
    if (r != CL_OK) return r;
  }
  return CL_OK;
}

int cl_read_close(int fd, buf_t *b, int timeout_ms) {
  uint64_t deadline = now_ms() + (uint64_t)timeout_ms;
  for (;;) {
    int r = read_some(fd, b, deadline);
    if (r != CL_OK) return r;
  }
}

void cl_reset(int fd) {
  struct linger l = {1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
  close(fd);
}

static long find_head_end(const char *p, size_t len) {
  size_t i;
  for (i = 0; i + 4 <= len; i++)
    if (memcmp(p + i, "\r\n\r\n", 4) == 0) return (long)(i + 4);
  return -1;
}

long cl_response_len(const char *p, size_t len, int head_request) {
  long hend = find_head_end(p, len), clen = -1;
  int status, chunked = 0;
  const char *h;
  if (hend < 0) return 0;
  if (len < 12 || memcmp(p, "HTTP/1.1 ", 9) != 0) return -1;
  status = atoi(p + 9);
  h = memchr(p, '\n', (size_t)hend);
  while (h != NULL && ++h < p + hend - 2) {
    if (strncmp(h, "content-length: ", 16) == 0) clen = atol(h + 16);
    if (strncmp(h, "transfer-encoding: chunked\r\n", 28) == 0) chunked = 1;
    h = memchr(h, '\n', (size_t)(p + hend - h));
  }
  if (head_request || status < 200 || status == 204 || status == 304) return hend;
  if (clen >= 0) return (size_t)(hend + clen) <= len ? hend + clen : 0;
  if (chunked) {
    size_t pos = (size_t)hend;
    for (;;) {
      char *end;
      long sz;
      const char *crlf = memmem(p + pos, len - pos, "\r\n", 2);
      if (crlf == NULL) return 0;
      sz = strtol(p + pos, &end, 16);
      if (end != crlf || sz < 0) return -1;
      pos = (size_t)(crlf - p) + 2 + (size_t)sz + 2;
      if (pos > len) return 0;
      if (sz == 0) return (long)pos;
    }
  }
  return -1;
}

void expect_error(int port, const void *req, size_t len, int status) {
  buf_t exp = {0};
  int fd = cl_connect(port);
  cbt_log("expecting %d for a request of %zu bytes: %.60s", status, len, (const char *)req);
  exp_error_close(&exp, status);
  ROUNDTRIP(fd, req, len, &exp);
  EXPECT_CLOSED(fd, 3000);
  close(fd);
  buf_free(&exp);
}

/* ---- servers ---- */

void test_config(cb_config_t *cfg) {
  cb_config_init(cfg);
  cfg->port = 0;
  cfg->threads = 1;
}

cb_server_t *test_start(const cb_config_t *cfg) {
  cb_server_t *srv = NULL;
  int r = cb_server_start(cfg, &srv);
  if (r != 0) FAIL("cb_server_start: %d (%s: %s)", r, cb_err_name(r), cb_strerror(r));
  ASSERT_NOT_NULL(srv);
  ASSERT_GT(cb_server_port(srv), 0);
  return srv;
}

void test_stop(cb_server_t *srv) { ASSERT_ERR(cb_server_stop(srv), 0); }

void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

void worker_hold_listener(void *ud, const cb_request_t *r) {
  worker_hold_t *h = ud;
  if (r->path.len != 6 || memcmp(r->path.ptr, "/block", 6) != 0) return;
  __atomic_store_n(&h->holding, 1, __ATOMIC_RELEASE);
  sleep_ms(300);
}

int worker_hold(cb_server_t *srv, worker_hold_t *h) {
  int fd = cl_connect(cb_server_port(srv));
  cl_sends(fd, "GET /block HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
  for (int i = 0; i < 1000 && !__atomic_load_n(&h->holding, __ATOMIC_ACQUIRE); i++) sleep_ms(5);
  ASSERT_EQ(__atomic_load_n(&h->holding, __ATOMIC_ACQUIRE), 1);
  return fd;
}

uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void wait_stats(cb_server_t *srv, cb_stats_t *st, int (*pred)(const cb_stats_t *, const void *), const void *arg,
                int timeout_ms) {
  uint64_t deadline = now_ms() + (uint64_t)timeout_ms;
  for (;;) {
    ASSERT_ERR(cb_server_stats(srv, st), 0);
    if (pred(st, arg) || now_ms() > deadline) return;
    sleep_ms(5);
  }
}

cb_request_list_t *wait_journal(cb_server_t *srv, const cb_request_filter_t *f, size_t want, int timeout_ms) {
  uint64_t deadline = now_ms() + (uint64_t)timeout_ms;
  for (;;) {
    cb_request_list_t *list = NULL;
    ASSERT_ERR(cb_server_requests(srv, f, &list), 0);
    if (list->count >= want || now_ms() > deadline) return list;
    cb_request_list_free(list);
    sleep_ms(2);
  }
}

static int count_dir(const char *path) {
  DIR *d = opendir(path);
  struct dirent *e;
  int n = 0;
  if (d == NULL) FAIL("opendir %s: %s", path, strerror(errno));
  while ((e = readdir(d)) != NULL)
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n;
}

int count_threads(void) { return count_dir("/proc/self/task"); }

/* The directory stream itself holds one descriptor while it is read. */
int count_fds(void) { return count_dir("/proc/self/fd") - 1; }

long vm_rss_kb(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long kb = -1;
  if (f == NULL) FAIL("cannot open /proc/self/status");
  while (fgets(line, sizeof line, f))
    if (strncmp(line, "VmRSS:", 6) == 0) kb = atol(line + 6);
  fclose(f);
  return kb;
}

uint64_t route_count(cb_server_t *srv, const char *name) {
  cb_route_counts_t *rc = NULL;
  uint64_t n = 0;
  ASSERT_ERR(cb_server_route_counts(srv, &rc), 0);
  for (size_t i = 0; i < rc->count; i++)
    if (strcmp(rc->items[i].name.ptr, name) == 0) n += rc->items[i].requests;
  cb_route_counts_free(rc);
  return n;
}

size_t cl_request_len(const char *p, size_t len) {
  const char *e = memmem(p, len, "\r\n\r\n", 4);
  if (e == NULL) return 0;
  size_t head = (size_t)(e - p) + 4;
  const char *cl = memmem(p, head, "content-length: ", 16);
  if (cl == NULL) cl = memmem(p, head, "Content-Length: ", 16);
  if (cl != NULL) {
    size_t n = strtoul(cl + 16, NULL, 10);
    return len >= head + n ? head + n : 0;
  }
  if (memmem(p, head, "chunked", 7) != NULL) {
    const char *z = memmem(p + head, len - head, "0\r\n\r\n", 5);
    return z ? (size_t)(z - p) + 5 : 0;
  }
  return head;
}

static void *plain_malloc(size_t n, void *ud) {
  (void)ud;
  return malloc(n);
}
static void plain_free(void *p, void *ud) {
  (void)ud;
  free(p);
}
static void *plain_calloc(size_t k, size_t n, void *ud) {
  (void)ud;
  return calloc(k, n);
}
static void *plain_realloc(void *p, size_t n, void *ud) {
  (void)ud;
  return realloc(p, n);
}

void *cbt_plain_mem(void) {
  static nghttp2_mem m = {NULL, plain_malloc, plain_free, plain_calloc, plain_realloc};
  return &m;
}
