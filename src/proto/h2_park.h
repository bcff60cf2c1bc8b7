/* Parking an idle HTTP/2 session (issue 24, docs/tls.md "Idle connections"): what a connection keeps of its
 * nghttp2 session while no stream is open, and the session made again from it when the peer speaks next.
 *
 * nghttp2 cannot save a session, and an idle one holds about 6 KiB (its own state, the HPACK tables and their
 * entries). What a new session must agree on with the peer is small: the peer's settings, the two connection
 * windows, our settings (the configuration's, so not kept) and the HPACK tables. The decoder's table is empty
 * by then (http2.c has asked the peer for a 0-byte table and had it acknowledged, or the peer indexed nothing);
 * the encoder's need not be: a new encoder inserts its entries where the peer inserts them, at the front of
 * the peer's table, and never refers to the older ones behind them. */
#ifndef CB_PROTO_H2_PARK_H
#define CB_PROTO_H2_PARK_H

#include <nghttp2/nghttp2.h>
#include <stdint.h>

#define CB__H2_PARK_SETTINGS 8

typedef struct {
  nghttp2_settings_entry peer[CB__H2_PARK_SETTINGS]; /* the peer's settings that differ from the defaults */
  uint8_t npeer;
  int32_t send_window; /* what we may still send on the connection (the peer's receive window) */
  int32_t recv_window; /* what the peer may still send us */
  int32_t recv_full;   /* the window we advertised: what the peer may send once what it sent is given back */
  int32_t last_sid;    /* the highest stream the peer opened (0: none) */
} cb__h2_park_t;

/* Saves what s needs to be made again; last_sid: the highest stream id the peer opened (0: none). UV_EBUSY
 * when it cannot be: the peer's window for our data is lower than a new session's by more than one stream's
 * initial window (the new session spends the difference on a stream of its own). */
int cb__h2_park_save(cb__h2_park_t *pk, nghttp2_session *s, int32_t last_sid);

/* Brings a new server session s (user data NULL, so that the caller's callbacks ignore what happens here) to
 * the saved state: our settings `ours` submitted and taken as acknowledged, the peer's preface and settings
 * fed in, the peer's last stream opened and closed again (so that frames on its older streams are frames on
 * closed streams, not on idle ones), the windows set, everything it would send dropped. Then the data the peer sent since our last
 * WINDOW_UPDATE is given back, by a WINDOW_UPDATE that s sends for real. 0, or UV_EPROTO when the session did
 * not come out as saved (the caller closes the connection). */
int cb__h2_park_restore(const cb__h2_park_t *pk, nghttp2_session *s, const nghttp2_settings_entry *ours,
                        size_t nours);

#endif
