/* What both ends of HTTP/2 need of field bytes, the engine's server session (proto/http2.c) and the upstream
 * client session (h2_client.c): the RFC 9113 8.2.1 rules a field must follow, and HPACK's literal
 * representation (RFC 7541 6.2.2), which needs no table state: every block either end writes is made of static
 * table references and literals without indexing, never Huffman-coded. */
#include <stdint.h>
#include <string.h>

#include "client/client.h"

/* tchar (RFC 9110 5.6.2), lower case only */
static int name_char(uint8_t ch) {
  if (ch >= 'a' && ch <= 'z') return 1;
  if (ch >= '0' && ch <= '9') return 1;
  return ch != 0 && strchr("!#$%&'*+-.^_`|~", ch) != NULL;
}

int cb_h2_valid_name(const uint8_t *p, size_t n) {
  if (n == 0) return 0;
  for (size_t i = 0; i < n; i++)
    if (!name_char(p[i])) return 0;
  return 1;
}

int cb_h2_valid_value(const uint8_t *p, size_t n) {
  if (n > 0 && (p[0] == ' ' || p[0] == '\t' || p[n - 1] == ' ' || p[n - 1] == '\t')) return 0;
  for (size_t i = 0; i < n; i++)
    if ((p[i] < 0x20 && p[i] != '\t') || p[i] == 0x7f) return 0;
  return 1;
}

int cb_h2_conn_specific(const uint8_t *name, size_t nl, const uint8_t *value, size_t vl) {
#define IS(lit) (nl == sizeof(lit) - 1 && memcmp(name, lit, sizeof(lit) - 1) == 0)
  if (IS("connection") || IS("keep-alive") || IS("proxy-connection") || IS("transfer-encoding") || IS("upgrade"))
    return 1;
  if (!IS("te")) return 0;
#undef IS
  static const char trailers[] = "trailers";
  if (vl != sizeof trailers - 1) return 1;
  for (size_t i = 0; i < vl; i++)
    if ((value[i] >= 'A' && value[i] <= 'Z' ? value[i] + 32 : value[i]) != trailers[i]) return 1;
  return 0;
}

int64_t cb_h2_parse_length(const uint8_t *p, size_t n) {
  if (n == 0 || n > 18) return -1;
  int64_t v = 0;
  for (size_t i = 0; i < n; i++) {
    if (p[i] < '0' || p[i] > '9') return -1;
    v = v * 10 + (p[i] - '0');
  }
  return v;
}

char *cb_hp_int(char *o, uint8_t high, int bits, size_t v) {
  size_t max = ((size_t)1 << bits) - 1;
  if (v < max) {
    *o++ = (char)(high | v);
    return o;
  }
  *o++ = (char)(high | max);
  v -= max;
  while (v >= 128) {
    *o++ = (char)(0x80 | (v & 0x7f));
    v >>= 7;
  }
  *o++ = (char)v;
  return o;
}

static char *hp_str(char *o, const char *s, size_t n) {
  o = cb_hp_int(o, 0, 7, n); /* not Huffman-coded */
  memcpy(o, s, n);
  return o + n;
}

char *cb_hp_field(char *o, int index, const char *name, size_t nl, const char *value, size_t vl) {
  o = cb_hp_int(o, 0x00, 4, (size_t)index);
  if (index == 0) o = hp_str(o, name, nl);
  return hp_str(o, value, vl);
}
