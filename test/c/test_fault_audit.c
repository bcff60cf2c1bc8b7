/* Faults over HTTP/2 against the peer's flow control and acknowledgements (the audit of the fault kinds): the
 * reset, rst_stream and TLS kinds end the answer after exactly `bytes` body bytes whatever the stream window,
 * and the settings fault bounds the SETTINGS a peer leaves unacknowledged. Each test failed before its fix. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>

#include "common.h"
#include "h2client.h"

static void exp_gen(buf_t *b, size_t from, size_t n) {
  for (size_t i = from; i < from + n; i++) {
    char ch = (char)(i % 251);
    buf_add(b, &ch, 1);
  }
}

static cb_server_t *start_one(void) {
  cb_config_t cfg;
  test_config(&cfg);
  return test_start(&cfg);
}

/* Opens an h2c connection whose streams start with a window of `window` bytes (the connection's is large). */
static h2cl_t *open_window(int port, uint32_t window) {
  h2cl_t *cl = h2_open(port);
  nghttp2_settings_entry iv[] = {{NGHTTP2_SETTINGS_ENABLE_PUSH, 0}, {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, window}};
  cl_send(cl->fd, H2_PREFACE, H2_PREFACE_LEN);
  h2_send_settings(cl, iv, 2);
  h2_send_window_update(cl, 0, H2_WINDOW_MAX - 65535);
  return cl;
}

/* Reads frames until the connection ends, the stream is reset or ends, giving back the stream's window for
 * every DATA frame on it until `want` body bytes came (a client that reads at its own pace). Returns how the
 * connection ended, or CL_OK. */
static int read_giving_window(h2cl_t *cl, h2resp_t *r, size_t want) {
  for (;;) {
    h2frame_t f;
    int rc = h2_next(cl, &f, 10000);
    if (rc != CL_OK) return rc;
    if (f.type == 0 && f.sid == r->sid && f.len > 0 && !r->ended && r->body.len < want) {
      /* Raw: a send that meets the server's reset would take the error a read is to see. */
      uint8_t wu[13];
      h2_frame_hd(wu, 4, 8 /* WINDOW_UPDATE */, 0, r->sid);
      wu[9] = (uint8_t)(f.len >> 24), wu[10] = (uint8_t)(f.len >> 16), wu[11] = (uint8_t)(f.len >> 8);
      wu[12] = (uint8_t)f.len;
      (void)h2_send_raw(cl, wu, sizeof wu);
    }
    if (r->ended || r->rst != H2_NO_RST) return CL_OK;
  }
}

TEST(faudit_h2_reset_bytes_window) {
  cb_server_t *srv = start_one();
  int port = cb_server_port(srv);
  h2cl_t *cl = open_window(port, 1000);
  h2resp_t *r = h2_request(cl, 1, "GET", "/fault/reset?bytes=5000&length=10000", NULL, 0, NULL, 0);
  int rc = read_giving_window(cl, r, 5000);
  cbt_log("ended %s, body %zu", cl_status_name(rc), r->body.len);
  buf_t e = {0};
  exp_gen(&e, 0, 5000);
  ASSERT_EQ(rc, CL_RESET);
  ASSERT_EQ(r->status, 200);
  ASSERT_MEM_EQ(r->body.p, r->body.len, e.p, e.len);
  buf_free(&e);
  h2_free(cl);
  test_stop(srv);
}

TEST(faudit_h2_rst_bytes_window) {
  cb_server_t *srv = start_one();
  int port = cb_server_port(srv);
  h2cl_t *cl = open_window(port, 1000);
  h2resp_t *r = h2_request(cl, 1, "GET", "/fault/rst_stream?bytes=5000&length=10000", NULL, 0, NULL, 0);
  int rc = read_giving_window(cl, r, 5000);
  cbt_log("ended %s, body %zu rst %u", cl_status_name(rc), r->body.len, r->rst);
  buf_t e = {0};
  exp_gen(&e, 0, 5000);
  ASSERT_EQ(rc, CL_OK);
  ASSERT_EQ(r->status, 200);
  ASSERT_EQ(r->rst, 2);
  ASSERT_EQ(r->ended, 0);
  ASSERT_MEM_EQ(r->body.p, r->body.len, e.p, e.len);
  buf_free(&e);
  h2_check_hello(port);
  h2_free(cl);
  test_stop(srv);
}

/* A client that never acknowledges SETTINGS asks for the settings fault again and again: nghttp2 keeps every
 * unacknowledged SETTINGS (its values, until the ACK), so each request left about 100 bytes on the connection
 * for good, for a request of a few bytes. At 1,024 unacknowledged the connection ends with
 * GOAWAY(SETTINGS_TIMEOUT) (RFC 9113 6.5.3) instead of sending one more. */
