/* The term reader and writer the codec (codec.c) is written against, with two backends: enif for the NIF
 * (term_enif.c) and ei for the port program (term_ei.c). The codec decodes and encodes Erlang terms through
 * these tables only, so that the NIF and the port program take and give the same terms by construction.
 *
 * This is the control plane (stubs, filters, journal reads, handler replies), never the per-request path of the
 * engine, so a call through a function pointer per term is fine.
 *
 * Reading: a term is a cb_term_t, an opaque handle its backend understands (an ERL_NIF_TERM for enif, a byte
 * offset into the frame for ei). Compound terms hand out handles of their parts, so the codec may look at any
 * part in any order, the same with both backends. Bytes read (binaries, atoms) point into the terms and live as
 * long as they do; flattened iodata lives as long as the reader.
 *
 * Writing: a term is written in order, parents first: tuple(2), then its two elements; list(n), then n
 * elements; map(n), then n keys each followed by its value. The backend closes a compound once its last part is
 * written. A failure (memory) is sticky: the writer's `failed` is set and the glue checks it once at the end.
 */
#ifndef CB_TERM_H
#define CB_TERM_H

#include <stddef.h>
#include <stdint.h>

#include "cbench.h"

typedef uint64_t cb_term_t;

/* A list being walked: the backend's position in it. */
typedef struct cb_term_list_s {
  uint64_t at;
  uint64_t left;
} cb_term_list_t;

typedef struct cb_term_in_s cb_term_in_t;

typedef struct cb_term_in_ops_s {
  /* The atom's name into buf, NUL-terminated: its length, or -1 for anything but an atom whose name fits. */
  int (*atom)(cb_term_in_t *in, cb_term_t t, char *buf, size_t cap);
  /* A binary's bytes (a binary only, not a list): 0, or -1. An empty binary is {"", 0}. */
  int (*binary)(cb_term_in_t *in, cb_term_t t, cb_str_t *out);
  /* iodata (a binary, or a list of bytes, binaries and such lists) flattened: 0, or -1. */
  int (*iodata)(cb_term_in_t *in, cb_term_t t, cb_str_t *out);
  /* An integer: 0 with *neg and *mag (its sign and magnitude) when the magnitude fits in 64 bits (a negative one
   * down to -2^63); 1 for an integer beyond that; -1 for anything but an integer. */
  int (*integer)(cb_term_in_t *in, cb_term_t t, int *neg, uint64_t *mag);
  /* A float (not an integer): 0, or -1. */
  int (*real)(cb_term_in_t *in, cb_term_t t, double *out);
  /* A tuple of at most max elements: its arity, with elems[0..arity) filled; -1 for anything else. */
  int (*tuple)(cb_term_in_t *in, cb_term_t t, cb_term_t *elems, int max);
  /* A proper list: its length, with *it set to walk it with next(); -1 for anything else. */
  long (*list)(cb_term_in_t *in, cb_term_t t, cb_term_list_t *it);
  /* The next element of a walked list: 1 with *head, or 0 at its end. */
  int (*next)(cb_term_in_t *in, cb_term_list_t *it, cb_term_t *head);
  /* A map's size, or -1 for anything but a map. */
  long (*map_size)(cb_term_in_t *in, cb_term_t t);
  /* The value of the atom key `key` in map t: 1 with *v, 0 when absent (or t is not a map). */
  int (*map_get)(cb_term_in_t *in, cb_term_t t, const char *key, cb_term_t *v);
} cb_term_in_ops_t;

struct cb_term_in_s {
  const cb_term_in_ops_t *ops;
};

typedef struct cb_term_out_s cb_term_out_t;

typedef struct cb_term_out_ops_s {
  void (*atom)(cb_term_out_t *out, const char *name, size_t len);
  void (*binary)(cb_term_out_t *out, const char *p, size_t len);
  void (*sint)(cb_term_out_t *out, int64_t v);
  void (*uint)(cb_term_out_t *out, uint64_t v);
  void (*tuple)(cb_term_out_t *out, size_t arity);
  void (*list)(cb_term_out_t *out, size_t n);
  void (*map)(cb_term_out_t *out, size_t pairs);
} cb_term_out_ops_t;

struct cb_term_out_s {
  const cb_term_out_ops_t *ops;
  int failed; /* sticky: a write ran out of memory, or built a term the backend refused (a map key twice) */
};

/* The most compounds open at once while writing: the codec's terms nest four deep at most. */
#define CB_TERM_OUT_DEPTH 16

#endif
