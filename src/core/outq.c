/* A connection's output queue: response bytes in order, written with as few system calls as possible.
 *
 * Small pieces (heads, chunk framing, short bodies) are copied into one growing arena so that a batch of
 * pipelined responses leaves in one writev. Static payloads are referenced, never copied; file ranges are
 * sent with sendfile(2). Arena entries hold offsets, not pointers, so the arena may grow while entries wait.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/core.h"

#define OUTQ_IOV_MAX 64

void cb__outq_init(cb__outq_t *q, cb__caches_t *caches) {
  memset(q, 0, sizeof *q);
  q->caches = caches;
}

/* The queue's storage goes back to the worker's cache (what grew past the block is freed). */
static void outq_rest(cb__outq_t *q) {
  if (q->q != NULL && (char *)q->q != q->block) free(q->q);
  if (q->arena != NULL && (q->block == NULL || q->arena != q->block + CB__OUTQ_ENTRIES * sizeof(cb__out_t)))
    free(q->arena);
  cb__cache_put(&q->caches->outq, q->block);
  q->block = NULL;
  q->q = NULL;
  q->cap = 0;
  q->arena = NULL;
  q->acap = 0;
  q->head = q->tail = 0;
  q->alen = 0;
}

/* Output begins: the queue takes a block for its first entries and arena. */
static int outq_wake(cb__outq_t *q) {
  q->block = cb__cache_get(&q->caches->outq);
  if (q->block == NULL) return -1;
  q->q = (cb__out_t *)q->block;
  q->cap = CB__OUTQ_ENTRIES;
  q->arena = q->block + CB__OUTQ_ENTRIES * sizeof(cb__out_t);
  q->acap = CB__OUTQ_ARENA;
  return 0;
}

void cb__outq_rest(cb__outq_t *q) {
  if (q->head == q->tail && q->block != NULL) outq_rest(q);
}

void cb__outq_free(cb__outq_t *q) {
  /* In order, like a flush: a CALL releases what the entries before it reference. */
  size_t released = q->released;
  for (uint32_t i = q->head; i < q->tail; i++) {
    if (q->q[i].kind == CB__OUT_FREE) {
      free((void *)q->q[i].ptr);
      released += q->q[i].held;
    }
    if (q->q[i].kind == CB__OUT_CALL) q->q[i].fn((void *)q->q[i].ptr, (uint32_t)q->q[i].fd);
  }
  outq_rest(q);
  cb__caches_t *caches = q->caches;
  memset(q, 0, sizeof *q);
  q->caches = caches;
  q->released = released; /* for the owner to give back */
}

static cb__out_t *push(cb__outq_t *q) {
  if (q->q == NULL && outq_wake(q) != 0) return NULL;
  if (q->tail == q->cap) {
    if (q->head > 0) { /* slide the live entries to the front before growing */
      memmove(q->q, q->q + q->head, (q->tail - q->head) * sizeof *q->q);
      q->tail -= q->head;
      q->head = 0;
    }
    if (q->tail == q->cap) {
      int inline_q = (char *)q->q == q->block;
      cb__out_t *n = inline_q ? malloc(2 * q->cap * sizeof *n) : realloc(q->q, 2 * q->cap * sizeof *n);
      if (n == NULL) return NULL;
      if (inline_q) memcpy(n, q->q, q->cap * sizeof *n);
      q->q = n;
      q->cap *= 2;
    }
  }
  return &q->q[q->tail++];
}

char *cb__outq_reserve(cb__outq_t *q, size_t n) {
  if (q->arena == NULL && outq_wake(q) != 0) return NULL;
  if (q->alen + n > q->acap) {
    size_t cap = q->acap;
    while (q->alen + n > cap) cap *= 2;
    int inline_a = q->arena == q->block + CB__OUTQ_ENTRIES * sizeof(cb__out_t);
    char *a = inline_a ? malloc(cap) : realloc(q->arena, cap);
    if (a == NULL) return NULL;
    if (inline_a) memcpy(a, q->arena, q->alen);
    q->arena = a;
    q->acap = cap;
  }
  return q->arena + q->alen;
}