#define SETTINGS_UNACKED_MAX 1024
static int ended_or_goaway(h2cl_t *cl, const void *arg) {
  const h2resp_t *r = arg;
  return r->ended || r->rst != H2_NO_RST || cl->goaway > 0;
}

TEST_T(faudit_h2_settings_unacked_bounded, 60000) {
  cb_server_t *srv = start_one();
  int port = cb_server_port(srv);
  h2cl_t *cl = h2_open(port);
  h2_handshake(cl); /* the server's first SETTINGS, acknowledged */
  cl->no_auto_ack = 1;
  int answered = 0;
  h2resp_t *r = NULL;
  for (int i = 0; i <= SETTINGS_UNACKED_MAX && cl->goaway == 0; i++) {
    int32_t sid = 1 + 2 * i;
    r = h2_request(cl, sid, "GET", "/fault/settings?window=65535&length=0", NULL, 0, NULL, 0);
    ASSERT_EQ(h2_run(cl, ended_or_goaway, r, 10000), CL_OK);
    if (cl->goaway > 0) break;
    ASSERT_EQ(r->status, 200);
    ASSERT_EQ(r->ended, 1);
    answered++;
    h2_forget(cl, sid);
  }
  cbt_log("answered %d, SETTINGS %d, GOAWAY %d (%s)", answered, cl->settings, cl->goaway,
          h2_err_name(cl->goaway_code));
  ASSERT_EQ(answered, SETTINGS_UNACKED_MAX);
  ASSERT_EQ(cl->settings, 1 + SETTINGS_UNACKED_MAX);
  ASSERT_EQ(cl->goaway, 1);
  ASSERT_EQ(cl->goaway_code, NGHTTP2_SETTINGS_TIMEOUT);
  ASSERT_EQ(r->status, 0);
  h2_free(cl);
  h2_check_hello(port);
  test_stop(srv);
}


/* ---- the TLS faults over h2 (ALPN h2): a blocking OpenSSL client that writes and reads raw frames ---- */

typedef struct {
  SSL_CTX *ctx;
  SSL *ssl;
  int fd;
  buf_t in;
} tls_h2_t;

static void tls_h2_open(tls_h2_t *t, cb_server_t *srv) {
  char pem[8192];
  int n = cb_server_tls_ca(srv, pem, sizeof pem);
  ASSERT_GT(n, 0);
  BIO *bio = BIO_new_mem_buf(pem, n);
  X509 *ca = PEM_read_bio_X509(bio, NULL, NULL, NULL);
  BIO_free(bio);
  ASSERT_NOT_NULL(ca);
  memset(t, 0, sizeof *t);
  t->ctx = SSL_CTX_new(TLS_client_method());
  ASSERT_NOT_NULL(t->ctx);
  ASSERT_EQ(X509_STORE_add_cert(SSL_CTX_get_cert_store(t->ctx), ca), 1);
  X509_free(ca);
  SSL_CTX_set_verify(t->ctx, SSL_VERIFY_PEER, NULL);
  t->ssl = SSL_new(t->ctx);
  ASSERT_NOT_NULL(t->ssl);
  ASSERT_EQ(SSL_set1_host(t->ssl, "localhost"), 1);
  ASSERT_EQ(SSL_set_alpn_protos(t->ssl, (const unsigned char *)"\x02h2", 3), 0);
  t->fd = cl_connect(cb_server_port(srv));
  ASSERT_EQ(SSL_set_fd(t->ssl, t->fd), 1);
  ASSERT_EQ(SSL_connect(t->ssl), 1);
  const unsigned char *proto;
  unsigned plen;
  SSL_get0_alpn_selected(t->ssl, &proto, &plen);
  ASSERT_MEM_EQ(proto, plen, "h2", (size_t)2);
}

static void tls_h2_close(tls_h2_t *t) {
  SSL_free(t->ssl);
  SSL_CTX_free(t->ctx);
  close(t->fd);
  buf_free(&t->in);
}

/* Writes one frame; a write the server's end refused is no failure here (it may have gone by then). */
static void tls_h2_frame(tls_h2_t *t, uint8_t type, uint8_t flags, int32_t sid, const void *p, size_t n) {
  buf_t f = {0};
  uint8_t hd[9];
  h2_frame_hd(hd, (uint32_t)n, type, flags, sid);
  buf_add(&f, hd, 9);
  if (n) buf_add(&f, p, n);
  (void)SSL_write(t->ssl, f.p, (int)f.len);
  buf_free(&f);
}

static void u32be(uint8_t *o, uint32_t v) {
  o[0] = (uint8_t)(v >> 24), o[1] = (uint8_t)(v >> 16), o[2] = (uint8_t)(v >> 8), o[3] = (uint8_t)v;
}

/* GET path on stream 1 with a stream window of `window` bytes, given back as DATA comes until `want` bytes
 * came; returns the DATA bytes received on stream 1 (checked against the generated content) before the
 * connection ended, and in *err the reason OpenSSL gives for the end. */
