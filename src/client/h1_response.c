/* HTTP/1.1 answers: llhttp in response mode, with the limits and framing rules a client needs and llhttp leaves
 * to its user (client.h says what the caller sees).
 *
 * Exact limits with no copy and no scan of our own: llhttp is paused at the end of every answer (and of every
 * 1xx), so each head starts where one llhttp_execute starts; while a head is being read, llhttp is given at most
 * the bytes left of its budget. A head that is still incomplete when its budget is spent is over the limit,
 * one that completes within it is not, whatever the reads' sizes. The trailer section gets the same treatment
 * from a pause at the last chunk's header. The pause costs one return from llhttp_execute per answer.
 *
 * The head's fields are copied into the caller's buffer as llhttp reports them (a field can be split across
 * reads), and shown to on_head once the head is complete; in count_only mode llhttp is given no field
 * callbacks at all. */
#include <stdalign.h>
#include <string.h>

#include "client/client.h"

enum { PH_IDLE, PH_HEAD, PH_BODY, PH_TRAILER, PH_CLOSED, PH_STOPPED };

#define P(lp) ((cb_cres_t *)(lp))

/* RFC 9110 token characters: what a field name may hold (llhttp 8.1 lets spaces through in names). */
static const uint8_t tchar[256] = {
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
  if (n > p->text_cap - p->text_len) return refuse(p, CB_CRES_E_HEAD_TOO_BIG);
  memcpy(p->text + p->text_len, at, n);
  p->text_len += n;
  return 0;
}

static int on_header_field(llhttp_t *lp, const char *at, size_t n) {
  cb_cres_t *p = P(lp);
  if (!p->name_open) {
    if (p->nfields >= p->max_fields) return refuse(p, CB_CRES_E_HEAD_TOO_BIG);
    cb_chdr_t *f = &p->fields[p->nfields++];
    f->name = p->text + p->text_len;
    f->name_len = 0;
    f->value = NULL;
    f->value_len = 0;
    p->name_open = 1;
  }
  for (size_t i = 0; i < n; i++)
    if (!tchar[(uint8_t)at[i]]) return refuse(p, CB_CRES_E_BAD);
  if (gather(p, at, n)) return -1;
  p->fields[p->nfields - 1].name_len += n;
  return 0;
}

