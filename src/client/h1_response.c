/* HTTP/1.1 answers: llhttp in response mode, with the limits and framing rules a client needs and llhttp leaves
 * to its user (client.h says what the caller sees).
 *
 * Exact limits with no copy and no scan of our own: llhttp reports no positions, so it is paused where a bounded
 * section starts in the middle of the bytes it was given (an answer after another one or after a 1xx: a head;
 * the end of a chunked answer's head or of a chunk: a chunk-size line; the last chunk's line: the trailers).
 * Each section then starts where one llhttp_execute starts, and while it is being read llhttp is given at most
 * the bytes left of its budget. A section still incomplete when its budget is spent is over the limit, one that
 * completes within it is not, whatever the reads' sizes. A pause costs one return from llhttp_execute: none for
 * a read that holds one answer, one per further pipelined answer, and one per chunk of a chunked body.
 *
 * Nothing is decided on a part of a field: llhttp reports a name or a value in pieces when a read ends inside
 * it (and not at all when it meets an error inside it), so a field is counted and checked once its name is
 * complete, and the answer to the same bytes is the same however they were cut. The fields are copied into the
 * caller's buffer and shown to on_head once the head is complete; in count_only mode llhttp is given no field
 * callbacks at all. */
#include <stdalign.h>
#include <string.h>

#include "client/client.h"

/* Where in an answer the parser is. PH_INTERIM: a 1xx ended, the final head has not begun. The bounded sections
 * (head, chunk-size line, trailers) are those from PH_HEAD to before PH_BODY. */
enum { PH_IDLE, PH_INTERIM, PH_HEAD, PH_CHUNKLINE, PH_TRAILER, PH_BODY, PH_CLOSED, PH_STOPPED };

#define BOUNDED(ph) ((ph) >= PH_HEAD && (ph) < PH_BODY)

/* cb_cres_t.keep_alive after a chunked body's last chunk: the trailers may change what the head said. */
#define KEEP_ASK_LLHTTP 2

#define P(lp) ((cb_cres_t *)(lp))

/* RFC 9110 token characters (client.h): what a field name may hold (llhttp 8.1 lets spaces through in names). */
const uint8_t cb_ctoken[256] = {
    ['!'] = 1, ['#'] = 1, ['$'] = 1, ['%'] = 1, ['&'] = 1, ['\''] = 1, ['*'] = 1, ['+'] = 1, ['-'] = 1,
    ['.'] = 1, ['^'] = 1, ['_'] = 1, ['`'] = 1, ['|'] = 1, ['~'] = 1,
    ['0'] = 1, ['1'] = 1, ['2'] = 1, ['3'] = 1, ['4'] = 1, ['5'] = 1, ['6'] = 1, ['7'] = 1, ['8'] = 1, ['9'] = 1,
    ['A'] = 1, ['B'] = 1, ['C'] = 1, ['D'] = 1, ['E'] = 1, ['F'] = 1, ['G'] = 1, ['H'] = 1, ['I'] = 1,
    ['J'] = 1, ['K'] = 1, ['L'] = 1, ['M'] = 1, ['N'] = 1, ['O'] = 1, ['P'] = 1, ['Q'] = 1, ['R'] = 1,
    ['S'] = 1, ['T'] = 1, ['U'] = 1, ['V'] = 1, ['W'] = 1, ['X'] = 1, ['Y'] = 1, ['Z'] = 1,
    ['a'] = 1, ['b'] = 1, ['c'] = 1, ['d'] = 1, ['e'] = 1, ['f'] = 1, ['g'] = 1, ['h'] = 1, ['i'] = 1,
    ['j'] = 1, ['k'] = 1, ['l'] = 1, ['m'] = 1, ['n'] = 1, ['o'] = 1, ['p'] = 1, ['q'] = 1, ['r'] = 1,
    ['s'] = 1, ['t'] = 1, ['u'] = 1, ['v'] = 1, ['w'] = 1, ['x'] = 1, ['y'] = 1, ['z'] = 1,
};

