/* The enif backend of term.h (term_enif.h). Reading hands out ERL_NIF_TERMs as handles; writing builds a term
 * bottom-up from the codec's parents-first order: each open compound is a frame collecting its parts, made into
 * a term when the last arrives and handed to its parent. */
#include "term_enif.h"

#include <string.h>

/* ---- reading ---- */

#define ENV(in) (((cb_enif_in_t *)(in))->env)
#define T(t) ((ERL_NIF_TERM)(t))

static int e_atom(cb_term_in_t *in, cb_term_t t, char *buf, size_t cap) {
  unsigned len;
  if (!enif_get_atom_length(ENV(in), T(t), &len, ERL_NIF_LATIN1) || (size_t)len + 1 > cap ||
      enif_get_atom(ENV(in), T(t), buf, (unsigned)cap, ERL_NIF_LATIN1) <= 0)
    return -1;
  return (int)len;
}

static int e_binary(cb_term_in_t *in, cb_term_t t, cb_str_t *out) {
  ErlNifBinary b;
  if (!enif_inspect_binary(ENV(in), T(t), &b)) return -1;
  *out = (cb_str_t){b.size ? (const char *)b.data : "", b.size};
  return 0;
}

static int e_iodata(cb_term_in_t *in, cb_term_t t, cb_str_t *out) {
  ErlNifBinary b;
  if (!enif_inspect_iolist_as_binary(ENV(in), T(t), &b)) return -1;
  *out = (cb_str_t){b.size ? (const char *)b.data : "", b.size};
  return 0;
}

static int e_integer(cb_term_in_t *in, cb_term_t t, int *neg, uint64_t *mag) {
  ErlNifUInt64 u;
  ErlNifSInt64 s;
  if (enif_get_uint64(ENV(in), T(t), &u)) {
    *neg = 0;
    *mag = u;
    return 0;
  }
  if (enif_get_int64(ENV(in), T(t), &s)) { /* negative: uint64 took every other */
    *neg = 1;
    *mag = (uint64_t)(-(s + 1)) + 1;
    return 0;
  }
  return enif_term_type(ENV(in), T(t)) == ERL_NIF_TERM_TYPE_INTEGER ? 1 : -1;
}

static int e_real(cb_term_in_t *in, cb_term_t t, double *out) { return enif_get_double(ENV(in), T(t), out) ? 0 : -1; }

static int e_tuple(cb_term_in_t *in, cb_term_t t, cb_term_t *elems, int max) {
  const ERL_NIF_TERM *e;
  int arity;
  if (!enif_get_tuple(ENV(in), T(t), &arity, &e) || arity > max) return -1;
  for (int i = 0; i < arity; i++) elems[i] = e[i];
  return arity;
}

static long e_list(cb_term_in_t *in, cb_term_t t, cb_term_list_t *it) {
  unsigned len;
  if (!enif_get_list_length(ENV(in), T(t), &len)) return -1; /* improper lists too */
  it->at = t;
  it->left = len;
  return (long)len;
}

static int e_next(cb_term_in_t *in, cb_term_list_t *it, cb_term_t *head) {
  ERL_NIF_TERM h, tail;
  if (it->left == 0 || !enif_get_list_cell(ENV(in), T(it->at), &h, &tail)) return 0;
  *head = h;
  it->at = tail;
  it->left--;
  return 1;
}

static long e_map_size(cb_term_in_t *in, cb_term_t t) {
  size_t n;
  return enif_get_map_size(ENV(in), T(t), &n) ? (long)n : -1;
}

static int e_map_get(cb_term_in_t *in, cb_term_t t, const char *key, cb_term_t *v) {
  ERL_NIF_TERM k, value;
  /* An atom that does not exist cannot be a key: no atom is made here. */
  if (!enif_make_existing_atom(ENV(in), key, &k, ERL_NIF_LATIN1) || !enif_get_map_value(ENV(in), T(t), k, &value))
    return 0;
  *v = value;
  return 1;
}

static const cb_term_in_ops_t in_ops = {e_atom,  e_binary, e_iodata,   e_integer, e_real,
                                        e_tuple, e_list,   e_next,     e_map_size, e_map_get};

void cb_enif_in_init(cb_enif_in_t *r, ErlNifEnv *env) {
  r->in.ops = &in_ops;
  r->env = env;
}

/* ---- writing ---- */

enum { K_TUPLE, K_LIST, K_MAP };

#define W(out) ((cb_enif_out_t *)(out))

static void push(cb_enif_out_t *w, ERL_NIF_TERM t);

/* The frame on top is complete: its term goes to its parent. */
static void close_frame(cb_enif_out_t *w) {
  cb_enif_frame_t *f = &w->frames[--w->depth];
  ERL_NIF_TERM t;
  if (f->kind == K_TUPLE) {
    t = enif_make_tuple_from_array(w->env, f->parts, (unsigned)f->need);
  } else if (f->kind == K_LIST) {
    t = enif_make_list_from_array(w->env, f->parts, (unsigned)f->need);
  } else {
    /* Keys and values are interleaved: split in place into the two arrays enif wants. */
    size_t n = f->need / 2;
    ERL_NIF_TERM kv[40], *keys = n * 2 <= 40 ? kv : enif_alloc(n * 2 * sizeof *keys);
    if (keys == NULL) {
      w->out.failed = 1;
      t = enif_make_new_map(w->env);
    } else {
      for (size_t i = 0; i < n; i++) {
        keys[i] = f->parts[2 * i];
        keys[n + i] = f->parts[2 * i + 1];
      }
      if (!enif_make_map_from_arrays(w->env, keys, keys + n, n, &t)) { /* a key twice */
        w->out.failed = 1;
        t = enif_make_new_map(w->env);
      }
    }
    if (keys != kv && keys != NULL) enif_free(keys);
  }
  if (f->parts != f->here) enif_free(f->parts);
  push(w, t);
}

