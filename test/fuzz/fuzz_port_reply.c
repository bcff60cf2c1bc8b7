/* libFuzzer: the port program's one-pass reader of {reply, Items} frames (c_src/port_reply_frame.c) against the
 * codec it stands in for. The input is the list of items as the external term format writes it, without the
 * version byte. The reader must never read outside the input (ASan), and whatever it takes must be a whole term
 * that ei_skip_term checks to the input's end and that the codec reads to the same items: refs, ops, statuses,
 * headers and bodies, byte for byte. A frame it declines goes to the codec in the program: nothing to compare. */
#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "port.h"

static int same(cb_str_t a, cb_str_t b) { return a.len == b.len && (a.len == 0 || memcmp(a.ptr, b.ptr, a.len) == 0); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > (1u << 20)) return 0;
  char *buf = malloc(size ? size : 1); /* its own block, so that ASan sees a read past the end */
  if (buf == NULL) return 0;
  memcpy(buf, data, size);
  cb_reply_t *items;
  size_t n;
  if (port_reply_frame(buf, 0, (int)size, &items, &n)) {
    int idx = 0;
    assert(ei_skip_term(buf, &idx) == 0 && (size_t)idx == size);
    cb_ei_in_t *r = malloc(sizeof *r);
    assert(r != NULL);
    cb_ei_in_init(r, buf);
    cb_codec_replies_t g;
    assert(cb_codec_replies(&r->in, CB_EI_TERM(0), &g) == 0 && g.n == n);
    for (size_t k = 0; k < n; k++) {
      const cb_reply_t *a = &items[k], *b = &g.items[k];
      assert(a->ref == b->ref && a->op == b->op && a->status == b->status && a->nheaders == b->nheaders);
      assert(same(a->body, b->body));
      for (size_t i = 0; i < a->nheaders; i++)
        assert(same(a->headers[i].name, b->headers[i].name) && same(a->headers[i].value, b->headers[i].value));
    }
    cb_codec_replies_free(&g);
    cb_ei_in_free(r);
    free(r);
  }
  free(buf);
  return 0;
}