/* A callback of ours refuses: llhttp stops with an error of its own, and cb_cres_feed returns `e` instead. */
static int refuse(cb_cres_t *p, int e) {
  p->err = e;
  return -1;
}

/* ---- the fields of a head or a trailer section ---- */

static int gather(cb_cres_t *p, const char *at, size_t n) {
  if (n == 0) return 0; /* text may be NULL (no head buffer) */
  if (n > p->text_cap - p->text_len) return refuse(p, CB_CRES_E_HEAD_TOO_BIG);
  memcpy(p->text + p->text_len, at, n);
  p->text_len += n;
  return 0;
}

static int on_header_field(llhttp_t *lp, const char *at, size_t n) {
  cb_cres_t *p = P(lp);
  if (!p->name_open) {
    p->name_open = 1;
    p->name_off = p->text_len;
  }
  for (size_t i = 0; i < n; i++)
    if (!cb_ctoken[(uint8_t)at[i]]) return refuse(p, CB_CRES_E_BAD);
  return gather(p, at, n);
}

/* The name is complete: the field is counted now (see the top of the file). */
static int on_header_field_complete(llhttp_t *lp) {
  cb_cres_t *p = P(lp);
  /* llhttp 8.1 lets a line that starts with ':' through as a field with an empty name. */
  if (!p->name_open || p->text_len == p->name_off) return refuse(p, CB_CRES_E_BAD);
  p->name_open = 0;
  if (p->nfields >= p->max_fields) return refuse(p, CB_CRES_E_HEAD_TOO_BIG);
  cb_chdr_t *f = &p->fields[p->nfields++];
  f->name = p->text + p->name_off;
  f->name_len = p->text_len - p->name_off;
  f->value = p->text + p->text_len; /* an empty value gets no on_header_value */
  f->value_len = 0;
  return 0;
}

static int on_header_value(llhttp_t *lp, const char *at, size_t n) {
  cb_cres_t *p = P(lp);
  if (gather(p, at, n)) return -1;
  p->fields[p->nfields - 1].value_len += n;
  return 0;
}

/* llhttp keeps a value's trailing whitespace (RFC 9110 5.5: it is not part of the value). */
static void trim_values(cb_cres_t *p) {
  for (int i = 0; i < p->nfields; i++) {
    cb_chdr_t *f = &p->fields[i];
    while (f->value_len > 0 && (f->value[f->value_len - 1] == ' ' || f->value[f->value_len - 1] == '\t'))
      f->value_len--;
  }
}

/* ---- framing ---- */

