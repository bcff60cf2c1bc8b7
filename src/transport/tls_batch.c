/* The TLS session's write side: the records of one event gathered into one write(2).
 *
 * A socket BIO writes each flush of OpenSSL's at once. A resumed TLS 1.3 handshake whose client sends its
 * Finished and its request together (h2load, cbench-load, curl) then costs the server three writes after its
 * first flight: the session ticket, the response, and the close_notify of a `connection: close`. Each write on
 * TCP runs the stack's whole send path, the costliest system call of the exchange on loopback. This BIO holds
 * small records in the connection's batch instead, and the connection writes the batch once its event is
 * over (the transport's push, tls_push in tls.c, from the after step of core/conn.c): one write for all three.
 *
 * Big records (a body's 16 KiB records) are not copied: one writev(2) sends the batch and the record together,
 * as a socket BIO would have sent the record. A batch never holds more than BATCH_MAX bytes: past it, the BIO
 * writes first, and a socket that takes nothing makes OpenSSL wait (retry), so output stays bounded by the
 * socket, as with a socket BIO.
 *
 * Kernel TLS needs a socket BIO to write through (OpenSSL hands it the keys), so a session that may go to the
 * kernel writes through a socket BIO (tls.c); it reads through the reader as every session does. The read side,
 * at the end of this file, bounds what one event takes from the socket. */
#include <errno.h>
#include <openssl/bio.h>
#include <openssl/ssl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "transport/transport.h"
#include "transport/tls_batch.h"

/* Records up to this size are copied into the batch; larger ones go out with it in one writev(2). A response
 * head and a small body make one record of a few hundred bytes; a handshake flight with a certificate chain,
 * one or two KiB. */
#define COPY_MAX 4096
/* What a batch may hold: a few small records. */
#define BATCH_MAX 16384
/* The batch's first storage: within glibc's per-thread cache (1032 bytes), so that the allocation each event
 * with output makes on a kept-alive connection is a cache hit. */
#define BATCH_FIRST 1024

typedef struct {
  const SSL *ssl;  /* the session writing: its handshake state decides what a flush does (batch_ctrl) */
  int fd;
  uint8_t fin;     /* shut the sending side down once the batch is out (cb__tls_batch_fin) */
  uint32_t len;    /* bytes held */
  uint32_t cap;
  char *buf;       /* NULL while empty: an idle connection holds no storage */
} batch_t;

static BIO_METHOD *method;
static int batch_type; /* the method's type: what tells a batch BIO from the others */
static pthread_once_t method_once = PTHREAD_ONCE_INIT;

static void drop_front(batch_t *b, size_t k) {
  if (k >= b->len) {
    free(b->buf);
    b->buf = NULL;
    b->len = b->cap = 0;
    return;
  }
  memmove(b->buf, b->buf + k, b->len - k);
  b->len -= (uint32_t)k;
}

/* Writes the batch and then p[0..n) (n may be 0), as far as the socket takes them: what of p went out (>= 0),
 * or -1 with errno. Bytes of p are only written once the batch is all out. */
static ssize_t write_out(batch_t *b, const char *p, size_t n) {
  struct iovec iov[2] = {{b->buf, b->len}, {(void *)p, n}};
  int first = b->len > 0 ? 0 : 1;
  int count = n > 0 ? 2 - first : 1 - first;
  if (count == 0) return 0;
  ssize_t r;
  do r = writev(b->fd, iov + first, count);
  while (r < 0 && errno == EINTR);
  if (r < 0) return -1;
  size_t held = b->len;
  drop_front(b, (size_t)r);
  return (size_t)r > held ? r - (ssize_t)held : 0;
}

