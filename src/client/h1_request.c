/* HTTP/1.1 requests: the head a client writes, and which fields a proxy must not pass on (client.h). */
#include <stdint.h>
#include <string.h>

#include "client/client.h"

/* The bytes that would break a head: 1 in a value (CR, LF, NUL), 2 in a name or method too (':', space, tab). */
static const unsigned char breaks[256] = {['\0'] = 3, ['\r'] = 3, ['\n'] = 3, [':'] = 2, [' '] = 2, ['\t'] = 2};

static int table_any(const char *s, size_t n, unsigned char which) {
  unsigned char any = 0;
  for (size_t i = 0; i < n; i++) any |= breaks[(unsigned char)s[i]];
  return (any & which) != 0;
}

/* The checks run eight bytes at a time: the proxy writes a head per request, and a table look-up per byte was
 * most of this file's cost. A word test only filters: it may fire on a byte the rules allow (another control
 * byte), and then the table decides, so the rules are exactly the table's. */
#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL
static inline uint64_t has_below(uint64_t v, unsigned b) { return (v - ONES * b) & ~v & HIGHS; }
static inline uint64_t has_byte(uint64_t v, unsigned b) { return has_below(v ^ (ONES * b), 1); }

static inline uint64_t word_at(const char *s) {
  uint64_t v;
  memcpy(&v, s, 8);
  return v;
}

/* name: any byte below 0x21 (NUL, tab, LF, CR, space and the other controls) or ':' may break it. value: any
 * byte below 0x0e (NUL, LF, CR and the controls around them). */
static inline uint64_t suspect(uint64_t v, int name) {
  return name ? has_below(v, 0x21) | has_byte(v, ':') : has_below(v, 0x0e);
}

static int breaks_in(const char *s, size_t n, int name) {
  uint64_t hit = 0;
  if (n >= 8) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) hit |= suspect(word_at(s + i), name);
    if (i < n) hit |= suspect(word_at(s + n - 8), name); /* the last word overlaps the one before */
  } else if (n >= 4) {
    uint32_t a, b;
    memcpy(&a, s, 4);
    memcpy(&b, s + n - 4, 4);
    hit = suspect((uint64_t)a << 32 | b, name);
  } else {
    hit = 1; /* three bytes or fewer: the table alone */
  }
  return hit != 0 && table_any(s, n, name ? 3 : 1);
}

static int has_ctl(const char *s, size_t n) { return breaks_in(s, n, 0); }

static int bad_name(const char *s, size_t n) { return n == 0 || breaks_in(s, n, 1); }

static char *put(char *o, const char *s, size_t n) {
  memcpy(o, s, n);
  return o + n;
}

#define PUT_LIT(o, s) put(o, s, sizeof(s) - 1)

ssize_t cb_creq_head(char *buf, size_t cap, const cb_creq_t *r) {
  if (r->method_len == 0 || bad_name(r->method, r->method_len) || r->target_len == 0 ||
      has_ctl(r->target, r->target_len) || memchr(r->target, ' ', r->target_len) || has_ctl(r->host, r->host_len))
    return -2;
  /* The whole head's size first, so that the writes below need no checks. */
  size_t need = r->method_len + 1 + r->target_len + sizeof " HTTP/1.1\r\nhost: " - 1 + r->host_len + 2 + 2;
  for (int i = 0; i < r->nheaders; i++) {
    const cb_chdr_t *h = &r->headers[i];
    if (!r->fields_checked && (bad_name(h->name, h->name_len) || has_ctl(h->value, h->value_len))) return -2;
    need += h->name_len + 2 + h->value_len + 2;
  }
  /* The digits written backwards from the end of a small buffer (no printf on a proxy's hot path). */
  char num[24];
  char *d = num + sizeof num;
  if (r->content_length >= 0) {
    uint64_t v = (uint64_t)r->content_length;
    do {
      *--d = (char)('0' + v % 10);
      v /= 10;
    } while (v);
    need += sizeof "content-length: \r\n" - 1 + (size_t)(num + sizeof num - d);
  } else if (r->content_length == CB_CREQ_CHUNKED) {
    need += sizeof "transfer-encoding: chunked\r\n" - 1;
  }
  if (need > cap) return -1;
  char *o = put(buf, r->method, r->method_len);
  o = PUT_LIT(o, " ");
  o = put(o, r->target, r->target_len);
  o = PUT_LIT(o, " HTTP/1.1\r\nhost: ");
  o = put(o, r->host, r->host_len);
  o = PUT_LIT(o, "\r\n");
  for (int i = 0; i < r->nheaders; i++) {
    const cb_chdr_t *h = &r->headers[i];
    o = put(o, h->name, h->name_len);
    o = PUT_LIT(o, ": ");
    o = put(o, h->value, h->value_len);
    o = PUT_LIT(o, "\r\n");
  }
  if (r->content_length >= 0) {
    o = PUT_LIT(o, "content-length: ");
    o = put(o, d, (size_t)(num + sizeof num - d));
    o = PUT_LIT(o, "\r\n");
  } else if (r->content_length == CB_CREQ_CHUNKED) {
    o = PUT_LIT(o, "transfer-encoding: chunked\r\n");
  }
  o = PUT_LIT(o, "\r\n");
  return (ssize_t)(o - buf);
}

