/* The memory of an nghttp2 session (nghttp2_mem), so that an idle h2c connection costs little (issue 11).
 *
 * A session allocates a few large blocks when it is made: its outgoing frame buffer (16 KiB), the stream map's
 * table (4 KiB), and later, rarely, more. Most of their bytes are never written while the connection idles, but
 * from malloc's heap they are resident anyway: the heap's pages are shared with their neighbours, and calloc
 * writes every byte. Here blocks of CB__H2_MEM_BIG bytes or more are mappings of their own (fresh pages are
 * zero, so calloc writes nothing): a page costs memory only once something is written to it. Smaller blocks
 * come from malloc.
 *
 * cb__h2_mem_rest() goes further for a session that is at rest (nothing being sent): its frame buffers hold
 * nothing that is still needed (nghttp2 resets them before each frame), so their pages are given back to the
 * kernel; the next frame written finds zero-filled pages. */
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "h2_mem.h"

static size_t page_size = 4096; /* set from sysconf when the first session is made */

static size_t page_round(size_t n) { return (n + page_size - 1) & ~(page_size - 1); }

/* Mappings start on a page; malloc's blocks (which sit after a chunk header) never do, so most frees and
 * reallocs are told apart without a search. */
static inline int maybe_big(const void *p) { return ((uintptr_t)p & (page_size - 1)) == 0; }

static cb__h2_big_t *find(cb__h2_mem_t *m, const void *p) {
  for (int i = 0; i < CB__H2_MEM_SLOTS; i++)
    if (m->big[i].ptr == p) return &m->big[i];
  return NULL;
}

static void *big_alloc(cb__h2_mem_t *m, size_t n) {
  cb__h2_big_t *slot = find(m, NULL);
  if (slot == NULL) return NULL; /* every slot taken: the caller uses malloc */
  size_t len = page_round(n);
  void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return NULL;
  slot->ptr = p;
  slot->len = len;
  slot->size = n;
  return p;
}

static void *mem_malloc(size_t n, void *ud) {
  cb__h2_mem_t *m = ud;
  if (n >= CB__H2_MEM_BIG) {
    void *p = big_alloc(m, n);
    if (p != NULL) return p;
  }
  return malloc(n);
}

static void mem_free(void *p, void *ud) {
  cb__h2_mem_t *m = ud;
  if (p == NULL) return;
  cb__h2_big_t *b = maybe_big(p) ? find(m, p) : NULL;
  if (b != NULL) {
    munmap(b->ptr, b->len);
    memset(b, 0, sizeof *b);
    return;
  }
  free(p);
}

static void *mem_calloc(size_t k, size_t n, void *ud) {
  cb__h2_mem_t *m = ud;
  if (n != 0 && k > SIZE_MAX / n) return NULL;
  if (k * n >= CB__H2_MEM_BIG) {
    void *p = big_alloc(m, k * n); /* fresh pages are zero */
    if (p != NULL) return p;
  }
  return calloc(k, n);
}

static void *mem_realloc(void *p, size_t n, void *ud) {
  cb__h2_mem_t *m = ud;
  if (p == NULL) return mem_malloc(n, ud);
  cb__h2_big_t *b = maybe_big(p) ? find(m, p) : NULL;
  if (b == NULL && n < CB__H2_MEM_BIG) return realloc(p, n);
  if (b != NULL && n >= CB__H2_MEM_BIG && n <= b->len) { /* still fits its mapping */
    b->size = n;
    return p;
  }
  /* From the heap to a mapping, or a mapping that changes size: a new block and a copy. */
  size_t old = b != NULL ? b->size : malloc_usable_size(p);
  void *q = mem_malloc(n, ud);
  if (q == NULL) return NULL;
  memcpy(q, p, n < old ? n : old);
  mem_free(p, ud);
  return q;
}

void cb__h2_mem_init(cb__h2_mem_t *m) {
  long ps = sysconf(_SC_PAGESIZE);
  if (ps > 0 && (ps & (ps - 1)) == 0) page_size = (size_t)ps;
  memset(m, 0, sizeof *m);
  m->mem = (nghttp2_mem){.mem_user_data = m, .malloc = mem_malloc, .free = mem_free, .calloc = mem_calloc,
                         .realloc = mem_realloc};
}

void cb__h2_mem_rest(cb__h2_mem_t *m) {
  for (int i = 0; i < CB__H2_MEM_SLOTS; i++)
    if (m->big[i].ptr != NULL && m->big[i].size == CB__H2_MEM_FRAMEBUF)
      madvise(m->big[i].ptr, m->big[i].len, MADV_DONTNEED);
}

void cb__h2_mem_free(cb__h2_mem_t *m) {
  for (int i = 0; i < CB__H2_MEM_SLOTS; i++)
    if (m->big[i].ptr != NULL) munmap(m->big[i].ptr, m->big[i].len);
  memset(m->big, 0, sizeof m->big);
}
