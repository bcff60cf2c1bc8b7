/* Faults against HTTP/2 flow control and clients that leave mid-fault (the audit of the fault kinds). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