/* A complete term: the next part of the frame on top, or the result. */
static void push(cb_enif_out_t *w, ERL_NIF_TERM t) {
  if (w->depth == 0) {
    if (w->done) w->out.failed = 1; /* a second term at the top */
    w->result = t;
    w->done = 1;
    return;
  }
  cb_enif_frame_t *f = &w->frames[w->depth - 1];
  f->parts[f->have++] = t;
  if (f->have == f->need) close_frame(w);
}

static void open_frame(cb_enif_out_t *w, int kind, size_t need) {
  if (w->depth == CB_TERM_OUT_DEPTH) {
    w->out.failed = 1;
    return;
  }
  cb_enif_frame_t *f = &w->frames[w->depth];
  f->kind = kind;
  f->need = need;
  f->have = 0;
  f->parts = need <= sizeof f->here / sizeof f->here[0] ? f->here : enif_alloc(need * sizeof *f->parts);
  if (f->parts == NULL) {
    w->out.failed = 1;
    return;
  }
  w->depth++;
}

/* After a failure nothing more is built: the caller throws the term away. */
#define FAILED(out) (W(out)->out.failed)

static void w_atom(cb_term_out_t *out, const char *name, size_t len) {
  cb_enif_out_t *w = W(out);
  if (FAILED(out)) return;
  if (len >= sizeof w->atoms[0].name) {
    push(w, enif_make_atom_len(w->env, name, len));
    return;
  }
  uint32_t h = 2166136261u; /* FNV-1a */
  for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)name[i]) * 16777619u;
  /* Two slots per name, so that two names of one hash both stay. */
  unsigned slot = h % CB_ENIF_ATOMS;
  for (unsigned k = 0; k < 2; k++) {
    unsigned at = (slot + k) % CB_ENIF_ATOMS;
    cb_enif_atom_t *a = &w->atoms[at];
    if ((w->atoms_used >> at & 1) && a->len == len && memcmp(a->name, name, len) == 0) {
      push(w, a->atom);
      return;
    }
  }
  if (w->atoms_used >> slot & 1) slot = (slot + 1) % CB_ENIF_ATOMS;
  cb_enif_atom_t *a = &w->atoms[slot];
  /* Atoms are global: one made in any environment is good in every other. */
  a->atom = enif_make_atom_len(w->env, name, len);
  a->len = (unsigned char)len;
  memcpy(a->name, name, len);
  w->atoms_used |= (uint64_t)1 << slot;
  push(w, a->atom);
}

static void w_binary(cb_term_out_t *out, const char *p, size_t len) {
  if (FAILED(out)) return;
  ERL_NIF_TERM t;
  unsigned char *b = enif_make_new_binary(W(out)->env, len, &t);
  if (b == NULL) {
    out->failed = 1;
    return;
  }
  if (len) memcpy(b, p, len);
  push(W(out), t);
}

static void w_sint(cb_term_out_t *out, int64_t v) {
  if (!FAILED(out)) push(W(out), enif_make_int64(W(out)->env, v));
}

static void w_uint(cb_term_out_t *out, uint64_t v) {
  if (!FAILED(out)) push(W(out), enif_make_uint64(W(out)->env, v));
}

static void w_tuple(cb_term_out_t *out, size_t n) {
  if (FAILED(out)) return;
  if (n == 0)
    push(W(out), enif_make_tuple_from_array(W(out)->env, NULL, 0));
  else
    open_frame(W(out), K_TUPLE, n);
}

static void w_list(cb_term_out_t *out, size_t n) {
  if (FAILED(out)) return;
  if (n == 0)
    push(W(out), enif_make_list(W(out)->env, 0));
  else
    open_frame(W(out), K_LIST, n);
}

static void w_map(cb_term_out_t *out, size_t pairs) {
  if (FAILED(out)) return;
  if (pairs == 0)
    push(W(out), enif_make_new_map(W(out)->env));
  else
    open_frame(W(out), K_MAP, pairs * 2);
}

static const cb_term_out_ops_t out_ops = {w_atom, w_binary, w_sint, w_uint, w_tuple, w_list, w_map};

void cb_enif_out_init(cb_enif_out_t *w, ErlNifEnv *env) {
  w->out.ops = &out_ops;
  w->out.failed = 0;
  w->env = env;
  w->depth = 0;
  w->done = 0;
  w->atoms_used = 0;
}

int cb_enif_out_term(cb_enif_out_t *w, ERL_NIF_TERM *t) {
  int ok = !w->out.failed && w->done && w->depth == 0;
  while (w->depth > 0) { /* left open by a failure */
    cb_enif_frame_t *f = &w->frames[--w->depth];
    if (f->parts != f->here) enif_free(f->parts);
  }
  if (!ok) return -1;
  *t = w->result;
  return 0;
}
