/* The {reply, Items} frame read in one pass, for the frames cbench_port_handler sends under load: every item a
 * whole answer {Ref, reply, Status, [{Name, Value}], Body} whose strings are binaries.
 *
 * Why a second reader: the codec reads terms in any order, as the NIF does, so an ei frame's parts are found by
 * skipping from a compound's first (terms/term_ei.c), and the frame is checked whole with ei_skip_term before.
 * For a frame of answers that was about 4,400 instructions per answer, a third of the port program's cost of an
 * Erlang-handled request (docs/bench.md, "The Erlang handler cases"). This reader walks the bytes once, checking
 * each length against the frame's end as it goes, and stops at the first thing it does not take: a frame it
 * declines goes to the codec as before (port_calls.c, port_reply), which gives every other shape its meaning,
 * iodata, streams and malformed frames included. So it only ever accepts, and what it accepts reads the same as
 * through the codec (test/fuzz/fuzz_port_reply.c compares the two on every input it takes). */
#include "port.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  const unsigned char *p, *end;
} rd_t;

static int has(const rd_t *r, size_t n) { return (size_t)(r->end - r->p) >= n; }

static uint32_t be32(const unsigned char *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* A non-negative integer of at most 64 bits, in the three forms term_to_binary gives one. */
static int ref_term(rd_t *r, uint64_t *v) {
  if (!has(r, 2)) return -1;
  switch (r->p[0]) {
    case ERL_SMALL_INTEGER_EXT: *v = r->p[1]; r->p += 2; return 0;
    case ERL_INTEGER_EXT: {
      if (!has(r, 5)) return -1;
      int32_t s = (int32_t)be32(r->p + 1);
      if (s < 0) return -1;
      *v = (uint64_t)s;
      r->p += 5;
      return 0;
    }
    case ERL_SMALL_BIG_EXT: {
      unsigned n = r->p[1];
      if (n == 0 || n > 8 || !has(r, 3 + (size_t)n) || r->p[2] != 0) return -1; /* r->p[2]: the sign */
      uint64_t x = 0;
      for (unsigned i = n; i-- > 0;) x = x << 8 | r->p[3 + i]; /* little-endian digits */
      *v = x;
      r->p += 3 + n;
      return 0;
    }
    default: return -1;
  }
}

/* Any C int (cb_server_reply checks the range and names it): small integers only, as Erlang encodes them. */
static int int_term(rd_t *r, int *v) {
  if (!has(r, 2)) return -1;
  if (r->p[0] == ERL_SMALL_INTEGER_EXT) {
    *v = r->p[1];
    r->p += 2;
    return 0;
  }
  if (r->p[0] != ERL_INTEGER_EXT || !has(r, 5)) return -1;
  *v = (int32_t)be32(r->p + 1);
  r->p += 5;
  return 0;
}

/* A binary, pointed at in the frame (an empty one as "", as the codec gives it). */
static int bin_term(rd_t *r, cb_str_t *s) {
  if (!has(r, 5) || r->p[0] != ERL_BINARY_EXT) return -1;
  uint32_t n = be32(r->p + 1);
  if (!has(r, 5 + (size_t)n)) return -1;
  *s = (cb_str_t){n ? (const char *)r->p + 5 : "", n};
  r->p += 5 + n;
  return 0;
}

static int tuple_of(rd_t *r, unsigned arity) {
  if (!has(r, 2) || r->p[0] != ERL_SMALL_TUPLE_EXT || r->p[1] != arity) return -1;
  r->p += 2;
  return 0;
}

/* The atom reply, in any of its four encodings (Latin-1 or UTF-8: the same bytes for it; OTP 25 writes ATOM_EXT,
 * OTP 26 on SMALL_ATOM_UTF8_EXT). */
static int reply_atom(rd_t *r) {
  size_t head;
  if (!has(r, 1)) return -1;
  switch (r->p[0]) {
    case ERL_SMALL_ATOM_EXT:
    case ERL_SMALL_ATOM_UTF8_EXT:
      if (!has(r, 2) || r->p[1] != 5) return -1;
      head = 2;
      break;
    case ERL_ATOM_EXT:
    case ERL_ATOM_UTF8_EXT:
      if (!has(r, 3) || r->p[1] != 0 || r->p[2] != 5) return -1;
      head = 3;
      break;
    default: return -1;
  }
  if (!has(r, head + 5) || memcmp(r->p + head, "reply", 5) != 0) return -1;
  r->p += head + 5;
  return 0;
}

/* A proper list's length: [] is 0, a LIST_EXT its count (its tail, [], is read by nil_tail after the elements).
 * A LIST_EXT of no elements is its tail alone, whatever that is (`l 0 m 1 ","` is the binary <<",">>), and
 * term_to_binary never writes one: not taken (the codec reads it), so that 0 always means [] with no tail. */
static int list_head(rd_t *r, uint32_t *n) {
  if (has(r, 1) && r->p[0] == ERL_NIL_EXT) {
    r->p += 1;
    *n = 0;
    return 0;
  }
  if (!has(r, 5) || r->p[0] != ERL_LIST_EXT) return -1;
  *n = be32(r->p + 1);
  if (*n == 0) return -1;
  r->p += 5;
  return 0;
}

static int nil_tail(rd_t *r) {
  if (!has(r, 1) || r->p[0] != ERL_NIL_EXT) return -1;
  r->p += 1;
  return 0;
}

/* The reader's arrays, kept from frame to frame (only the main thread reads frames). */
static cb_reply_t *items;
static cb_header_t *headers; /* every item's headers, in the items' order */
static size_t items_cap, headers_cap;

/* p grown to hold need (at least 1) elements of size bytes, doubling from 64 (*cap updated): the block, or NULL
 * when memory ran out (p is then as it was). */
static void *grow(void *p, size_t *cap, size_t need, size_t size) {
  if (need <= *cap) return p;
  size_t cap2 = *cap ? *cap : 64;
  while (cap2 < need) cap2 *= 2;
  void *p2 = realloc(p, cap2 * size);
  if (p2 != NULL) *cap = cap2;
  return p2;
}

int port_reply_frame(const char *buf, int at, int end, cb_reply_t **out, size_t *n) {
  rd_t r = {(const unsigned char *)buf + at, (const unsigned char *)buf + end};
  uint32_t count, nh = 0;
  /* An item takes 19 bytes at least ({0, reply, 0, [], <<>>} with a small atom): a count that the rest of the
   * frame could not hold is not one to size the arrays by. */
  if (list_head(&r, &count) != 0 || count == 0 || count > (size_t)(r.end - r.p) / 19) return 0;
  cb_reply_t *items2 = grow(items, &items_cap, count, sizeof *items);
  if (items2 == NULL) return 0; /* the codec then reads the frame, and meets the same shortage */
  items = items2;
  for (uint32_t k = 0; k < count; k++) {
    cb_reply_t *x = &items[k];
    uint32_t hn;
    memset(x, 0, sizeof *x);
    x->op = CB_REPLY_FULL;
    if (tuple_of(&r, 5) != 0 || ref_term(&r, &x->ref) != 0 || reply_atom(&r) != 0 || int_term(&r, &x->status) != 0 ||
        list_head(&r, &hn) != 0 || hn > CB_MAX_HEADERS)
      return 0;
    if (hn > 0) {
      cb_header_t *headers2 = grow(headers, &headers_cap, (size_t)nh + hn, sizeof *headers);
      if (headers2 == NULL) return 0;
      headers = headers2;
    }
    x->nheaders = hn;
    for (uint32_t i = 0; i < hn; i++, nh++)
      if (tuple_of(&r, 2) != 0 || bin_term(&r, &headers[nh].name) != 0 || bin_term(&r, &headers[nh].value) != 0)
        return 0;
    if ((hn > 0 && nil_tail(&r) != 0) || bin_term(&r, &x->body) != 0) return 0;
  }
  if (nil_tail(&r) != 0 || r.p != r.end) return 0;
  /* The headers stopped moving: each item's are where the items before it left off. */
  for (uint32_t k = 0, first = 0; k < count; first += (uint32_t)items[k].nheaders, k++)
    items[k].headers = items[k].nheaders ? headers + first : NULL;
  *out = items;
  *n = count;
  return 1;
}
