/* A minimal raw HTTP/2 client for the h2c tests (test_h2.c): frames are encoded and decoded here, byte by
 * byte, so a test can send anything (malformed frames included) and see every frame the server sends. Header
 * blocks are built and read with nghttp2's HPACK deflater and inflater (the system library), nothing else of
 * nghttp2 is used: the client does not enforce the protocol, the tests do.
 *
 * One client is one blocking socket. Frames are read with h2_next() (one frame, processed) or h2_run() (until a
 * condition holds); processing answers SETTINGS and PING (unless told not to), records GOAWAY and RST_STREAM,
 * and collects the responses of the streams registered with h2_request() / h2_stream(). */
#ifndef CBT_H2CLIENT_H
#define CBT_H2CLIENT_H

#include <nghttp2/nghttp2.h>
#include <stddef.h>
#include <stdint.h>

#include "common.h"

#define H2_PREFACE "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
#define H2_PREFACE_LEN 24
#define H2_NO_RST 0xffffffffu
#define H2_MAX_STREAMS 16384 /* stream ids 1..2*H2_MAX_STREAMS-1 can be registered */
#define H2_WINDOW_MAX 0x7fffffff

/* What a stream received. */
typedef struct {
  int32_t sid;
  int status;    /* :status of the last HEADERS block, 0 before */
  buf_t head;    /* the decoded header fields, ":status: 200\r\ndate: ...\r\n...", in the order received */
  buf_t body;    /* the DATA payloads (padding removed) */
  int ended;     /* END_STREAM received */
  uint32_t rst;  /* the RST_STREAM error code, H2_NO_RST when none */
  int nheaders;  /* header blocks received (1 for a response, 2 with trailers) */
  int ndata;     /* DATA frames received */
  int end_seq;   /* 1 for the first stream of the connection to end (END_STREAM), 2 for the next, ... */
  int64_t window; /* what we may still send on the stream: the server's initial window plus its updates */
} h2resp_t;

/* One frame as read: the payload points into the client's input buffer until the next read. */
typedef struct {
  uint32_t len;
  uint8_t type, flags;
  int32_t sid;
  const uint8_t *p;
} h2frame_t;

typedef struct {
  int fd;
  int port;
  buf_t in;
  size_t off;           /* start of the unread input in `in` */
  nghttp2_hd_deflater *def;
  nghttp2_hd_inflater *inf;
  /* A header block being collected across HEADERS and CONTINUATION frames. */
  buf_t block;
  int32_t block_sid;
  int block_end_stream;
  /* What the server sent on the connection. */
  int settings;         /* SETTINGS frames received (without ACK) */
  int settings_acks;    /* ACKs of our SETTINGS */
  uint32_t srv_max_streams, srv_initial_window, srv_max_frame, srv_max_header_list;
  uint32_t srv_no_rfc7540_priorities;
  uint32_t srv_header_table; /* the server's SETTINGS_HEADER_TABLE_SIZE (4096 until it says): our encoder's bound */
  int goaway;           /* GOAWAY frames received */
  uint32_t goaway_code;
  int32_t goaway_last;
  int pings;            /* PING ACKs received */
  uint8_t ping_data[8]; /* opaque data of the last PING ACK */
  int unexpected;       /* frames of types the client does not know */
  int no_auto_ack;      /* set: SETTINGS and PING are not answered */
  int closed;           /* CL_EOF or CL_RESET seen */
  int64_t conn_window;  /* what we may still send on the connection */
  uint64_t frames;      /* frames read */
  uint64_t data_bytes;  /* DATA payload bytes read */
  int ends;             /* streams ended so far */
  h2resp_t *streams[H2_MAX_STREAMS];
} h2cl_t;

/* Connects to 127.0.0.1:port (no byte sent). */
void h2_connect(h2cl_t *cl, int port);
/* The same on the heap (the client holds a table of H2_MAX_STREAMS pointers); h2_free() closes and frees. */
h2cl_t *h2_open(int port);
void h2_free(h2cl_t *cl);
/* Frees what was kept of a finished stream (long runs of streams keep the client's memory flat). */
void h2_forget(h2cl_t *cl, int32_t sid);
/* Takes over a connected socket (after an HTTP/1.1 101 Switching Protocols); `already` holds bytes read after
 * the 101 that belong to HTTP/2. */
void h2_adopt(h2cl_t *cl, int fd, int port, const void *already, size_t len);
/* Sends the preface, our SETTINGS (push off, initial window 2^31-1: flow control never holds the server back)
 * and a connection WINDOW_UPDATE to 2^31-1. */
void h2_start(h2cl_t *cl);
/* h2_start() plus reading until the server's SETTINGS arrived (answered with an ACK). */
void h2_handshake(h2cl_t *cl);
/* Frees the responses, the HPACK state, closes the socket. */
void h2_close(h2cl_t *cl);

