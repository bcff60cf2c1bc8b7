/* The enif backend of term.h, for the NIF: terms are ERL_NIF_TERMs of one environment. */
#ifndef CB_TERM_ENIF_H
#define CB_TERM_ENIF_H

#include <erl_nif.h>

#include "term.h"

typedef struct cb_enif_in_s {
  cb_term_in_t in;
  ErlNifEnv *env;
} cb_enif_in_t;

/* A reader of env's terms: pass &r.in to the codec, and CB_ENIF_TERM(t) for a term. Flattened iodata lives in
 * env (as long as the NIF call), so there is nothing to free. */
void cb_enif_in_init(cb_enif_in_t *r, ErlNifEnv *env);
#define CB_ENIF_TERM(t) ((cb_term_t)(t))

typedef struct cb_enif_frame_s {
  int kind;                /* tuple, list or map */
  size_t need, have;       /* the parts it takes (a map: twice its pairs) and those written */
  ERL_NIF_TERM *parts;     /* `here`, or allocated for a larger one */
  ERL_NIF_TERM here[40];   /* a journal entry's 19 pairs fit */
} cb_enif_frame_t;

/* Atoms the writer made, by name: a journal read writes the same 20 or so atoms for every entry, and a lookup
 * here costs less than one in the VM's atom table (a hash under a lock). */
#define CB_ENIF_ATOMS 64
typedef struct cb_enif_atom_s {
  unsigned char len;
  char name[23];
  ERL_NIF_TERM atom;
} cb_enif_atom_t;

typedef struct cb_enif_out_s {
  cb_term_out_t out;
  ErlNifEnv *env;
  int depth;
  int done;
  ERL_NIF_TERM result;
  uint64_t atoms_used; /* which slots of atoms hold one */
  cb_enif_atom_t atoms[CB_ENIF_ATOMS];
  cb_enif_frame_t frames[CB_TERM_OUT_DEPTH];
} cb_enif_out_t;

/* A writer of one term in env: pass &w.out to the codec, then take the term with cb_enif_out_term(). */
void cb_enif_out_init(cb_enif_out_t *w, ErlNifEnv *env);

/* The term written: 0, or -1 when a write failed (memory) or the term is incomplete. Frees what the writer
 * holds either way. */
int cb_enif_out_term(cb_enif_out_t *w, ERL_NIF_TERM *t);

#endif
