/* HTTP/1.1 findings of an audit of http1.c and the fixture routes (request framing, the fixture handlers): each
 * test failed before its fix. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"

/* ---- an empty Transfer-Encoding ----
 * llhttp sets none of its transfer-encoding flags for a field whose value is empty (or only whitespace), so such
 * a request was framed as if the field were not there: by its Content-Length, or as bodiless. RFC 9112 6.3 says
 * that a request whose Transfer-Encoding does not end with chunked cannot be framed reliably and MUST get a 400
 * and a close; beside a Content-Length that is the disagreement request smuggling is made of (a front end that
 * honours the field reads the bytes after the head differently). Empty list elements beside a chunked coding
 * (two fields, `chunked` and an empty one) are ignored as RFC 9110 5.6.1 asks: still chunked. */
TEST(h1_audit_empty_transfer_encoding) {
  cb_config_t cfg;
  test_config(&cfg);
  cb_server_t *srv = test_start(&cfg);
  int port = cb_server_port(srv);
  EXPECT_ERROR(port, "POST /echo HTTP/1.1\r\nhost: x\r\ntransfer-encoding: \r\ncontent-length: 3\r\n\r\nabc", 400);
  EXPECT_ERROR(port, "POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 3\r\ntransfer-encoding:\r\n\r\nabc", 400);
  EXPECT_ERROR(port, "POST /echo HTTP/1.1\r\nhost: x\r\ntransfer-encoding:  \t \r\n\r\n", 400);
  EXPECT_ERROR(port, "GET /hello HTTP/1.1\r\nhost: x\r\nTransfer-Encoding:\r\n\r\n", 400);
  EXPECT_ERROR(port, "POST /echo HTTP/1.0\r\nTRANSFER-ENCODING: \r\ncontent-length: 3\r\n\r\nabc", 400);

  /* With chunked in another field the codings still end with it: read as chunked, the connection goes on. */
  buf_t exp = {0};
  exp_head(&exp, 200, "application/octet-stream", NULL, 3, CONN_NONE);
  buf_adds(&exp, "abc");
  int fd = cl_connect(port);
  ROUNDTRIP_S(fd,
              "POST /echo HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\ntransfer-encoding: \r\n\r\n"
              "3\r\nabc\r\n0\r\n\r\n",
              &exp);
  ROUNDTRIP_S(fd,
              "POST /echo HTTP/1.1\r\nhost: x\r\ntransfer-encoding:\r\ntransfer-encoding: chunked\r\n\r\n"
              "3\r\nabc\r\n0\r\n\r\n",
              &exp);
  /* A field named like it but longer or shorter is no transfer-encoding. */
  buf_reset(&exp);
  exp_route(&exp, "GET", "/hello", CONN_NONE);
  ROUNDTRIP_S(fd, "GET /hello HTTP/1.1\r\nhost: x\r\ntransfer-encodings:\r\ntransfer-encodin:\r\n\r\n", &exp);
  EXPECT_QUIET(fd, 100);
  close(fd);
  buf_free(&exp);
  test_stop(srv);
}

