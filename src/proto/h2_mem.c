/* The memory of an nghttp2 session (nghttp2_mem), so that an idle h2c connection costs little (issue 11).
 *
 * Since December 2026 neither the server (proto/http2.c) nor the h2c client (client/h2_client.c) uses nghttp2's
 * session: what allocates here is nghttp2's HPACK decoder (its 1 KiB table ring is a slot, its entries and
 * buffers small blocks). The rest step that gave nghttp2's frame buffers and zero pages back went with the
 * sessions; the mappings and three-slot pages below were made for them too, and stay correct for any size.
 *
 * A session allocates a few large blocks when it is made: its outgoing frame buffer (16 KiB), the stream map's
 * table (4 KiB), and later, rarely, more. Most of their bytes are never written while the connection idles, but
 * from malloc's heap they are resident anyway: the heap's pages are shared with their neighbours, and calloc
 * writes every byte. Here blocks of CB__H2_MEM_BIG bytes or more are mappings of their own (fresh pages are
 * zero, so calloc writes nothing): a page costs memory only once something is written to it. Smaller blocks
 * come from malloc, and those of up to 1 KiB are kept per worker when freed, by size class: a stream's blocks
 * then cost a pointer pop and push instead of malloc and free. Blocks of exactly 1 KiB (the HPACK ring
 * buffers: allocated with the session, written only once a header is indexed) are slots of per-worker
 * mappings, four to a page, so that a session that never indexes a header costs nothing for them. */
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "proto/h2_mem.h"
#include "proto/proto.h"

static size_t page_size = 4096; /* set from sysconf once (page_size_once), before any worker reads it */
static pthread_once_t page_size_done = PTHREAD_ONCE_INIT;

static void page_size_read(void) {
  long ps = sysconf(_SC_PAGESIZE);
  if (ps > 0 && (ps & (ps - 1)) == 0) page_size = (size_t)ps;
}

/* Once for the process: every worker wrote the same value on each new session, a data race by the letter
 * (ThreadSanitizer reported it in every h2c run, which hid the rest of its reports). */
static void page_size_once(void) { pthread_once(&page_size_done, page_size_read); }

static size_t page_round(size_t n) { return (n + page_size - 1) & ~(page_size - 1); }

/* Mappings and slots start on a multiple of 1 KiB; heap blocks rarely do, so most frees and reallocs are told
 * apart without a search (a heap block that happens to be so aligned is simply not found among them). */
static inline int maybe_big(const void *p) { return ((uintptr_t)p & (CB__H2_MEM_SLOT - 1)) == 0; }

static cb__h2_big_t *find(cb__h2_mem_t *m, const void *p) {
  for (int i = 0; i < CB__H2_MEM_SLOTS; i++)
    if (m->big[i].ptr == p) return &m->big[i];
  return NULL;
}

static void *big_alloc(cb__h2_mem_t *m, size_t n) {
  cb__h2_big_t *slot = find(m, NULL);
  if (slot == NULL) return NULL; /* every slot taken: the caller uses malloc */
  size_t len = page_round(n);
  if (len > UINT32_MAX) return NULL;
  void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return NULL;
  slot->ptr = p;
  slot->len = (uint32_t)len;
  slot->size = (uint32_t)n;
  return p;
}

static int grow(void ***arr, uint32_t *cap, uint32_t need) {
  if (need <= *cap) return 0;
  uint32_t c = *cap ? 2 * *cap : 64;
  while (c < need) c *= 2;
  void **a = realloc(*arr, c * sizeof *a);
  if (a == NULL) return -1;
  *arr = a;
  *cap = c;
  return 0;
}

/* Slot chunks are aligned to their size and kept sorted, each with a word saying which of its slots are free,
 * so that a page whose slots are all free goes back to the kernel (a parked session's HPACK rings, docs/tls.md
 * "Idle connections"). The words live apart from the chunks: a page of a chunk no slot ever used stays
 * untouched. */
