/* libFuzzer target: the client layer's HTTP/1.1 answer parser (src/client/h1_response.c), what the engine's proxy
 * and cbench-load read from a server.
 *
 * The first byte of the input steers the run; the rest is what the server sends:
 *   bits 0-3  the number of reads the rest is split into (1 to 16), at offsets drawn from a small PRNG seeded
 *             with the whole first byte;
 *   bit 4     the answers are to HEAD requests;
 *   bit 5     count_only mode (no fields gathered);
 *   bit 6     small limits (head 64 bytes, 4 fields, body 16 bytes), so that every bound is reached by short
 *             inputs; otherwise head 2048, 32 fields, no body bound;
 *   bit 7     the peer closes after the last read (cb_cres_eof).
 * Each input is parsed twice, whole and in pieces, and the two runs must give the same events (a digest of
 * every callback, with the body bytes as one stream) and the same result: a read's size never changes what the
 * parser says. Besides the sanitizers' checks, it aborts when a callback sees more than the limits allow, a
 * field outside the head buffer, or an event after the parser stopped.
 *
 * Seeds: test/fuzz/corpus/h1_response/. Build and run: make fuzz-h1-response (FUZZ_SECONDS=N). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/client.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct {
  uint64_t digest;
  uint64_t body; /* body bytes of the current answer */
  int in_answer; /* on_head was called and on_done not yet */
  int done;      /* on_done said keep_alive 0 */
  const cb_cres_limits_t *lim;
  const char *buf;
  size_t cap;
} state_t;

static void mix(state_t *s, const void *p, size_t n) {
  const uint8_t *b = p;
  for (size_t i = 0; i < n; i++) s->digest = (s->digest ^ b[i]) * 1099511628211ull;
}

static void mix_int(state_t *s, int64_t v) { mix(s, &v, sizeof v); }

static void check_fields(state_t *s, const cb_chdr_t *f, int n) {
  if (n < 0 || n > s->lim->max_headers) abort();
  if (s->lim->count_only && n != 0) abort();
  for (int i = 0; i < n; i++) {
    if (f[i].name < s->buf || f[i].name + f[i].name_len > s->buf + s->cap) abort();
    if (f[i].value < s->buf || f[i].value + f[i].value_len > s->buf + s->cap) abort();
    if (f[i].name_len == 0) abort();
    mix(s, f[i].name, f[i].name_len);
    mix_int(s, -1);
    mix(s, f[i].value, f[i].value_len);
    mix_int(s, -2);
  }
}

static int f_begin(void *ud) {
  state_t *s = ud;
  if (s->in_answer || s->done) abort();
  mix_int(s, 1);
  return 0;
}

static int f_head(void *ud, const cb_cres_head_t *h) {
  state_t *s = ud;
  if (s->in_answer || s->done || (h->status < 200 && h->status != 101) || h->status > 999) abort();
  s->in_answer = 1;
  s->body = 0;
  mix_int(s, 2);
  mix_int(s, h->status);
  mix_int(s, h->minor);
  mix_int(s, h->content_length);
  mix_int(s, h->chunked);
  mix_int(s, h->keep_alive);
  mix_int(s, h->has_body);
  check_fields(s, h->headers, h->nheaders);
  return 0;
}

static int f_body(void *ud, const char *p, size_t n) {
  state_t *s = ud;
  if (!s->in_answer || n == 0) abort();
  s->body += n;
  if (s->lim->max_body && s->body > s->lim->max_body) abort();
  mix(s, p, n); /* no separator: the bytes as one stream, however they were cut */
  return 0;
}

static int f_trailers(void *ud, const cb_chdr_t *t, int n) {
  state_t *s = ud;
  if (!s->in_answer || s->lim->count_only || n <= 0) abort();
  mix_int(s, 3);
  check_fields(s, t, n);
  return 0;
}

static int f_done(void *ud, int keep_alive) {
  state_t *s = ud;
  if (!s->in_answer) abort();
  s->in_answer = 0;
  s->done = !keep_alive;
  mix_int(s, 4);
  mix_int(s, keep_alive);
  return 0;
}

static const cb_cres_callbacks_t callbacks = {
  .on_begin = f_begin, .on_head = f_head, .on_body = f_body, .on_trailers = f_trailers, .on_done = f_done};

static char headbuf[CB_CRES_HEADBUF_SIZE(2048, 32)];

/* One run: the input in nfeeds reads (1: whole), then eof when asked. Returns the digest, with the result. */
static uint64_t run(const cb_cres_limits_t *lim, unsigned ctl, const char *in, size_t n, unsigned nfeeds) {
  state_t s = {.digest = 14695981039346656037ull, .lim = lim, .buf = headbuf, .cap = sizeof headbuf};
  cb_cres_t p;
  cb_cres_init(&p, &callbacks, &s, lim, headbuf, sizeof headbuf);
  cb_cres_expect(&p, (ctl & 0x10) != 0);
  unsigned rng = ctl * 2654435761u + 1;
  size_t pos = 0;
  int rc = 0;
  for (unsigned i = 1; i <= nfeeds && rc == 0; i++) {
    rng = rng * 1103515245u + 12345u;
    size_t left = n - pos;
    size_t k = i == nfeeds ? left : (left ? (rng >> 8) % (left + 1) : 0);
    rc = cb_cres_feed(&p, in + pos, k);
    pos += k;
  }
  if (rc == 0 && (ctl & 0x80)) rc = cb_cres_eof(&p);
  if (rc != 0) {
    if (rc != CB_CRES_E_BAD && rc != CB_CRES_E_HEAD_TOO_BIG && rc != CB_CRES_E_BODY_TOO_BIG &&
        rc != CB_CRES_E_TRUNCATED)
      abort();
    /* Stopped: it says so again, and calls nothing. */
    uint64_t before = s.digest;
    if (cb_cres_feed(&p, "HTTP/1.1 200 OK\r\n\r\n", 19) != rc || cb_cres_eof(&p) != rc || s.digest != before) abort();
    if (cb_cres_strerror(rc)[0] == '\0') abort();
  }
  mix_int(&s, rc);
  return s.digest;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  unsigned ctl = data[0];
  const char *in = (const char *)data + 1;
  size_t n = size - 1;
  cb_cres_limits_t lim = {.max_head = 2048, .max_headers = 32, .count_only = (ctl & 0x20) != 0};
  if (ctl & 0x40) {
    lim.max_head = 64;
    lim.max_headers = 4;
    lim.max_body = 16;
  }
  uint64_t whole = run(&lim, ctl, in, n, 1);
  uint64_t split = run(&lim, ctl, in, n, (ctl & 15) + 1);
  if (whole != split) {
    fprintf(stderr, "fuzz_h1_response: the events differ between one read and %u reads\n", (ctl & 15) + 1);
    abort();
  }
  return 0;
}
