/* libFuzzer on what cbench-load reads from a server (make load-fuzz; docs/testing.md): the HTTP/1.1 answer reader
 * (src/load/h1.c), the h2 frame reader (src/load/h2.c) or the WebSocket reader (src/load/ws.c: after a fixed
 * 101, or from the handshake's answer on), fed the input in reads of a
 * size the input chooses, with the connection's requests in flight refilled or not, and the output taken by the
 * "socket" or left to pile up. No loop and no socket: a connection and its thread are set up by hand, as
 * thread.c would, and the protocol's read, flush and eof are called as on_read calls them.
 *
 * The input: byte 0 = flags (bit 0: WebSocket, else HTTP/1.1; bit 1: refill the requests in flight before each
 * read; bit 2: the socket takes the output after each read; bit 3: h2, over bits 0's choice; bit 4, with bit 0:
 * no fixed 101, the bytes begin with the handshake's answer, interim 1xx and all), byte 1 = the read
 * size - 1, the rest = the bytes. Besides the sanitizers' checks, it aborts when one read queues more output than
 * one pong frame (pings are coalesced: however many a read holds, one pong answers them) or when the output
 * queued passes CBL_OUT_HIGH by more than one pong frame: reading must never queue output without a bound. Over
 * h2 the bound is what the read held (each PING or SETTINGS is answered by an acknowledgement no longer than
 * itself) plus the requests the flush may start, and CBL_OUT_HIGH plus one acknowledgement. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "load.h"

#define DEPTH 4
#define MSG "0123456789abcdef" /* --ws-size 16 */
#define PONG_MAX 131

static cbl_config_t cfg;
static cbl_wire_t wire;
static cbl_run_t run;
static cbl_thread_t th;
static cbl_conn_t conn;
static cbl_req_t reqs[DEPTH];
static uint32_t free_slots[DEPTH];
/* GET / for authority "x": :method GET, :scheme http (static indexes), :authority "x" (literal, not indexed). */
static char h2_req[] = "\x82\x86\x01\x01x\x84";
static char *h2_blocks[1] = {h2_req};
static size_t h2_block_lens[1] = {sizeof h2_req - 1};
#define H2_REQ_MAX 64 /* a request's HEADERS frame, its header and block, with room */
static char msg[] = MSG;
static char handshake[] = "GET /ws HTTP/1.1\r\nhost: x\r\nupgrade: websocket\r\nconnection: Upgrade\r\n\r\n";
static const char upgraded[] = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n";

static void setup(void) {
  cfg.depth = DEPTH;
  cfg.ws_size = sizeof MSG - 1;
  cfg.npaths = 1;
  cfg.connections = 1;
  cfg.threads = 1;
  cfg.duration_ns = 1000000000ull;
  cfg.timeout_ns = 1000000000ull;
  wire.ws_msg = msg;
  wire.ws_handshake = handshake;
  wire.ws_handshake_len = sizeof handshake - 1;
  wire.h2_block = h2_blocks;
  wire.h2_block_len = h2_block_lens;
  run.cfg = &cfg;
  th.cfg = &cfg;
  th.wire = &wire;
  th.run = &run;
  th.conns = &conn;
  th.nconns = 1;
  th.rng = 1;
  th.sending = true;
  cbl_result_init(&th.res, 0);
  conn.t = &th;
  conn.reqs = reqs;
  conn.state = CBL_CONN_OPEN;
}

/* Over h2 slots come and go in any order (thread.c's free list) and each is a stream the protocol starts. */
static int refill_h2(const cbl_proto_t *proto) {
  while (conn.inflight < DEPTH && proto->ready(&conn)) {
    cbl_req_t *r = &reqs[free_slots[--conn.nfree]];
    conn.inflight++;
    r->used = true;
    r->status = 0;
    r->body_off = 0;
    r->measured = true;
    r->intended = r->sent = 0;
    int rc = proto->send(&conn, r);
    if (rc) return rc;
  }
  return 0;
}

/* Every slot in flight, as after conn_pump in a closed loop. */
static void refill(void) {
  while (conn.inflight < DEPTH) {
    cbl_req_t *r = &reqs[(conn.head + conn.inflight) % DEPTH];
    r->used = true;
    r->status = 0;
    r->measured = true;
    r->intended = r->sent = 0;
    conn.inflight++;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static int ready;
  if (!ready) {
    setup();
    ready = 1;
  }
  if (size < 2) return 0;
  uint8_t flags = data[0];
  size_t step = (size_t)data[1] + 1;
  data += 2;
  size -= 2;
  int h2 = (flags & 8) != 0;
  const cbl_proto_t *proto = h2 ? &cbl_h2_proto : (flags & 1) ? &cbl_ws_proto : &cbl_h1_proto;
  if (h2) flags &= (uint8_t)~1;
  th.proto = proto;
  conn.free_slots = h2 ? free_slots : NULL;
  conn.nfree = DEPTH;
  for (uint32_t i = 0; i < DEPTH; i++) free_slots[i] = DEPTH - 1 - i;
  conn.head = 0;
  conn.inflight = 0;
  conn.done_clean = false;
  conn.out.len = 0;
  memset(reqs, 0, sizeof reqs);
  conn.p = proto->create(&conn);
  if (!conn.p) abort();
  int rc = proto->open(&conn);
  if (h2) {
    if (rc == 0) rc = refill_h2(proto);
  } else {
    refill();
  }
  bool fixed_101 = (flags & 1) && !(flags & 16);
  if (rc == 0 && fixed_101) rc = proto->read(&conn, upgraded, sizeof upgraded - 1);
  if (rc == 0 && fixed_101 && !proto->ready(&conn)) abort(); /* the fixed 101 must upgrade */
  for (size_t off = 0; rc == 0 && off < size && !conn.done_clean; off += step) {
    if ((flags & 2) && rc == 0) {
      if (h2) rc = refill_h2(proto);
      else refill();
      if (rc) break;
    }
    size_t n = size - off < step ? size - off : step;
    size_t before = cbl_conn_unsent(&conn);
    th.now = cbl_now();
    rc = proto->read(&conn, (const char *)data + off, n);
    if (rc == 0) rc = proto->flush(&conn);
    /* A pong frame is 2 + 4 (mask) + 125 bytes at most. */
    size_t after = cbl_conn_unsent(&conn);
    int over = h2 ? after > before + n + DEPTH * H2_REQ_MAX || after > CBL_OUT_HIGH + 17 + DEPTH * H2_REQ_MAX
                  : after > before + PONG_MAX || after > CBL_OUT_HIGH + PONG_MAX + wire.ws_handshake_len;
    if (over) {
      fprintf(stderr, "fuzz_load: one read of %zu bytes took the output from %zu to %zu bytes\n", n, before, after);
      abort();
    }
    if (flags & 4) conn.out.len = 0;
  }
  if (rc == 0 && !conn.done_clean) (void)proto->eof(&conn);
  proto->reset(&conn);
  proto->destroy(conn.p);
  conn.p = NULL;
  return 0;
}
