/* The plain transport: a non-blocking TCP socket, read and written with system calls, file ranges sent with
 * sendfile(2). */
#include <errno.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "transport/transport.h"

/* read(2) and write(2) as bare system calls: glibc's wrappers are cancellation points, which in a threaded
 * process cost about 25 instructions each way per call to arm and disarm (the engine's threads are never
 * cancelled), and its syscall(2) sets errno. On x86-64 Linux the instruction itself: the result, or -errno,
 * which is the UV_E* code of that error. */
#if defined(__x86_64__) && defined(__linux__)
static inline ssize_t sys3(long nr, long a, long b, long c) {
  long ret;
  __asm__ volatile("syscall" : "=a"(ret) : "a"(nr), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
  return ret;
}
#else
static inline ssize_t sys3(long nr, long a, long b, long c) {
  long ret = syscall(nr, a, b, c);
  return ret < 0 ? -errno : ret;
}
#endif

/* A failed call: EINTR is retried; anything else (UV_EAGAIN: "not now") is the answer. Out of the way of the
 * calls that succeed (one read and one write per request on a keep-alive connection). */
static __attribute__((noinline)) ssize_t retry(cb__tport_t *t, long nr, char *p, size_t n, ssize_t r) {
  while (r == UV_EINTR) r = sys3(nr, t->fd, (long)p, (long)n);
  return r;
}

static ssize_t plain_read(cb__tport_t *t, char *buf, size_t n) {
  ssize_t r = sys3(SYS_read, t->fd, (long)buf, (long)n);
  return __builtin_expect(r >= 0, 1) ? r : retry(t, SYS_read, buf, n, r);
}

static ssize_t plain_write(cb__tport_t *t, const char *p, size_t n) {
  ssize_t r = sys3(SYS_write, t->fd, (long)p, (long)n);
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
