/* The ei backend of term.h, for the port program: terms are byte offsets into one frame in the external term
 * format (which the caller has checked is whole: every term in it skips cleanly). */
#ifndef CB_TERM_EI_H
#define CB_TERM_EI_H

#include <ei.h>

#include "term.h"

/* Slots of the reader's memo of where terms end (a power of 2). */
#define CB_EI_SKIP_MEMO 512

typedef struct cb_ei_in_s {
  cb_term_in_t in;
  const char *buf;
  struct cb_ei_flat_s *flat; /* iodata flattened so far, freed by cb_ei_in_free() */
  struct {
    int from, to; /* from: the term's offset + 1 (0: an empty slot) */
  } skip[CB_EI_SKIP_MEMO]; /* where terms skipped from the codec's calls end (term_ei.c, skip) */
} cb_ei_in_t;

/* A reader of buf's terms: pass &r.in to the codec, and CB_EI_TERM(index) for the term at that index. */
void cb_ei_in_init(cb_ei_in_t *r, const char *buf);
#define CB_EI_TERM(index) ((cb_term_t)(index))
/* Frees the iodata the reader flattened (strings decoded from it point there). */
void cb_ei_in_free(cb_ei_in_t *r);

typedef struct cb_ei_out_s {
  cb_term_out_t out;
  ei_x_buff *x;
  int depth;
  struct {
    int list;    /* a list ends with [] once its elements are written */
    size_t left; /* parts still to come */
  } frames[CB_TERM_OUT_DEPTH];
} cb_ei_out_t;

/* A writer appending to x (made by the caller, with the version byte). */
void cb_ei_out_init(cb_ei_out_t *w, ei_x_buff *x);

/* 0 when one whole term was written, -1 when a write failed or the term is incomplete. */
int cb_ei_out_done(cb_ei_out_t *w);

#endif
