/* HTTP/1.1 requests: the head a client writes, and which fields a proxy must not pass on (client.h). */
#include <string.h>

#include "client/client.h"

/* A byte that could end a line or a string on the peer's side: never written inside a field. */
/* The bytes that would break a head: 1 in a value (CR, LF, NUL), 2 in a name or method too (':', space, tab).
 * One table look-up per byte: the proxy writes a head per request, and the checks were half its cost. */
static const unsigned char breaks[256] = {['\0'] = 3, ['\r'] = 3, ['\n'] = 3, [':'] = 2, [' '] = 2, ['\t'] = 2};

static int has_ctl(const char *s, size_t n) {
  unsigned char any = 0;
  for (size_t i = 0; i < n; i++) any |= breaks[(unsigned char)s[i]];
  return any & 1;
}

static int bad_name(const char *s, size_t n) {
  unsigned char any = 0;
  for (size_t i = 0; i < n; i++) any |= breaks[(unsigned char)s[i]];
  return n == 0 || any != 0;
}

typedef struct {
  char *p, *end;
  int short_;
} out_t;

static void put(out_t *o, const char *s, size_t n) {
  if ((size_t)(o->end - o->p) < n) {
    o->short_ = 1;
    return;
  }
  memcpy(o->p, s, n);
  o->p += n;
}

#define PUT_LIT(o, s) put(o, s, sizeof(s) - 1)

ssize_t cb_creq_head(char *buf, size_t cap, const cb_creq_t *r) {
  if (r->method_len == 0 || bad_name(r->method, r->method_len) || r->target_len == 0 ||
      has_ctl(r->target, r->target_len) || memchr(r->target, ' ', r->target_len) || has_ctl(r->host, r->host_len))
    return -2;
  for (int i = 0; i < r->nheaders; i++) {
    const cb_chdr_t *h = &r->headers[i];
    if (bad_name(h->name, h->name_len) || has_ctl(h->value, h->value_len)) return -2;
  }
  out_t o = {buf, buf + cap, 0};
  put(&o, r->method, r->method_len);
  PUT_LIT(&o, " ");
  put(&o, r->target, r->target_len);
  PUT_LIT(&o, " HTTP/1.1\r\nhost: ");
  put(&o, r->host, r->host_len);
  PUT_LIT(&o, "\r\n");
  for (int i = 0; i < r->nheaders; i++) {
    const cb_chdr_t *h = &r->headers[i];
    put(&o, h->name, h->name_len);
    PUT_LIT(&o, ": ");
    put(&o, h->value, h->value_len);
    PUT_LIT(&o, "\r\n");
  }
  if (r->content_length >= 0) {
    /* The digits written backwards from the end of a small buffer (no printf on a proxy's hot path). */
    char num[24];
    char *d = num + sizeof num;
    uint64_t v = (uint64_t)r->content_length;
    do {
      *--d = (char)('0' + v % 10);
      v /= 10;
    } while (v);
    PUT_LIT(&o, "content-length: ");
    put(&o, d, (size_t)(num + sizeof num - d));
    PUT_LIT(&o, "\r\n");
  } else if (r->content_length == CB_CREQ_CHUNKED) {
    PUT_LIT(&o, "transfer-encoding: chunked\r\n");
  }
  PUT_LIT(&o, "\r\n");
  return o.short_ ? -1 : (ssize_t)(o.p - buf);
}

/* ---- hop-by-hop fields ---- */

static int lower_eq(const char *a, size_t n, const char *lit, size_t m) {
  if (n != m) return 0;
  for (size_t i = 0; i < n; i++) {
    char c = a[i];
    if (c >= 'A' && c <= 'Z') c = (char)(c + 32);
    if (c != lit[i]) return 0;
  }
  return 1;
}

static int ci_eq(const char *a, const char *b, size_t n) {
  for (size_t i = 0; i < n; i++) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = (char)(x + 32);
    if (y >= 'A' && y <= 'Z') y = (char)(y + 32);
    if (x != y) return 0;
  }
  return 1;
}

#define IS(name, len, lit) lower_eq(name, len, lit, sizeof(lit) - 1)

int cb_chdr_hop_by_hop(const char *name, size_t len, const char *connection_value, size_t cv_len) {
  if (IS(name, len, "connection") || IS(name, len, "keep-alive") || IS(name, len, "proxy-connection") ||
      IS(name, len, "te") || IS(name, len, "trailer") || IS(name, len, "transfer-encoding") ||
      IS(name, len, "upgrade"))
    return 1;
  /* The connection field's value: a list of names separated by commas, with optional spaces and tabs. */
  size_t i = 0;
  while (connection_value && i < cv_len) {
    while (i < cv_len && (connection_value[i] == ' ' || connection_value[i] == '\t' || connection_value[i] == ','))
      i++;
    size_t start = i;
    while (i < cv_len && connection_value[i] != ',') i++;
    size_t stop = i;
    while (stop > start && (connection_value[stop - 1] == ' ' || connection_value[stop - 1] == '\t')) stop--;
    if (stop - start == len && len > 0 && ci_eq(connection_value + start, name, len)) return 1;
  }
  return 0;
}
