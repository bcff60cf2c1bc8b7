/* Wire tests of cbench-load's WebSocket reader (src/load/ws.c), run by `make load-unit`: after a fixed 101, a
 * server's exact bytes are read whole, one byte at a time and three bytes at a time (a header split anywhere),
 * and each case asserts the result (0 or the error kind), the echoes completed and the exact frames written
 * (unmasked: one pong per read's flush, with the latest ping's payload however many the read held). The rules
 * pinned: echoes compared as they arrive, fragments and control frames between them, RSV bits, masked frames,
 * unknown opcodes, control frames fragmented or over 125 bytes, continuation without a message, a message inside
 * a message, a message with nothing in flight (unsolicited), frames and messages longer or shorter than the
 * message sent, and the pong held while the output is at CBL_OUT_HIGH. As fuzz_load.c, no loop and no socket:
 * a connection and its thread are set up by hand. The handshake cases read the server's answer from its first
 * byte: interim 1xx answers before the 101 skipped, the final answer after them judged alone, the head's bound. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "load.h"

#define DEPTH 4
#define MSG "0123456789abcdef" /* --ws-size 16 */

static int failures;

#define CHECK(cond, ...)                                         \
  do {                                                           \
    if (!(cond)) {                                               \
      fprintf(stderr, "%s:%d: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                              \
      fprintf(stderr, "\n");                                     \
      failures++;                                                \
    }                                                            \
  } while (0)

static cbl_config_t cfg;
static cbl_wire_t wire;
static cbl_run_t run;
static cbl_thread_t th;
static cbl_conn_t conn;
static cbl_req_t reqs[DEPTH];
static char msg[] = MSG;
static char handshake[] = "GET /ws HTTP/1.1\r\nhost: x\r\nupgrade: websocket\r\nconnection: Upgrade\r\n\r\n";
static const char upgraded[] = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n";

static void setup(void) {
  cfg.depth = DEPTH;
  cfg.ws_size = sizeof MSG - 1;
  cfg.npaths = 1;
  cfg.connections = 1;
  cfg.threads = 1;
  wire.ws_msg = msg;
  wire.ws_handshake = handshake;
  wire.ws_handshake_len = sizeof handshake - 1;
  run.cfg = &cfg;
  th.cfg = &cfg;
  th.wire = &wire;
  th.run = &run;
  th.conns = &conn;
  th.nconns = 1;
  th.rng = 1;
  th.sending = true;
  th.proto = &cbl_ws_proto;
  cbl_result_init(&th.res, 0);
  conn.t = &th;
  conn.reqs = reqs;
  conn.state = CBL_CONN_OPEN;
}

/* A fresh connection, upgraded, with `inflight` echoes awaited. */
static void conn_open(uint32_t inflight) {
  conn.head = 0;
  conn.inflight = 0;
  conn.out.len = 0;
  memset(reqs, 0, sizeof reqs);
  memset(&th.res.counts, 0, sizeof th.res.counts);
  conn.p = cbl_ws_proto.create(&conn);
  if (!conn.p) abort();
  int rc = cbl_ws_proto.open(&conn);
  if (rc == 0) rc = cbl_ws_proto.read(&conn, upgraded, sizeof upgraded - 1);
  if (rc || !cbl_ws_proto.ready(&conn)) abort();
  conn.out.len = 0; /* the socket took the handshake */
  for (; conn.inflight < inflight; conn.inflight++) {
    cbl_req_t *r = &reqs[conn.inflight];
    r->used = true;
    r->measured = true;
  }
}

static void conn_close(void) {
  cbl_ws_proto.reset(&conn);
  cbl_ws_proto.destroy(conn.p);
  conn.p = NULL;
}

/* The frames written, unmasked, as "opcode:payload;" each, or "bad frame" if one is not a masked final frame. */
static void written(char *dst, size_t cap) {
  const uint8_t *p = (const uint8_t *)conn.out.p, *end = p + conn.out.len;
  size_t n = 0;
  dst[0] = 0;
  while (p < end) {
    if (end - p < 6 || !(p[0] & 0x80) || !(p[1] & 0x80) || (p[1] & 0x7f) > 125 || end - p < 6 + (p[1] & 0x7f)) {
      snprintf(dst, cap, "bad frame");
      return;
    }
    size_t len = p[1] & 0x7f;
    n += (size_t)snprintf(dst + n, cap - n, "%x:", p[0] & 0x0f);
    for (size_t i = 0; i < len && n + 2 < cap; i++) dst[n++] = (char)(p[6 + i] ^ p[2 + i % 4]);
    n += (size_t)snprintf(dst + n, cap - n, ";");
    p += 6 + len;
  }
}

typedef struct {
  const char *name;
  const char *bytes; /* the server's, after the 101 */
  size_t len;
  uint32_t inflight;
  int rc;             /* 0 or CBL_FAIL(kind) */
  uint64_t completed; /* echoes completed */
  const char *out;    /* the frames written after the last read's flush, as written() spells them */
} wire_case_t;

#define B(s) s, sizeof s - 1
#define ECHO_FRAME "\x81\x10" MSG
#define FAIL_P CBL_FAIL(CBL_ERR_PROTOCOL)

static const wire_case_t cases[] = {
  {"one echo", B(ECHO_FRAME), 1, 0, 1, ""},
  {"two echoes", B(ECHO_FRAME ECHO_FRAME), 2, 0, 2, ""},
  {"empty frames before", B("\x01\x00\x80\x10" MSG), 1, 0, 1, ""},
  {"fragments", B("\x01\x05" "01234" "\x00\x05" "56789" "\x80\x06" "abcdef"), 1, 0, 1, ""},
  {"ping between fragments", B("\x01\x08" "01234567" "\x89\x02" "hi" "\x80\x08" "89abcdef"), 1, 0, 1, "a:hi;"},
  {"pings coalesced", B("\x89\x01" "a" "\x89\x02" "bb" "\x89\x00" "\x89\x03" "ccc" ECHO_FRAME), 1, 0, 1, "a:ccc;"},
  {"empty ping", B("\x89\x00"), 0, 0, 0, "a:;"},
  {"125-byte ping", B("\x89\x7d" "0123456789012345678901234567890123456789012345678901234567890123456789"
                      "0123456789012345678901234567890123456789012345678901234"),
   0, 0, 0,
   "a:0123456789012345678901234567890123456789012345678901234567890123456789"
   "0123456789012345678901234567890123456789012345678901234;"},
  {"pong ignored", B("\x8a\x03" "xyz" ECHO_FRAME), 1, 0, 1, ""},
  {"close", B(ECHO_FRAME "\x88\x02\x03\xe8"), 2, CBL_FAIL(CBL_ERR_RESET), 1, ""},
  {"wrong byte", B("\x81\x10" "0123456789abcdeX"), 1, FAIL_P, 0, ""},
  {"wrong byte in a fragment", B("\x01\x08" "01234567" "\x80\x08" "89abXdef"), 1, FAIL_P, 0, ""},
  {"rsv1", B("\xc1\x10" MSG), 1, FAIL_P, 0, ""},
  {"rsv3 on a ping", B("\x99\x00"), 1, FAIL_P, 0, ""},
  {"rsv1 unsolicited", B("\xc1\x10" MSG), 0, FAIL_P, 0, ""},
  {"masked", B("\x81\x90" "\x00\x00\x00\x00" MSG), 1, FAIL_P, 0, ""},
  {"masked empty ping", B("\x89\x80" "\x00\x00\x00\x00"), 1, FAIL_P, 0, ""},
  {"binary", B("\x82\x10" MSG), 1, FAIL_P, 0, ""},
  {"opcode 3", B("\x83\x10" MSG), 1, FAIL_P, 0, ""},
  {"opcode 0xb", B("\x8b\x00"), 1, FAIL_P, 0, ""},
  {"fragmented ping", B("\x09\x01" "a"), 1, FAIL_P, 0, ""},
  {"126-byte ping", B("\x89\x7e\x00\x7e"), 1, FAIL_P, 0, ""},
  {"continuation first", B("\x80\x10" MSG), 1, FAIL_P, 0, ""},
  {"text inside a message", B("\x01\x08" "01234567" "\x81\x08" "89abcdef"), 1, FAIL_P, 0, ""},
  {"unsolicited", B(ECHO_FRAME ECHO_FRAME), 1, CBL_FAIL(CBL_ERR_UNSOLICITED), 1, ""},
  {"unsolicited fragment", B("\x01\x01" "0"), 0, CBL_FAIL(CBL_ERR_UNSOLICITED), 0, ""},
  {"frame over the message", B("\x81\x11" MSG "g"), 1, FAIL_P, 0, ""},
  {"16-bit length over", B("\x81\x7e\x01\x00" "0"), 1, FAIL_P, 0, ""},
  {"64-bit length over", B("\x81\x7f\x40\x00\x00\x00\x00\x00\x00\x00" "0"), 1, FAIL_P, 0, ""},
  {"fragments over the message", B("\x01\x0a" "0123456789" "\x80\x0a" "abcdefghij"), 1, FAIL_P, 0, ""},
  {"message short", B("\x81\x0f" "0123456789abcde"), 1, FAIL_P, 0, ""},
  /* Where wslay's frame layer differs from the hand-written reader it replaced (src/load/ws.c's header comment):
   * a length not in its shortest form is refused, and a header is judged with its payload's first byte. */
  {"16-bit length for 16 bytes", B("\x81\x7e\x00\x10" MSG), 1, FAIL_P, 0, ""},
  {"over-long header alone", B("\x81\x7f\x40\x00\x00\x00\x00\x00\x00\x00"), 1, 0, 0, ""},
  {"unsolicited header alone", B("\x81\x10"), 0, 0, 0, ""},
};

/* Reads c's bytes in steps of `step` (0: whole), flushing after each read as thread.c does. */
static void run_case(const wire_case_t *c, size_t step) {
  char out[512];
  conn_open(c->inflight);
  int rc = 0;
  size_t n = step ? step : c->len;
  for (size_t off = 0; rc == 0 && off < c->len; off += n) {
    rc = cbl_ws_proto.read(&conn, c->bytes + off, c->len - off < n ? c->len - off : n);
    if (rc == 0) rc = cbl_ws_proto.flush(&conn);
  }
  written(out, sizeof out);
  CHECK(rc == c->rc, "%s (step %zu): rc %d, expected %d", c->name, step, rc, c->rc);
  CHECK(th.res.counts.completed == c->completed, "%s (step %zu): %llu echoes, expected %llu", c->name, step,
        (unsigned long long)th.res.counts.completed, (unsigned long long)c->completed);
  /* Read in steps, each read's flush may answer the pings it saw: the last pong must answer the latest ping. */
  size_t lo = strlen(out), le = strlen(c->out);
  bool ok = step ? lo >= le && strcmp(out + lo - le, c->out) == 0 && (le > 0 || lo == 0) : strcmp(out, c->out) == 0;
  CHECK(ok, "%s (step %zu): wrote \"%s\", expected \"%s\"", c->name, step, out, c->out);
  conn_close();
}

/* The handshake's answer: the server's exact bytes from the first, read whole, by 1 and by 3 bytes, with one
 * echo awaited once upgraded. Interim 1xx answers (RFC 9110 15.2) before the 101 are skipped, whatever their
 * fields; the 101 is the final answer, and any other final answer fails the upgrade as before, counted by its
 * status when that is not 2xx (never by a 1xx skipped before it). */
typedef struct {
  const char *name;
  const char *bytes;
  size_t len;
  int rc;             /* 0 or CBL_FAIL(kind) */
  bool ready;         /* upgraded */
  uint64_t completed; /* echoes completed */
  int status;         /* the status counted (0: none) */
} hs_case_t;

#define UPGRADED "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
#define CONTINUE "HTTP/1.1 100 Continue\r\n\r\n"

static const hs_case_t hs_cases[] = {
  {"101 alone", B(UPGRADED ECHO_FRAME), 0, true, 1, 0},
  {"100 then 101", B(CONTINUE UPGRADED ECHO_FRAME), 0, true, 1, 0},
  {"103 with fields then 101", B("HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n" UPGRADED ECHO_FRAME),
   0, true, 1, 0},
  {"100, 102, 100 then 101", B(CONTINUE "HTTP/1.1 102 Processing\r\n\r\n" CONTINUE UPGRADED ECHO_FRAME), 0, true, 1,
   0},
  {"100 then 200", B(CONTINUE "HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"), CBL_FAIL(CBL_ERR_UPGRADE), false, 0,
   200},
  {"100 then 404", B(CONTINUE "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n"), FAIL_P, false, 0, 404},
  {"100 then not HTTP", B(CONTINUE "SSH-2.0-x\r\n"), CBL_FAIL(CBL_ERR_UPGRADE), false, 0, 0},
};

static void run_hs_case(const hs_case_t *c, size_t step) {
  conn.head = 0;
  conn.inflight = 1;
  conn.out.len = 0;
  memset(reqs, 0, sizeof reqs);
  reqs[0].used = reqs[0].measured = true;
  memset(&th.res.counts, 0, sizeof th.res.counts);
  conn.p = cbl_ws_proto.create(&conn);
  if (!conn.p) abort();
  int rc = cbl_ws_proto.open(&conn);
  size_t n = step ? step : c->len;
  for (size_t off = 0; rc == 0 && off < c->len; off += n)
    rc = cbl_ws_proto.read(&conn, c->bytes + off, c->len - off < n ? c->len - off : n);
  CHECK(rc == c->rc, "%s (step %zu): rc %d, expected %d", c->name, step, rc, c->rc);
  CHECK(cbl_ws_proto.ready(&conn) == c->ready, "%s (step %zu): ready %d", c->name, step, cbl_ws_proto.ready(&conn));
  CHECK(th.res.counts.completed == c->completed, "%s (step %zu): %llu echoes, expected %llu", c->name, step,
        (unsigned long long)th.res.counts.completed, (unsigned long long)c->completed);
  uint64_t counted = 0;
  for (int s = 0; s < CBL_MAX_STATUS; s++) counted += th.res.counts.status[s];
  CHECK(counted == (c->status ? 1u : 0u) && (!c->status || th.res.counts.status[c->status] == 1),
        "%s (step %zu): %llu statuses counted, expected %d once", c->name, step, (unsigned long long)counted,
        c->status);
  conn_close();
}

/* A server that sends 100 Continue forever: the interim answers count toward the head's bound, so the upgrade
 * fails once more than CBL_MAX_HEAD bytes came before a 101, at the read that passes it, not later. */
static void endless_continue(void) {
  conn.head = 0;
  conn.inflight = 1;
  conn.out.len = 0;
  memset(&th.res.counts, 0, sizeof th.res.counts);
  conn.p = cbl_ws_proto.create(&conn);
  if (!conn.p) abort();
  int rc = cbl_ws_proto.open(&conn);
  size_t fed = 0, one = sizeof CONTINUE - 1;
  while (rc == 0 && fed <= 2 * CBL_MAX_HEAD) {
    rc = cbl_ws_proto.read(&conn, CONTINUE, one);
    fed += one;
  }
  size_t expect = (CBL_MAX_HEAD / one + 1) * one;
  CHECK(rc == CBL_FAIL(CBL_ERR_UPGRADE) && fed == expect, "endless 100s: rc %d after %zu bytes, expected %d after %zu",
        rc, fed, CBL_FAIL(CBL_ERR_UPGRADE), expect);
  conn_close();
}

/* The pong waits while CBL_OUT_HIGH bytes wait for the socket, answers only the latest ping once they are gone,
 * and a message sent is one masked text frame. */
static void pong_held(void) {
  char out[512];
  conn_open(1);
  static char fill[CBL_OUT_HIGH];
  CHECK(cbl_conn_write(&conn, fill, sizeof fill) == 0, "fill");
  CHECK(cbl_ws_proto.read(&conn, B("\x89\x01" "a")) == 0, "ping a");
  CHECK(cbl_ws_proto.flush(&conn) == 0, "flush");
  CHECK(conn.out.len == CBL_OUT_HIGH, "pong queued above the mark: %zu bytes", conn.out.len);
  CHECK(cbl_ws_proto.read(&conn, B("\x89\x01" "b")) == 0, "ping b");
  CHECK(cbl_ws_proto.flush(&conn) == 0, "flush");
  CHECK(conn.out.len == CBL_OUT_HIGH, "pong queued above the mark: %zu bytes", conn.out.len);
  conn.out.len = 0; /* the socket took it */
  CHECK(cbl_ws_proto.flush(&conn) == 0, "flush");
  CHECK(cbl_ws_proto.flush(&conn) == 0, "flush again");
  written(out, sizeof out);
  CHECK(strcmp(out, "a:b;") == 0, "wrote \"%s\", expected one pong for the latest ping", out);
  conn.out.len = 0;
  CHECK(cbl_ws_proto.send(&conn, &reqs[0]) == 0, "send");
  CHECK(cbl_ws_proto.flush(&conn) == 0, "flush");
  CHECK(conn.out.len == 2 + 4 + sizeof MSG - 1, "a message of %zu bytes", conn.out.len);
  if (conn.out.len == 2 + 4 + sizeof MSG - 1) {
    const uint8_t *p = (const uint8_t *)conn.out.p;
    char got[sizeof MSG] = {0};
    for (size_t i = 0; i < sizeof MSG - 1; i++) got[i] = (char)(p[6 + i] ^ p[2 + i % 4]);
    CHECK(p[0] == 0x81 && p[1] == (0x80 | (sizeof MSG - 1)) && strcmp(got, MSG) == 0, "text frame %02x %02x %s",
          p[0], p[1], got);
  }
  conn_close();
}

int main(void) {
  setup();
  size_t ncases = sizeof cases / sizeof cases[0];
  for (size_t i = 0; i < ncases; i++) {
    run_case(&cases[i], 0);
    run_case(&cases[i], 1);
    run_case(&cases[i], 3);
  }
  size_t nhs = sizeof hs_cases / sizeof hs_cases[0];
  for (size_t i = 0; i < nhs; i++) {
    run_hs_case(&hs_cases[i], 0);
    run_hs_case(&hs_cases[i], 1);
    run_hs_case(&hs_cases[i], 3);
  }
  endless_continue();
  pong_held();
  free(conn.out.p);
  cbl_result_free(&th.res);
  if (failures) {
    fprintf(stderr, "test_ws: %d failures\n", failures);
    return 1;
  }
  printf("test_ws: %zu cases and %zu handshakes, each read whole, by 1 and by 3 bytes, the endless 100s and the held "
         "pong: ok\n", ncases, nhs);
  return 0;
}