static int on_header_field_complete(llhttp_t *lp) {
  cb_cres_t *p = P(lp);
  p->name_open = 0;
  /* An empty value gets no on_header_value: it points at the end of its name. */
  cb_chdr_t *f = &p->fields[p->nfields - 1];
  f->value = f->name + f->name_len;
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

/* llhttp_should_keep_alive() before llhttp knows the body is skipped (it learns that from our answer to
 * on_headers_complete): the version's default, the connection field, and a body that does not need the close. */
static int keeps_alive(const llhttp_t *lp, int skip) {
  if (lp->http_major > 0 && lp->http_minor > 0) {
    if (lp->flags & F_CONNECTION_CLOSE) return 0;
  } else if (!(lp->flags & F_CONNECTION_KEEP_ALIVE)) {
    return 0;
  }
  return skip || !llhttp_message_needs_eof(lp);
}

static int on_headers_complete(llhttp_t *lp) {
  cb_cres_t *p = P(lp);
  int status = lp->status_code;
  /* 1xx, 204 and 304 answers have no body whatever their fields say (RFC 9110 6.4.1); nor have answers to HEAD.
   * llhttp 8.1 would read a body announced by a content-length on any of them. */
  int skip = status < 200 || status == 204 || status == 304 || p->head_req;
  if (status < 200 && status != 101) { /* interim: the final answer follows */
    p->nfields = 0;
    p->text_len = 0;
    return 1;
  }
  cb_cres_head_t h;
  h.status = status;
  h.major = lp->http_major;
  h.minor = lp->http_minor;
  h.chunked = !skip && (lp->flags & F_CHUNKED) != 0;
  h.content_length = (lp->flags & F_CONTENT_LENGTH) ? (int64_t)lp->content_length : -1;
  if (status == 101) { /* the connection leaves HTTP/1.1 after this head */
    h.keep_alive = 0;
    h.has_body = 0;
  } else {
    h.keep_alive = keeps_alive(lp, skip);
    h.has_body = !skip && (h.chunked || (lp->flags & F_CONTENT_LENGTH ? lp->content_length > 0
                                                                      : llhttp_message_needs_eof(lp)));
  }
  if (h.has_body && p->lim.max_body && h.content_length > 0 && (uint64_t)h.content_length > p->lim.max_body)
    return refuse(p, CB_CRES_E_BODY_TOO_BIG);
  trim_values(p);
  h.headers = p->fields;
  h.nheaders = p->nfields;
  p->phase = PH_BODY;
  p->final_seen = 1;
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
  return skip;
}

static int on_body(llhttp_t *lp, const char *at, size_t n) {
  cb_cres_t *p = P(lp);
  int over = 0;
  if (p->lim.max_body && n > p->lim.max_body - p->body_bytes) {
    n = (size_t)(p->lim.max_body - p->body_bytes); /* the callbacks see exactly max_body bytes */
    over = 1;
  }
  p->body_bytes += n;
  if (n > 0 && p->cb->on_body) {
    int r = p->cb->on_body(p->ud, at, n);
    if (r < 0) {
      p->cb_ret = r;
      return -1;
    }
  }
  return over ? refuse(p, CB_CRES_E_BODY_TOO_BIG) : 0;
}

/* The last chunk: what follows is the trailer section, with its own budget. A pause marks where it starts. */
static int on_chunk_header(llhttp_t *lp) {
  cb_cres_t *p = P(lp);
  p->ext_bytes = 0;
  if (lp->content_length != 0) return 0;
  p->phase = PH_TRAILER;
  return HPE_PAUSED;
}

/* Chunk extensions are parsed and dropped; one chunk's are bounded like a head, or a peer could make a
 * chunk-size line endless. */
static int on_chunk_ext(llhttp_t *lp, const char *at, size_t n) {
  (void)at;
  cb_cres_t *p = P(lp);
  p->ext_bytes += n;
  return p->ext_bytes > p->lim.max_head ? refuse(p, CB_CRES_E_HEAD_TOO_BIG) : 0;
}

static int on_message_complete(llhttp_t *lp) {
  cb_cres_t *p = P(lp);
  if (!p->final_seen) { /* a 1xx ended: the next head starts here */
    p->phase = PH_HEAD;
    p->head_bytes = 0;
    return HPE_PAUSED;
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
  int keep = lp->status_code != 101 && llhttp_should_keep_alive(lp);
  p->phase = keep ? PH_IDLE : PH_CLOSED;
  p->final_seen = 0;
  if (p->cb->on_done) {
    int r = p->cb->on_done(p->ud, keep);
    if (r < 0) {
      p->cb_ret = r;
      return -1;
    }
  }
  return HPE_PAUSED;
}

static const llhttp_settings_t gather_settings = {
  .on_header_field = on_header_field,
  .on_header_field_complete = on_header_field_complete,
  .on_header_value = on_header_value,
  .on_headers_complete = on_headers_complete,
  .on_body = on_body,
  .on_chunk_header = on_chunk_header,
  .on_chunk_extension_name = on_chunk_ext,
  .on_chunk_extension_value = on_chunk_ext,
  .on_message_complete = on_message_complete,
};

static const llhttp_settings_t count_settings = {
  .on_headers_complete = on_headers_complete,
  .on_body = on_body,
  .on_chunk_header = on_chunk_header,
  .on_chunk_extension_name = on_chunk_ext,
  .on_chunk_extension_value = on_chunk_ext,
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
  p->ext_bytes = 0;
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
    if (p->phase >= PH_CLOSED) return p->phase == PH_CLOSED ? 0 : p->err;
    if (p->phase == PH_IDLE) {
      /* Empty lines between answers are not an answer (llhttp skips them too). */
      while (data < end && (*data == '\r' || *data == '\n')) data++;
      if (data == end) break;
      p->phase = PH_HEAD;
      p->head_bytes = 0;
      if (p->cb->on_begin) {
        int r = p->cb->on_begin(p->ud);
        if (r < 0) return stop(p, r);
      }
    }
    size_t len = (size_t)(end - data);
    int limited = 0;
    if (p->phase == PH_HEAD || p->phase == PH_TRAILER) {
      size_t left = p->lim.max_head - p->head_bytes;
      if (len > left) {
        len = left;
        limited = 1;
      }
    }
    llhttp_errno_t e = llhttp_execute(&p->parser, data, len);
    if (e == HPE_OK) {
      if (p->phase == PH_HEAD || p->phase == PH_TRAILER) {
        /* Still inside the head (or the trailers): all of these bytes were theirs. */
        p->head_bytes += len;
        if (limited) return stop(p, CB_CRES_E_HEAD_TOO_BIG);
      }
      data += len;
    } else if (e == HPE_PAUSED) {
      /* The end of an answer, of a 1xx, or of the last chunk's header: the next section starts here. */
      const char *at = llhttp_get_error_pos(&p->parser);
      llhttp_resume(&p->parser);
      if (p->phase == PH_TRAILER) p->head_bytes = 0;
      data = at;
    } else if (e == HPE_PAUSED_UPGRADE && p->phase == PH_CLOSED) {
      return 0; /* after a 101 */
    } else {
      return failed(p);
    }
  }
  return p->phase == PH_STOPPED ? p->err : 0;
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