/* Like h2_handshake(), with the test's own SETTINGS and windows: the preface, one SETTINGS frame holding
 * SETTINGS_ENABLE_PUSH 0 and then iv (n entries, at most 15, sent as given), a connection WINDOW_UPDATE of
 * conn_increment unless it is 0 (the connection window stays 65535 then), and reading until the server's
 * SETTINGS arrived. The flow-control tests (test_h2_edge.c) hold the server back with these. */
void h2_handshake_with(h2cl_t *cl, const nghttp2_settings_entry *iv, size_t n, uint32_t conn_increment);
/* Sends a PING with data of its own and reads until its ACK: every frame the server sent before it has then been
 * read and processed (a PING ACK is not held back by flow control). Returns CL_OK, or how the wait ended
 * (CL_EOF, CL_RESET, CL_TIMEOUT; a GOAWAY alone does not end it). */
int h2_sync(h2cl_t *cl, int timeout_ms);

/* Encodes a frame header. */
void h2_frame_hd(uint8_t out[9], uint32_t len, uint8_t type, uint8_t flags, int32_t sid);
/* Sends one frame; asserts the send succeeded. */
void h2_send_frame(h2cl_t *cl, uint8_t type, uint8_t flags, int32_t sid, const void *payload, size_t len);
/* Sends bytes; returns 0, or -1 when the server has closed or reset the connection (for floods). */
int h2_send_raw(h2cl_t *cl, const void *data, size_t len);
void h2_send_settings(h2cl_t *cl, const nghttp2_settings_entry *iv, size_t n);
void h2_send_window_update(h2cl_t *cl, int32_t sid, uint32_t increment);
void h2_send_ping(h2cl_t *cl, const uint8_t data[8]);
void h2_send_rst(h2cl_t *cl, int32_t sid, uint32_t code);

/* HPACK-encodes a header list ("name", "value" pairs) into out with the client's deflater. */
void h2_encode(h2cl_t *cl, const nghttp2_nv *nv, size_t n, buf_t *out);
/* Builds the request header list: :method, :scheme http, :authority 127.0.0.1:port, :path, then `extra`
 * (nextra name/value pairs, NULL-free) and encodes it. */
void h2_encode_request(h2cl_t *cl, const char *method, const char *path, const char *const *extra, size_t nextra,
                       buf_t *out);
/* Registers stream sid so that its frames are collected; returns its record. */
h2resp_t *h2_stream(h2cl_t *cl, int32_t sid);
/* Sends a request on stream sid: HEADERS (END_STREAM when body is NULL), then the body as DATA frames of at
 * most 16384 bytes, the last with END_STREAM (an empty body: one empty DATA frame). Waits for window when the
 * body is larger than what the server allows. Returns the stream's record. */
h2resp_t *h2_request(h2cl_t *cl, int32_t sid, const char *method, const char *path, const char *const *extra,
                     size_t nextra, const void *body, size_t body_len);
/* Sends DATA on sid in frames of at most 16384 bytes, END_STREAM on the last when end is set; waits for the
 * server's WINDOW_UPDATEs (connection and stream) when its windows are used up. */
void h2_send_body(h2cl_t *cl, int32_t sid, const void *body, size_t len, int end);

/* Reads and processes one frame. Returns CL_OK, CL_EOF, CL_RESET or CL_TIMEOUT. */
int h2_next(h2cl_t *cl, h2frame_t *f, int timeout_ms);
/* Reads frames until pred(cl, arg) holds (CL_OK), or the connection ends or the time runs out. */
int h2_run(h2cl_t *cl, int (*pred)(h2cl_t *, const void *), const void *arg, int timeout_ms);
/* Reads until every listed stream ended or was reset; asserts it happened. */
void h2_wait(h2cl_t *cl, h2resp_t *const *rs, size_t n, int timeout_ms);
void h2_wait1(h2cl_t *cl, h2resp_t *r, int timeout_ms);
/* Reads until a GOAWAY arrives or the connection ends; returns CL_OK when a GOAWAY arrived. */
int h2_wait_goaway(h2cl_t *cl, int timeout_ms);
/* Reads until the server closes; returns CL_EOF, CL_RESET or CL_TIMEOUT. */
int h2_wait_closed(h2cl_t *cl, int timeout_ms);

/* The expected HTTP/2 form of an HTTP/1.1 response written by common.c (exp_route, exp_head): ":status: N"
 * first, the same header lines without transfer-encoding and connection, and the body de-chunked
 * (docs/wire.md: the same fields in the same order after :status). */
void h2_expect_from_h1(const buf_t *h1, buf_t *head, buf_t *body);
/* Asserts that r ended without a reset and that its masked head and its body are exactly these. */
void h2_assert_resp(h2resp_t *r, const buf_t *head, const buf_t *body, const char *what);
/* Asserts that r is exactly exp_route(method, path) in HTTP/2 form. */
void h2_assert_route(h2resp_t *r, const char *method, const char *path);

/* A fresh prior-knowledge connection to port gets GET /hello right (the server is still well). */
void h2_check_hello(int port);

/* Names of error codes and frame types for messages. */
const char *h2_err_name(uint32_t code);

#endif
