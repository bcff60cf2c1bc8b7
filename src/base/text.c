/* The rules of HTTP's text that every layer checks against: methods and their names, tokens and field values
 * (RFC 9110), the header names the engine writes itself, and a route's name. */
#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "base/base.h"

static const char *const method_names[] = {"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS",
                                           "CONNECT", "TRACE"};

#define NMETHODS (sizeof method_names / sizeof method_names[0])

unsigned cb_method_bit(cb_str_t name) {
  if (name.ptr == NULL) return 0;
  /* Every HTTP/2 request passes here: the common methods first, without a loop. */
  if (name.len == 3 && memcmp(name.ptr, "GET", 3) == 0) return CB_METHOD_GET;
  if (name.len == 4 && memcmp(name.ptr, "POST", 4) == 0) return CB_METHOD_POST;
  for (unsigned i = 1; i < NMETHODS; i++)
    if (strlen(method_names[i]) == name.len && memcmp(method_names[i], name.ptr, name.len) == 0) return 1u << i;
  return 0;
}

const char *cb__method_name(unsigned bit) {
  for (unsigned i = 0; i < NMETHODS; i++)
    if (bit == 1u << i) return method_names[i];
  return NULL;
}

size_t cb__allow_string(unsigned mask, char *buf) {
  size_t o = 0;
  if (mask & CB_METHOD_GET) mask |= CB_METHOD_HEAD;
  for (unsigned i = 0; i < NMETHODS; i++) {
    if (!(mask & (1u << i))) continue;
    if (o > 0) {
      memcpy(buf + o, ", ", 2);
      o += 2;
    }
    size_t n = strlen(method_names[i]);
    memcpy(buf + o, method_names[i], n);
    o += n;
  }
  return o;
}

/* A field value may hold no control character but HTAB (RFC 9110 section 5.5). */
int cb__bad_value(const char *p, size_t n) {
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)p[i];
    if ((ch < 0x20 && ch != '\t') || ch == 0x7f) return 1;
  }
  return 0;
}

static int is_tchar(unsigned char ch) {
  return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
         (ch != 0 && strchr("!#$%&'*+-.^_`|~", ch) != NULL);
}

int cb__is_token(const char *p, size_t n) {
  if (n == 0) return 0;
  for (size_t i = 0; i < n; i++)
    if (!is_tchar((unsigned char)p[i])) return 0;
  return 1;
}

/* A header value as both protocols carry it: no control byte but HTAB, no space or tab at either end (RFC 9113
 * 8.2.1; an HTTP/1.1 parser strips them, so a matcher with one would never match). 0 or a CB_WHY_*. */
int cb__header_value_why(const char *p, size_t n) {
  if (n > 8192) return CB_WHY_TOO_LONG;
  if (cb__bad_value(p, n)) return CB_WHY_CONTROL_CHAR;
  if (n > 0 && (p[0] == ' ' || p[0] == '\t' || p[n - 1] == ' ' || p[n - 1] == '\t')) return CB_WHY_EDGE_SPACE;
  return 0;
}

/* A header name: 0 or a CB_WHY_*. */
int cb__header_name_why(const char *p, size_t n) {
  if (p == NULL && n > 0) return CB_WHY_NULL_POINTER;
  if (n == 0) return CB_WHY_EMPTY;
  if (n > 256) return CB_WHY_TOO_LONG;
  return cb__is_token(p, n) ? 0 : CB_WHY_NOT_A_TOKEN;
}

static int hexval(char ch) {
  if (ch >= '0' && ch <= '9') return ch - '0';
  if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
  if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
  return -1;
}

size_t cb__url_decode(char *dst, const char *src, size_t n) {
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    if (src[i] == '+') {
      dst[o++] = ' ';
    } else if (src[i] == '%' && i + 2 < n && hexval(src[i + 1]) >= 0 && hexval(src[i + 2]) >= 0) {
      dst[o++] = (char)(hexval(src[i + 1]) << 4 | hexval(src[i + 2]));
      i += 2;
    } else {
      dst[o++] = src[i];
    }
  }
  return o;
}

int cb__forbidden_header(const char *name, size_t n) {
  static const char *const names[] = {"content-length", "transfer-encoding", "connection", "keep-alive",
                                      "upgrade", "te", "proxy-connection", "date"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    if (strlen(names[i]) != n) continue;
    size_t k = 0;
    while (k < n && ((name[k] >= 'A' && name[k] <= 'Z') ? name[k] + 32 : name[k]) == names[i][k]) k++;
    if (k == n) return 1;
  }
  return 0;
}


/* A route's name: 1..CB_MAX_NAME printable ASCII bytes, no space. Stubs and deferred routes. 0 or UV_EINVAL. */
int cb__check_name(cb_str_t name) {
  if (name.ptr == NULL) return name.len ? cb__bad_bytes(CB_FIELD_NAME, -1, CB_WHY_NULL_POINTER, NULL, 0) : 0;
  if (name.len == 0) return cb__bad_bytes(CB_FIELD_NAME, -1, CB_WHY_EMPTY, name.ptr, 0);
  if (name.len > CB_MAX_NAME) return cb__bad_bytes(CB_FIELD_NAME, -1, CB_WHY_TOO_LONG, name.ptr, name.len);
  for (size_t i = 0; i < name.len; i++)
    if ((unsigned char)name.ptr[i] <= 0x20 || (unsigned char)name.ptr[i] >= 0x7f)
      return cb__bad_bytes(CB_FIELD_NAME, -1, CB_WHY_BAD_CHAR, name.ptr, name.len);
  return 0;
}

/* The decimal digits of v (below 100,000) at o: how many. */
static size_t put_uint(char *o, unsigned v) {
  char d[8];
  size_t n = 0;
  do {
    d[n++] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  for (size_t i = 0; i < n; i++) o[i] = d[n - 1 - i];
  return n;
}

size_t cb__peer_text(int family, const unsigned char *addr, int port, char *buf) {
  size_t n = 0;
  if (family == AF_INET) {
    for (int i = 0; i < 4; i++) {
      if (i) buf[n++] = '.';
      n += put_uint(buf + n, addr[i]);
    }
  } else if (family == AF_INET6) {
    char a[INET6_ADDRSTRLEN];
    if (inet_ntop(AF_INET6, addr, a, sizeof a) != NULL) {
      size_t k = strlen(a);
      if (port >= 0) buf[n++] = '[';
      memcpy(buf + n, a, k);
      n += k;
      if (port >= 0) buf[n++] = ']';
    }
  }
  if (port >= 0 && (family == AF_INET || family == AF_INET6)) {
    buf[n++] = ':';
    n += put_uint(buf + n, (unsigned)port);
  }
  buf[n] = '\0';
  return n;
}
