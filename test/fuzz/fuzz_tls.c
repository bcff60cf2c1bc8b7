/* libFuzzer target: the TLS transport's glue (src/transport/tls.c, tls_fault.c) under a real connection.
 *
 * A test connection (src/testing.h, cb__testconn_new_tls) runs the whole stack, TLS transport, detection,
 * HTTP/1.1 or HTTP/2, the routes, on one end of a socketpair, polled by its worker's loop; the fuzzer holds the
 * other end and plays a real OpenSSL client on memory BIOs, so every input starts a real handshake (fresh keys)
 * and the bytes are delivered as the input says:
 *   byte 0, bits 0-2  the SNI name: none, localhost, tls-stall, tls-reset, alpn-none, tls-slow, expired,
 *                     weak-key (the bad-certificate and fault identities);
 *           bits 3-4  ALPN offered: none, h2, http/1.1, both;
 *           bit 5     TLS 1.2 at most (else 1.2 or 1.3);
 *           bit 6     the client closes its side (FIN) at the end;
 *           bit 7     raw: no client; the rest of the input is the peer's bytes as they are (ClientHellos,
 *                     records and alerts from the corpus, mutated);
 *   byte 1            how the client's bytes are split: each flight in pieces of 1 + (byte 1 % 64) bytes (every
 *                     split point is some input's), the loop run after each piece;
 *   byte 2            an injection: 0 none; else at client flight (byte 2 % 4) (0: after the handshake) the
 *                     alert of bytes 3 and 4 (level, description) goes as a plaintext record before the flight,
 *                     or, when byte 2 >= 128, instead of it;
 *   the rest          application data the client sends once its handshake is done (requests: the corpus has
 *                     /hello, /fault/tls_bad_record, /fault/tls_truncate, h2 prefaces), in the same pieces.
 * The server's answers are read back into the client, so handshakes complete; the loop is never run until idle
 * (a paced flight's timer, a header timeout would wait). The connection is then freed with whatever is pending,
 * and cb__testconn_free() must report a clean loop; ASan and LeakSanitizer check the rest.
 *
 * Build and run: make fuzz-tls (FUZZ_SECONDS=N); seeds in test/fuzz/corpus/tls. */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "engine.h"
#include "fuzz_common.h"
#include "testing.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int debug; /* FUZZ_TLS_DEBUG=1: what each input did, on stderr (to check that the seeds reach the server) */
static cb__certs_t *certs;
static cb__tls_ctx_t *server_ctx;
static SSL_CTX *client_ctx[2]; /* [1]: TLS 1.2 at most */

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  debug = getenv("FUZZ_TLS_DEBUG") != NULL;
  /* The server writes its socket with write(2), as a server's worker does (cbench-server and the BEAM ignore
   * SIGPIPE too): a client end closed first must not end the run. */
  signal(SIGPIPE, SIG_IGN);
  if (cb__certs_new(NULL, &certs) != 0 || cb__tls_ctx_new(certs, 1, 1, &server_ctx) != 0) abort();
  for (int i = 0; i < 2; i++) {
    client_ctx[i] = SSL_CTX_new(TLS_client_method());
    if (client_ctx[i] == NULL) abort();
    SSL_CTX_set_verify(client_ctx[i], SSL_VERIFY_NONE, NULL);
    SSL_CTX_set_security_level(client_ctx[i], 0); /* the weak-key leaf is served, not refused */
    if (i == 1) SSL_CTX_set_max_proto_version(client_ctx[i], TLS1_2_VERSION);
  }
  return 0;
}

static const char *const snis[8] = {NULL,
                                    "localhost",
                                    "tls-stall.localhost",
                                    "tls-reset.localhost",
                                    "alpn-none.localhost",
                                    "tls-slow.localhost",
                                    "expired.localhost",
                                    "weak-key.localhost"};
static const struct {
  const char *p;
  unsigned n;
} alpns[4] = {{NULL, 0}, {"\x02h2", 3}, {"\x08http/1.1", 9}, {"\x02h2\x08http/1.1", 12}};

typedef struct {
  cb__testconn_t *tc;
  int fd;      /* the client's end */
  size_t step; /* piece size */
  int open;    /* the server has not closed */
} run_t;

/* Delivers p[0..n) in pieces, running the loop after each; stops once the server has closed, or when its socket
 * stays full (a server that does not read while it cannot write). */
