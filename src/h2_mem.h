/* The memory of one nghttp2 session (h2_mem.c). Internal to the engine. */
#ifndef CB_H2_MEM_H
#define CB_H2_MEM_H

#include <nghttp2/nghttp2.h>
#include <stddef.h>
#include <stdint.h>

/* Blocks of this size or more are mappings of their own. */
#define CB__H2_MEM_BIG 4096
/* nghttp2's outgoing frame buffer: NGHTTP2_FRAMEBUF_CHUNKLEN (a 9-byte frame header, one padding byte and a
 * 16 KiB payload). Blocks of exactly this size are what cb__h2_mem_rest() empties; were nghttp2 to change it,
 * nothing would be emptied (more memory, never a lost byte). */
#define CB__H2_MEM_FRAMEBUF (16384 + 9 + 1)
/* Big blocks a session may hold at once (more go to malloc). */
#define CB__H2_MEM_SLOTS 4

typedef struct {
  void *ptr; /* NULL: a free slot */
  size_t len;  /* of the mapping */
  size_t size; /* asked for */
} cb__h2_big_t;

/* Small blocks (up to CB__H2_SMALL_MAX bytes) in size classes of powers of two from 32 bytes, kept per worker
 * once freed: nghttp2 allocates and frees several per stream (the stream, its frames, header buffers). */
#define CB__H2_SMALL_CLASSES 6 /* 32, 64, 128, 256, 512, 1024 */
#define CB__H2_SMALL_MAX 1024
#define CB__H2_SMALL_KEEP 256  /* blocks kept per class */

typedef struct cb__h2_small_s {
  uint32_t n[CB__H2_SMALL_CLASSES];
  void *free[CB__H2_SMALL_CLASSES][CB__H2_SMALL_KEEP];
} cb__h2_small_t;

typedef struct {
  nghttp2_mem mem; /* given to nghttp2_session_server_new3; mem_user_data points back here */
  cb__h2_small_t *small; /* the worker's */
  cb__h2_big_t big[CB__H2_MEM_SLOTS];
} cb__h2_mem_t;

/* small: the worker's small-block cache (one thread only). */
void cb__h2_mem_init(cb__h2_mem_t *m, cb__h2_small_t *small);
/* The worker's small-block cache, made on first use (NULL when out of memory: blocks then go to malloc). */
cb__h2_small_t *cb__h2_small_get(cb__h2_small_t **slot);
/* The session is at rest (no frame being sent, nothing queued): gives its frame buffers' pages back. */
void cb__h2_mem_rest(cb__h2_mem_t *m);
/* Unmaps what the session did not free (after nghttp2_session_del, nothing should be left). */
void cb__h2_mem_free(cb__h2_mem_t *m);

#endif
