/* The ei backend of term.h (term_ei.h). A term is its byte offset in the frame: a compound's parts are found by
 * skipping (ei_skip_term) from its first, so the codec can look at them in any order, as with enif. Binaries and
 * atoms are read in place; iodata that is more than one binary is flattened into memory the reader owns. */
#include "term_ei.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- reading ---- */

#define BUF(in) (((cb_ei_in_t *)(in))->buf)

struct cb_ei_flat_s {
  struct cb_ei_flat_s *next;
  char bytes[];
};

static uint32_t be32(const unsigned char *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Moves *i past the term there. The codec finds a compound's parts by skipping from its first, so every term
 * of a frame is skipped over about as many times as it is deep; ei_skip_term decodes each (ei_get_type and a
 * decode call per term: 60% of the time a {reply, Items} frame took to read). The types the node's frames carry
 * are skipped here by their headers alone, the rest by ei_skip_term. Sizes are trusted: a frame is checked
 * whole with ei_skip_term before any of it is read (cbench_port.c, dispatch). */
static int skip_term(const char *buf, int *i) {
  const unsigned char *p = (const unsigned char *)buf + *i;
  uint32_t n;
  switch (p[0]) {
    case ERL_NIL_EXT: *i += 1; return 0;
    case ERL_SMALL_INTEGER_EXT: *i += 2; return 0;
    case ERL_INTEGER_EXT: *i += 5; return 0;
    case ERL_SMALL_BIG_EXT: *i += 3 + p[1]; return 0;
    case ERL_SMALL_ATOM_EXT:
    case ERL_SMALL_ATOM_UTF8_EXT: *i += 2 + p[1]; return 0;
    case ERL_ATOM_EXT:
    case ERL_ATOM_UTF8_EXT:
    case ERL_STRING_EXT: *i += 3 + (p[1] << 8 | p[2]); return 0;
    case ERL_BINARY_EXT: *i += 5 + (int)be32(p + 1); return 0;
    case ERL_SMALL_TUPLE_EXT:
      n = p[1];
      *i += 2;
      break;
    case ERL_LARGE_TUPLE_EXT:
      n = be32(p + 1);
      *i += 5;
      break;
    case ERL_LIST_EXT:
      n = be32(p + 1) + 1; /* and the tail */
      *i += 5;
      break;
    default: return ei_skip_term(buf, i);
  }
  for (uint32_t k = 0; k < n; k++)
    if (skip_term(buf, i) != 0) return -1;
  return 0;
}

/* skip_term for the codec's calls, remembered: a list is looked at twice (counted, then read) and its elements
 * once more one by one, so most of its terms are skipped again from the same offset. The slot is the offset's
 * Fibonacci hash. */
static int skip(cb_term_in_t *in, int *i) {
  cb_ei_in_t *r = (cb_ei_in_t *)in;
  unsigned slot = ((unsigned)*i * 2654435769u) >> 23;
  _Static_assert(CB_EI_SKIP_MEMO == 512, "the hash takes 9 bits");
  if (r->skip[slot].from == *i + 1) {
    *i = r->skip[slot].to;
    return 0;
  }
  int from = *i;
  if (skip_term(r->buf, i) != 0) return -1;
  r->skip[slot].from = from + 1;
  r->skip[slot].to = *i;
  return 0;
}

static int r_atom(cb_term_in_t *in, cb_term_t t, char *buf, size_t cap) {
  char atom[MAXATOMLEN_UTF8];
  int i = (int)t;
  if (ei_decode_atom(BUF(in), &i, atom) != 0) return -1;
  size_t len = strlen(atom);
  if (len + 1 > cap) return -1;
  memcpy(buf, atom, len + 1);
  return (int)len;
}

static int r_binary(cb_term_in_t *in, cb_term_t t, cb_str_t *out) {
  int type, size, i = (int)t;
  if (ei_get_type(BUF(in), &i, &type, &size) != 0 || type != ERL_BINARY_EXT || size < 0) return -1;
  /* BINARY_EXT: the tag, a 4-byte length, then the bytes: pointed at, not copied. */
  *out = (cb_str_t){size ? BUF(in) + i + 5 : "", (size_t)size};
  return 0;
}

/* Walks the iodata at *idx: its bytes are added to out at *len (out NULL: only counted). 0, or -1 for anything
 * but iodata (or a nesting too deep to be one of ours). */
static int walk_iodata(const char *buf, int *idx, char *out, size_t *len, int depth) {
  int type, size, n;
  if (depth > 64 || ei_get_type(buf, idx, &type, &size) != 0) return -1;
  switch (type) {
    case ERL_BINARY_EXT:
    case ERL_STRING_EXT: /* a list of bytes, its bytes after the tag and a 2-byte length */
      if (out) memcpy(out + *len, buf + *idx + (type == ERL_BINARY_EXT ? 5 : 3), (size_t)size);
      *len += (size_t)size;
      return skip_term(buf, idx);
    case ERL_NIL_EXT: return skip_term(buf, idx);
    case ERL_LIST_EXT:
      if (ei_decode_list_header(buf, idx, &n) != 0) return -1;
      for (int i = 0; i < n; i++) {
        int at = *idx;
        long byte;
        if (ei_get_type(buf, &at, &type, &size) != 0) return -1;
        if (type == ERL_SMALL_INTEGER_EXT) {
          if (ei_decode_long(buf, idx, &byte) != 0) return -1;
          if (out) out[*len] = (char)byte;
          (*len)++;
        } else if (walk_iodata(buf, idx, out, len, depth + 1) != 0) {
          return -1;
        }
      }
      /* The tail: [] or a binary. */
      if (ei_get_type(buf, idx, &type, &size) != 0 || (type != ERL_NIL_EXT && type != ERL_BINARY_EXT)) return -1;
      return walk_iodata(buf, idx, out, len, depth + 1);
    default: return -1;
  }
}

static int r_iodata(cb_term_in_t *in, cb_term_t t, cb_str_t *out) {
  cb_ei_in_t *r = (cb_ei_in_t *)in;
  int type, size, i = (int)t;
  size_t len = 0;
  if (r_binary(in, t, out) == 0) return 0;
  if (ei_get_type(r->buf, &i, &type, &size) != 0) return -1;
  if (type == ERL_STRING_EXT) { /* in place too */
    *out = (cb_str_t){size ? r->buf + i + 3 : "", (size_t)size};
    return 0;
  }
  if (walk_iodata(r->buf, &i, NULL, &len, 0) != 0) return -1;
  struct cb_ei_flat_s *f = malloc(sizeof *f + (len ? len : 1));
  if (f == NULL) return -1;
  f->next = r->flat;
  r->flat = f;
  len = 0;
  i = (int)t;
  if (walk_iodata(r->buf, &i, f->bytes, &len, 0) != 0) return -1;
  *out = (cb_str_t){f->bytes, len};
  return 0;
}

static int r_integer(cb_term_in_t *in, cb_term_t t, int *neg, uint64_t *mag) {
  int type, size, i = (int)t;
  unsigned long long u;
  long long s;
  if (ei_get_type(BUF(in), &i, &type, &size) != 0 ||
      (type != ERL_SMALL_INTEGER_EXT && type != ERL_INTEGER_EXT && type != ERL_SMALL_BIG_EXT &&
       type != ERL_LARGE_BIG_EXT))
    return -1;
  if (ei_decode_ulonglong(BUF(in), &i, &u) == 0) {
    *neg = 0;
    *mag = u;
    return 0;
  }
  i = (int)t;
  if (ei_decode_longlong(BUF(in), &i, &s) == 0 && s < 0) {
    *neg = 1;
    *mag = (uint64_t)(-(s + 1)) + 1;
    return 0;
  }
  return 1;
}

static int r_real(cb_term_in_t *in, cb_term_t t, double *out) {
  int i = (int)t;
  return ei_decode_double(BUF(in), &i, out) == 0 ? 0 : -1;
}

static int r_tuple(cb_term_in_t *in, cb_term_t t, cb_term_t *elems, int max) {
  int arity, i = (int)t;
  if (ei_decode_tuple_header(BUF(in), &i, &arity) != 0 || arity > max) return -1;
  for (int k = 0; k < arity; k++) {
    elems[k] = (cb_term_t)i;
    if (skip(in, &i) != 0) return -1;
  }
  return arity;
}

/* A proper list: LIST_EXT whose tail is [], or NIL_EXT. A STRING_EXT (a list of small integers) is not one the
 * codec takes anywhere but as iodata, which reads it itself: refused here, as its first element would be. */
static long r_list(cb_term_in_t *in, cb_term_t t, cb_term_list_t *it) {
  int type, size, n, i = (int)t;
  if (ei_get_type(BUF(in), &i, &type, &size) != 0 || (type != ERL_LIST_EXT && type != ERL_NIL_EXT)) return -1;
  if (ei_decode_list_header(BUF(in), &i, &n) != 0 || n < 0) return -1;
  it->at = (uint64_t)i;
  it->left = (uint64_t)n;
  for (int k = 0; k < n; k++)
    if (skip(in, &i) != 0) return -1;
  if (n > 0 && (ei_get_type(BUF(in), &i, &type, &size) != 0 || type != ERL_NIL_EXT)) return -1;
  return n;
}

static int r_next(cb_term_in_t *in, cb_term_list_t *it, cb_term_t *head) {
  int i = (int)it->at;
  if (it->left == 0) return 0;
  *head = it->at;
  if (skip(in, &i) != 0) return 0;
  it->at = (uint64_t)i;
  it->left--;
  return 1;
}

static long r_map_size(cb_term_in_t *in, cb_term_t t) {
  int arity, i = (int)t;
  return ei_decode_map_header(BUF(in), &i, &arity) == 0 ? arity : -1;
}

static int r_map_get(cb_term_in_t *in, cb_term_t t, const char *key, cb_term_t *v) {
  int arity, i = (int)t;
  if (ei_decode_map_header(BUF(in), &i, &arity) != 0) return 0;
  for (int k = 0; k < arity; k++) {
    char atom[MAXATOMLEN_UTF8];
    int at = i;
    int hit = ei_decode_atom(BUF(in), &at, atom) == 0 && strcmp(atom, key) == 0;
    if (skip(in, &i) != 0) return 0; /* the key */
    if (hit) {
      *v = (cb_term_t)i;
      return 1;
    }
    if (skip(in, &i) != 0) return 0; /* its value */
  }
  return 0;
}

static const cb_term_in_ops_t in_ops = {r_atom,  r_binary, r_iodata, r_integer,  r_real,
                                        r_tuple, r_list,   r_next,   r_map_size, r_map_get};

void cb_ei_in_init(cb_ei_in_t *r, const char *buf) {
  r->in.ops = &in_ops;
  r->buf = buf;
  r->flat = NULL;
  memset(r->skip, 0, sizeof r->skip);
}

void cb_ei_in_free(cb_ei_in_t *r) {
  while (r->flat != NULL) {
    struct cb_ei_flat_s *next = r->flat->next;
    free(r->flat);
    r->flat = next;
  }
}

/* ---- writing ---- */

#define W(out) ((cb_ei_out_t *)(out))

/* One part is written: the frames it completes are closed (a list's with its []). */
static void part_done(cb_ei_out_t *w, int rc) {
  if (rc != 0) w->out.failed = 1;
  while (w->depth > 0) {
    if (--w->frames[w->depth - 1].left > 0) return;
    if (w->frames[w->depth - 1].list && ei_x_encode_empty_list(w->x) != 0) w->out.failed = 1;
    w->depth--;
  }
}

static void open_frame(cb_ei_out_t *w, int list, size_t parts, int rc) {
  if (rc != 0) w->out.failed = 1;
  if (parts == 0) {
    part_done(w, list ? ei_x_encode_empty_list(w->x) : 0);
    return;
  }
  if (w->depth == CB_TERM_OUT_DEPTH) {
    w->out.failed = 1;
    return;
  }
  w->frames[w->depth].list = list;
  w->frames[w->depth].left = parts;
  w->depth++;
}

static void w_atom(cb_term_out_t *out, const char *name, size_t len) {
  part_done(W(out), ei_x_encode_atom_len(W(out)->x, name, (int)len));
}

static void w_binary(cb_term_out_t *out, const char *p, size_t len) {
  part_done(W(out), ei_x_encode_binary(W(out)->x, len ? p : "", (long)len));
}

static void w_sint(cb_term_out_t *out, int64_t v) { part_done(W(out), ei_x_encode_longlong(W(out)->x, v)); }

static void w_uint(cb_term_out_t *out, uint64_t v) { part_done(W(out), ei_x_encode_ulonglong(W(out)->x, v)); }

static void w_tuple(cb_term_out_t *out, size_t n) {
  open_frame(W(out), 0, n, ei_x_encode_tuple_header(W(out)->x, (long)n));
}

static void w_list(cb_term_out_t *out, size_t n) {
  /* An empty list is [] alone (open_frame writes it); a list header of 0 is not a term. */
  open_frame(W(out), 1, n, n ? ei_x_encode_list_header(W(out)->x, (long)n) : 0);
}

static void w_map(cb_term_out_t *out, size_t pairs) {
  open_frame(W(out), 0, pairs * 2, ei_x_encode_map_header(W(out)->x, (long)pairs));
}

static const cb_term_out_ops_t out_ops = {w_atom, w_binary, w_sint, w_uint, w_tuple, w_list, w_map};

void cb_ei_out_init(cb_ei_out_t *w, ei_x_buff *x) {
  w->out.ops = &out_ops;
  w->out.failed = 0;
  w->x = x;
  w->depth = 0;
}

int cb_ei_out_done(cb_ei_out_t *w) { return w->out.failed || w->depth != 0 ? -1 : 0; }