/* ---- hop-by-hop fields ---- */

static int ci_eq(const char *a, const char *b, size_t n) {
  for (size_t i = 0; i < n; i++) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = (char)(x + 32);
    if (y >= 'A' && y <= 'Z') y = (char)(y + 32);
    if (x != y) return 0;
  }
  return 1;
}

/* Up to 8 bytes of s as a word (zero above n), ASCII letters lowercased: a byte gets 0x20 when it lies in
 * 'A'..'Z' (the sums stay inside each byte: the high bits are masked first). n is a constant where it is used,
 * so the load is one move. */
static inline uint64_t lower_word(const char *s, size_t n) {
  uint64_t v = 0;
  memcpy(&v, s, n);
  uint64_t x = v & ~HIGHS;
  uint64_t upper = (x + ONES * (0x80 - 'A')) & ~(x + ONES * (0x80 - 'Z' - 1)) & ~v & HIGHS;
  return v | upper >> 2;
}

static inline uint64_t lit_word(const char *lit, size_t n) {
  uint64_t v = 0;
  memcpy(&v, lit, n);
  return v;
}

/* name (len bytes, len the literal's) equals the lowercase literal, without case: one word up to 8 bytes; above,
 * the words at 0 and at len - 8, and for 17 bytes the one at 8 too (the other two leave its middle byte out). */
#define SHORT_IS(lit) (lower_word(name, sizeof(lit) - 1) == lit_word(lit, sizeof(lit) - 1))
#define WORD_IS(lit, at) (lower_word(name + (at), 8) == lit_word((lit) + (at), 8))
#define LONG_IS(lit) (WORD_IS(lit, 0) && WORD_IS(lit, sizeof(lit) - 9) && (sizeof(lit) - 1 <= 16 || WORD_IS(lit, 8)))

int cb_chdr_name(const char *name, size_t len) {
  switch (len) {
    case 2: return SHORT_IS("te") ? CB_CHDR_TE : CB_CHDR_OTHER;
    case 4: return SHORT_IS("host") ? CB_CHDR_HOST : SHORT_IS("date") ? CB_CHDR_DATE : CB_CHDR_OTHER;
    case 6: return SHORT_IS("expect") ? CB_CHDR_EXPECT : CB_CHDR_OTHER;
    case 7: return SHORT_IS("trailer") ? CB_CHDR_TRAILER : SHORT_IS("upgrade") ? CB_CHDR_UPGRADE : CB_CHDR_OTHER;
    case 10:
      return LONG_IS("connection") ? CB_CHDR_CONNECTION : LONG_IS("keep-alive") ? CB_CHDR_KEEP_ALIVE : CB_CHDR_OTHER;
    case 14: return LONG_IS("content-length") ? CB_CHDR_CONTENT_LENGTH : CB_CHDR_OTHER;
    case 15: return LONG_IS("x-forwarded-for") ? CB_CHDR_X_FORWARDED_FOR : CB_CHDR_OTHER;
    case 16:
      return LONG_IS("proxy-connection")   ? CB_CHDR_PROXY_CONNECTION
             : LONG_IS("x-forwarded-host") ? CB_CHDR_X_FORWARDED_HOST
                                           : CB_CHDR_OTHER;
    case 17:
      return LONG_IS("transfer-encoding")   ? CB_CHDR_TRANSFER_ENCODING
             : LONG_IS("x-forwarded-proto") ? CB_CHDR_X_FORWARDED_PROTO
                                            : CB_CHDR_OTHER;
    default: return CB_CHDR_OTHER;
  }
}

int cb_chdr_hop_by_hop(const char *name, size_t len, const char *connection_value, size_t cv_len) {
  return CB_CHDR_IS_HOP_BY_HOP(cb_chdr_name(name, len)) || cb_chdr_listed(name, len, connection_value, cv_len);
}

int cb_chdr_listed(const char *name, size_t len, const char *connection_value, size_t cv_len) {
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
