/* Parking an idle HTTP/2 session: what is kept, and the session made again from it (h2_park.h). */
#include <string.h>
#include <uv.h>

#include "proto/h2_park.h"

#define DEFAULT_WINDOW 65535 /* a new connection's windows, both ways (RFC 9113 6.9.2) */

/* The settings a peer may have changed, with the value a new session assumes until it does. nghttp2 answers
 * UINT32_MAX for NO_RFC7540_PRIORITIES never received. */
static const struct {
  int32_t id;
  uint32_t dflt;
} peer_settings[CB__H2_PARK_SETTINGS] = {
    {NGHTTP2_SETTINGS_HEADER_TABLE_SIZE, 4096},        {NGHTTP2_SETTINGS_ENABLE_PUSH, 1},
    {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, UINT32_MAX}, {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, DEFAULT_WINDOW},
    {NGHTTP2_SETTINGS_MAX_FRAME_SIZE, 16384},          {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, UINT32_MAX},
    {NGHTTP2_SETTINGS_ENABLE_CONNECT_PROTOCOL, 0},     {NGHTTP2_SETTINGS_NO_RFC7540_PRIORITIES, UINT32_MAX},
};

int cb__h2_park_save(cb__h2_park_t *pk, nghttp2_session *s, int32_t last_sid) {
  memset(pk, 0, sizeof *pk);
  pk->last_sid = last_sid > 0 ? last_sid : 0;
  for (int i = 0; i < CB__H2_PARK_SETTINGS; i++) {
    uint32_t v = nghttp2_session_get_remote_settings(s, (nghttp2_settings_id)peer_settings[i].id);
    if (v != peer_settings[i].dflt) pk->peer[pk->npeer++] = (nghttp2_settings_entry){peer_settings[i].id, v};
  }
  pk->send_window = nghttp2_session_get_remote_window_size(s);
  pk->recv_window = nghttp2_session_get_local_window_size(s);
  pk->recv_full = nghttp2_session_get_effective_local_window_size(s);
  uint32_t stream_window = nghttp2_session_get_remote_settings(s, NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE);
  if (pk->send_window < 0 || pk->recv_window < 0 ||
      (pk->send_window < DEFAULT_WINDOW &&
       (pk->last_sid == 0 || (uint32_t)(DEFAULT_WINDOW - pk->send_window) > stream_window)))
    return UV_EBUSY;
  return 0;
}

/* ---- the restore: frames the peer never sent, answers it never gets ---- */

static size_t frame_head(uint8_t *p, uint32_t len, uint8_t type, uint8_t flags, int32_t sid) {
  p[0] = (uint8_t)(len >> 16);
  p[1] = (uint8_t)(len >> 8);
  p[2] = (uint8_t)len;
  p[3] = type;
  p[4] = flags;
  p[5] = (uint8_t)((uint32_t)sid >> 24 & 0x7f);
  p[6] = (uint8_t)(sid >> 16);
  p[7] = (uint8_t)(sid >> 8);
  p[8] = (uint8_t)sid;
  return 9;
}

static size_t put32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24);
  p[1] = (uint8_t)(v >> 16);
  p[2] = (uint8_t)(v >> 8);
  p[3] = (uint8_t)v;
  return 4;
}

/* Everything the session would write goes nowhere: the peer has it already (or, for the deficit stream's
 * answer, must never see it). */
static int drain(nghttp2_session *s) {
  const uint8_t *out;
  ssize_t n;
  while ((n = nghttp2_session_mem_send(s, &out)) > 0) {
  }
  return n < 0 ? UV_EPROTO : 0;
}

static int feed(nghttp2_session *s, const uint8_t *in, size_t n) {
  return nghttp2_session_mem_recv(s, in, n) == (ssize_t)n ? 0 : UV_EPROTO;
}

/* The deficit stream's body: zeros, as many as the window deficit (source.ptr: the bytes left). */
static ssize_t zeros(nghttp2_session *s, int32_t sid, uint8_t *buf, size_t length, uint32_t *flags,
                     nghttp2_data_source *src, void *ud) {
  (void)s;
  (void)sid;
  (void)ud;
  size_t *left = src->ptr;
  size_t n = length < *left ? length : *left;
  memset(buf, 0, n);
  *left -= n;
  if (*left == 0) *flags |= NGHTTP2_DATA_FLAG_EOF;
  return (ssize_t)n;
}

