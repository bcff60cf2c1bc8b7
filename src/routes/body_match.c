/* Body matchers (cb_match_t.body): compiled once when a route is added, run on a request's complete body when the
 * lookup reaches a route that has one (route_table.c holds the body until then). JSON through jansson, regular
 * expressions through libc's regcomp/regexec. */
#include <jansson.h>
#include <regex.h>
#include <stdlib.h>
#include <string.h>

#include "routes/routes.h"

struct cb__body_match_s {
  int kind;
  char *bytes; /* EQUAL, CONTAINS */
  size_t len;
  json_t *json; /* JSON, JSON_SUBSET */
  regex_t re;   /* REGEX */
};

/* Whether a regular expression stays inside the subset that POSIX ERE (glibc) and PCRE (Erlang's re, with dotall
 * and dollar_endonly) read alike, so that every engine accepts and matches the same patterns: literals, '.',
 * bracket expressions without '\' or "[." "[=" (character classes "[:alpha:]" are fine), groups without "(?",
 * alternation, anchors, and one quantifier ('*', '+', '?', "{m}", "{m,}", "{m,n}" with m <= n <= 255) after an
 * atom or a group. '\' escapes only punctuation (no "\d", "\w", back-references: one engine or the other reads
 * them differently); '{', '}' and ']' outside a bracket must be escaped. cbench_spec:regex_ok/1 is the same
 * check, step for step. */
int cb__regex_subset_ok(const char *p, size_t n) {
  static const char escapable[] = "\\.[](){}*+?|^$-/";
  int depth = 0, can_quantify = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)p[i];
    if (ch == 0) return 0;
    switch (ch) {
      case '\\':
        if (i + 1 >= n || strchr(escapable, p[i + 1]) == NULL || p[i + 1] == 0) return 0;
        i++;
        can_quantify = 1;
        break;
      case '[': {
        i++;
        if (i < n && p[i] == '^') i++;
        if (i < n && p[i] == ']') i++; /* a leading ']' is a member */
        for (;;) {
          if (i >= n || p[i] == '\\' || p[i] == 0) return 0;
          if (p[i] == ']') break;
          if (p[i] == '[' && i + 1 < n && (p[i + 1] == '.' || p[i + 1] == '=')) return 0;
          if (p[i] == '[' && i + 1 < n && p[i + 1] == ':') {
            const char *end = NULL;
            for (size_t k = i + 2; k + 1 < n; k++)
              if (p[k] == ':' && p[k + 1] == ']') {
                end = p + k;
                break;
              }
            if (end == NULL) return 0;
            static const char *const classes[] = {"alpha", "digit", "alnum", "upper", "lower", "space",
                                                  "punct", "print", "graph", "cntrl", "xdigit", "blank"};
            size_t cl = (size_t)(end - (p + i + 2));
            int known = 0;
            for (size_t c = 0; c < sizeof classes / sizeof classes[0]; c++)
              if (strlen(classes[c]) == cl && memcmp(classes[c], p + i + 2, cl) == 0) known = 1;
            if (!known) return 0;
            i = (size_t)(end - p) + 2;
            continue;
          }
          i++;
        }
        can_quantify = 1;
        break;
      }
      case '(':
        if (i + 1 < n && (p[i + 1] == '?' || p[i + 1] == '*' || p[i + 1] == '+')) return 0;
        depth++;
        can_quantify = 0;
        break;
      case ')':
        if (depth == 0) return 0;
        depth--;
        can_quantify = 1;
        break;
      case '|':
      case '^':
      case '$':
        can_quantify = 0;
        break;
      case '*':
      case '+':
      case '?':
        if (!can_quantify) return 0;
        can_quantify = 0;
        break;
      case '{': {
        if (!can_quantify) return 0;
        unsigned m = 0, k = 0, nd = 0, hi = 0, has_hi = 0, comma = 0;
        for (i++; i < n && p[i] >= '0' && p[i] <= '9' && nd < 4; i++, nd++) m = m * 10 + (unsigned)(p[i] - '0');
        if (nd == 0 || m > 255) return 0;
        if (i < n && p[i] == ',') {
          comma = 1;
          for (i++; i < n && p[i] >= '0' && p[i] <= '9' && k < 4; i++, k++) hi = hi * 10 + (unsigned)(p[i] - '0');
          has_hi = k > 0;
        }
        if (i >= n || p[i] != '}') return 0;
        if (comma && has_hi && (hi > 255 || hi < m)) return 0;
        can_quantify = 0;
        break;
      }
      case '}':
      case ']':
        return 0;
      default:
        can_quantify = 1;
    }
  }
  return depth == 0;
}

