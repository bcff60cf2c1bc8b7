/* libFuzzer target: the WebSocket frame path (src/proto/ws.c). A valid handshake for GET /ws is always sent first,
 * so that every input reaches the frame codec after the 101, not the HTTP/1.1 parser.
 *
 * The first byte of the input steers the run; the rest is what the peer sends after the handshake:
 *   bits 0-3  the number of reads the rest is split into (1 to 16), at offsets drawn from a small PRNG seeded
 *             with the whole first byte;
 *   bit 4     a small message limit (max_body_bytes 64), so that 1009 and the message buffer's growth are
 *             reached by short inputs;
 *   bit 5     signal end of input (the peer closed its side) after the last read;
 *   bit 6     run the loop (without blocking) after every read;
 *   bit 7     feed the handshake and the first piece in one read.
 * The connection is freed with whatever is pending; cb__testconn_free() must report a clean loop.
 *
 * Seeds: test/fuzz/corpus/ws/. Build and run: make fuzz-ws (FUZZ_SECONDS=N). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "testing.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char handshake[] =
    "GET /ws HTTP/1.1\r\nhost: x\r\nupgrade: websocket\r\nconnection: Upgrade\r\n"
    "sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\n\r\n";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  cb_config_t cfg;
  if (size < 1) return 0;
  unsigned ctl = data[0], rng = data[0] * 2654435761u + 1;
  data++;
  size--;
  cb_config_init(&cfg);
  cfg.fixture_dir = fixture_dir();
  cfg.max_body_bytes = (ctl & 0x10) ? 64 : 65536;
  cfg.idle_timeout_ms = 1000;
  cfg.journal = 4;
  cb__testconn_t *tc = cb__testconn_new(&cfg, sink, NULL);
  if (tc == NULL) abort();
  unsigned nfeeds = (ctl & 15) + 1;
  size_t pos = 0;
  int closed = 0;
  if (ctl & 0x80) {
    /* The handshake and the first piece in one read, as a client that does not wait for the 101. */
    size_t first = size / nfeeds;
    char *buf = malloc(sizeof handshake - 1 + first + 1);
    memcpy(buf, handshake, sizeof handshake - 1);
    if (first) memcpy(buf + sizeof handshake - 1, data, first);
    closed = cb__testconn_feed(tc, buf, sizeof handshake - 1 + first);
    free(buf);
    pos = first;
  } else {
    closed = cb__testconn_feed(tc, handshake, sizeof handshake - 1);
  }
  for (unsigned i = 1; i <= nfeeds && !closed && pos <= size; i++) {
    rng = rng * 1103515245u + 12345u;
    size_t left = size - pos;
    size_t n = i == nfeeds ? left : (left ? (rng >> 8) % (left + 1) : 0);
    if (n) closed = cb__testconn_feed(tc, (const char *)data + pos, n);
    pos += n;
    if (ctl & 0x40 && !closed) closed = cb__testconn_run(tc, 0);
  }
  if ((ctl & 0x20) && !closed) cb__testconn_eof(tc);
  if (cb__testconn_free(tc) != 0) abort();
  return 0;
}
