/* The small-block cache behind nghttp2's HPACK decoders (src/proto/h2_mem.c), the server's and the proxy's h2c
 * upstreams': a freed block of up to 1 KiB is kept by size class, at most CB__H2_SMALL_KEEP per class and
 * CB__H2_SMALL_KEEP_BYTES in all, and handed out again, the last kept first, before malloc is asked. Under make
 * asan every block is written after it comes back, and the cache's end frees what it keeps. */
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "proto/h2_mem.h"

static void *take(cb__h2_mem_t *m, size_t n) { return m->mem.malloc(n, m->mem.mem_user_data); }
static void give(cb__h2_mem_t *m, void *p) { m->mem.free(p, m->mem.mem_user_data); }

/* Size class c holds blocks of 16c + 8 bytes. */
static size_t class_bytes(int c) { return 16 * (size_t)c + 8; }

static size_t kept_by_counts(const cb__h2_small_t *k) {
  size_t b = 0;
  for (int c = 0; c < CB__H2_SMALL_CLASSES; c++) b += k->n[c] * class_bytes(c);
  return b;
}

enum { OVER = CB__H2_SMALL_KEEP + 100 };
static void *blocks[5 * CB__H2_SMALL_KEEP];

/* One class: of 612 blocks of 100 bytes (the 104-byte class, 6) freed, 512 are kept; 512 taken again (97 bytes:
 * the same class) are those, the last freed first; then none is left. A block's class is read from its usable
 * size, and malloc may hand out a larger chunk it had freed before (the test runner's heap is not fresh): such
 * blocks would be kept in their own class, so they are set aside and freed to the system. */
TEST(h2_mem_kept_per_class) {
  cb__h2_small_t *k = cb__h2_small_new();
  ASSERT_NOT_NULL(k);
  cb__h2_mem_t m;
  cb__h2_mem_init(&m, k);
  void *odd[64];
  int nodd = 0;
  for (int i = 0; i < OVER; i++) {
    blocks[i] = take(&m, 100);
    ASSERT_NOT_NULL(blocks[i]);
    if (malloc_usable_size(blocks[i]) != class_bytes(6)) {
      ASSERT_LT(nodd, 64);
      odd[nodd++] = blocks[i--];
      continue;
    }
    memset(blocks[i], 0xab, 100);
  }
  for (int i = 0; i < OVER; i++) give(&m, blocks[i]);
  ASSERT_EQ(k->n[6], CB__H2_SMALL_KEEP);
  ASSERT_EQ(k->kept, (size_t)CB__H2_SMALL_KEEP * class_bytes(6));
  for (int i = 0; i < CB__H2_SMALL_KEEP; i++) {
    void *p = take(&m, 97);
    ASSERT_EQ(p, blocks[CB__H2_SMALL_KEEP - 1 - i]);
    memset(p, 0xcd, class_bytes(6));
  }
  ASSERT_EQ(k->n[6], 0);
  ASSERT_EQ(k->kept, 0);
  for (int i = 0; i < CB__H2_SMALL_KEEP; i++) give(&m, blocks[i]);
  ASSERT_EQ(k->n[6], CB__H2_SMALL_KEEP);
  for (int i = 0; i < nodd; i++) free(odd[i]);
  cb__h2_mem_free(&m);
  cb__h2_small_free(k); /* frees the 512 it keeps (LeakSanitizer under make asan) */
}

/* In all: 512 blocks each of the five largest classes (1,000 down to 936 bytes, 2.48 MB) freed; the first four
 * classes are kept whole (1,998,848 bytes) and the fifth until the next block would pass 2 MiB. */
TEST(h2_mem_kept_bytes_bounded) {
  cb__h2_small_t *k = cb__h2_small_new();
  ASSERT_NOT_NULL(k);
  cb__h2_mem_t m;
  cb__h2_mem_init(&m, k);
  for (int c = 0; c < 5; c++)
    for (int i = 0; i < CB__H2_SMALL_KEEP; i++) {
      void **slot = &blocks[c * CB__H2_SMALL_KEEP + i];
      *slot = take(&m, class_bytes(62 - c));
      ASSERT_NOT_NULL(*slot);
      memset(*slot, c, class_bytes(62 - c));
    }
  for (int i = 0; i < 5 * CB__H2_SMALL_KEEP; i++) give(&m, blocks[i]);
  for (int c = 62; c > 58; c--) ASSERT_EQ(k->n[c], CB__H2_SMALL_KEEP);
  ASSERT_EQ(k->n[58], (CB__H2_SMALL_KEEP_BYTES - 1998848u) / class_bytes(58));
  ASSERT_EQ(k->kept, kept_by_counts(k));
  ASSERT_LE(k->kept, (size_t)CB__H2_SMALL_KEEP_BYTES);
  ASSERT_GT(k->kept + class_bytes(58), (size_t)CB__H2_SMALL_KEEP_BYTES);
  cb__h2_mem_free(&m);
  cb__h2_small_free(k);
}
