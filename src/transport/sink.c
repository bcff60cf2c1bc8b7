/* The sink transport: a connection without a socket (testing.h, the fuzzers). What the engine writes goes to a
 * function; a stalled sink takes nothing, like a peer that stopped reading. It has no sendfile: the output
 * queue reads file ranges and writes them, the path a TLS transport takes too. */
#include "transport/transport.h"

static ssize_t sink_read(cb__tport_t *t, char *buf, size_t n) {
  (void)t, (void)buf, (void)n;
  return UV_EAGAIN; /* input is fed by the test (cb__conn_input) */
}

static ssize_t sink_write(cb__tport_t *t, const char *p, size_t n) {
  if (t->stalled) return UV_EAGAIN;
  if (t->sink && n > 0) t->sink(t->sink_arg, p, n);
  return (ssize_t)n;
}

static ssize_t sink_writev(cb__tport_t *t, const struct iovec *iov, int n) {
  if (t->stalled) return UV_EAGAIN;
  ssize_t total = 0;
  for (int i = 0; i < n; i++) {
    if (t->sink && iov[i].iov_len > 0) t->sink(t->sink_arg, iov[i].iov_base, iov[i].iov_len);
    total += (ssize_t)iov[i].iov_len;
  }
  return total;
}

static void sink_shutdown(cb__tport_t *t) { (void)t; }

static void sink_close(cb__tport_t *t, int reset) { (void)t, (void)reset; }

static const cb__tport_ops_t sink_ops = {
    .read = sink_read,
    .write = sink_write,
    .writev = sink_writev,
    .sendfile = NULL,
    .shutdown = sink_shutdown,
    .close = sink_close,
};

cb__tport_t cb__tport_sink(cb__sink_fn_t sink, void *arg) {
  return (cb__tport_t){.ops = &sink_ops, .fd = -1, .sink = sink, .sink_arg = arg};
}