static void deliver(run_t *r, const uint8_t *p, size_t n) {
  int stuck = 0;
  for (size_t off = 0; off < n && r->open && stuck < 64;) {
    size_t k = n - off < r->step ? n - off : r->step;
    ssize_t s = send(r->fd, p + off, k, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (s > 0)
      off += (size_t)s;
    else
      stuck++;
    if (cb__testconn_run(r->tc, 0) != 0) r->open = 0;
  }
}

/* What the server wrote, into the client's read BIO (or dropped without a client). */
static size_t collect(run_t *r, BIO *cin) {
  char tmp[16384];
  size_t total = 0;
  for (;;) {
    ssize_t n = recv(r->fd, tmp, sizeof tmp, MSG_DONTWAIT);
    if (n <= 0) return total;
    sink(NULL, tmp, (size_t)n);
    if (cin != NULL) BIO_write(cin, tmp, (int)n);
    total += (size_t)n;
  }
}

static void inject(run_t *r, const uint8_t *ctl) {
  uint8_t alert[7] = {0x15, 0x03, 0x03, 0x00, 0x02, ctl[3], ctl[4]};
  deliver(r, alert, sizeof alert);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 5) return 0;
  const uint8_t *ctl = data;
  data += 5;
  size -= 5;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0) abort();
  cb_config_t cfg;
  cb_config_init(&cfg);
  cfg.fixture_dir = fixture_dir();
  cfg.header_timeout_ms = 1000;
  cfg.idle_timeout_ms = 1000;
  cfg.journal = 8;
  run_t r = {.fd = sv[1], .step = 1 + ctl[1] % 64, .open = 1};
  r.tc = cb__testconn_new_tls(&cfg, sv[0], server_ctx);
  if (r.tc == NULL) abort();

  if (ctl[0] & 0x80) { /* raw bytes, no client */
    deliver(&r, data, size);
    collect(&r, NULL);
  } else {
    SSL *ssl = SSL_new(client_ctx[(ctl[0] >> 5) & 1]);
    BIO *cin = BIO_new(BIO_s_mem()), *cout = BIO_new(BIO_s_mem());
    if (ssl == NULL || cin == NULL || cout == NULL) abort();
    SSL_set_bio(ssl, cin, cout);
    SSL_set_connect_state(ssl);
    const char *sni = snis[ctl[0] & 7];
    if (sni != NULL) SSL_set_tlsext_host_name(ssl, sni);
    if (alpns[(ctl[0] >> 3) & 3].p != NULL)
      SSL_set_alpn_protos(ssl, (const unsigned char *)alpns[(ctl[0] >> 3) & 3].p, alpns[(ctl[0] >> 3) & 3].n);
    unsigned inject_at = ctl[2] ? ctl[2] % 4 : 99, flight = 1;
    int done = 0, sent_app = 0;
    char rd[16384];
    for (int round = 0; round < 16 && r.open; round++) {
      ERR_clear_error();
      if (!done) done = SSL_do_handshake(ssl) == 1;
      if (done && !sent_app) {
        if (size > 0) SSL_write(ssl, data, (int)size);
        sent_app = 1;
      }
      char *p;
      long n = BIO_get_mem_data(cout, &p);
      int at_step = (n > 0 && flight == inject_at) || (done && sent_app && inject_at == 0);
      if (at_step) {
        inject(&r, ctl);
        inject_at = 99;
      }
      if (n > 0 && !(at_step && ctl[2] >= 128)) deliver(&r, (const uint8_t *)p, (size_t)n);
      if (n > 0) flight++;
      (void)BIO_reset(cout);
      size_t got = collect(&r, cin);
      int k;
      while ((k = SSL_read(ssl, rd, sizeof rd)) > 0)
        if (debug) fprintf(stderr, "fuzz_tls: plaintext %d bytes: %.*s\n", k, k < 80 ? k : 80, rd);
      if (n <= 0 && got == 0) break; /* nothing moved either way */
    }
    if (debug) {
      const unsigned char *sel;
      unsigned sel_len;
      SSL_get0_alpn_selected(ssl, &sel, &sel_len);
      fprintf(stderr, "fuzz_tls: sni %s, handshake %s (%s, alpn %.*s), %s\n", sni ? sni : "-",
              done ? "done" : "not done", SSL_get_version(ssl), (int)sel_len, (const char *)sel,
              r.open ? "open" : "closed by the server");
    }
    SSL_free(ssl);
  }
  if (ctl[0] & 0x40) {
    shutdown(sv[1], SHUT_WR);
    cb__testconn_run(r.tc, 0);
    collect(&r, NULL);
  }
  close(sv[1]);
  cb__testconn_run(r.tc, 0);
  if (cb__testconn_free(r.tc) != 0) {
    fprintf(stderr, "cb__testconn_free: the loop did not close cleanly\n");
    abort();
  }
  return 0;
}