int cb__body_match_new(const cb_body_match_t *in, cb__body_match_t **out) {
  *out = NULL;
  if (in->kind == CB_MATCH_BODY_ANY) return 0;
  if (in->kind < CB_MATCH_BODY_ANY || in->kind > CB_MATCH_BODY_REGEX)
    return cb__bad_number(CB_FIELD_MATCH_BODY, -1, CB_WHY_OUT_OF_RANGE, in->kind);
  if (in->value.ptr == NULL && in->value.len > 0) return cb__bad_bytes(CB_FIELD_MATCH_BODY, -1, CB_WHY_NULL_POINTER, NULL, 0);
  const char *v = in->value.ptr ? in->value.ptr : "";
  size_t n = in->value.len;
  size_t max = in->kind == CB_MATCH_BODY_REGEX ? CB_MAX_BODY_REGEX : CB_MAX_BODY_MATCH;
  if (n > max) return cb__bad_bytes(CB_FIELD_MATCH_BODY, -1, CB_WHY_TOO_LONG, v, n);
  cb__body_match_t *m = calloc(1, sizeof *m);
  if (m == NULL) return UV_ENOMEM;
  m->kind = in->kind;
  switch (in->kind) {
    case CB_MATCH_BODY_EQUAL:
    case CB_MATCH_BODY_CONTAINS:
      m->bytes = malloc(n ? n : 1);
      if (m->bytes == NULL) {
        free(m);
        return UV_ENOMEM;
      }
      if (n) memcpy(m->bytes, v, n);
      m->len = n;
      break;
    case CB_MATCH_BODY_JSON:
    case CB_MATCH_BODY_JSON_SUBSET: {
      json_error_t jerr;
      m->json = json_loadb(v, n, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
      if (m->json == NULL) {
        free(m);
        return cb__bad_bytes(CB_FIELD_MATCH_BODY, -1, CB_WHY_BAD_JSON, v, n);
      }
      break;
    }
    default: { /* CB_MATCH_BODY_REGEX */
      char pat[CB_MAX_BODY_REGEX + 1];
      if (!cb__regex_subset_ok(v, n)) {
        free(m);
        return cb__bad_bytes(CB_FIELD_MATCH_BODY, -1, CB_WHY_BAD_REGEX, v, n);
      }
      memcpy(pat, v, n);
      pat[n] = '\0';
      if (regcomp(&m->re, pat, REG_EXTENDED | REG_NOSUB) != 0) {
        free(m);
        return cb__bad_bytes(CB_FIELD_MATCH_BODY, -1, CB_WHY_BAD_REGEX, v, n);
      }
    }
  }
  *out = m;
  return 0;
}

void cb__body_match_free(cb__body_match_t *m) {
  if (m == NULL) return;
  if (m->kind == CB_MATCH_BODY_REGEX) regfree(&m->re);
  json_decref(m->json);
  free(m->bytes);
  free(m);
}

/* Whether v holds pattern p (CB_MATCH_BODY_JSON_SUBSET). */
static int json_holds(const json_t *v, const json_t *p) {
  if (json_is_object(p)) {
    if (!json_is_object(v)) return 0;
    const char *key;
    json_t *pv;
    json_object_foreach((json_t *)p, key, pv) {
      json_t *vv = json_object_get(v, key);
      if (vv == NULL || !json_holds(vv, pv)) return 0;
    }
    return 1;
  }
  if (json_is_array(p)) {
    size_t n = json_array_size(p);
    if (!json_is_array(v) || json_array_size(v) != n) return 0;
    for (size_t i = 0; i < n; i++)
      if (!json_holds(json_array_get(v, i), json_array_get(p, i))) return 0;
    return 1;
  }
  return json_equal(v, p);
}

void cb__req_body_json_free(cb__req_t *r) {
  if (r->mjson_state == 1) json_decref(r->mjson);
  r->mjson = NULL;
  r->mjson_state = 0;
}

int cb__body_match(const cb__body_match_t *m, cb__req_t *r) {
  const char *p = r->mbody ? r->mbody : "";
  size_t n = r->mbody_len;
  switch (m->kind) {
    case CB_MATCH_BODY_EQUAL:
      return n == m->len && memcmp(p, m->bytes, n) == 0;
    case CB_MATCH_BODY_CONTAINS:
      return m->len == 0 || (n >= m->len && memmem(p, n, m->bytes, m->len) != NULL);
    case CB_MATCH_BODY_JSON:
    case CB_MATCH_BODY_JSON_SUBSET:
      /* Parsed once per request, whatever the number of JSON matchers tried: 1 parsed, 2 not JSON. */
      if (r->mjson_state == 0) {
        json_error_t jerr;
        r->mjson = json_loadb(p, n, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
        r->mjson_state = r->mjson ? 1 : 2;
      }
      if (r->mjson_state != 1) return 0;
      return m->kind == CB_MATCH_BODY_JSON ? json_equal(r->mjson, m->json) : json_holds(r->mjson, m->json);
    default: {
      /* REG_STARTEND bounds the search by the body's length (it may hold NUL bytes and has no terminator). */
      regmatch_t pm[1] = {{.rm_so = 0, .rm_eo = (regoff_t)n}};
      return regexec(&m->re, p, 1, pm, REG_STARTEND) == 0;
    }
  }
}

/* ---- cb__h_body_wait: the body held until the lookup can choose ---- */

static void hold_refuse(cb__req_t *r) {
  free(r->mbody);
  cb__echo_release(r->conn, r->mbody_cap);
  r->mbody = NULL;
  r->mbody_len = r->mbody_cap = 0;
  r->mbody_refused = 1;
  cb__res_head(r, 503, NULL, NULL, 0, 0);
  cb__res_end(r);
}

static void hold_body(cb__req_t *r, const char *p, size_t n) {
  if (r->mbody_refused || n == 0) return;
  if (r->mbody_len + n > r->mbody_cap) {
    /* The declared length when there is one (the protocol refused one over the body limit), else doubling up to
     * the limit: the protocol answers 413 before a body goes over it. */
    size_t cap = r->content_length > 0 && (uint64_t)r->content_length >= r->mbody_len + n
                     ? (size_t)r->content_length
                     : r->mbody_cap ? r->mbody_cap : 4096;
    while (cap < r->mbody_len + n) cap *= 2;
    size_t max = r->conn->w->cfg->max_body_bytes;
    if (cap > max && r->mbody_len + n <= max) cap = max;
    if (cb__echo_hold(r->conn, cap - r->mbody_cap) != 0) {
      hold_refuse(r);
      return;
    }
    /* One byte more for a terminator: regexec reads the body up to rm_eo (REG_STARTEND), but sanitizers'
     * regexec interceptors measure the string with strlen first. */
    char *b = realloc(r->mbody, cap + 1);
    if (b == NULL) {
      cb__echo_release(r->conn, cap - r->mbody_cap);
      hold_refuse(r);
      return;
    }
    r->mbody = b;
    r->mbody_cap = cap;
  }
  memcpy(r->mbody + r->mbody_len, p, n);
  r->mbody_len += n;
  r->mbody[r->mbody_len] = '\0';
}

static void hold_free(cb__req_t *r) {
  cb__req_body_json_free(r);
  free(r->mbody);
  cb__echo_release(r->conn, r->mbody_cap);
  r->mbody = NULL;
  r->mbody_len = r->mbody_cap = 0;
}

static void hold_end(cb__req_t *r) {
  if (r->mbody_refused) return; /* answered already */
  cb__rtable_dispatch_body(r);
  const cb__handler_t *h = r->allow ? &cb__h_method_not_allowed : r->route->handler;
  /* The chosen handler sees the request as if it had been chosen at the head: on_head, the body, on_end. The
   * held body stays until the request is released (cb__req_body_free): a 404 scores the body matchers of its
   * near misses with it. */
  r->handler = h;
  if (h->on_head) h->on_head(r);
  if (h->on_body && r->mbody_len > 0) h->on_body(r, r->mbody, r->mbody_len);
  h->on_end(r);
}

void cb__req_body_free(cb__req_t *r) { hold_free(r); }

const cb__handler_t cb__h_body_wait = {.on_body = hold_body, .on_end = hold_end};