int cb__h2_park_restore(const cb__h2_park_t *pk, nghttp2_session *s, const nghttp2_settings_entry *ours,
                        size_t nours) {
  static const uint8_t magic[24] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
  /* A request that indexes nothing (GET, http, / from the static table; :authority "x" without indexing). */
  static const uint8_t request_block[] = {0x82, 0x86, 0x84, 0x01, 0x01, 'x'};
  uint8_t in[24 + 9 + 6 * CB__H2_PARK_SETTINGS + 9 + sizeof request_block];
  size_t n = 0;
  if (nghttp2_submit_settings(s, NGHTTP2_FLAG_NONE, ours, nours) != 0 ||
      nghttp2_session_set_local_window_size(s, NGHTTP2_FLAG_NONE, 0, pk->recv_window) != 0)
    return UV_EPROTO;
  memcpy(in, magic, sizeof magic);
  n += sizeof magic;
  n += frame_head(in + n, 6u * pk->npeer, NGHTTP2_SETTINGS, NGHTTP2_FLAG_NONE, 0);
  for (int i = 0; i < pk->npeer; i++) {
    in[n++] = (uint8_t)(pk->peer[i].settings_id >> 8);
    in[n++] = (uint8_t)pk->peer[i].settings_id;
    n += put32(in + n, pk->peer[i].value);
  }
  /* The peer's last stream, opened again and answered: the new session then takes the streams below it for
   * closed ones (a late WINDOW_UPDATE or RST_STREAM on one is ignored, as the parked session ignored it, not a
   * frame on an idle stream). The answer spends our data the peer has not yet made room for (the answer is
   * dropped), so that the new session's window for our data is the peer's. */
  size_t deficit = pk->send_window < DEFAULT_WINDOW ? (size_t)(DEFAULT_WINDOW - pk->send_window) : 0;
  if (pk->last_sid > 0) {
    n += frame_head(in + n, sizeof request_block, NGHTTP2_HEADERS,
                    NGHTTP2_FLAG_END_STREAM | NGHTTP2_FLAG_END_HEADERS, pk->last_sid);
    memcpy(in + n, request_block, sizeof request_block);
    n += sizeof request_block;
  }
  int err = feed(s, in, n);
  if (err == 0 && pk->last_sid > 0) {
    static const nghttp2_nv status[] = {{(uint8_t *)":status", (uint8_t *)"200", 7, 3, NGHTTP2_NV_FLAG_NONE}};
    nghttp2_data_provider prd = {.source.ptr = &deficit, .read_callback = zeros};
    if (nghttp2_submit_response(s, pk->last_sid, status, 1, deficit > 0 ? &prd : NULL) != 0) err = UV_EPROTO;
  }
  if (err == 0) err = drain(s);
  if (err == 0 && deficit > 0) err = UV_EPROTO; /* not all of it could be sent */
  /* Our settings acknowledged, and the peer's window for our data opened to what it was. */
  n = frame_head(in, 0, NGHTTP2_SETTINGS, NGHTTP2_FLAG_ACK, 0);
  if (pk->send_window > DEFAULT_WINDOW) {
    n += frame_head(in + n, 4, NGHTTP2_WINDOW_UPDATE, NGHTTP2_FLAG_NONE, 0);
    n += put32(in + n, (uint32_t)(pk->send_window - DEFAULT_WINDOW));
  }
  if (err == 0) err = feed(s, in, n);
  if (err == 0) err = drain(s);
  if (err == 0 && (nghttp2_session_get_remote_window_size(s) != pk->send_window ||
                   nghttp2_session_get_local_window_size(s) != pk->recv_window ||
                   nghttp2_session_get_last_proc_stream_id(s) != pk->last_sid ||
                   (pk->last_sid > 0 && nghttp2_session_find_stream(s, pk->last_sid) != NULL)))
    err = UV_EPROTO;
  if (err == 0 && pk->recv_full > pk->recv_window &&
      nghttp2_session_set_local_window_size(s, NGHTTP2_FLAG_NONE, 0, pk->recv_full) != 0)
    err = UV_EPROTO;
  return err;
}
