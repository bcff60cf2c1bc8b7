/* Kernel TLS: after a session's handshake its records may go to the kernel (Linux's `tls` upper-layer protocol),
 * which then encrypts what the plain system calls hand it, so that writev(2) and sendfile(2) carry a TLS
 * connection's responses as they carry a cleartext one's: no copy through OpenSSL, and files again without a
 * read into the engine.
 *
 * Whether a server tries it is decided once, at start (cb__ktls_probe): the kernel must list `tls` in
 * /proc/sys/net/ipv4/tcp_available_ulp (the module `tls` loaded: `modprobe tls`). Then each session asks OpenSSL
 * for it (SSL_OP_ENABLE_KTLS, tls.c), and OpenSSL moves the keys into the socket when the handshake ends, for the
 * sending side (the side the socket BIO writes). A session whose socket refused
 * (a cipher the kernel lacks, setsockopt(TCP_ULP) failing) stays with OpenSSL's record layer, as every session
 * does when the kernel offers nothing: the fallback is the TLS transport itself.
 *
 * Reads stay with OpenSSL's record layer: they go through the reader (tls_batch.c), which takes no keys, so the
 * receiving side is never the kernel's, and what one event reads is bounded as for every TLS session (a client
 * streaming KeyUpdates, which OpenSSL handles inside one SSL_read, does not hold the worker). */
#include <errno.h>
#include <openssl/bio.h>
#include <openssl/ssl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "transport/transport.h"

#define ULP_FILE "/proc/sys/net/ipv4/tcp_available_ulp"

static void say(char *why, size_t why_size, const char *fmt, const char *arg) {
  if (why != NULL && why_size > 0) snprintf(why, why_size, fmt, arg);
}

int cb__ktls_probe(char *why, size_t why_size) {
  say(why, why_size, "%s", "");
  const char *force = getenv("CBENCH_KTLS");
  if (force != NULL && strcmp(force, "off") == 0) {
    say(why, why_size, "%s", "turned off (CBENCH_KTLS=off)");
    return 0;
  }
  const char *path = getenv("CBENCH_KTLS_ULP_FILE");
  if (path == NULL || path[0] == '\0') path = ULP_FILE;
  FILE *f = fopen(path, "r");
  if (f == NULL) {
    say(why, why_size, "%s cannot be read: no kernel TLS", path);
    return 0;
  }
  char list[512];
  size_t n = fread(list, 1, sizeof list - 1, f);
  fclose(f);
  list[n] = '\0';
  /* A line of names separated by spaces ("mptcp tls"). */
  for (char *save = NULL, *tok = strtok_r(list, " \t\n", &save); tok != NULL; tok = strtok_r(NULL, " \t\n", &save))
    if (strcmp(tok, "tls") == 0) return 1;
  say(why, why_size, "the kernel offers no tls ULP (%s does not list tls: modprobe tls)", path);
  return 0;
}

/* ---- the kTLS table: system calls on a socket whose sending side the kernel encrypts ---- */

static ssize_t ktls_write(cb__tport_t *t, const char *p, size_t n) {
  ssize_t r;
  do r = write(t->fd, p, n);
  while (r < 0 && errno == EINTR);
  return r >= 0 ? r : errno == EAGAIN ? UV_EAGAIN : uv_translate_sys_error(errno);
}

static ssize_t ktls_writev(cb__tport_t *t, const struct iovec *iov, int n) {
  ssize_t r;
  do r = writev(t->fd, iov, n);
  while (r < 0 && errno == EINTR);
  return r >= 0 ? r : errno == EAGAIN ? UV_EAGAIN : uv_translate_sys_error(errno);
}

static ssize_t ktls_sendfile(cb__tport_t *t, int fd, uint64_t off, size_t n) {
  off_t o = (off_t)off;
  ssize_t r;
  do r = sendfile(t->fd, fd, &o, n);
  while (r < 0 && errno == EINTR);
  if (r == 0 && n > 0) return UV_EIO; /* the file shrank under us */
  return r >= 0 ? r : errno == EAGAIN ? UV_EAGAIN : uv_translate_sys_error(errno);
}

static const cb__tport_ops_t ktls_ops = {
    .read = cb__tls_read,
    .write = ktls_write,
    .writev = ktls_writev,
    .sendfile = ktls_sendfile,
    .shutdown = cb__tls_shutdown,
    .close = cb__tls_close,
};

int cb__ktls_take(cb__tport_t *t) {
  SSL *ssl = t->state;
  BIO *wbio = SSL_get_wbio(ssl);
  /* Only a sending side the kernel took, with nothing of OpenSSL's left to write before it (a session ticket
   * waiting for the socket): the bytes written from here on must follow it. */
  if (wbio == NULL || !BIO_get_ktls_send(wbio) || BIO_wpending(wbio) > 0 || t->want_write) return 0;
  t->ops = &ktls_ops;
  return 1;
}
