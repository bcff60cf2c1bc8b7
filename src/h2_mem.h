/* The memory of one nghttp2 session (h2_mem.c). Internal to the engine. */
#ifndef CB_H2_MEM_H
#define CB_H2_MEM_H

#include <nghttp2/nghttp2.h>
#include <stddef.h>

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

typedef struct {
  nghttp2_mem mem; /* given to nghttp2_session_server_new3; mem_user_data points back here */
  cb__h2_big_t big[CB__H2_MEM_SLOTS];
} cb__h2_mem_t;

void cb__h2_mem_init(cb__h2_mem_t *m);
/* The session is at rest (no frame being sent, nothing queued): gives its frame buffers' pages back. */
void cb__h2_mem_rest(cb__h2_mem_t *m);
/* Unmaps what the session did not free (after nghttp2_session_del, nothing should be left). */
void cb__h2_mem_free(cb__h2_mem_t *m);

#endif