static int on_headers_complete(llhttp_t *lp) {
  cb_cres_t *p = P(lp);
  int status = lp->status_code;
  unsigned flags = lp->flags;
  if (status < 200 && status != 101) { /* interim: the final answer follows */
    p->nfields = 0;
    p->text_len = 0;
    return 1; /* no body (llhttp 8.1 would read one a content-length announced) */
  }
  /* 204 and 304 answers have no body whatever their fields say (RFC 9110 6.4.1), nor have answers to HEAD, nor
   * a 101. The rest is llhttp_message_needs_eof() and llhttp_should_keep_alive() as they will be once llhttp
   * learns that from what this returns, written out without branches: this runs once per answer. A body is
   * read until the close (RFC 9112 6.3) when it has neither a length nor chunked as its last transfer coding
   * (llhttp refuses a content-length beside a transfer-encoding). */
  int skip = (status == 204) | (status == 304) | (status == 101) | p->head_req;
  /* llhttp takes a content-length up to 2^64-1; one past INT64_MAX would be a negative length here (an answer
   * "without a body" whose body llhttp still reads). No answer is that long: malformed. */
  if ((flags & F_CONTENT_LENGTH) && (int64_t)lp->content_length < 0) return refuse(p, CB_CRES_E_BAD);
  cb_cres_head_t h;
  h.status = status;
  h.major = lp->http_major;
  h.minor = lp->http_minor;
  unsigned framing = flags & (F_CHUNKED | F_CONTENT_LENGTH | F_TRANSFER_ENCODING | F_CONNECTION_CLOSE);
  if (!skip && framing == F_CONTENT_LENGTH && h.major == 1 && h.minor == 1) {
    /* The usual answer (HTTP/1.1 with a content-length, no connection: close) in a few instructions. */
    h.content_length = (int64_t)lp->content_length;
    h.chunked = 0;
    h.keep_alive = 1;
    h.has_body = h.content_length > 0;
  } else {
    int body = !skip;
    framing &= ~(unsigned)F_CONNECTION_CLOSE;
    int until_close = body & ((framing == 0) | (framing == F_TRANSFER_ENCODING));
    int keep = h.major > 0 && h.minor > 0 ? !(flags & F_CONNECTION_CLOSE) : (flags & F_CONNECTION_KEEP_ALIVE) != 0;
    h.chunked = body & ((flags & F_CHUNKED) != 0);
    h.content_length = (flags & F_CONTENT_LENGTH) ? (int64_t)lp->content_length : -1;
    h.keep_alive = keep & !until_close & (status != 101); /* after a 101 the connection leaves HTTP/1.1 */
    h.has_body = until_close | h.chunked | (body & (h.content_length > 0));
  }
  if (p->lim.max_body && h.has_body && h.content_length > 0 && (uint64_t)h.content_length > p->lim.max_body)
    return refuse(p, CB_CRES_E_BODY_TOO_BIG);
  h.headers = p->fields;
  h.nheaders = p->nfields;
  if (p->nfields) trim_values(p);
  p->phase = PH_BODY;
  p->final_seen = 1;
  p->keep_alive = (uint8_t)h.keep_alive;
  p->body_bytes = 0;
  if (p->cb->on_head) {
    int r = p->cb->on_head(p->ud, &h);
    if (r < 0) {
      p->cb_ret = r;
      return -1;
    }
  }
  p->nfields = 0;
  p->text_len = 0;
  if (h.chunked) { /* the first chunk-size line starts here: a pause marks it */
    p->phase = PH_CHUNKLINE;
    return HPE_PAUSED;
  }
  return skip;
}

static int on_body(llhttp_t *lp, const char *at, size_t n) {
  cb_cres_t *p = P(lp);
  int over = 0;
  if (p->lim.max_body) {
    if (n > p->lim.max_body - p->body_bytes) {
      n = (size_t)(p->lim.max_body - p->body_bytes); /* the callbacks see exactly max_body bytes */
      over = 1;
    }
    p->body_bytes += n;
  }
  if (n > 0 && p->cb->on_body) {
    int r = p->cb->on_body(p->ud, at, n);
    if (r < 0) {
      p->cb_ret = r;
      return -1;
    }
  }
  return over ? refuse(p, CB_CRES_E_BODY_TOO_BIG) : 0;
}

/* A chunk-size line is complete. After the last one come the trailers, with their own budget: a pause marks
 * where they start. */
static int on_chunk_header(llhttp_t *lp) {
  cb_cres_t *p = P(lp);
  if (lp->content_length != 0) {
    p->phase = PH_BODY;
    return 0;
  }
  p->phase = PH_TRAILER;
  if (p->keep_alive) p->keep_alive = KEEP_ASK_LLHTTP;
  return HPE_PAUSED;
}

/* A chunk's data and its line end are complete: the next chunk-size line starts here (a pause marks it). Also
 * called after the trailers, just before on_message_complete. */
static int on_chunk_complete(llhttp_t *lp) {
  cb_cres_t *p = P(lp);
  if (p->phase == PH_TRAILER) return 0;
  p->phase = PH_CHUNKLINE;
  return HPE_PAUSED;
}

/* A head begins. When cb_cres_feed saw its first byte at the start of the bytes it gave llhttp, it has begun it
 * already (PH_HEAD); when it begins after another answer (or a 1xx) in the same bytes, a pause marks where, and
 * cb_cres_feed begins it there. So a read of one answer (or whose last answer is cut by its end) costs no
 * pause, and pipelined answers one each. */