#define CHUNK_BYTES ((size_t)CB__H2_SLOTS_PER_CHUNK * CB__H2_MEM_SLOT)

static char *chunk_map(void) {
  char *c = mmap(NULL, 2 * CHUNK_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (c == MAP_FAILED) return NULL;
  char *a = (char *)(((uintptr_t)c + CHUNK_BYTES - 1) & ~(uintptr_t)(CHUNK_BYTES - 1));
  if (a > c) munmap(c, (size_t)(a - c));
  munmap(a + CHUNK_BYTES, (size_t)(c + CHUNK_BYTES - a));
  return a;
}

/* The index of the chunk holding p (a binary search of the sorted chunks). */
static uint32_t chunk_index(const cb__h2_small_t *k, const void *p) {
  uintptr_t base = (uintptr_t)p & ~(uintptr_t)(CHUNK_BYTES - 1);
  uint32_t lo = 0, hi = k->nchunks;
  while (hi - lo > 1) {
    uint32_t mid = lo + (hi - lo) / 2;
    if ((uintptr_t)k->chunks[mid] <= base) lo = mid; else hi = mid;
  }
  return lo;
}

static int chunk_add(cb__h2_small_t *k, char *c) {
  if (k->nchunks + 1 > k->chunks_cap) {
    uint32_t cap = k->chunks_cap ? 2 * k->chunks_cap : 16;
    void **a = realloc(k->chunks, cap * sizeof *a);
    if (a == NULL) return -1;
    k->chunks = a;
    uint64_t *b = realloc(k->chunk_free, cap * sizeof *b);
    if (b == NULL) return -1;
    k->chunk_free = b;
    k->chunks_cap = cap;
  }
  uint32_t i = k->nchunks;
  while (i > 0 && (uintptr_t)k->chunks[i - 1] > (uintptr_t)c) {
    k->chunks[i] = k->chunks[i - 1];
    k->chunk_free[i] = k->chunk_free[i - 1];
    i--;
  }
  k->chunks[i] = c;
  k->chunk_free[i] = ~(uint64_t)0;
  k->nchunks++;
  return 0;
}

/* A new chunk, cut into single slots, or (triples) into one triple and one single slot per 4 KiB page. */
static int chunk_new(cb__h2_small_t *k, int triples) {
  if (grow(&k->slots, &k->slots_cap, k->nslots + CB__H2_SLOTS_PER_CHUNK) != 0 ||
      grow(&k->triples, &k->triples_cap, k->ntriples + CB__H2_SLOTS_PER_CHUNK / 4) != 0)
    return -1;
  char *c = chunk_map();
  if (c == NULL) return -1;
  if (chunk_add(k, c) != 0) {
    munmap(c, CHUNK_BYTES);
    return -1;
  }
  for (int i = CB__H2_SLOTS_PER_CHUNK - 1; i >= 0; i--) {
    char *p = c + (size_t)i * CB__H2_MEM_SLOT;
    if (!triples || i % 4 == 3) k->slots[k->nslots++] = p;
    else if (i % 4 == 0) k->triples[k->ntriples++] = p;
  }
  return 0;
}

/* Slots i .. i + n - 1 of p's chunk taken (used) or given back. */
static uint64_t slot_bits(const cb__h2_small_t *k, uint32_t ci, const char *p, int n) {
  size_t i = (size_t)(p - (char *)k->chunks[ci]) / CB__H2_MEM_SLOT;
  return (((uint64_t)1 << n) - 1) << i;
}

static void *slot_take(cb__h2_mem_t *m, int triple) {
  cb__h2_small_t *k = m->small;
  cb__h2_big_t *e = find(m, NULL);
  if (k == NULL || e == NULL || (triple && page_size != 4 * CB__H2_MEM_SLOT)) return NULL;
  if ((triple ? k->ntriples : k->nslots) == 0 && chunk_new(k, triple) != 0) return NULL;
  char *p = triple ? k->triples[--k->ntriples] : k->slots[--k->nslots];
  uint32_t ci = chunk_index(k, p);
  k->chunk_free[ci] &= ~slot_bits(k, ci, p, triple ? 3 : 1);
  *e = (cb__h2_big_t){.ptr = p, .len = 0, .size = triple ? CB__H2_MEM_TRIPLE : CB__H2_MEM_SLOT};
  return p;
}

/* The blocks a triple holds (CB__H2_MEM_TRIPLE): more than two slots, at most three. */
static inline int triple_size(size_t n) { return n > 2 * CB__H2_MEM_SLOT && n <= CB__H2_MEM_TRIPLE; }

/* A slot (or a triple: n 3) is free again: when every slot of its page is, the page goes back to the kernel (it
 * reads as zeros when next used, and a slot's bytes mean nothing until nghttp2 writes them). */
static void slot_release(cb__h2_small_t *k, char *p, int n) {
  uint32_t ci = chunk_index(k, p);
  char *c = k->chunks[ci];
  size_t i = (size_t)(p - c) / CB__H2_MEM_SLOT, per_page = page_size / CB__H2_MEM_SLOT;
  k->chunk_free[ci] |= slot_bits(k, ci, p, n);
  if (per_page == 0 || per_page > CB__H2_SLOTS_PER_CHUNK) return;
  size_t first = i - i % per_page;
  uint64_t page = per_page == 64 ? ~(uint64_t)0 : (((uint64_t)1 << per_page) - 1) << first;
  if ((k->chunk_free[ci] & page) == page) madvise(c + first * CB__H2_MEM_SLOT, page_size, MADV_DONTNEED);
}

/* Gives a mapping back to the kernel, or a slot back to the worker. */
static void big_free(cb__h2_mem_t *m, cb__h2_big_t *b) {
  if (b->len > 0)
    munmap(b->ptr, b->len);
  else if (b->size == CB__H2_MEM_TRIPLE && grow(&m->small->triples, &m->small->triples_cap, m->small->ntriples + 1) == 0) {
    m->small->triples[m->small->ntriples++] = b->ptr;
    slot_release(m->small, b->ptr, 3);
  } else if (b->size != CB__H2_MEM_TRIPLE && grow(&m->small->slots, &m->small->slots_cap, m->small->nslots + 1) == 0) {
    m->small->slots[m->small->nslots++] = b->ptr;
    slot_release(m->small, b->ptr, 1);
  }
  /* else: the slot is lost until the worker ends (its chunk is unmapped then) */
  memset(b, 0, sizeof *b);
}

/* Heap blocks carry no header of their own: a block's class is read back from its usable size. Class k holds
 * blocks of 16k + 8 bytes, which is what malloc gives a chunk of 16(k + 1) bytes, so a cached block costs what
 * the same malloc would. Any block whose usable size is at least 16k + 8 can serve class k. */
static inline int size_class(size_t n) { return (int)((n + 7) / 16); }
static inline size_t class_size(int k) { return 16 * (size_t)k + 8; }

/* A kept block of class c taken (the class has one), and a block put back. */
static inline void *kept_pop(cb__h2_small_t *k, int c) {
  void *p = k->free[c];
  memcpy(&k->free[c], p, sizeof(void *));
  k->n[c]--;
  k->kept -= class_size(c);
  return p;
}

static inline void kept_push(cb__h2_small_t *k, int c, void *p) {
  memcpy(p, &k->free[c], sizeof(void *));
  k->free[c] = p;
  k->n[c]++;
  k->kept += class_size(c);
}

static inline void *heap_alloc(cb__h2_mem_t *m, size_t n) {
  if (n > CB__H2_SMALL_MAX) return malloc(n);
  int k = size_class(n);
  if (m->small != NULL && m->small->n[k] > 0) return kept_pop(m->small, k);
  return malloc(class_size(k));
}

static inline void heap_free(cb__h2_mem_t *m, void *p) {
  size_t u = malloc_usable_size(p);
  if (u >= 8 && u <= class_size(CB__H2_SMALL_CLASSES - 1) && m->small != NULL) {
    int k = (int)((u - 8) / 16);
    if (m->small->n[k] < CB__H2_SMALL_KEEP && m->small->kept + class_size(k) <= CB__H2_SMALL_KEEP_BYTES) {
      kept_push(m->small, k, p);
      return;
    }
  }
  free(p);
}

/* The bytes a heap block can hold. */
static size_t heap_room(const void *p) { return malloc_usable_size((void *)p); }

static __attribute__((noinline)) void *mem_malloc_big(cb__h2_mem_t *m, size_t n) {
  void *p = n == CB__H2_MEM_SLOT ? slot_take(m, 0)
            : triple_size(n)       ? slot_take(m, 1)
            : n >= CB__H2_MEM_BIG  ? big_alloc(m, n)
                                   : NULL;
  return p != NULL ? p : heap_alloc(m, n);
}

/* The common case (a small block from the worker's cache) stays a leaf: nothing to save, no call. */
static void *mem_malloc(size_t n, void *ud) {
  cb__h2_mem_t *m = ud;
  cb__h2_small_t *k = m->small;
  if (__builtin_expect(n <= CB__H2_SMALL_MAX && k != NULL, 1)) {
    int c = size_class(n);
    if (k->n[c] > 0) return kept_pop(k, c);
    return malloc(class_size(c));
  }
  return mem_malloc_big(m, n);
}

static __attribute__((noinline)) void mem_free_big(cb__h2_mem_t *m, void *p) {
  cb__h2_big_t *b = find(m, p);
  if (b != NULL)
    big_free(m, b);
  else
    heap_free(m, p);
}

static void mem_free(void *p, void *ud) {
  cb__h2_mem_t *m = ud;
  if (__builtin_expect(maybe_big(p), 0)) {
    if (p != NULL) mem_free_big(m, p);
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
  } else if (triple_size(len)) {
    void *p = slot_take(m, 1); /* the session itself: a reused triple may hold an old one's bytes */
    if (p != NULL) return memset(p, 0, len);
  }
  void *p = heap_alloc(m, len);
  if (p != NULL) memset(p, 0, len);
  return p;
}

static void *mem_realloc(void *p, size_t n, void *ud) {
  cb__h2_mem_t *m = ud;
  if (p == NULL) return mem_malloc(n, ud);
  cb__h2_big_t *b = maybe_big(p) ? find(m, p) : NULL;
  if (b != NULL && b->len > 0 && n >= CB__H2_MEM_BIG && n <= b->len) { /* still fits its mapping */
    b->size = (uint32_t)n;
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

cb__h2_small_t *cb__h2_small_new(void) { return calloc(1, sizeof(cb__h2_small_t)); }

void cb__h2_small_free(cb__h2_small_t *small) {
  if (small == NULL) return;
  for (int k = 0; k < CB__H2_SMALL_CLASSES; k++)
    while (small->n[k] > 0) free(kept_pop(small, k));
  for (uint32_t i = 0; i < small->nchunks; i++)
    munmap(small->chunks[i], CHUNK_BYTES);
  free(small->chunks);
  free(small->chunk_free);
  free(small->slots);
  free(small->triples);
  free(small);
}

void cb__h2_mem_init(cb__h2_mem_t *m, cb__h2_small_t *small) {
  page_size_once();
  memset(m, 0, sizeof *m);
  m->small = small;
  m->mem = (nghttp2_mem){.mem_user_data = m, .malloc = mem_malloc, .free = mem_free, .calloc = mem_calloc,
                         .realloc = mem_realloc};
}

void cb__h2_mem_free(cb__h2_mem_t *m) {
  for (int i = 0; i < CB__H2_MEM_SLOTS; i++)
    if (m->big[i].ptr != NULL) big_free(m, &m->big[i]);
}
