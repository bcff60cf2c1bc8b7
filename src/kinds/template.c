/* Response templates (cb_response_t.templated, docs/routes.md "Templates"): a stub's body or header value with
 * {{method}}, {{body}}, {{seq}}, {{path.NAME}}, {{query.NAME}} and {{header.NAME}} in it.
 *
 * A template is compiled once, when the stub is added, into pieces: literal runs that point into the stub's own
 * copy of the text, and placeholders with what they name resolved (a path parameter to its index in the
 * pattern, a header name lowercased). A request then costs one pass to size the answer and one to write it; no
 * text is parsed again. Values are inserted as they are (escaped nowhere); a missing one is empty. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kinds/kinds.h"

static int is_name_byte(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
         c == '.';
}

/* The index of parameter name[0..n) among pattern's "{name}" segments, or -1. */
static int param_index(cb_str_t pattern, const char *name, size_t n) {
  int idx = 0;
  for (size_t i = 0; i + 1 < pattern.len; i++) {
    if (pattern.ptr[i] != '{') continue;
    const char *end = memchr(pattern.ptr + i, '}', pattern.len - i);
    if (end == NULL) return -1;
    size_t len = (size_t)(end - pattern.ptr) - i - 1;
    if (len == n && memcmp(pattern.ptr + i + 1, name, n) == 0) return idx;
    idx++;
    i = (size_t)(end - pattern.ptr);
  }
  return -1;
}

static int prefix(const char *p, size_t n, const char *lit, size_t *rest) {
  size_t l = strlen(lit);
  if (n <= l || memcmp(p, lit, l) != 0) return 0;
  *rest = l;
  return 1;
}

int cb__tpl_compile(const char *text, size_t n, cb_str_t pattern, cb__tpl_t *t) {
  memset(t, 0, sizeof *t);
  /* At most one literal and one placeholder per "{{": count them first. */
  size_t cap = 1;
  for (size_t i = 0; i + 1 < n; i++)
    if (text[i] == '{' && text[i + 1] == '{') cap += 2;
  t->p = calloc(cap, sizeof *t->p);
  t->text = malloc(n ? n : 1);
  if (t->p == NULL || t->text == NULL) {
    cb__tpl_free(t);
    return UV_ENOMEM;
  }
  if (n) memcpy(t->text, text, n);
  const char *s = t->text;
  size_t i = 0, lit = 0;
  while (i < n) {
    if (!(i + 1 < n && s[i] == '{' && s[i + 1] == '{')) {
      i++;
      continue;
    }
    size_t j = i + 2;
    while (j < n && is_name_byte(s[j])) j++;
    if (j + 1 >= n || s[j] != '}' || s[j + 1] != '}') {
      cb__tpl_free(t);
      return UV_EINVAL;
    }
    if (i > lit) t->p[t->n++] = (cb__tpl_piece_t){CB__TPL_LIT, 0, s + lit, i - lit};
    const char *name = s + i + 2;
    size_t nl = j - i - 2, off;
    cb__tpl_piece_t pc = {0, 0, NULL, 0};
    if (nl == 6 && memcmp(name, "method", 6) == 0) {
      pc.kind = CB__TPL_METHOD;
    } else if (nl == 4 && memcmp(name, "body", 4) == 0) {
      pc.kind = CB__TPL_BODY;
      t->uses_body = 1;
    } else if (nl == 3 && memcmp(name, "seq", 3) == 0) {
      pc.kind = CB__TPL_SEQ;
    } else if (prefix(name, nl, "path.", &off)) {
      int k = param_index(pattern, name + off, nl - off);
      if (k < 0) {
        cb__tpl_free(t);
        return UV_EINVAL;
      }
      pc = (cb__tpl_piece_t){CB__TPL_PATH, (unsigned)k, NULL, 0};
    } else if (prefix(name, nl, "query.", &off)) {
      pc = (cb__tpl_piece_t){CB__TPL_QUERY, 0, name + off, nl - off};
    } else if (prefix(name, nl, "header.", &off)) {
      pc = (cb__tpl_piece_t){CB__TPL_HEADER, 0, name + off, nl - off};
      for (size_t k = off; k < nl; k++) /* header names compare without case: kept lowercased */
        if (t->text[i + 2 + k] >= 'A' && t->text[i + 2 + k] <= 'Z') t->text[i + 2 + k] += 32;
    } else {
      cb__tpl_free(t);
      return UV_EINVAL;
    }
    t->p[t->n++] = pc;
    i = lit = j + 2;
  }
  if (n > lit) t->p[t->n++] = (cb__tpl_piece_t){CB__TPL_LIT, 0, s + lit, n - lit};
  return 0;
}

void cb__tpl_free(cb__tpl_t *t) {
  free(t->p);
  free(t->text);
  memset(t, 0, sizeof *t);
}