static int on_message_begin(llhttp_t *lp) {
  cb_cres_t *p = P(lp);
  return p->phase == PH_HEAD ? 0 : HPE_PAUSED;
}

static int on_message_complete(llhttp_t *lp) {
  cb_cres_t *p = P(lp);
  if (!p->final_seen) { /* a 1xx ended: the final head follows */
    p->phase = PH_INTERIM;
    return 0;
  }
  if (p->nfields > 0 && p->cb->on_trailers) {
    trim_values(p);
    int r = p->cb->on_trailers(p->ud, p->fields, p->nfields);
    if (r < 0) {
      p->cb_ret = r;
      return -1;
    }
  }
  p->nfields = 0;
  p->text_len = 0;
  /* As the head said (llhttp_should_keep_alive() written out, in on_headers_complete), unless trailers came:
   * llhttp reads them as fields (a connection or transfer-encoding among them changes its flags), and the
   * answer must be the one llhttp acts on (it refuses any byte after an answer it takes for the last). */
  int keep = p->keep_alive == KEEP_ASK_LLHTTP ? llhttp_should_keep_alive(lp) : p->keep_alive;
  p->phase = keep ? PH_IDLE : PH_CLOSED;
  p->final_seen = 0;
  if (p->cb->on_done) {
    int r = p->cb->on_done(p->ud, keep);
    if (r < 0) {
      p->cb_ret = r;
      return -1;
    }
  }
  return keep ? 0 : HPE_PAUSED; /* nothing after an answer that ends the connection is parsed */
}

static const llhttp_settings_t gather_settings = {
  .on_message_begin = on_message_begin,
  .on_header_field = on_header_field,
  .on_header_field_complete = on_header_field_complete,
  .on_header_value = on_header_value,
  .on_headers_complete = on_headers_complete,
  .on_body = on_body,
  .on_chunk_header = on_chunk_header,
  .on_chunk_complete = on_chunk_complete,
  .on_message_complete = on_message_complete,
};

static const llhttp_settings_t count_settings = {
  .on_message_begin = on_message_begin,
  .on_headers_complete = on_headers_complete,
  .on_body = on_body,
  .on_chunk_header = on_chunk_header,
  .on_chunk_complete = on_chunk_complete,
  .on_message_complete = on_message_complete,
};

/* ---- the API ---- */

void cb_cres_init(cb_cres_t *p, const cb_cres_callbacks_t *cb, void *ud, const cb_cres_limits_t *lim,
                  char *headbuf, size_t headcap) {
  memset(p, 0, sizeof *p);
  p->cb = cb;
  p->ud = ud;
  p->lim = *lim;
  if (p->lim.max_head == 0) p->lim.max_head = CB_CRES_MAX_HEAD_DEFAULT;
  if (p->lim.max_headers <= 0) p->lim.max_headers = CB_CRES_MAX_HEADERS_DEFAULT;
  if (!p->lim.count_only && headbuf) {
    /* The entries at the buffer's first aligned address, the text after them. */
    size_t pad = (alignof(cb_chdr_t) - (uintptr_t)headbuf % alignof(cb_chdr_t)) % alignof(cb_chdr_t);
    size_t room = headcap > pad ? headcap - pad : 0;
    /* A buffer short of CB_CRES_HEADBUF_SIZE gives the entries at most half of itself, the text the rest. */
    size_t nf = (size_t)p->lim.max_headers;
    if (room < nf * sizeof(cb_chdr_t) + p->lim.max_head) nf = room / 2 / sizeof(cb_chdr_t);
    if (nf > (size_t)p->lim.max_headers) nf = (size_t)p->lim.max_headers;
    p->fields = (cb_chdr_t *)(void *)(headbuf + pad);
    p->max_fields = (int)nf;
    p->text = headbuf + pad + nf * sizeof(cb_chdr_t);
    p->text_cap = room - nf * sizeof(cb_chdr_t);
  }
  cb_cres_reset(p);
}

