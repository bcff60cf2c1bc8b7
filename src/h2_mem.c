/* The memory of an nghttp2 session (nghttp2_mem), so that an idle h2c connection costs little (issue 11).
 *
 * A session allocates a few large blocks when it is made: its outgoing frame buffer (16 KiB), the stream map's
 * table (4 KiB), and later, rarely, more. Most of their bytes are never written while the connection idles, but
 * from malloc's heap they are resident anyway: the heap's pages are shared with their neighbours, and calloc
 * writes every byte. Here blocks of CB__H2_MEM_BIG bytes or more are mappings of their own (fresh pages are
 * zero, so calloc writes nothing): a page costs memory only once something is written to it. Smaller blocks
 * come from malloc, and those of up to 1 KiB are kept per worker when freed, by size class: a stream's blocks
 * then cost a pointer pop and push instead of malloc and free.
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
#include "internal.h"

static size_t page_size = 4096; /* set from sysconf when the first session is made */

static size_t page_round(size_t n) { return (n + page_size - 1) & ~(page_size - 1); }

/* Mappings start on a page; heap blocks rarely do, so most frees and reallocs are told apart without a
 * search (a heap block that happens to start on a page is simply not found among the mappings). */
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

/* Every block from the heap starts with a header that says which class it is (CLASS_RAW: any size, from
 * malloc), 16 bytes to keep nghttp2's blocks aligned as malloc's are. */
#define HDR 16
#define CLASS_RAW 0xff

/* The class of n bytes (n <= CB__H2_SMALL_MAX): 0 for up to 32 bytes, then one per power of two. */
static inline int size_class(size_t n) {
  return n <= 32 ? 0 : (int)(sizeof(unsigned long) * 8) - __builtin_clzl((unsigned long)(n - 1)) - 5;
}

static inline void *heap_alloc(cb__h2_mem_t *m, size_t n) {
  int k = n <= CB__H2_SMALL_MAX ? size_class(n) : CLASS_RAW;
  unsigned char *b;
  if (k != CLASS_RAW && m->small != NULL && m->small->n[k] > 0) {
    b = m->small->free[k][--m->small->n[k]];
  } else {
    b = malloc(HDR + (k != CLASS_RAW ? (size_t)32 << k : n));
    if (b == NULL) return NULL;
    b[0] = (unsigned char)k;
  }
  return b + HDR;
}

static inline void heap_free(cb__h2_mem_t *m, void *p) {
  unsigned char *b = (unsigned char *)p - HDR;
  int k = b[0];
  if (k != CLASS_RAW && m->small != NULL && m->small->n[k] < CB__H2_SMALL_KEEP)
    m->small->free[k][m->small->n[k]++] = b;
  else
    free(b);
}

/* The bytes a heap block can hold. */
static size_t heap_room(const void *p) {
  const unsigned char *b = (const unsigned char *)p - HDR;
  return b[0] != CLASS_RAW ? (size_t)32 << b[0] : malloc_usable_size((void *)b) - HDR;
}

static void *mem_malloc(size_t n, void *ud) {
  cb__h2_mem_t *m = ud;
  if (__builtin_expect(n >= CB__H2_MEM_BIG, 0)) {
    void *p = big_alloc(m, n);
    if (p != NULL) return p;
  }
  return heap_alloc(m, n);
}

static void mem_free(void *p, void *ud) {
  cb__h2_mem_t *m = ud;
  if (p == NULL) return;
  cb__h2_big_t *b = __builtin_expect(maybe_big(p), 0) ? find(m, p) : NULL;
  if (b != NULL) {
    munmap(b->ptr, b->len);
    memset(b, 0, sizeof *b);
    return;
  }
  heap_free(m, p);
}

static void *mem_calloc(size_t k, size_t n, void *ud) {
  cb__h2_mem_t *m = ud;
  if (n != 0 && k > SIZE_MAX / n) return NULL;
  size_t len = k * n;
  if (len >= CB__H2_MEM_BIG) {
    void *p = big_alloc(m, len); /* fresh pages are zero */
    if (p != NULL) return p;
  }
  void *p = heap_alloc(m, len);
  if (p != NULL) memset(p, 0, len);
  return p;
}

static void *mem_realloc(void *p, size_t n, void *ud) {
  cb__h2_mem_t *m = ud;
  if (p == NULL) return mem_malloc(n, ud);
  cb__h2_big_t *b = maybe_big(p) ? find(m, p) : NULL;
  if (b != NULL && n >= CB__H2_MEM_BIG && n <= b->len) { /* still fits its mapping */
    b->size = n;
    return p;
  }
  size_t old = b != NULL ? b->size : heap_room(p);
  if (b == NULL && n <= old && n < CB__H2_MEM_BIG) return p; /* still fits its heap block */
  void *q = mem_malloc(n, ud);
  if (q == NULL) return NULL;
  memcpy(q, p, n < old ? n : old);
  mem_free(p, ud);
  return q;
}

cb__h2_small_t *cb__h2_small_get(cb__h2_small_t **slot) {
  if (*slot == NULL) *slot = calloc(1, sizeof **slot);
  return *slot;
}

void cb__h2_small_free(cb__h2_small_t *small) {
  if (small == NULL) return;
  for (int k = 0; k < CB__H2_SMALL_CLASSES; k++)
    while (small->n[k] > 0) free(small->free[k][--small->n[k]]);
  free(small);
}

void cb__h2_mem_init(cb__h2_mem_t *m, cb__h2_small_t *small) {
  long ps = sysconf(_SC_PAGESIZE);
  if (ps > 0 && (ps & (ps - 1)) == 0) page_size = (size_t)ps;
  memset(m, 0, sizeof *m);
  m->small = small;
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
