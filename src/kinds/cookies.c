/* GET /cookies: the request's cookies (RFC 6265) as a JSON object, the roadrunner `cookies_heavy` case.
 *
 * The parser follows RFC 6265's server side: the cookie-string is cookie-pairs separated by ";" (section
 * 4.2.1), a pair is a token name, "=", and a value of cookie-octets, optionally in double quotes. A server meets
 * what real user agents send, so it is lenient where they are (whitespace around each piece and around "=")
 * and strict about what a pair may hold: a piece that is not a valid pair is skipped, as Go's net/http and
 * most servers do, and the pairs around it still count. docs/wire.md lists the rules. */
#include <stdlib.h>
#include <string.h>

#include "kinds/kinds.h"

/* RFC 6265 4.2.1 cookie-octet: visible ASCII without DQUOTE, comma, semicolon and backslash. */
static int cookie_octet(unsigned char c) {
  return c == 0x21 || (c >= 0x23 && c <= 0x2B) || (c >= 0x2D && c <= 0x3A) || (c >= 0x3C && c <= 0x5B) ||
         (c >= 0x5D && c <= 0x7E);
}

static int ows(char c) { return c == ' ' || c == '\t'; }

static void trim(const char **p, size_t *n) {
  while (*n > 0 && ows((*p)[0])) (*p)++, (*n)--;
  while (*n > 0 && ows((*p)[*n - 1])) (*n)--;
}

/* One piece between semicolons: a valid pair fills name and value (quotes removed) and returns 1. */
static int parse_pair(const char *p, size_t n, cb__slice_t *name, cb__slice_t *value) {
  trim(&p, &n);
  const char *eq = memchr(p, '=', n);
  if (eq == NULL) return 0;
  const char *np = p, *vp = eq + 1;
  size_t nn = (size_t)(eq - p), vn = n - nn - 1;
  trim(&np, &nn);
  trim(&vp, &vn);
  if (nn == 0 || !cb__is_token(np, nn)) return 0;
  if (vn >= 2 && vp[0] == '"' && vp[vn - 1] == '"') vp++, vn -= 2;
  for (size_t i = 0; i < vn; i++)
    if (!cookie_octet((unsigned char)vp[i])) return 0;
  *name = (cb__slice_t){np, nn};
  *value = (cb__slice_t){vp, vn};
  return 1;
}

static int is_cookie_field(const cb__hdr_t *h) {
  static const char want[] = "cookie";
  if (h->name_len != sizeof want - 1) return 0;
  for (size_t i = 0; i < h->name_len; i++) {
    unsigned char c = (unsigned char)h->name[i];
    if ((c | 0x20) != (unsigned char)want[i]) return 0;
  }
  return 1;
}

size_t cb__cookies_json_cap(const cb__hdr_t *hs, int n) {
  size_t cap = 2;
  for (int i = 0; i < n; i++)
    if (is_cookie_field(&hs[i])) cap += hs[i].value_len;
  /* A kept pair takes its bytes plus at most 5 more ("", ":", ","; quotes removed give two back). */
  return cap + 5 * CB__COOKIES_MAX;
}

/* The names kept so far, found by hash: a repeated name costs one probe or a few, where a scan of the kept
 * names cost up to 255 comparisons per pair (255 names, then 1.6 million repeats of the last: 1.33 s of CPU,
 * 15 times what the same bytes cost without repeats). Open addressing in twice as many slots as names; the
 * hash is seeded per call (from the answer buffer's address), so that a client cannot aim names at one slot. */
#define NAME_SLOTS (2 * CB__COOKIES_MAX)

static uint64_t name_hash(uint64_t seed, const char *p, size_t n) {
  uint64_t x = seed ^ 0xcbf29ce484222325ull; /* FNV-1a */
  for (size_t i = 0; i < n; i++) x = (x ^ (unsigned char)p[i]) * 0x100000001b3ull;
  return x ^ x >> 29;
}

/* Whether name was seen before; if not, it is added as names[kept] (the caller counts it). *compared counts
 * the kept names it was compared with (the tests bound it: a scan would compare with every one). */
static int seen_name(cb__slice_t *names, int kept, int16_t *slots, uint64_t seed, cb__slice_t name,
                     uint64_t *compared) {
  for (uint64_t i = name_hash(seed, name.ptr, name.len);; i++) {
    int16_t k = slots[i & (NAME_SLOTS - 1)];
    if (k < 0) {
      slots[i & (NAME_SLOTS - 1)] = (int16_t)kept;
      names[kept] = name;
      return 0;
    }
    (*compared)++;
    if (names[k].len == name.len && memcmp(names[k].ptr, name.ptr, name.len) == 0) return 1;
  }
}

size_t cb__cookies_json(const cb__hdr_t *hs, int n, char *out) {
  uint64_t compared = 0; /* a local the compiler keeps in a register: no cost to the route */
  return cb__cookies_json_counted(hs, n, out, &compared);
}

size_t cb__cookies_json_counted(const cb__hdr_t *hs, int n, char *out, uint64_t *compared) {
  cb__slice_t names[CB__COOKIES_MAX];
  int16_t slots[NAME_SLOTS];
  memset(slots, 0xff, sizeof slots); /* -1: empty */
  uint64_t seed = (uint64_t)(uintptr_t)out * 0x9e3779b97f4a7c15ull;
  int kept = 0;
  size_t o = 0;
  out[o++] = '{';
  /* Every cookie field in order (HTTP/2 clients may split the cookies over several, RFC 9113 8.2.3). */
  for (int i = 0; i < n && kept < CB__COOKIES_MAX; i++) {
    if (!is_cookie_field(&hs[i])) continue;
    const char *p = hs[i].value, *end = p + hs[i].value_len;
    while (p < end && kept < CB__COOKIES_MAX) {
      const char *semi = memchr(p, ';', (size_t)(end - p));
      const char *stop = semi != NULL ? semi : end;
      cb__slice_t name, value;
      if (parse_pair(p, (size_t)(stop - p), &name, &value)) {
        /* The first of a repeated name wins: user agents send the most specific cookie first (5.4). */
        if (!seen_name(names, kept, slots, seed, name, compared)) {
          kept++;
          if (o > 1) out[o++] = ',';
          /* Tokens and cookie-octets hold no character JSON would escape. */
          out[o++] = '"';
          memcpy(out + o, name.ptr, name.len);
          o += name.len;
          memcpy(out + o, "\":\"", 3);
          o += 3;
          memcpy(out + o, value.ptr, value.len);
          o += value.len;
          out[o++] = '"';
        }
      }
      p = stop + 1;
    }
  }
  out[o++] = '}';
  return o;
}

static void cookies_end(cb__req_t *r) {
  char *json = malloc(cb__cookies_json_cap(r->headers, r->nheaders));
  if (json == NULL) {
    cb__res_head(r, 503, NULL, NULL, 0, 0);
    cb__res_end(r);
    return;
  }
  size_t n = cb__cookies_json(r->headers, r->nheaders, json);
  cb__res_head(r, 200, "application/json", NULL, 0, (int64_t)n);
  cb__res_data(r, json, n, CB__DATA_FREE);
  cb__res_end(r);
}

const cb__handler_t cb__h_cookies = {.on_end = cookies_end};
