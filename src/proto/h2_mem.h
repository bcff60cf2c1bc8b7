/* The memory of nghttp2's HPACK decoders (h2_mem.c), the engine's HTTP/2 session's and the h2c client's. Internal
 * to the engine. */
#ifndef CB_H2_MEM_H
#define CB_H2_MEM_H

#include <nghttp2/nghttp2.h>
#include <stddef.h>
#include <stdint.h>

/* Blocks of this size or more are mappings of their own. */
#define CB__H2_MEM_BIG 4096
/* Blocks of exactly this size (the HPACK encoder's and decoder's ring buffers, which a session makes at once
 * but writes only when a header is indexed) are slots of per-worker mappings, four to a page. */
#define CB__H2_MEM_SLOT 1024
#define CB__H2_SLOTS_PER_CHUNK 64
/* Blocks of 2 to 3 KiB (nghttp2's session itself, about 2.9 KiB in 1.52) are three slots of one page, the
 * page's fourth a single slot: a parked session's page then goes back whole (docs/tls.md "Idle connections"),
 * where a heap block would leave a hole among the live connections' blocks. */
#define CB__H2_MEM_TRIPLE (3 * CB__H2_MEM_SLOT)
/* Mappings and slots a session may hold at once (more go to malloc). */
#define CB__H2_MEM_SLOTS 5

typedef struct {
  void *ptr;     /* NULL: a free entry */
  uint32_t len;  /* of the mapping; 0 for a slot */
  uint32_t size; /* asked for */
} cb__h2_big_t;

/* Small blocks (up to CB__H2_SMALL_MAX bytes) in size classes 16 bytes apart (h2_mem.c), kept per worker once
 * freed: nghttp2 allocates and frees several per stream (the stream, its frames, header buffers). A class's kept
 * blocks are a list linked through their first word (every class holds a pointer), so keeping more costs no
 * array. */
#define CB__H2_SMALL_CLASSES 64 /* 8, 24, 40, ... 1016 bytes */
#define CB__H2_SMALL_MAX 1016
/* Blocks kept per class, and in all. A worker's streams in flight (50 connections of 10 streams each in `make
 * bench`, 500 proxied streams on its h2c upstreams) each hold a few blocks of the same classes: with 64 kept per
 * class, the blocks of the streams past the 64th went to malloc and free (about 1,900 instructions per proxied
 * h2c request). The byte bound keeps what a burst leaves behind small until the trim gives it back. */
#define CB__H2_SMALL_KEEP 512
#define CB__H2_SMALL_KEEP_BYTES (2u << 20)

typedef struct cb__h2_small_s {
  uint32_t n[CB__H2_SMALL_CLASSES];
  size_t kept; /* bytes of the blocks kept, by their classes' sizes */
  void *free[CB__H2_SMALL_CLASSES]; /* each class's kept blocks: the first, whose first word is the next */
  /* The 1 KiB slots: free ones (a stack kept apart from them, so a slot never handed out stays untouched) and
   * the mappings they are carved from (unmapped when the worker ends). */
  void **slots;
  uint32_t nslots, slots_cap;
  void **triples; /* free triples (CB__H2_MEM_TRIPLE), each the first three slots of a page */
  uint32_t ntriples, triples_cap;
  void **chunks;     /* sorted by address, each CB__H2_SLOTS_PER_CHUNK slots, aligned to its size */
  uint64_t *chunk_free; /* per chunk: bit i, slot i is free */
  uint32_t nchunks, chunks_cap;
} cb__h2_small_t;

typedef struct {
  nghttp2_mem mem; /* given to nghttp2_session_server_new3; mem_user_data points back here */
  cb__h2_small_t *small; /* the worker's */
  cb__h2_big_t big[CB__H2_MEM_SLOTS];
} cb__h2_mem_t;

/* small: the worker's small-block cache (one thread only). */
void cb__h2_mem_init(cb__h2_mem_t *m, cb__h2_small_t *small);
/* A worker's small-block cache (NULL when out of memory: blocks then go to malloc), and its end: the blocks it
 * keeps are freed. */
cb__h2_small_t *cb__h2_small_new(void);
void cb__h2_small_free(cb__h2_small_t *small);
/* Unmaps what the session did not free (after nghttp2_session_del, nothing should be left). */
void cb__h2_mem_free(cb__h2_mem_t *m);

#endif