void cb_cres_reset(cb_cres_t *p) {
  llhttp_init(&p->parser, HTTP_RESPONSE, p->lim.count_only ? &count_settings : &gather_settings);
  p->nfields = 0;
  p->text_len = 0;
  p->name_open = 0;
  p->err = 0;
  p->cb_ret = 0;
  p->body_bytes = 0;
  p->head_bytes = 0;
  p->phase = PH_IDLE;
  p->final_seen = 0;
}

void cb_cres_expect(cb_cres_t *p, int head_request) { p->head_req = head_request != 0; }

int cb_cres_idle(const cb_cres_t *p) { return p->phase == PH_IDLE; }

/* Feeding stops for good (until reset): later feeds and eof give the same value. */
static int stop(cb_cres_t *p, int e) {
  p->phase = PH_STOPPED;
  p->err = e;
  return e;
}

/* llhttp stopped with an error: one of our callbacks refused (p->err), the caller's did (p->cb_ret), or the
 * bytes are not an HTTP/1.x answer. */
static int failed(cb_cres_t *p) {
  return stop(p, p->cb_ret ? p->cb_ret : p->err ? p->err : CB_CRES_E_BAD);
}

int cb_cres_feed(cb_cres_t *p, const char *data, size_t n) {
  const char *end = data + n;
  while (data < end) {
    unsigned ph = p->phase;
    if (ph <= PH_INTERIM) {
      /* Empty lines between answers are not an answer (llhttp skips them too). */
      if (*data == '\r' || *data == '\n') {
        data++;
        continue;
      }
      p->phase = PH_HEAD;
      p->head_bytes = 0;
      if (ph == PH_IDLE && p->cb->on_begin) {
        int r = p->cb->on_begin(p->ud);
        if (r < 0) return stop(p, r);
      }
      ph = PH_HEAD;
    } else if (ph >= PH_CLOSED) {
      return ph == PH_CLOSED ? 0 : p->err;
    }
    size_t len = (size_t)(end - data);
    int limited = 0;
    if (BOUNDED(ph) && len > p->lim.max_head - p->head_bytes) {
      len = p->lim.max_head - p->head_bytes;
      limited = 1;
    }
    llhttp_errno_t e = llhttp_execute(&p->parser, data, len);
    if (e == HPE_OK) {
      if (BOUNDED(p->phase)) {
        /* Still inside a bounded section: all of these bytes were its own (each starts a region). */
        p->head_bytes += len;
        if (limited) return stop(p, CB_CRES_E_HEAD_TOO_BIG);
      }
      data += len;
    } else if (e == HPE_PAUSED) {
      /* A head or another bounded section starts here (the callback that paused set the phase), or an answer
       * that ends the connection ended. */
      data = p->parser.error_pos; /* llhttp_get_error_pos(), then llhttp_resume() */
      p->parser.error = HPE_OK;
      p->head_bytes = 0;
    } else if (e == HPE_PAUSED_UPGRADE && p->phase == PH_CLOSED) {
      return 0; /* after a 101 */
    } else {
      return failed(p);
    }
  }
  return 0;
}

int cb_cres_eof(cb_cres_t *p) {
  switch (p->phase) {
    case PH_IDLE:
    case PH_CLOSED:
      return 0;
    case PH_STOPPED:
      return p->err;
    case PH_BODY:
      /* A body without a length ends with the close: llhttp completes it (on_message_complete). */
      if (p->parser.finish == HTTP_FINISH_SAFE_WITH_CB) {
        llhttp_errno_t e = llhttp_finish(&p->parser);
        if (e != HPE_OK && e != HPE_PAUSED) return failed(p);
        return 0;
      }
      return stop(p, CB_CRES_E_TRUNCATED);
    default:
      return stop(p, CB_CRES_E_TRUNCATED);
  }
}

const char *cb_cres_strerror(int e) {
  switch (e) {
    case CB_CRES_E_BAD: return "bad response";
    case CB_CRES_E_HEAD_TOO_BIG: return "response head too big";
    case CB_CRES_E_BODY_TOO_BIG: return "response body too big";
    case CB_CRES_E_TRUNCATED: return "response truncated";
    default: return "response error";
  }
}