static size_t tls_h2_fetch(tls_h2_t *t, const char *path, uint32_t window, size_t want, int *err) {
  uint8_t st[12] = {0, NGHTTP2_SETTINGS_ENABLE_PUSH, 0, 0, 0, 0, 0, NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE};
  u32be(st + 8, window);
  ASSERT_EQ(SSL_write(t->ssl, H2_PREFACE, H2_PREFACE_LEN), H2_PREFACE_LEN);
  tls_h2_frame(t, NGHTTP2_SETTINGS, 0, 0, st, sizeof st);
  uint8_t wu[4];
  u32be(wu, H2_WINDOW_MAX - 65535);
  tls_h2_frame(t, NGHTTP2_WINDOW_UPDATE, 0, 0, wu, 4);
  nghttp2_hd_deflater *def;
  ASSERT_EQ(nghttp2_hd_deflate_new(&def, 4096), 0);
  nghttp2_nv nv[] = {{(uint8_t *)":method", (uint8_t *)"GET", 7, 3, 0},
                     {(uint8_t *)":scheme", (uint8_t *)"https", 7, 5, 0},
                     {(uint8_t *)":authority", (uint8_t *)"localhost", 10, 9, 0},
                     {(uint8_t *)":path", (uint8_t *)path, 5, strlen(path), 0}};
  uint8_t block[256];
  ssize_t bl = nghttp2_hd_deflate_hd(def, block, sizeof block, nv, 4);
  ASSERT_GT(bl, 0);
  nghttp2_hd_deflate_del(def);
  tls_h2_frame(t, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS | NGHTTP2_FLAG_END_STREAM, 1, block, (size_t)bl);
  size_t got = 0;
  *err = 0;
  for (;;) {
    while (t->in.len >= 9) {
      const uint8_t *f = (const uint8_t *)t->in.p;
      size_t len = (size_t)f[0] << 16 | (size_t)f[1] << 8 | f[2];
      if (t->in.len < 9 + len) break;
      int32_t sid = (int32_t)((uint32_t)(f[5] & 0x7f) << 24 | (uint32_t)f[6] << 16 | (uint32_t)f[7] << 8 | f[8]);
      if (f[3] == NGHTTP2_DATA && sid == 1) {
        for (size_t i = 0; i < len; i++) ASSERT_EQ((uint8_t)f[9 + i], (uint8_t)((got + i) % 251));
        got += len;
        if (len > 0 && got < want) {
          u32be(wu, (uint32_t)len);
          tls_h2_frame(t, NGHTTP2_WINDOW_UPDATE, 0, 1, wu, 4);
        }
      } else if (f[3] == NGHTTP2_SETTINGS && !(f[4] & NGHTTP2_FLAG_ACK)) {
        tls_h2_frame(t, NGHTTP2_SETTINGS, NGHTTP2_FLAG_ACK, 0, NULL, 0);
      }
      memmove(t->in.p, t->in.p + 9 + len, t->in.len - 9 - len);
      t->in.len -= 9 + len;
    }
    char b[16384];
    int k = SSL_read(t->ssl, b, sizeof b);
    if (k <= 0) {
      *err = ERR_GET_REASON(ERR_peek_error());
      ERR_clear_error();
      return got;
    }
    buf_add(&t->in, b, (size_t)k);
  }
}

/* tls_truncate and tls_bad_record over h2 after `bytes` body bytes: the connection ended its TLS way as soon
 * as the output queue was empty, while the bytes past the stream's window still waited for it (1,000 of the
 * 5,000). */
TEST(faudit_h2_tls_fault_bytes_window) {
  cb_config_t cfg;
  test_config(&cfg);
  cfg.tls = 1;
  cb_server_t *srv = test_start(&cfg);
  tls_h2_t t;
  int err;
  tls_h2_open(&t, srv);
  size_t got = tls_h2_fetch(&t, "/fault/tls_truncate?length=10000&bytes=5000", 1000, 5000, &err);
  cbt_log("tls_truncate: %zu bytes, then reason %d", got, err);
  ASSERT_EQ(got, 5000);
  ASSERT_EQ(err, SSL_R_UNEXPECTED_EOF_WHILE_READING);
  tls_h2_close(&t);
  tls_h2_open(&t, srv);
  got = tls_h2_fetch(&t, "/fault/tls_bad_record?length=10000&bytes=5000", 1000, 5000, &err);
  cbt_log("tls_bad_record: %zu bytes, then reason %d", got, err);
  ASSERT_EQ(got, 5000);
  ASSERT_EQ(err, SSL_R_DECRYPTION_FAILED_OR_BAD_RECORD_MAC);
  tls_h2_close(&t);
  test_stop(srv);
}