void cb__outq_commit(cb__outq_t *q, size_t n) {
  if (n == 0) return;
  cb__out_t *last = q->tail > q->head ? &q->q[q->tail - 1] : NULL;
  /* Bytes that follow the previous arena entry extend it: one iovec for the whole run. */
  if (last != NULL && last->kind == CB__OUT_ARENA && last->off + last->len == q->alen) {
    last->len += n;
  } else {
    cb__out_t *e = push(q);
    if (e == NULL) return; /* out of memory: the bytes are dropped and the peer sees a short response */
    *e = (cb__out_t){.kind = CB__OUT_ARENA, .fd = -1, .off = q->alen, .ptr = NULL, .len = n, .held = 0};
  }
  q->alen += n;
  q->bytes += n;
}

/* Past the arena's room or the entries' (or nothing to copy): grows what must grow. */
static __attribute__((noinline)) int copy_slow(cb__outq_t *q, const void *p, size_t n) {
  char *dst = cb__outq_reserve(q, n);
  if (dst == NULL) return UV_ENOMEM;
  memcpy(dst, p, n);
  cb__outq_commit(q, n);
  return 0;
}

int cb__outq_copy(cb__outq_t *q, const void *p, size_t n) {
  size_t at = q->alen;
  /* Bytes that fit the arena (acap is 0 while there is none): no call; right after its last entry (a body after
   * its head, pipelined responses), no new entry either. The bytes are copied last: nothing is left to do after
   * the call. */
  if (n - 1 >= q->acap - at) return copy_slow(q, p, n); /* also n == 0 */
  uint32_t t = q->tail;
  if (t > q->head && q->q[t - 1].kind == CB__OUT_ARENA && q->q[t - 1].off + q->q[t - 1].len == at)
    q->q[t - 1].len += n;
  else if (t < q->cap)
    q->q[q->tail++] = (cb__out_t){.kind = CB__OUT_ARENA, .fd = -1, .off = at, .ptr = NULL, .len = n, .held = 0};
  else
    return copy_slow(q, p, n);
  q->alen = at + n;
  q->bytes += n;
  memcpy(q->arena + at, p, n);
  return 0;
}

int cb__outq_ref(cb__outq_t *q, const char *p, size_t n, int free_after) {
  if (n == 0) {
    if (free_after) free((void *)p);
    return 0;
  }
  cb__out_t *e = push(q);
  if (e == NULL) {
    if (free_after) free((void *)p);
    return UV_ENOMEM;
  }
  *e = (cb__out_t){.kind = free_after ? CB__OUT_FREE : CB__OUT_REF, .fd = -1, .off = 0, .ptr = p, .len = n,
                   .held = 0};
  q->bytes += n;
  return 0;
}

int cb__outq_ref_range(cb__outq_t *q, const char *base, size_t off, size_t n, int free_after, size_t held) {
  if (n == 0 && !free_after) return 0;
  if (n == 0 && q->head == q->tail) { /* nothing queued refers to it any more */
    free((void *)base);
    q->released += held;
    return 0;
  }
  cb__out_t *e = push(q);
  if (e == NULL) {
    if (free_after) {
      free((void *)base);
      q->released += held;
    }
    return UV_ENOMEM;
  }
  *e = (cb__out_t){.kind = free_after ? CB__OUT_FREE : CB__OUT_REF, .fd = -1, .off = off, .ptr = base, .len = n,
                   .held = free_after ? held : 0};
  q->bytes += n;
  return 0;
}

int cb__outq_file(cb__outq_t *q, int fd, uint64_t off, size_t n) {
  if (n == 0) return 0;
  cb__out_t *e = push(q);
  if (e == NULL) return UV_ENOMEM;
  *e = (cb__out_t){.kind = CB__OUT_FILE, .fd = fd, .off = off, .len = n, .held = 0};
  q->bytes += n;
  return 0;
}

void cb__outq_call(cb__outq_t *q, cb__release_fn fn, void *arg, uint32_t n) {
  if (q->head == q->tail) {
    fn(arg, n);
    return;
  }
  cb__out_t *e = push(q);
  if (e == NULL) { /* out of memory: release now rather than never (the bytes are gone too: see commit) */
    fn(arg, n);
    return;
  }
  *e = (cb__out_t){.kind = CB__OUT_CALL, .fd = (int)n, .fn = fn, .ptr = arg, .len = 0};
}

static const char *entry_ptr(const cb__outq_t *q, const cb__out_t *e) {
  return e->kind == CB__OUT_ARENA ? q->arena + e->off : e->ptr + e->off;
}

