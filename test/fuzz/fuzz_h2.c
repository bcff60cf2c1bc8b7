/* libFuzzer target: the HTTP/2 client preface, then arbitrary bytes, into the connection code with no socket
 * (src/testing.h). The preface is always sent first so that every input reaches the engine's HTTP/2 session
 * (proto/http2.c: its frame reader, nghttp2's HPACK decoder, streams, handlers, flow control), not the protocol
 * detection.
 *
 * The first byte of the input steers the run; the rest is what the peer sends after the preface:
 *   bits 0-3  the number of reads the rest is split into (1 to 16), at offsets drawn from a small PRNG seeded
 *             with the whole first byte;
 *   bit 4     run the loop (without blocking) after every read: /delay timers, deferred data and resumed
 *             generators interleave with the input; and the connection's rest step after it, as after a second
 *             without input, where an idle session is parked (its HPACK decoder given back) and the next read wakes it;
 *   bit 5     signal end of input (the peer closed its side) after the last read;
 *   bit 6     small limits: header 256 bytes, body 64 bytes, 4 concurrent streams;
 *   bit 7     feed the preface and the first piece in one read (otherwise the preface is a read of its own).
 * The loop is never run until idle (a /delay/60000 would sleep); the connection is freed with whatever is still
 * pending, and cb__testconn_free() must report a clean loop (no handle left, nothing leaked).
 *
 * Seeds: test/fuzz/corpus/h2/ (docs/h2-tests.md lists them). Build and run: make fuzz-h2 (FUZZ_SECONDS=N). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "testing.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char preface[24] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  cb_config_t cfg;
  cb__testconn_t *tc;
  unsigned ctl, nfeeds, i, rng;
  size_t pos = 0;
  char *first = NULL;
  if (size < 1) return 0;
  ctl = data[0];
  data++;
  size--;

  cb_config_init(&cfg);
  cfg.fixture_dir = fixture_dir();
  cfg.max_header_bytes = (ctl & 0x40) ? 256 : 8192;
  cfg.max_body_bytes = (ctl & 0x40) ? 64 : 65536;
  cfg.h2_max_concurrent_streams = (ctl & 0x40) ? 4 : 128;
  cfg.header_timeout_ms = 1000;
  cfg.idle_timeout_ms = 1000;
  cfg.journal = 8; /* the journal records what the stubs and routes answered */
  cfg.journal_body_bytes = 16;
  tc = cb__testconn_new(&cfg, sink, NULL);
  if (tc == NULL) abort();
  add_stubs(tc);

  nfeeds = (ctl & 0x0f) + 1;
  rng = ctl * 2654435761u + 1;
  if (!(ctl & 0x80) && cb__testconn_feed(tc, preface, sizeof preface) != 0) goto done;
  for (i = 0; i < nfeeds && pos < size; i++) {
    size_t left = size - pos, n;
    int closed;
    if (i + 1 == nfeeds) {
      n = left;
    } else {
      rng = rng * 1103515245u + 12345u;
      n = 1 + (size_t)((rng >> 8) % left);
    }
    if (i == 0 && (ctl & 0x80)) {
      /* A fresh heap copy, so ASan sees reads past what was fed. */
      first = malloc(sizeof preface + n);
      if (first == NULL) abort();
      memcpy(first, preface, sizeof preface);
      memcpy(first + sizeof preface, data, n);
      closed = cb__testconn_feed(tc, first, sizeof preface + n);
      free(first);
      first = NULL;
    } else {
      closed = cb__testconn_feed(tc, (const char *)data + pos, n);
    }
    if (closed != 0) goto done;
    pos += n;
    if ((ctl & 0x10) && (cb__testconn_run(tc, 0) != 0 || cb__testconn_rest(tc) != 0 || cb__testconn_run(tc, 0) != 0))
      goto done;
  }
  if ((ctl & 0x80) && size == 0 && cb__testconn_feed(tc, preface, sizeof preface) != 0) goto done;
  if (ctl & 0x20) cb__testconn_eof(tc);
  cb__testconn_run(tc, 0);
done:
  if (cb__testconn_free(tc) != 0) {
    fprintf(stderr, "cb__testconn_free: the loop did not close cleanly\n");
    abort();
  }
  return 0;
}
