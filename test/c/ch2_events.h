/* What the client layer's h2c session tells a stream's owner, written down as one line per run
 * (test_client_h2.c, test_client_h2_edge.c): "head 200 [x-a: 1]|data hel|end|". */
#ifndef CBT_CH2_EVENTS_H
#define CBT_CH2_EVENTS_H

#include <stddef.h>
#include <stdint.h>

#include "client/client.h"

typedef struct {
  char log[4096];
  size_t len;
  int32_t id;
  int consume; /* give DATA back at once */
  cb_ch2_t *c;
  size_t body_left; /* request body still to give ('b' bytes) */
  int body_wait;    /* none waiting now */
} sx_t;

/* Appends to the stream's line (fails the test when full). */
void sx_log(sx_t *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Callbacks that log every event of a stream whose sud is its sx_t. */
extern const cb_ch2_callbacks_t sx_callbacks;
/* A frame's 9-byte header then len bytes of p at o: its length. */
size_t ch2_frame(uint8_t *o, uint8_t type, uint8_t flags, int32_t sid, const void *p, size_t len);
/* Everything the session has to write now, at most cap bytes (more fails the test). */
size_t ch2_pull_all(cb_ch2_t *c, uint8_t *out, size_t cap);

#endif
