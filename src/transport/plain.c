/* The plain transport: a non-blocking TCP socket, read and written with bare system calls (base.h), file
 * ranges sent with sendfile(2). */
#include <errno.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

#include "transport/transport.h"

/* A failed call: EINTR is retried; anything else (UV_EAGAIN: "not now") is the answer. Out of the way of the
 * calls that succeed (one read and one write per request on a keep-alive connection). */
static __attribute__((noinline)) ssize_t retry(cb__tport_t *t, long nr, char *p, size_t n, ssize_t r) {
  while (r == UV_EINTR) r = cb__sys3(nr, t->fd, (long)p, (long)n);
  return r;
}

static ssize_t plain_read(cb__tport_t *t, char *buf, size_t n) {
  ssize_t r = cb__sys3(SYS_read, t->fd, (long)buf, (long)n);
  return __builtin_expect(r >= 0, 1) ? r : retry(t, SYS_read, buf, n, r);
}

static ssize_t plain_write(cb__tport_t *t, const char *p, size_t n) {
  ssize_t r = cb__sys3(SYS_write, t->fd, (long)p, (long)n);
  return __builtin_expect(r >= 0, 1) ? r : retry(t, SYS_write, (char *)p, n, r);
}

static ssize_t plain_writev(cb__tport_t *t, const struct iovec *iov, int n) {
  ssize_t r;
  do r = writev(t->fd, iov, n);
  while (r < 0 && errno == EINTR);
  return r >= 0 ? r : errno == EAGAIN ? UV_EAGAIN : uv_translate_sys_error(errno);
}

static ssize_t plain_sendfile(cb__tport_t *t, int fd, uint64_t off, size_t n) {
  off_t o = (off_t)off;
  ssize_t r;
  do r = sendfile(t->fd, fd, &o, n);
  while (r < 0 && errno == EINTR);
  if (r == 0 && n > 0) return UV_EIO; /* the file shrank under us */
  return r >= 0 ? r : errno == EAGAIN ? UV_EAGAIN : uv_translate_sys_error(errno);
}

static void plain_shutdown(cb__tport_t *t) { shutdown(t->fd, SHUT_WR); }

static void plain_close(cb__tport_t *t, int reset) {
  if (reset) {
    struct linger lg = {.l_onoff = 1, .l_linger = 0}; /* close(2) then sends RST and drops unsent bytes */
    setsockopt(t->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  }
  close(t->fd);
  t->fd = -1;
}

static const cb__tport_ops_t plain_ops = {
    .read = plain_read,
    .write = plain_write,
    .writev = plain_writev,
    .sendfile = plain_sendfile,
    .shutdown = plain_shutdown,
    .close = plain_close,
};

cb__tport_t cb__tport_plain(int fd) { return (cb__tport_t){.ops = &plain_ops, .fd = fd}; }
