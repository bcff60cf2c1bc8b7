/* libFuzzer target: arbitrary bytes into the HTTP/1.1 connection code, with no socket (src/testing.h).
 *
 * The first byte of the input steers the run; the rest is the peer's bytes:
 *   bits 0-3  the number of reads the rest is split into (1 to 16), at offsets drawn from a small PRNG seeded
 *             with the whole first byte, so the parser sees every kind of split point;
 *   bit 4     run the loop (without blocking) after every read, so timers and deferred writes interleave;
 *   bit 5     signal end of input (peer closed its side) after the last read;
 *   bit 6     use small limits (header 256 bytes, body 64 bytes) instead of the larger fuzz defaults;
 *   bit 7     chunked-body mode: the second byte picks a route, a fixed head `POST|GET route HTTP/1.1` with
 *             `transfer-encoding: chunked` is fed first, and the rest is its body, so that every input goes
 *             through chunk sizes, extensions, the CRLF after chunk data and trailers.
 * The loop is never run until idle: a /delay/60000 would sleep. The connection is freed with whatever is still
 * pending, and cb__testconn_free() must report a clean loop.
 *
 * Build and run: make fuzz (FUZZ_SECONDS=N). The fixture files are kept in $CBT_FIXTURE_DIR (or
 * /tmp/cbench-fuzz-fixtures) and reused, so that making a connection does not write 5 MB each time. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "testing.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  cb_config_t cfg;
  cb__testconn_t *tc;
  unsigned ctl, nfeeds, i, rng;
  size_t pos = 0;
  if (size < 1) return 0;
  ctl = data[0];
  data++;
  size--;

  cb_config_init(&cfg);
  cfg.fixture_dir = fixture_dir();
  cfg.max_header_bytes = (ctl & 0x40) ? 256 : 8192;
  cfg.max_body_bytes = (ctl & 0x40) ? 64 : 65536;
  cfg.header_timeout_ms = 1000;
  cfg.idle_timeout_ms = 1000;
  cfg.journal = 8; /* the journal records what the stubs and routes answered */
  cfg.journal_body_bytes = 16;
  tc = cb__testconn_new(&cfg, sink, NULL);
  if (tc == NULL) abort();
  add_stubs(tc);
  if ((ctl & 0x80) && size > 0) {
    static const char *const heads[] = {
        "POST /echo HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n",
        "POST /echo/chunked HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n",
        "GET /headers HTTP/1.1\r\nhost: x\r\nx-a: 1\r\ntransfer-encoding: chunked\r\n\r\n",
        "GET /delay/1 HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n",
        "GET /status/201 HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n",
        "POST /hello HTTP/1.1\r\nhost: x\r\nexpect: 100-continue\r\ntransfer-encoding: chunked\r\n\r\n",
    };
    const char *head = heads[data[0] % (sizeof heads / sizeof heads[0])];
    data++;
    size--;
    cb__testconn_feed(tc, head, strlen(head));
  }

  nfeeds = (ctl & 0x0f) + 1;
  rng = ctl * 2654435761u + 1;
  for (i = 0; i < nfeeds && pos < size; i++) {
    size_t left = size - pos, n;
    if (i + 1 == nfeeds) {
      n = left;
    } else {
      rng = rng * 1103515245u + 12345u;
      n = 1 + (size_t)((rng >> 8) % left);
    }
    if (cb__testconn_feed(tc, (const char *)data + pos, n) != 0) break;
    pos += n;
    if ((ctl & 0x10) && cb__testconn_run(tc, 0) != 0) break;
  }
  if (ctl & 0x20) cb__testconn_eof(tc);
  cb__testconn_run(tc, 0);
  if (cb__testconn_free(tc) != 0) {
    fprintf(stderr, "cb__testconn_free: the loop did not close cleanly\n");
    abort();
  }
  return 0;
}
