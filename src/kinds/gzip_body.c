/* GET /gzip: a 16 KiB JSON-shaped body, compressed once per process with zlib (Debian's zlib1g-dev) and sent
 * gzip-coded to a request whose accept-encoding prefers gzip, identity otherwise; both representations are
 * made once and referenced, never copied (roadrunner's `gzip_response` case without the per-request
 * compression: docs/wire.md says why).
 *
 * The compressed bytes are part of the wire contract: deflate level 6, a 32 KiB window, memLevel 8, the
 * default strategy and zlib's own gzip header (no name, mtime 0), which the ehttpd engine reproduces with
 * the same zlib through OTP's zlib module. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "kinds/kinds.h"

static char plain[CB__GZIP_PLAIN_LEN];
static unsigned char *packed;
static size_t packed_len;
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* The body: {"items":[ITEM,...],"pad":"PAD"} with 150 items and PAD the 16-byte "0123456789abcdef" run cut to
 * what makes the whole exactly CB__GZIP_PLAIN_LEN bytes. */
static void build_plain(void) {
  size_t o = 0;
  o += (size_t)snprintf(plain + o, sizeof plain - o, "{\"items\":[");
  for (int i = 0; i < 150; i++)
    o += (size_t)snprintf(plain + o, sizeof plain - o,
                          "%s{\"id\":%d,\"name\":\"item-%d\",\"price\":%d.%02d,\"in_stock\":%s,"
                          "\"tags\":[\"cbench\",\"fixture\"]}",
                          i ? "," : "", i, i, i * 37 % 1000, i * 13 % 100, i % 3 ? "true" : "false");
  o += (size_t)snprintf(plain + o, sizeof plain - o, "],\"pad\":\"");
  size_t pad = sizeof plain - o - 2;
  for (size_t i = 0; i < pad; i++) plain[o++] = "0123456789abcdef"[i % 16];
  memcpy(plain + o, "\"}", 2);
}

static void build(void) {
  build_plain();
  z_stream z;
  memset(&z, 0, sizeof z);
  if (deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) return;
  size_t cap = deflateBound(&z, sizeof plain);
  unsigned char *out = malloc(cap);
  if (out != NULL) {
    z.next_in = (unsigned char *)plain;
    z.avail_in = sizeof plain;
    z.next_out = out;
    z.avail_out = (uInt)cap;
    if (deflate(&z, Z_FINISH) == Z_STREAM_END) {
      packed = out;
      packed_len = cap - z.avail_out;
    } else {
      free(out);
    }
  }
  deflateEnd(&z);
}

int cb__gzip_bodies(cb__slice_t *identity, cb__slice_t *gzip) {
  pthread_once(&once, build);
  if (packed == NULL) return UV_ENOMEM;
  *identity = (cb__slice_t){plain, sizeof plain};
  *gzip = (cb__slice_t){(const char *)packed, packed_len};
  return 0;
}

/* ---- accept-encoding (RFC 9110 12.5.3) ---- */

static int ows(char c) { return c == ' ' || c == '\t'; }

/* qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] ), as thousandths; -1 when malformed. */
static int qvalue(const char *p, size_t n) {
  if (n == 0 || (p[0] != '0' && p[0] != '1')) return -1;
  int q = (p[0] - '0') * 1000;
  if (n == 1) return q;
  if (p[1] != '.' || n > 5) return -1;
  int scale = 100;
  for (size_t i = 2; i < n; i++, scale /= 10) {
    if (p[i] < '0' || p[i] > '9') return -1;
    q += (p[i] - '0') * scale;
  }
  return q > 1000 ? -1 : q;
}

static int lower_eq(const char *p, size_t n, const char *lit) {
  size_t l = strlen(lit);
  if (n != l) return 0;
  for (size_t i = 0; i < n; i++)
    if ((char)(p[i] | (p[i] >= 'A' && p[i] <= 'Z' ? 0x20 : 0)) != lit[i]) return 0;
  return 1;
}

/* One list member: codings [ OWS ";" OWS "q=" qvalue ]. Returns 0 and fills the coding and q (1000 when no
 * weight), or -1 when the member is malformed (it is then ignored, as if absent). */
static int member(const char *p, size_t n, cb__slice_t *coding, int *q) {
  while (n > 0 && ows(p[0])) p++, n--;
  while (n > 0 && ows(p[n - 1])) n--;
  size_t t = 0;
  while (t < n && p[t] != ';' && !ows(p[t])) t++;
  if (t == 0 || !cb__is_token(p, t)) return -1;
  *coding = (cb__slice_t){p, t};
  *q = 1000;
  size_t i = t;
  while (i < n && ows(p[i])) i++;
  if (i == n) return 0;
  if (p[i++] != ';') return -1;
  while (i < n && ows(p[i])) i++;
  if (n - i < 2 || (p[i] != 'q' && p[i] != 'Q') || p[i + 1] != '=') return -1;
  *q = qvalue(p + i + 2, n - i - 2);
  return *q < 0 ? -1 : 0;
}

int cb__accepts_gzip(const cb__hdr_t *hs, int n) {
  int gzip_q = -1, identity_q = -1, star_q = -1, seen = 0;
  for (int i = 0; i < n; i++) {
    if (!lower_eq(hs[i].name, hs[i].name_len, "accept-encoding")) continue;
    seen = 1;
    const char *p = hs[i].value, *end = p + hs[i].value_len;
    while (p <= end) {
      const char *comma = memchr(p, ',', (size_t)(end - p));
      const char *stop = comma != NULL ? comma : end;
      cb__slice_t c;
      int q;
      if (member(p, (size_t)(stop - p), &c, &q) == 0) {
        /* The first mention of a coding counts; later ones repeat it. */
        if ((lower_eq(c.ptr, c.len, "gzip") || lower_eq(c.ptr, c.len, "x-gzip")) && gzip_q < 0) gzip_q = q;
        else if (lower_eq(c.ptr, c.len, "identity") && identity_q < 0) identity_q = q;
        else if (c.len == 1 && c.ptr[0] == '*' && star_q < 0) star_q = q;
      }
      p = stop + 1;
    }
  }
  if (!seen) return 0; /* no preference stated: identity, which every client reads */
  if (gzip_q < 0) gzip_q = star_q < 0 ? 0 : star_q;
  if (identity_q < 0) identity_q = star_q < 0 ? 1000 : star_q;
  /* The higher weight wins; on a tie the smaller representation. */
  return gzip_q > 0 && gzip_q >= identity_q;
}

static void gzip_end(cb__req_t *r) {
  static const cb__hdr_t coded[] = {{"content-encoding", 16, "gzip", 4}, {"vary", 4, "accept-encoding", 15}};
  cb__slice_t identity, gzip;
  if (cb__gzip_bodies(&identity, &gzip) != 0) {
    cb__res_head(r, 503, NULL, NULL, 0, 0);
    cb__res_end(r);
    return;
  }
  int use_gzip = cb__accepts_gzip(r->headers, r->nheaders);
  cb__slice_t body = use_gzip ? gzip : identity;
  cb__res_head(r, 200, "application/json", use_gzip ? coded : coded + 1, use_gzip ? 2 : 1,
               (int64_t)body.len);
  cb__res_data(r, body.ptr, body.len, CB__DATA_STATIC);
  cb__res_end(r);
}

const cb__handler_t cb__h_gzip = {.on_end = gzip_end};