static int batch_write(BIO *bio, const char *p, int n) {
  batch_t *b = BIO_get_data(bio);
  BIO_clear_retry_flags(bio);
  if (n <= 0) return 0;
  if (n <= COPY_MAX && b->len + (uint32_t)n <= BATCH_MAX) {
    if (b->len + (uint32_t)n > b->cap) {
      uint32_t cap = b->cap ? b->cap : BATCH_FIRST;
      while (cap < b->len + (uint32_t)n) cap *= 2;
      char *buf = realloc(b->buf, cap);
      if (buf == NULL) goto direct; /* no memory to hold it: write now instead */
      b->buf = buf;
      b->cap = cap;
    }
    memcpy(b->buf + b->len, p, (size_t)n);
    b->len += (uint32_t)n;
    return n;
  }
direct:;
  ssize_t r = write_out(b, p, (size_t)n);
  if (r > 0) return (int)r;
  if (r == 0 || errno == EAGAIN || errno == EWOULDBLOCK) { /* the batch, or the record, waits for the socket */
    BIO_set_retry_write(bio);
    return -1;
  }
  return -1; /* errno says why: OpenSSL's SSL_ERROR_SYSCALL (tls.c reads a reset as the peer's end) */
}

static long batch_ctrl(BIO *bio, int cmd, long num, void *ptr) {
  (void)num, (void)ptr;
  batch_t *b = BIO_get_data(bio);
  switch (cmd) {
    case BIO_CTRL_FLUSH:
      /* OpenSSL flushes at the end of each handshake flight and after each alert: the peer waits for those
       * bytes, and the session goes on to read its answer, so they go now (with what the batch held before).
       * TLS 1.3's session tickets are the exception: a server sends them after the client's Finished, which
       * usually came with the first request, so they wait for the response and leave with it. Records of
       * data are never flushed by OpenSSL; the connection pushes them at the end of its event. */
      if (b != NULL && b->len > 0 && SSL_get_state(b->ssl) != TLS_ST_SW_SESSION_TICKET &&
          write_out(b, NULL, 0) < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
        return 0;
      return 1; /* bytes the socket did not take yet wait for the push, as a record that waits would */
    case BIO_CTRL_WPENDING: return b != NULL ? (long)b->len : 0;
    case BIO_CTRL_DUP: return 1;
    default: return 0;
  }
}

static int batch_create(BIO *bio) {
  BIO_set_init(bio, 1);
  return 1;
}

static int batch_destroy(BIO *bio) {
  batch_t *b = BIO_get_data(bio);
  if (b != NULL) free(b->buf);
  free(b);
  BIO_set_data(bio, NULL);
  return 1;
}

static void method_new(void) {
  int type = BIO_get_new_index();
  if (type == -1) return;
  type |= BIO_TYPE_SOURCE_SINK;
  BIO_METHOD *m = BIO_meth_new(type, "cbench TLS batch");
  if (m == NULL) return;
  if (BIO_meth_set_write(m, batch_write) != 1 || BIO_meth_set_ctrl(m, batch_ctrl) != 1 ||
      BIO_meth_set_create(m, batch_create) != 1 || BIO_meth_set_destroy(m, batch_destroy) != 1) {
    BIO_meth_free(m);
    return;
  }
  method = m;
  batch_type = type;
}

BIO *cb__tls_batch_new(const SSL *ssl, int fd) {
  pthread_once(&method_once, method_new);
  if (method == NULL) return NULL;
  batch_t *b = calloc(1, sizeof *b);
  BIO *bio = b != NULL ? BIO_new(method) : NULL;
  if (bio == NULL) {
    free(b);
    return NULL;
  }
  b->ssl = ssl;
  b->fd = fd;
  BIO_set_data(bio, b);
  return bio;
}

/* The batch behind a session's write BIO, when it is one (a tls-slow or tls-stall fault swaps in its own). */
static batch_t *batch_of(BIO *bio) {
  return bio != NULL && batch_type != 0 && BIO_method_type(bio) == batch_type ? BIO_get_data(bio) : NULL;
}

int cb__tls_batch_push(BIO *bio, int closing) {
  batch_t *b = batch_of(bio);
  if (b == NULL) return 0;
  if (closing) b->fin = 0; /* close(2) sends the FIN */
  if (b->len > 0 && write_out(b, NULL, 0) < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
    return uv_translate_sys_error(errno);
  if (b->len > 0) return 1;
  if (b->fin) {
    b->fin = 0;
    shutdown(b->fd, SHUT_WR);
  }
  return 0;
}

int cb__tls_batch_fin(BIO *bio) {
  batch_t *b = batch_of(bio);
  if (b == NULL) return 0;
  b->fin = 1;
  return 1;
}

/* ---- the read side: the socket, with a budget per event ----
 * OpenSSL handles the records that are not data (a TLS 1.3 KeyUpdate) inside one SSL_read, and reads the socket
 * again for the next one, for as long as the socket has bytes: a client that streams such records kept its worker in
 * one read, and every other connection of the worker waited. This BIO reads the socket as a socket BIO does, but
 * only `left` bytes per event (tls.c sets it at each read): past it, a read asks to be retried, SSL_read answers
 * "want read", and the poll, level-triggered, brings the rest at the next turn of the loop, as a cleartext
 * connection reads one buffer per event. */

typedef struct {
  int fd;
  uint8_t eof; /* recv(2) read the end: BIO_eof() says so (OpenSSL's unexpected-EOF rule asks) */
  size_t left; /* bytes this event may still take from the socket */
} reader_t;

static BIO_METHOD *reader_method;
static int reader_type;
static pthread_once_t reader_once = PTHREAD_ONCE_INIT;

static int reader_read(BIO *bio, char *p, int n) {
  reader_t *r = BIO_get_data(bio);
  BIO_clear_retry_flags(bio);
  if (n <= 0) return 0;
  if (r->left == 0) { /* this event's share is taken: the rest waits in the socket for the next turn */
    BIO_set_retry_read(bio);
    return -1;
  }
  size_t want = (size_t)n < r->left ? (size_t)n : r->left;
  ssize_t k;
  do k = recv(r->fd, p, want, 0);
  while (k < 0 && errno == EINTR);
  if (k > 0) {
    r->left -= (size_t)k;
    return (int)k;
  }
  if (k == 0) {
    r->eof = 1;
    return 0;
  }
  if (errno == EAGAIN || errno == EWOULDBLOCK) BIO_set_retry_read(bio);
  return -1; /* errno says why, as from a socket BIO */
}

static long reader_ctrl(BIO *bio, int cmd, long num, void *ptr) {
  (void)num;
  reader_t *r = BIO_get_data(bio);
  switch (cmd) {
    case BIO_CTRL_EOF: return r != NULL && r->eof;
    case BIO_C_GET_FD: /* SSL_get_fd() (the TLS faults' sends) */
      if (r == NULL) return -1;
      if (ptr != NULL) *(int *)ptr = r->fd;
      return r->fd;
    case BIO_CTRL_FLUSH: return 1;
    case BIO_CTRL_DUP: return 1;
    default: return 0;
  }
}

static int reader_destroy(BIO *bio) {
  free(BIO_get_data(bio));
  BIO_set_data(bio, NULL);
  return 1;
}

static void reader_method_new(void) {
  int type = BIO_get_new_index();
  if (type == -1) return;
  /* A descriptor type, so that SSL_get_fd() finds the socket through it. */
  type |= BIO_TYPE_SOURCE_SINK | BIO_TYPE_DESCRIPTOR;
  BIO_METHOD *m = BIO_meth_new(type, "cbench TLS reader");
  if (m == NULL) return;
  if (BIO_meth_set_read(m, reader_read) != 1 || BIO_meth_set_ctrl(m, reader_ctrl) != 1 ||
      BIO_meth_set_create(m, batch_create) != 1 || BIO_meth_set_destroy(m, reader_destroy) != 1) {
    BIO_meth_free(m);
    return;
  }
  reader_method = m;
  reader_type = type;
}

BIO *cb__tls_reader_new(int fd) {
  pthread_once(&reader_once, reader_method_new);
  if (reader_method == NULL) return NULL;
  reader_t *r = calloc(1, sizeof *r);
  BIO *bio = r != NULL ? BIO_new(reader_method) : NULL;
  if (bio == NULL) {
    free(r);
    return NULL;
  }
  r->fd = fd;
  BIO_set_data(bio, r);
  return bio;
}

void cb__tls_reader_budget(BIO *bio, size_t n) {
  if (bio == NULL || reader_type == 0 || BIO_method_type(bio) != reader_type) return; /* not the reader */
  ((reader_t *)BIO_get_data(bio))->left = n;
}
