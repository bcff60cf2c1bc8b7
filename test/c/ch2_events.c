/* The event log of the h2c session's tests (ch2_events.h). */
#include "ch2_events.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "runner.h"

void sx_log(sx_t *s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(s->log + s->len, sizeof s->log - s->len, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= sizeof s->log - s->len) FAIL("event log full");
  s->len += (size_t)n;
}

static int x_head(void *sud, int status, const cb_chdr_t *f, int n) {
  sx_t *s = sud;
  sx_log(s, "head %d", status);
  for (int i = 0; i < n; i++)
    sx_log(s, " [%.*s: %.*s]", (int)f[i].name_len, f[i].name, (int)f[i].value_len, f[i].value);
  sx_log(s, "|");
  return 0;
}

static int x_data(void *sud, const char *p, size_t n) {
  sx_t *s = sud;
  if (n <= 16)
    sx_log(s, "data %.*s|", (int)n, p);
  else
    sx_log(s, "data %zu|", n);
  if (s->consume) cb_ch2_consume(s->c, s->id, n);
  return 0;
}

static int x_trailers(void *sud, const cb_chdr_t *t, int n) {
  sx_t *s = sud;
  sx_log(s, "trailers");
  for (int i = 0; i < n; i++)
    sx_log(s, " [%.*s: %.*s]", (int)t[i].name_len, t[i].name, (int)t[i].value_len, t[i].value);
  sx_log(s, "|");
  return 0;
}

static void x_end(void *sud) { sx_log(sud, "end|"); }
static void x_close(void *sud, int err) { sx_log(sud, "close %s|", cb_ch2_strerror(err)); }

static ssize_t x_body(void *sud, char *buf, size_t cap, int *eof) {
  sx_t *s = sud;
  if (s->body_wait) return 0;
  size_t n = s->body_left < cap ? s->body_left : cap;
  memset(buf, 'b', n);
  s->body_left -= n;
  if (s->body_left == 0) *eof = 1;
  return (ssize_t)n;
}

const cb_ch2_callbacks_t sx_callbacks = {.on_head = x_head, .on_data = x_data, .on_trailers = x_trailers,
                                         .on_end = x_end, .on_close = x_close, .read_body = x_body};

size_t ch2_frame(uint8_t *o, uint8_t type, uint8_t flags, int32_t sid, const void *p, size_t len) {
  o[0] = (uint8_t)(len >> 16);
  o[1] = (uint8_t)(len >> 8);
  o[2] = (uint8_t)len;
  o[3] = type;
  o[4] = flags;
  o[5] = (uint8_t)(sid >> 24);
  o[6] = (uint8_t)(sid >> 16);
  o[7] = (uint8_t)(sid >> 8);
  o[8] = (uint8_t)sid;
  if (len) memcpy(o + 9, p, len);
  return 9 + len;
}

size_t ch2_pull_all(cb_ch2_t *c, uint8_t *out, size_t cap) {
  size_t n = 0;
  const char *p;
  ssize_t k;
  while ((k = cb_ch2_pull(c, &p)) > 0) {
    ASSERT_LE((size_t)k, cap - n);
    memcpy(out + n, p, (size_t)k);
    n += (size_t)k;
  }
  ASSERT_EQ(k, 0);
  return n;
}