/* Drops `n` written bytes from the front of the queue. */
static void consume(cb__outq_t *q, size_t n) {
  q->bytes -= n;
  q->written += n;
  while (q->head < q->tail && (n > 0 || q->q[q->head].len == 0)) {
    cb__out_t *e = &q->q[q->head];
    if (e->kind == CB__OUT_CALL) {
      q->head++; /* first: the callback may queue more */
      e->fn((void *)e->ptr, (uint32_t)e->fd);
      continue;
    }
    size_t take = n < e->len ? n : e->len;
    e->len -= take;
    n -= take;
    e->off += take; /* arena offset, file offset, or progress into a referenced buffer */
    if (e->len > 0) break;
    if (e->kind == CB__OUT_FREE) {
      free((void *)e->ptr);
      q->released += e->held;
    }
    q->head++;
  }
  if (q->head == q->tail) { /* empty: the arena and the entry array start over */
    q->head = q->tail = 0;
    q->alen = 0;
  }
}

/* A file range through a transport without sendfile (the sink; TLS without kernel TLS): read, then written like
 * bytes, a piece at a time. Returns what the transport's write returns. */
static ssize_t file_by_copy(cb__tport_t *t, const cb__out_t *e) {
  char buf[16384];
  size_t n = e->len < sizeof buf ? e->len : sizeof buf;
  ssize_t r = pread(e->fd, buf, n, (off_t)e->off);
  if (r <= 0) return UV_EIO; /* the file shrank under us */
  return t->ops->write(t, buf, (size_t)r);
}

/* Writes entries from the front until the transport is full or the queue is empty: writev for bytes, sendfile
 * for file ranges. Returns like cb__outq_flush. */
static __attribute__((noinline)) ssize_t flush_all(cb__outq_t *q, cb__tport_t *t) {
  ssize_t total = 0;
  while (q->head < q->tail) {
    cb__out_t *e = &q->q[q->head];
    if (e->kind == CB__OUT_FILE) {
      ssize_t r = t->ops->sendfile ? t->ops->sendfile(t, e->fd, e->off, e->len) : file_by_copy(t, e);
      if (r == UV_EAGAIN) break;
      if (r < 0) return r;
      consume(q, (size_t)r);
      total += r;
      continue;
    }
    struct iovec iov[OUTQ_IOV_MAX];
    int n = 0;
    size_t want = 0;
    for (uint32_t i = q->head; i < q->tail && n < OUTQ_IOV_MAX; i++) {
      cb__out_t *x = &q->q[i];
      if (x->kind == CB__OUT_FILE) break;
      if (x->len == 0) continue; /* releases (CALL, FREE after): run by consume() in order */
      iov[n].iov_base = (void *)entry_ptr(q, x);
      iov[n].iov_len = x->len;
      want += x->len;
      n++;
    }
    if (n == 0) { /* only releases before a file range */
      consume(q, 0);
      continue;
    }
    ssize_t r = t->ops->writev(t, iov, n);
    if (r == UV_EAGAIN) break;
    if (r < 0) return r;
    consume(q, (size_t)r);
    total += r;
    if ((size_t)r < want) break; /* the socket buffer is full */
  }
  return total;
}

/* The single piece cb__outq_flush wrote did not all leave (the write returned r): part of it did and the
 * transport is full, or the write failed. */
static __attribute__((noinline)) ssize_t flush_short(cb__outq_t *q, cb__tport_t *t, ssize_t r) {
  if (r > 0) {
    consume(q, (size_t)r);
    return r;
  }
  if (r == UV_EAGAIN) return 0;
  if (r < 0) return r;
  return flush_all(q, t);
}

ssize_t cb__outq_flush(cb__outq_t *q, cb__tport_t *t) {
  /* One piece of bytes (a response or a batch of them copied into the arena): one write, and when it all
   * leaves, the queue is empty without walking it. A short write, an error or anything else: flush_all. */
  const cb__out_t *e = &q->q[q->head];
  if (q->tail - q->head != 1 || !(e->kind == CB__OUT_ARENA || e->kind == CB__OUT_REF) || e->len == 0)
    return flush_all(q, t);
  size_t n = e->len;
  ssize_t r = t->ops->write(t, entry_ptr(q, e), n);
  if (r != (ssize_t)n) return flush_short(q, t, r);
  q->bytes -= n;
  q->written += n;
  q->head = q->tail = 0;
  q->alen = 0;
  return r;
}
