/* libFuzzer target: the client layer's h2c session (src/client/h2_client.c), what the engine's proxy reads from
 * an h2c upstream. Three requests are submitted (stream 1 without a body, 3 with one given in two pieces, 5
 * cancelled by its owner when its head comes); the rest of the input is what the server sends.
 *
 * The first byte of the input steers the run:
 *   bits 0-3  the number of reads the rest is split into (1 to 16), at offsets drawn from a small PRNG seeded
 *             with the whole first byte; the session's output is taken (and dropped) between reads;
 *   bit 4     the owner does not give body bytes back (a client that reads nothing): windows stay closed;
 *   bit 5     small limits (head 64 bytes, 4 fields);
 *   bit 6     stream 3's body waits (deferred) until after the second read;
 *   bit 7     every callback returns "done with the stream" on stream 1.
 * With an even number of reads, stream 5 is cancelled before anything is written (its HEADERS still waiting in
 * the session: it must never go, and nothing may be told about it); with an odd number, when
 * its head comes.
 * An input of odd length runs its session on the proxy's allocator (src/proto/h2_mem.c, on a small-block cache
 * kept across inputs as a worker's proxy pool keeps it); one of even length on the same allocator without a
 * cache, its small blocks from malloc, where ASan sees each one freed.
 * Besides the sanitizers' checks, it aborts when a stream is told anything after it ended for its owner (on_end,
 * on_close, a non-zero callback, a cancel), when a head comes twice or a field lies outside the head buffer,
 * and when a head holds more than the limits allow.
 *
 * Seeds: test/fuzz/corpus/h2_client/. Build and run: make fuzz-h2-client (FUZZ_SECONDS=N). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "client/client.h"
#include "proto/h2_mem.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct {
  int32_t id;
  int ended;  /* over for its owner */
  int heads;
  int quit;   /* callbacks return non-zero */
  int cancel_on_head;
  size_t body_left;
  int body_wait;
} stream_t;

static cb_ch2_t sess;
static char headbuf[CB_CRES_HEADBUF_SIZE(2048, 32)];
static cb_ch2_limits_t lim;
static int no_consume;

static void check_fields(const cb_chdr_t *f, int n) {
  if (n < 0 || n > lim.max_headers) abort();
  size_t bytes = 0;
  for (int i = 0; i < n; i++) {
    if (f[i].name < headbuf || f[i].name + f[i].name_len > headbuf + sizeof headbuf) abort();
    if (f[i].value < headbuf || f[i].value + f[i].value_len > headbuf + sizeof headbuf) abort();
    bytes += f[i].name_len + f[i].value_len;
  }
  if (bytes > lim.max_head) abort();
}

static int s_head(void *sud, int status, const cb_chdr_t *f, int n) {
  stream_t *s = sud;
  if (s->ended || s->heads++ > 0 || status < 200 || status > 999) abort();
  check_fields(f, n);
  if (s->cancel_on_head) {
    s->ended = 1;
    cb_ch2_cancel(&sess, s->id);
    return 0;
  }
  if (s->quit) s->ended = 1;
  return s->quit;
}

static int s_data(void *sud, const char *p, size_t n) {
  stream_t *s = sud;
  if (s->ended || s->heads == 0) abort();
  if (n > 0 && (p[0] == 0x7f || p[n - 1] == 0x7f)) s->heads += 0; /* the bytes are readable */
  if (!no_consume) cb_ch2_consume(&sess, s->id, n);
  if (s->quit) s->ended = 1;
  return s->quit;
}

static int s_trailers(void *sud, const cb_chdr_t *t, int n) {
  stream_t *s = sud;
  if (s->ended || s->heads == 0) abort();
  check_fields(t, n);
  if (s->quit) s->ended = 1;
  return s->quit;
}

static void s_end(void *sud) {
  stream_t *s = sud;
  if (s->ended || s->heads == 0) abort();
  s->ended = 1;
}

static void s_close(void *sud, int err) {
  stream_t *s = sud;
  if (s->ended) abort();
  if (err > -1101 || err < -1105) abort();
  s->ended = 1;
}

static ssize_t s_read_body(void *sud, char *buf, size_t cap, int *eof) {
  stream_t *s = sud;
  if (s->ended) abort();
  if (s->body_wait) return 0;
  size_t n = s->body_left < cap ? s->body_left : cap;
  memset(buf, 'b', n);
  s->body_left -= n;
  if (s->body_left == 0) *eof = 1;
  return (ssize_t)n;
}

static stream_t streams[3];

static const cb_ch2_callbacks_t cbs = {.on_head = s_head, .on_data = s_data, .on_trailers = s_trailers,
                                       .on_end = s_end, .on_close = s_close, .read_body = s_read_body};

static void drain_out(void) {
  const char *p;
  for (int i = 0; i < 64 && cb_ch2_pull(&sess, &p) > 0; i++) {}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  uint8_t ctl = data[0];
  data++;
  size--;
  lim = (cb_ch2_limits_t){.max_head = ctl & 0x20 ? 64 : 2048, .max_headers = ctl & 0x20 ? 4 : 32,
                          .conn_window = 1 << 20};
  no_consume = (ctl & 0x10) != 0;
  static cb__h2_small_t *small;
  static cb__h2_mem_t mem;
  int pooled = size % 2 == 1;
  if (pooled && small == NULL) small = cb__h2_small_new();
  cb__h2_mem_init(&mem, pooled ? small : NULL); /* no cache: every block from malloc */
  if (cb_ch2_init(&sess, &cbs, NULL, &lim, headbuf, sizeof headbuf, &mem.mem) != 0) {
    cb__h2_mem_free(&mem);
    return 0;
  }
  memset(streams, 0, sizeof streams);
  static const cb_chdr_t fields[] = {{"accept", 6, "*/*", 3}, {"x-a", 3, "1", 1}};
  for (int i = 0; i < 3; i++) {
    stream_t *s = &streams[i];
    s->quit = i == 0 && (ctl & 0x80);
    s->cancel_on_head = i == 2;
    s->body_left = i == 1 ? 70000 : 0;
    s->body_wait = i == 1 && (ctl & 0x40);
    cb_ch2_req_t q = {.method = i == 1 ? "POST" : "GET", .method_len = i == 1 ? 4 : 3, .path = "/x", .path_len = 2,
                      .authority = "h:1", .authority_len = 3, .headers = fields, .nheaders = 2, .has_body = i == 1};
    s->id = cb_ch2_submit(&sess, &q, s);
    if (s->id < 0) s->ended = 1;
  }
  int pieces = (ctl & 0x0f) + 1;
  if (pieces % 2 == 0 && !streams[2].ended) { /* the owner goes before its request went */
    streams[2].ended = 1;
    cb_ch2_cancel(&sess, streams[2].id);
  }
  drain_out();
  uint32_t rng = ctl * 2654435761u + 1;
  size_t off = 0;
  for (int k = 0; k < pieces && off <= size; k++) {
    size_t n = size - off;
    if (k < pieces - 1 && n > 0) {
      rng = rng * 1103515245u + 12345u;
      n = (rng >> 8) % (n + 1);
    }
    if (cb_ch2_feed(&sess, (const char *)data + off, n) != 0) break;
    off += n;
    if (k == 1 && streams[1].body_wait && !streams[1].ended) {
      streams[1].body_wait = 0;
      cb_ch2_resume(&sess, streams[1].id);
    }
    drain_out();
    (void)cb_ch2_can_submit(&sess);
    (void)cb_ch2_done(&sess);
  }
  cb_ch2_free(&sess);
  cb__h2_mem_free(&mem);
  return 0;
}
