/* Per-worker caches of fixed-size blocks: the storage a connection needs only while it has work in flight
 * (its output queue's arena and entries, the HTTP/1.1 request state) is taken from its worker's cache when
 * the work begins and given back when the connection is idle again. An idle connection then holds none of
 * it (issue 11: memory per idle connection), and a busy one pays a pointer pop and push instead of a malloc
 * and free per request. A cache keeps at most CB__CACHE_MAX blocks; beyond that, blocks are freed. Touched
 * only by the worker's thread. */
#include <stdlib.h>

#include "base/base.h"

void cb__cache_init(cb__cache_t *k, size_t size) {
  k->n = 0;
  k->size = size;
}

void *cb__cache_get(cb__cache_t *k) {
  if (k->n > 0) return k->free[--k->n];
  return malloc(k->size);
}

void cb__cache_put(cb__cache_t *k, void *p) {
  if (p == NULL) return;
  if (k->n < CB__CACHE_MAX)
    k->free[k->n++] = p;
  else
    free(p);
}

void cb__cache_drain(cb__cache_t *k) {
  while (k->n > 0) free(k->free[--k->n]);
}

void cb__caches_init(cb__caches_t *cs, size_t outq_block) {
  cb__cache_init(&cs->outq, outq_block);
  cb__cache_init(&cs->b4k, CB__BLOCK_4K);
  cb__cache_init(&cs->h1, 0); /* sized by HTTP/1.1 when it first takes a connection (proto/http1.c) */
}

void cb__caches_drain(cb__caches_t *cs) {
  cb__cache_drain(&cs->outq);
  cb__cache_drain(&cs->b4k);
  cb__cache_drain(&cs->h1);
}