static int hexval(char ch) {
  if (ch >= '0' && ch <= '9') return ch - '0';
  if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
  if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
  return -1;
}

static int header_byte(char c) { return (unsigned char)c >= 0x20 ? c != 0x7f : c == '\t'; }

/* Percent-decodes src (and '+' as space) into dst (NULL: only counts), as the query matchers decode, and stops
 * at room bytes; header: the decoded bytes a field value cannot hold are left out. */
static size_t url_decode(char *dst, const char *src, size_t n, int header, size_t room) {
  size_t o = 0;
  for (size_t i = 0; i < n && o < room; i++) {
    char c = src[i];
    if (c == '+') {
      c = ' ';
    } else if (c == '%' && i + 2 < n && hexval(src[i + 1]) >= 0 && hexval(src[i + 2]) >= 0) {
      c = (char)(hexval(src[i + 1]) << 4 | hexval(src[i + 2]));
      i += 2;
    }
    if (header && !header_byte(c)) continue;
    if (dst) dst[o] = c;
    o++;
  }
  return o;
}

/* The raw value of the first query parameter whose decoded name is name[0..n) (a name alone: empty). */
static int query_value(const cb__req_t *r, const char *name, size_t n, const char **v, size_t *vl) {
  if (r->target_len <= r->path_len + 1) return 0;
  const char *p = r->path + r->path_len + 1, *end = r->path + r->target_len;
  while (p < end) {
    const char *amp = memchr(p, '&', (size_t)(end - p));
    const char *fe = amp ? amp : end;
    const char *eq = memchr(p, '=', (size_t)(fe - p));
    const char *ne = eq ? eq : fe;
    char dec[256];
    if ((size_t)(ne - p) <= sizeof dec && url_decode(dec, p, (size_t)(ne - p), 0, sizeof dec) == n &&
        memcmp(dec, name, n) == 0) {
      *v = eq ? eq + 1 : fe;
      *vl = (size_t)(fe - *v);
      return 1;
    }
    p = fe + 1;
  }
  return 0;
}

static int same_lower(const char *a, size_t n, const char *lower, size_t ln) {
  if (n != ln) return 0;
  for (size_t i = 0; i < n; i++)
    if ((a[i] >= 'A' && a[i] <= 'Z' ? a[i] + 32 : a[i]) != lower[i]) return 0;
  return 1;
}

/* At most room bytes of v[0..n) into dst (NULL: only counts). A header value may not hold what an inserted value
 * can bring (CR, LF, NUL, other control bytes but HTAB): those bytes are left out. */
static size_t put_value(char *dst, const char *v, size_t n, int header, size_t room) {
  if (!header) {
    if (n > room) n = room;
    if (dst && n) memcpy(dst, v, n);
    return n;
  }
  size_t o = 0;
  for (size_t i = 0; i < n && o < room; i++)
    if (header_byte(v[i])) {
      if (dst) dst[o] = v[i];
      o++;
    }
  return o;
}

size_t cb__tpl_render(const cb__tpl_t *t, const cb__req_t *r, const char *body, size_t body_len, uint64_t seq,
                      int header, size_t max, char *dst) {
  size_t o = 0;
  for (int k = 0; k < t->n && o < max; k++) {
    const cb__tpl_piece_t *pc = &t->p[k];
    char num[24];
    const char *v = NULL;
    size_t vl = 0;
    switch (pc->kind) {
      case CB__TPL_LIT:
        o += put_value(dst ? dst + o : NULL, pc->str, pc->len, 0, max - o);
        continue;
      case CB__TPL_METHOD:
        v = r->method_str;
        vl = r->method_len;
        break;
      case CB__TPL_BODY:
        v = body;
        vl = body_len;
        break;
      case CB__TPL_SEQ: {
        int len = snprintf(num, sizeof num, "%llu", (unsigned long long)seq);
        v = num;
        vl = (size_t)len;
        break;
      }
      case CB__TPL_PATH:
        v = r->path + r->params[pc->arg][0];
        vl = r->params[pc->arg][1];
        break;
      case CB__TPL_QUERY: {
        const char *raw;
        size_t rl;
        if (query_value(r, pc->str, pc->len, &raw, &rl)) {
          /* Decoded, as the matchers compare it. */
          o += url_decode(dst ? dst + o : NULL, raw, rl, header, max - o);
        }
        continue;
      }
      case CB__TPL_HEADER:
        for (int i = 0; i < r->nheaders; i++)
          if (same_lower(r->headers[i].name, r->headers[i].name_len, pc->str, pc->len)) {
            v = r->headers[i].value;
            vl = r->headers[i].value_len;
            break;
          }
        break;
      default:
        break;
    }
    if (v != NULL) o += put_value(dst ? dst + o : NULL, v, vl, header, max - o);
  }
  return o;
}
