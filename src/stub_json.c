/* Stubs from a JSON file, parsed with jansson (Debian's libjansson-dev).
 *
 * jansson gives no positions for the values of a parsed document, so when a field is wrong its line is found
 * by walking the text again with jansson itself: JSON_DISABLE_EOF_CHECK decodes one value at an offset and
 * says how many bytes it took, which is enough to step over array elements and object members (only
 * whitespace, ':' and ',' are skipped by hand). */
#include "stub_json.h"

#include "admin.h"
#include "engine.h"
#include "json_text.h"

#include <errno.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* A field's place: array indexes and object keys from the root. */
typedef struct {
  int n;
  struct {
    const char *key; /* NULL: index */
    size_t index;
  } at[8];
} where_t;

typedef struct {
  const char *file;
  const char *text;
  size_t len;
  const char *dir; /* for relative body files */
  size_t dir_len;
  char *msg;
  size_t msgcap;
  int root_is_object; /* {"stubs": [...]} */
  cb_stubs_json_error_t *err; /* NULL, or where fail() also puts the field, the reason and the value */
  int single_ok;              /* a lone stub object is taken as a list of one (the admin API) */
  int lone;                   /* it was: the text has no list for stubs[0] to index */
} ctx_t;

static size_t skip_ws(const char *t, size_t len, size_t pos) {
  while (pos < len && (t[pos] == ' ' || t[pos] == '\t' || t[pos] == '\n' || t[pos] == '\r')) pos++;
  return pos;
}

/* The offset just past the JSON value at pos, or 0. */
static size_t value_end(const char *t, size_t len, size_t pos) {
  json_error_t e;
  json_t *v = json_loadb(t + pos, len - pos, JSON_DECODE_ANY | JSON_DISABLE_EOF_CHECK, &e);
  if (v == NULL) return 0;
  json_decref(v);
  return pos + (size_t)e.position;
}

/* The offset of the value named by w (as far as it can be followed). */
static size_t locate(const ctx_t *c, const where_t *w) {
  const char *t = c->text;
  size_t len = c->len, pos = skip_ws(t, len, 0);
  for (int d = c->lone ? 1 : 0; d < w->n && pos < len; d++) {
    if (t[pos] == '[' && w->at[d].key == NULL) {
      pos = skip_ws(t, len, pos + 1);
      for (size_t i = 0; i < w->at[d].index && pos < len && t[pos] != ']'; i++) {
        size_t end = value_end(t, len, pos);
        if (end == 0) return pos;
        pos = skip_ws(t, len, end);
        if (pos < len && t[pos] == ',') pos = skip_ws(t, len, pos + 1);
      }
    } else if (t[pos] == '{' && w->at[d].key != NULL) {
      size_t obj = pos, found = 0;
      pos = skip_ws(t, len, pos + 1);
      while (pos < len && t[pos] != '}') {
        json_error_t e;
        json_t *k = json_loadb(t + pos, len - pos, JSON_DECODE_ANY | JSON_DISABLE_EOF_CHECK, &e);
        if (k == NULL) return pos;
        int hit = json_is_string(k) && strcmp(json_string_value(k), w->at[d].key) == 0;
        json_decref(k);
        pos = skip_ws(t, len, pos + (size_t)e.position);
        if (pos < len && t[pos] == ':') pos = skip_ws(t, len, pos + 1);
        if (hit) {
          found = 1;
          break;
        }
        size_t end = value_end(t, len, pos);
        if (end == 0) return pos;
        pos = skip_ws(t, len, end);
        if (pos < len && t[pos] == ',') pos = skip_ws(t, len, pos + 1);
      }
      if (!found) return obj; /* a missing field: the object that lacks it */
    } else {
      break;
    }
  }
  return pos;
}

static int line_of(const ctx_t *c, size_t pos) {
  int line = 1;
  for (size_t i = 0; i < pos && i < c->len; i++) line += c->text[i] == '\n';
  return line;
}

static void field_name(const ctx_t *c, const where_t *w, char *out, size_t cap) {
  size_t o = 0;
  out[0] = '\0';
  for (int d = c->root_is_object ? 1 : 0; d < w->n && o < cap; d++) {
    int n;
    if (w->at[d].key)
      n = snprintf(out + o, cap - o, "%s%s", o ? "." : "", w->at[d].key);
    else
      n = snprintf(out + o, cap - o, "%s[%zu]", o ? "" : "stubs", w->at[d].index);
    if (n < 0) break;
    o += (size_t)n;
  }
}

/* Rewrites msg in place so that a terminal shows it as text: a control byte, DEL or a byte above 0x7f (from a
 * key, a value or the file name quoted in it) becomes \xNN. Cut at the end of msg's room. */
static void escape_msg(char *msg, size_t cap) {
  char out[2048];
  size_t o = 0;
  for (const unsigned char *p = (const unsigned char *)msg; *p != '\0' && o + 5 < sizeof out; p++) {
    if (*p < 0x20 || *p >= 0x7f)
      o += (size_t)snprintf(out + o, sizeof out - o, "\\x%02x", *p);
    else
      out[o++] = (char)*p;
  }
  out[o] = '\0';
  snprintf(msg, cap, "%s", out);
}

__attribute__((format(printf, 3, 4))) static int fail(const ctx_t *c, const where_t *w, const char *fmt, ...) {
  char field[256], what[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  field_name(c, w, field, sizeof field);
  int line = line_of(c, locate(c, w));
  snprintf(c->msg, c->msgcap, "%s:%d: %s: %s", c->file, line, field[0] ? field : "stubs", what);
  escape_msg(c->msg, c->msgcap);
  if (c->err != NULL) {
    /* Every message starts with its reason: "unknown_key: ...", "control_char: \"value\" ...". */
    snprintf(c->err->field, sizeof c->err->field, "%s", field[0] ? field : "stubs");
    escape_msg(c->err->field, sizeof c->err->field);
    snprintf(c->err->why, sizeof c->err->why, "%.*s", (int)strcspn(what, ":"), what);
    c->err->line = line;
    c->err->column = 0;
  }
  return -1;
}

static where_t sub(const where_t *w, const char *key, size_t index) {
  where_t x = *w;
  if (x.n < 8) {
    x.at[x.n].key = key;
    x.at[x.n].index = index;
    x.n++;
  }
  return x;
}

/* The order of response headers given as an object, which JSON leaves undefined (RFC 8259 section 4) and
 * ehttpd's loader cannot keep (it decodes an object as a map): by the name as sent, lowercased, bytewise, a name
 * that is a prefix of another first; two names equal but for case by their bytes as written. The same order as
 * Erlang's lists:sort/1 on {cbench_http:lower(Name), Name} (cbench_stub_json:headers/2). */
static int header_name_cmp(const void *a, const void *b) {
  const cb_str_t *x = &((const cb_header_t *)a)->name, *y = &((const cb_header_t *)b)->name;
  size_t n = x->len < y->len ? x->len : y->len;
  for (size_t i = 0; i < n; i++) {
    unsigned char cx = (unsigned char)x->ptr[i], cy = (unsigned char)y->ptr[i];
    if (cx >= 'A' && cx <= 'Z') cx = (unsigned char)(cx + 32);
    if (cy >= 'A' && cy <= 'Z') cy = (unsigned char)(cy + 32);
    if (cx != cy) return cx < cy ? -1 : 1;
  }
  if (x->len != y->len) return x->len < y->len ? -1 : 1;
  return memcmp(x->ptr, y->ptr, n);
}

/* A field the engine refused (cb_error_detail()): "FIELD: WHY: \"VALUE\"", the value escaped by the engine. The
 * field is named as in the file: the stub's key path, then a header or query matcher by its name (a response
 * header given as a list of pairs by its index). match, res: the stub's objects (res may be NULL). */
static int fail_detail(const ctx_t *c, const where_t *ws, const cb_error_detail_t *d, json_t *match, json_t *res) {
  /* The field's key path in a JSON stub: the library's one field table (cb_field_names()). */
  const cb_field_names_t *f = cb_field_names(d->field);
  where_t w = *ws;
  json_t *items = NULL;
  if (d->field != CB_FIELD_NONE && f != NULL && f->json[0] != NULL) {
    w = sub(&w, f->json[0], 0);
    if (f->json[1]) {
      w = sub(&w, f->json[1], 0);
      items = d->field == CB_FIELD_MATCH_BODY ? NULL
              : json_object_get(d->field == CB_FIELD_HEADERS ? res : match, f->json[1]);
    }
  }
  if (d->index >= 0 && json_is_array(items)) {
    w = sub(&w, NULL, (size_t)d->index);
  } else if (d->index >= 0 && json_is_object(items)) {
    /* The members in the order the stub's list was built in: file order for matchers (jansson keeps it), sorted
     * by name for response headers (parse_headers). The names point into the object, so the key outlives hs. */
    size_t n = json_object_size(items), i = 0;
    cb_header_t *hs = calloc(n + 1, sizeof *hs);
    const char *key;
    json_t *v;
    if (hs != NULL) {
      json_object_foreach(items, key, v) hs[i++].name = (cb_str_t){key, strlen(key)};
      if (d->field == CB_FIELD_HEADERS) qsort(hs, n, sizeof *hs, header_name_cmp);
      if ((size_t)d->index < n) w = sub(&w, hs[d->index].name.ptr, 0);
      free(hs);
    }
  }
  if (c->err != NULL) snprintf(c->err->value, sizeof c->err->value, "%s", d->text);
  return fail(c, &w, "%s: \"%s\" (docs/routes.md%s)", d->why_name, d->text,
              d->field == CB_FIELD_FAULT ? ", docs/faults.md" : "");
}

/* ---- fields ---- */

static int get_uint(const ctx_t *c, const where_t *w, json_t *obj, const char *key, uint64_t max, uint64_t *out) {
  json_t *v = json_object_get(obj, key);
  if (v == NULL) return 0;
  where_t f = sub(w, key, 0);
  if (!json_is_integer(v) || json_integer_value(v) < 0 || (uint64_t)json_integer_value(v) > max)
    return fail(c, &f, "%s: must be an integer from 0 to %llu", json_is_integer(v) ? "out_of_range" : "wrong_type",
                (unsigned long long)max);
  *out = (uint64_t)json_integer_value(v);
  return 0;
}

static int check_keys(const ctx_t *c, const where_t *w, json_t *obj, const char *const *keys) {
  const char *key;
  json_t *v;
  json_object_foreach(obj, key, v) {
    int known = 0;
    for (size_t i = 0; keys[i] && !known; i++) known = strcmp(key, keys[i]) == 0;
    if (!known) {
      where_t f = sub(w, key, 0);
      return fail(c, &f, "unknown_key: unknown field");
    }
  }
  return 0;
}

static int parse_methods(const ctx_t *c, const where_t *w, json_t *v, unsigned *out) {
  *out = 0;
  if (v == NULL) return 0;
  if (json_is_string(v)) {
    if (strcmp(json_string_value(v), "any") == 0) return 0;
    unsigned bit = cb_method_bit((cb_str_t){json_string_value(v), json_string_length(v)});
    if (bit == 0)
      return fail(c, w, "unknown_method: unknown method \"%s\" (GET, HEAD, POST, PUT, DELETE, PATCH, OPTIONS, CONNECT, "
                                    "TRACE, or \"any\")", json_string_value(v));
    *out = bit;
    return 0;
  }
  if (!json_is_array(v) || json_array_size(v) == 0)
    return fail(c, w, "%s: must be a method, a list of methods, or \"any\"", json_is_array(v) ? "empty" : "wrong_type");
  size_t i;
  json_t *m;
  json_array_foreach(v, i, m) {
    where_t f = sub(w, NULL, i);
    unsigned bit = json_is_string(m) ? cb_method_bit((cb_str_t){json_string_value(m), json_string_length(m)}) : 0;
    if (bit == 0) return fail(c, &f, "%s: must be a method name", json_is_string(m) ? "unknown_method" : "wrong_type");
    *out |= bit;
  }
  return 0;
}

/* {"name": "value" | true} into matchers. */
static int parse_matchers(const ctx_t *c, const where_t *w, json_t *v, cb_matcher_t **out, size_t *n) {
  *out = NULL;
  *n = 0;
  if (v == NULL) return 0;
  if (!json_is_object(v)) return fail(c, w, "wrong_type: must be an object of name: \"value\" or name: true");
  *out = calloc(json_object_size(v) + 1, sizeof **out);
  const char *key;
  json_t *x;
  json_object_foreach(v, key, x) {
    where_t f = sub(w, key, 0);
    cb_matcher_t *m = &(*out)[(*n)++];
    m->name = (cb_str_t){key, strlen(key)};
    if (json_is_true(x)) continue; /* present */
    if (!json_is_string(x)) return fail(c, &f, "wrong_type: must be a string (equal) or true (present)");
    m->value = (cb_str_t){json_string_value(x), json_string_length(x)};
  }
  return 0;
}

/* Response headers: an object, sent sorted by name (header_name_cmp), or a list of [name, value] pairs, sent in
 * its order with repeats kept. The names and values point into v. */
static int parse_headers(const ctx_t *c, const where_t *w, json_t *v, cb_header_t **out, size_t *n) {
  *out = NULL;
  *n = 0;
  if (v == NULL) return 0;
  if (json_is_object(v)) {
    *out = calloc(json_object_size(v) + 1, sizeof **out);
    const char *key;
    json_t *x;
    json_object_foreach(v, key, x) {
      where_t f = sub(w, key, 0);
      if (!json_is_string(x)) return fail(c, &f, "wrong_type: must be a string");
      (*out)[(*n)++] = (cb_header_t){{key, strlen(key)}, {json_string_value(x), json_string_length(x)}};
    }
    qsort(*out, *n, sizeof **out, header_name_cmp);
    return 0;
  }
  if (!json_is_array(v)) return fail(c, w, "wrong_type: must be an object, or a list of [name, value] pairs");
  *out = calloc(json_array_size(v) + 1, sizeof **out);
  size_t i;
  json_t *pair;
  json_array_foreach(v, i, pair) {
    where_t f = sub(w, NULL, i);
    json_t *k = json_array_get(pair, 0), *x = json_array_get(pair, 1);
    if (!json_is_array(pair) || json_array_size(pair) != 2 || !json_is_string(k) || !json_is_string(x))
      return fail(c, &f, "wrong_type: must be a [name, value] pair of strings");
    (*out)[(*n)++] = (cb_header_t){{json_string_value(k), json_string_length(k)}, {json_string_value(x), json_string_length(x)}};
  }
  return 0;
}

/* The offset of the first byte that makes s[0..n) not base64 (RFC 4648 section 4: A-Z, a-z, 0-9, '+', '/',
 * padded with '=' to a multiple of 4 characters, no white space), or -1 when it is base64. */
static long base64_bad(const char *s, size_t n) {
  size_t pad = n >= 1 && s[n - 1] == '=' ? (n >= 2 && s[n - 2] == '=' ? 2 : 1) : 0;
  for (size_t i = 0; i < n - pad; i++) {
    char ch = s[i];
    if (!((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '+' || ch == '/'))
      return (long)i;
  }
  return n % 4 ? (long)n : -1;
}

/* The body: "text", {"bytes": N}, {"file": "path"}, {"json": any} or {"base64": "..."}. *owned is what to free
 * afterwards. */
static int parse_body(const ctx_t *c, const where_t *w, json_t *v, cb_response_t *res, char **owned) {
  *owned = NULL;
  res->body_kind = CB_BODY_BYTES;
  if (v == NULL) return 0;
  if (json_is_string(v)) {
    res->body = (cb_str_t){json_string_value(v), json_string_length(v)};
    return 0;
  }
  if (!json_is_object(v) || json_object_size(v) != 1)
    return fail(c, w, "wrong_type: must be a string, or an object with one of bytes, file, json, base64");
  json_t *x;
  if ((x = json_object_get(v, "bytes")) != NULL) {
    where_t f = sub(w, "bytes", 0);
    if (!json_is_integer(x) || json_integer_value(x) < 0)
      return fail(c, &f, "%s: must be a non-negative integer", json_is_integer(x) ? "out_of_range" : "wrong_type");
    res->body_kind = CB_BODY_GENERATED;
    res->body_size = (uint64_t)json_integer_value(x);
    return 0;
  }
  if ((x = json_object_get(v, "file")) != NULL) {
    where_t f = sub(w, "file", 0);
    if (!json_is_string(x) || json_string_length(x) == 0)
      return fail(c, &f, "%s: must be a file path", json_is_string(x) ? "empty" : "wrong_type");
    const char *p = json_string_value(x);
    res->body_kind = CB_BODY_FILE;
    if (p[0] != '/' && c->dir_len > 0) { /* relative to the stub file's directory */
      size_t n = c->dir_len + 1 + strlen(p) + 1;
      *owned = malloc(n);
      snprintf(*owned, n, "%.*s/%s", (int)c->dir_len, c->dir, p);
      p = *owned;
    }
    res->body = (cb_str_t){p, strlen(p)};
    /* The engine refuses these too (cb_server_route_add); here the message can say what the file is. stat(2)
     * opens nothing, so a FIFO cannot block it. */
    struct stat sb;
    if (stat(p, &sb) == 0) {
      /* The reason first, as everywhere: not_regular, or the posix name (eisdir, efbig) as in Erlang. */
      if (S_ISDIR(sb.st_mode)) return fail(c, &f, "eisdir: %s is a directory: a body file must be a regular file", p);
      const char *what = S_ISFIFO(sb.st_mode) ? "a FIFO"
                         : S_ISCHR(sb.st_mode) || S_ISBLK(sb.st_mode) ? "a device" : S_ISSOCK(sb.st_mode) ? "a socket"
                         : NULL;
      if (what != NULL) return fail(c, &f, "not_regular: %s is %s: a body file must be a regular file", p, what);
      if ((uint64_t)sb.st_size > CB_MAX_BODY_FILE)
        return fail(c, &f, "efbig: %s has %llu bytes: a body file may have at most %llu", p,
                    (unsigned long long)sb.st_size, (unsigned long long)CB_MAX_BODY_FILE);
    }
    return 0;
  }
  if ((x = json_object_get(v, "json")) != NULL) {
    /* The canonical text, not json_dumps': ehttpd serves the same file's body in the same bytes. */
    *owned = cb__json_text(x);
    res->body = (cb_str_t){*owned, *owned ? strlen(*owned) : 0};
    return 0;
  }
  if ((x = json_object_get(v, "base64")) != NULL) { /* bytes a JSON string cannot hold (recordings: docs/record.md) */
    where_t f = sub(w, "base64", 0);
    if (!json_is_string(x)) return fail(c, &f, "wrong_type: must be a string of base64 (RFC 4648)");
    const char *b = json_string_value(x);
    size_t n = json_string_length(x);
    long bad = base64_bad(b, n);
    if (bad >= 0 && (size_t)bad == n)
      return fail(c, &f, "bad_char: not base64: %zu characters, not a multiple of 4 (pad with =)", n);
    if (bad >= 0)
      return fail(c, &f, "bad_char: not base64: byte %ld is not one of A-Z a-z 0-9 + / (or = padding at the end)",
                  bad);
    if (n > INT32_MAX) return fail(c, &f, "too_long: at most %d characters of base64", INT32_MAX);
    *owned = malloc(n / 4 * 3 + 1);
    if (*owned == NULL) return fail(c, &f, "out of memory");
    int m = EVP_DecodeBlock((unsigned char *)*owned, (const unsigned char *)b, (int)n);
    if (m < 0) return fail(c, &f, "bad_char: not base64");
    /* EVP_DecodeBlock counts the padding as zero bytes decoded: they are not the body's. */
    m -= (n >= 1 && b[n - 1] == '=') + (n >= 2 && b[n - 2] == '=');
    res->body = (cb_str_t){*owned, (size_t)m};
    return 0;
  }
  return fail(c, w, "unknown_key: must be a string, or an object with one of bytes, file, json, base64");
}

/* match.body: an object with one of equal, contains, regex (strings) or json, json_subset (any JSON value, handed
 * to the engine as compact text in *owned, which the caller frees). */
static int parse_body_match(const ctx_t *c, const where_t *w, json_t *v, cb_body_match_t *out, char **owned) {
  static const struct {
    const char *key;
    int kind;
  } kinds[] = {{"equal", CB_MATCH_BODY_EQUAL},
               {"contains", CB_MATCH_BODY_CONTAINS},
               {"regex", CB_MATCH_BODY_REGEX},
               {"json", CB_MATCH_BODY_JSON},
               {"json_subset", CB_MATCH_BODY_JSON_SUBSET}};
  *owned = NULL;
  if (v == NULL) return 0;
  if (!json_is_object(v) || json_object_size(v) != 1)
    return fail(c, w, "wrong_type: must be an object with one of equal, contains, regex, json, json_subset");
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
    json_t *x = json_object_get(v, kinds[i].key);
    if (x == NULL) continue;
    where_t f = sub(w, kinds[i].key, 0);
    out->kind = kinds[i].kind;
    if (kinds[i].kind == CB_MATCH_BODY_JSON || kinds[i].kind == CB_MATCH_BODY_JSON_SUBSET) {
      *owned = json_dumps(x, JSON_COMPACT | JSON_ENCODE_ANY);
      if (*owned == NULL) return fail(c, &f, "out of memory");
      out->value = (cb_str_t){*owned, strlen(*owned)};
      return 0;
    }
    if (!json_is_string(x)) return fail(c, &f, "wrong_type: must be a string");
    out->value = (cb_str_t){json_string_value(x), json_string_length(x)};
    return 0;
  }
  return fail(c, w, "unknown_key: must be an object with one of equal, contains, regex, json, json_subset");
}

/* One stub, parsed: what it points to lives in the parsed document or in the four allocations, freed by
 * parsed_free once the stubs are added. */
typedef struct {
  cb_response_t *rs; /* a sequence's responses, with each one's headers and owned bytes */
  cb_header_t **rh;
  char **owned;
  size_t n;
} seq_t;

typedef struct {
  cb_stub_t st;
  cb_matcher_t *hm, *qm;
  cb_header_t *rh;
  char *owned, *mowned;
  cb_stub_expect_kind expect;
  uint64_t expect_n;
  seq_t seq;
  struct proxy_mem_s *pm; /* a proxy response's options */
} parsed_t;

/* "expect": {"times": N} or {"at_least": N}, one of the two. */
static int parse_expect(const ctx_t *c, const where_t *w, json_t *v, parsed_t *out) {
  static const char *const keys[] = {"times", "at_least", NULL};
  if (v == NULL) return 0;
  if (!json_is_object(v) || json_object_size(v) != 1)
    return fail(c, w, "wrong_type: must be {\"times\": N} or {\"at_least\": N}");
  if (check_keys(c, w, v, keys)) return -1;
  int times = json_object_get(v, "times") != NULL;
  uint64_t n = 0;
  if (get_uint(c, w, v, times ? "times" : "at_least", UINT64_MAX >> 1, &n)) return -1;
  out->expect = times ? CB_STUB_EXPECT_TIMES : CB_STUB_EXPECT_AT_LEAST;
  out->expect_n = n;
  return 0;
}

static void seq_free(seq_t *q) {
  for (size_t i = 0; i < q->n; i++) {
    free(q->rh[i]);
    free(q->owned[i]);
  }
  free(q->rs);
  free(q->rh);
  free(q->owned);
  memset(q, 0, sizeof *q);
}

static void proxy_mem_free(struct proxy_mem_s *m);

static void parsed_free(parsed_t *p) {
  free(p->hm);
  free(p->qm);
  free(p->rh);
  free(p->owned);
  seq_free(&p->seq);
  free(p->mowned);
  proxy_mem_free(p->pm);
}

/* ---- proxy responses (issue 26, docs/proxy.md) ---- */

#define PROXY_RECORD_HEADERS 32
#define PROXY_RECORD_STATUS 64

typedef struct proxy_mem_s {
  cb_proxy_t p;
  cb_str_t headers[PROXY_RECORD_HEADERS];
  int status[PROXY_RECORD_STATUS];
  char *ca_path; /* a relative ca_file joined to the stub file's directory */
} proxy_mem_t;

static void proxy_mem_free(proxy_mem_t *m) {
  if (m != NULL) free(m->ca_path);
  free(m);
}

/* "proxy": {"to": "http://HOST:PORT[/prefix]", "protocol": "http1" | "h2c", "timeout_ms", "max_body_bytes",
 * "record", "record_headers": [...], "record_body_file_bytes", "record_status": [...], "pipeline", and for
 * https://: "ca_file", "ca_pem", "insecure", "server_name"}: the JSON types here, the values' rules in the engine
 * (cb_error_detail, response.proxy). */
static int parse_proxy(const ctx_t *c, const where_t *wr, json_t *v, proxy_mem_t **out) {
  static const char *const keys[] = {"to", "protocol", "timeout_ms", "max_body_bytes", "record", "record_headers",
                                     "record_body_file_bytes", "record_status", "ca_file", "ca_pem", "insecure",
                                     "server_name", "pipeline", NULL};
  where_t w = sub(wr, "proxy", 0);
  if (!json_is_object(v)) return fail(c, &w, "wrong_type: must be an object with at least \"to\"");
  if (check_keys(c, &w, v, keys)) return -1;
  proxy_mem_t *m = calloc(1, sizeof *m);
  if (m == NULL) return fail(c, &w, "out of memory");
  *out = m;
  json_t *to = json_object_get(v, "to"), *x;
  where_t f = sub(&w, "to", 0);
  if (!json_is_string(to)) return fail(c, &f, "%s: must be a string \"http://HOST:PORT\"", to ? "wrong_type" : "missing");
  m->p.to = (cb_str_t){json_string_value(to), json_string_length(to)};
  if ((x = json_object_get(v, "protocol")) != NULL) {
    f = sub(&w, "protocol", 0);
    if (!json_is_string(x)) return fail(c, &f, "wrong_type: must be \"http1\" or \"h2c\"");
    if (strcmp(json_string_value(x), "h2c") == 0) m->p.protocol = CB_PROXY_H2C;
    else if (strcmp(json_string_value(x), "http1") != 0) return fail(c, &f, "out_of_range: must be \"http1\" or \"h2c\"");
  }
  uint64_t u = 0;
  if (get_uint(c, &w, v, "timeout_ms", CB_PROXY_MAX_TIMEOUT_MS, &u)) return -1;
  if (json_object_get(v, "timeout_ms") != NULL && u == 0) {
    f = sub(&w, "timeout_ms", 0);
    return fail(c, &f, "out_of_range: must be an integer from 1 to %u", CB_PROXY_MAX_TIMEOUT_MS);
  }
  m->p.timeout_ms = (unsigned)u;
  if (get_uint(c, &w, v, "max_body_bytes", UINT64_MAX >> 2, &m->p.max_body_bytes)) return -1;
  if (get_uint(c, &w, v, "record_body_file_bytes", UINT64_MAX >> 2, &m->p.record_body_file_bytes)) return -1;
  /* Its bound here, as timeout_ms's; above 1 with h2c or https:// the engine's conflict names response.proxy. */
  u = 0;
  if (get_uint(c, &w, v, "pipeline", CB_PROXY_MAX_PIPELINE, &u)) return -1;
  m->p.pipeline = (unsigned)u;
  if ((x = json_object_get(v, "record")) != NULL) {
    f = sub(&w, "record", 0);
    if (!json_is_boolean(x)) return fail(c, &f, "wrong_type: must be true or false");
    m->p.record = json_is_true(x);
  }
  if ((x = json_object_get(v, "insecure")) != NULL) {
    f = sub(&w, "insecure", 0);
    if (!json_is_boolean(x)) return fail(c, &f, "wrong_type: must be true or false");
    m->p.insecure = json_is_true(x);
  }
  static const char *const tls_strs[] = {"ca_file", "ca_pem", "server_name"};
  cb_str_t *tls_out[] = {&m->p.ca_file, &m->p.ca_pem, &m->p.server_name};
  for (int k = 0; k < 3; k++) {
    if ((x = json_object_get(v, tls_strs[k])) == NULL) continue;
    f = sub(&w, tls_strs[k], 0);
    if (!json_is_string(x)) return fail(c, &f, "wrong_type: must be a string");
    *tls_out[k] = (cb_str_t){json_string_value(x), json_string_length(x)};
  }
  const char *cf = m->p.ca_file.ptr;
  if (cf != NULL && m->p.ca_file.len > 0 && cf[0] != '/' && c->dir_len > 0) { /* as a body file: relative to
                                                                                  * the stub file's directory */
    size_t n = c->dir_len + 1 + m->p.ca_file.len + 1;
    if ((m->ca_path = malloc(n)) == NULL) return fail(c, &w, "out of memory");
    snprintf(m->ca_path, n, "%.*s/%.*s", (int)c->dir_len, c->dir, (int)m->p.ca_file.len, cf);
    m->p.ca_file = (cb_str_t){m->ca_path, strlen(m->ca_path)};
  }
  size_t i;
  json_t *item;
  if ((x = json_object_get(v, "record_headers")) != NULL) {
    f = sub(&w, "record_headers", 0);
    if (!json_is_array(x)) return fail(c, &f, "wrong_type: must be a list of header names");
    if (json_array_size(x) > PROXY_RECORD_HEADERS) return fail(c, &f, "too_many: at most %d", PROXY_RECORD_HEADERS);
    json_array_foreach(x, i, item) {
      where_t fi = sub(&f, NULL, i);
      if (!json_is_string(item)) return fail(c, &fi, "wrong_type: must be a header name");
      m->headers[i] = (cb_str_t){json_string_value(item), json_string_length(item)};
    }
    m->p.record_headers = m->headers;
    m->p.nrecord_headers = json_array_size(x);
  }
  if ((x = json_object_get(v, "record_status")) != NULL) {
    f = sub(&w, "record_status", 0);
    if (!json_is_array(x)) return fail(c, &f, "wrong_type: must be a list of statuses");
    if (json_array_size(x) > PROXY_RECORD_STATUS) return fail(c, &f, "too_many: at most %d", PROXY_RECORD_STATUS);
    json_array_foreach(x, i, item) {
      where_t fi = sub(&f, NULL, i);
      if (!json_is_integer(item) || json_integer_value(item) < 100 || json_integer_value(item) > 599)
        return fail(c, &fi, "%s: must be a status from 100 to 599", json_is_integer(item) ? "out_of_range" : "wrong_type");
      m->status[i] = (int)json_integer_value(item);
    }
    m->p.record_status = m->status;
    m->p.nrecord_status = json_array_size(x);
  }
  return 0;
}

/* ---- sequences, scenarios, drawn delays and templates (issue 25) ---- */

/* "delay": a number of ms, {"uniform": [MIN, MAX]} or {"lognormal": [MEDIAN_MS, SIGMA]}; "delay_seed": N. */
static int parse_delay(const ctx_t *c, const where_t *w, json_t *res, cb_response_t *r) {
  json_t *d = json_object_get(res, "delay");
  if (d != NULL && json_object_get(res, "delay_ms") != NULL) {
    where_t f = sub(w, "delay_ms", 0);
    return fail(c, &f, "conflict: give delay or delay_ms, not both");
  }
  if (get_uint(c, w, res, "delay_seed", UINT64_MAX >> 1, &r->delay_seed)) return -1;
  if (d == NULL) return 0;
  where_t f = sub(w, "delay", 0);
  if (json_is_integer(d)) { /* a fixed delay */
    uint64_t ms = 0;
    if (get_uint(c, w, res, "delay", 3600000, &ms)) return -1;
    r->delay_ms = (unsigned)ms;
    return 0;
  }
  json_t *u = json_is_object(d) && json_object_size(d) == 1 ? json_object_get(d, "uniform") : NULL;
  json_t *l = json_is_object(d) && json_object_size(d) == 1 ? json_object_get(d, "lognormal") : NULL;
  json_t *a = u ? u : l, *x = json_array_get(a, 0), *y = json_array_get(a, 1);
  if (a == NULL || !json_is_array(a) || json_array_size(a) != 2 || !json_is_integer(x) ||
      !(u ? json_is_integer(y) : json_is_number(y)))
    return fail(c, &f, "wrong_type: must be milliseconds, {\"uniform\": [MIN, MAX]} or {\"lognormal\": [MEDIAN_MS, SIGMA]}");
  json_int_t lo = json_integer_value(x);
  double hi = json_number_value(y);
  if (lo < 0 || lo > 3600000 || (u && (hi < 0 || hi > 3600000)) || (l && !(hi > 0 && hi <= 10)))
    return fail(c, &f, "out_of_range: milliseconds from 0 to 3600000%s", l ? ", a sigma above 0 and at most 10" : "");
  if (u && (double)lo > hi) return fail(c, &f, "min_above_max: the lower end is above the upper end");
  r->delay_ms = (unsigned)lo;
  r->delay_dist = u ? CB_DELAY_UNIFORM : CB_DELAY_LOGNORMAL;
  if (u)
    r->delay_max_ms = (unsigned)hi;
  else
    r->delay_sigma = hi;
  return 0;
}

/* "scenario", "when", "then": strings (the engine checks them, and when or then without a scenario). */
static int parse_scenario(const ctx_t *c, const where_t *w, json_t *match, cb_stub_t *st) {
  static const char *const keys[] = {"scenario", "when", "then"};
  cb_str_t *out[] = {&st->scenario, &st->when, &st->then};
  for (int i = 0; i < 3; i++) {
    json_t *v = json_object_get(match, keys[i]);
    if (v == NULL) continue;
    where_t f = sub(w, keys[i], 0);
    if (!json_is_string(v)) return fail(c, &f, "wrong_type: must be a string");
    *out[i] = (cb_str_t){json_string_value(v), json_string_length(v)};
  }
  return 0;
}

static int parse_response(const ctx_t *c, const where_t *wr, json_t *res, cb_response_t *r, cb_header_t **rh,
                          char **owned, int top);

/* "responses": a list of responses (each as "response" but without times, responses or after); "after":
 * "last", "cycle" or "not_found". A sequence's own object holds only these and times. */
static int parse_sequence(const ctx_t *c, const where_t *wr, json_t *res, cb_stub_t *st, seq_t *q) {
  json_t *list = json_object_get(res, "responses"), *after = json_object_get(res, "after");
  where_t wl = sub(wr, "responses", 0);
  const char *key;
  json_t *v;
  json_object_foreach(res, key, v) {
    if (strcmp(key, "responses") && strcmp(key, "after") && strcmp(key, "times")) {
      where_t f = sub(wr, key, 0);
      return fail(c, &f, "unknown_key: a sequence takes responses, after and times");
    }
  }
  if (!json_is_array(list)) return fail(c, &wl, "wrong_type: must be a list of responses");
  size_t n = json_array_size(list);
  if (n == 0) return fail(c, &wl, "empty: a sequence has at least one response");
  if (n > CB_MAX_RESPONSES) return fail(c, &wl, "too_many: at most %d responses", CB_MAX_RESPONSES);
  q->rs = calloc(n, sizeof *q->rs);
  q->rh = calloc(n, sizeof *q->rh);
  q->owned = calloc(n, sizeof *q->owned);
  if (q->rs == NULL || q->rh == NULL || q->owned == NULL) return fail(c, &wl, "out of memory");
  for (size_t i = 0; i < n; i++) {
    where_t wi = sub(&wl, NULL, i);
    json_t *item = json_array_get(list, i);
    q->n = i + 1;
    if (!json_is_object(item)) return fail(c, &wi, "wrong_type: must be an object");
    if (parse_response(c, &wi, item, &q->rs[i], &q->rh[i], &q->owned[i], 0)) return -1;
  }
  if (after != NULL) {
    where_t f = sub(wr, "after", 0);
    const char *a = json_string_value(after);
    if (a == NULL) return fail(c, &f, "wrong_type: must be \"last\", \"cycle\" or \"not_found\"");
    if (strcmp(a, "last") == 0)
      st->after = CB_AFTER_LAST;
    else if (strcmp(a, "cycle") == 0)
      st->after = CB_AFTER_CYCLE;
    else if (strcmp(a, "not_found") == 0)
      st->after = CB_AFTER_NOT_FOUND;
    else
      return fail(c, &f, "out_of_range: must be \"last\", \"cycle\" or \"not_found\"");
  }
  st->responses = q->rs;
  st->nresponses = n;
  return 0;
}

/* A response object; top: the stub's own (which may also hold times, or be a sequence). */
static int parse_response(const ctx_t *c, const where_t *wr, json_t *res, cb_response_t *r, cb_header_t **rh,
                          char **owned, int top) {
  static const char *const item_keys[] = {"status", "headers", "body", "delay_ms", "chunks", "interval_ms", "fault",
                                          "delay", "delay_seed", "template", NULL};
  r->status = 200;
  r->body_kind = CB_BODY_BYTES;
  if (top && json_object_get(res, "responses") != NULL) {
    /* A sequence: times only here, the rest is its responses'. */
    return get_uint(c, wr, res, "times", UINT64_MAX >> 1, &r->times);
  }
  if (!top && check_keys(c, wr, res, item_keys)) return -1;
  if (top && json_object_get(res, "after") != NULL) {
    /* The stub's keys allow "after" for sequences; here nothing would read it, and its value would go unchecked.
     * Beside a proxy it is one of the keys a proxy cannot go with: a conflict, as the Erlang API names it. */
    where_t f = sub(wr, "after", 0);
    if (json_object_get(res, "proxy") != NULL)
      return fail(c, &f, "conflict: after goes with responses (a sequence), not with proxy");
    return fail(c, &f, "unknown_key: after goes with responses (a sequence)");
  }
  json_t *status = json_object_get(res, "status");
  if (status != NULL) {
    where_t f = sub(wr, "status", 0);
    if (!json_is_integer(status) || json_integer_value(status) < 200 || json_integer_value(status) > 599) {
      fail(c, &f, "%s: must be an integer from 200 to 599", json_is_integer(status) ? "out_of_range" : "wrong_type");
      return -1;
    }
    r->status = (int)json_integer_value(status);
  }
  where_t wrh = sub(wr, "headers", 0), wb = sub(wr, "body", 0);
  if (parse_headers(c, &wrh, json_object_get(res, "headers"), rh, &r->nheaders)) return -1;
  r->headers = *rh;
  if (parse_body(c, &wb, json_object_get(res, "body"), r, owned)) return -1;
  uint64_t v;
  v = 0;
  if (get_uint(c, wr, res, "delay_ms", 3600000, &v)) return -1;
  r->delay_ms = (unsigned)v;
  v = 0;
  if (get_uint(c, wr, res, "chunks", 1000000, &v)) return -1;
  r->chunks = (unsigned)v;
  v = 0;
  if (get_uint(c, wr, res, "interval_ms", 3600000, &v)) return -1;
  r->interval_ms = (unsigned)v;
  if (get_uint(c, wr, res, "times", UINT64_MAX >> 1, &r->times)) return -1;
  json_t *fault = json_object_get(res, "fault");
  if (fault != NULL && !json_is_string(fault)) {
    where_t wf = sub(wr, "fault", 0);
    fail(c, &wf, "wrong_type: must be a fault spec string such as \"reset?at=head\" (docs/faults.md)");
    return -1;
  }
  if (fault != NULL) r->fault = (cb_str_t){json_string_value(fault), json_string_length(fault)};
  if (parse_delay(c, wr, res, r)) return -1;
  json_t *t = json_object_get(res, "template");
  if (t != NULL) {
    where_t f = sub(wr, "template", 0);
    if (!json_is_boolean(t)) return fail(c, &f, "wrong_type: must be true or false");
    r->templated = json_is_true(t);
  }
  return 0;
}


static int parse_stub(const ctx_t *c, const where_t *w, json_t *s, parsed_t *out) {
  static const char *const stub_keys[] = {"name", "match", "response", "expect", NULL};
  static const char *const match_keys[] = {"method", "path", "headers", "query", "priority", "scenario", "when",
                                           "then", "body", NULL};
  static const char *const res_keys[] = {"status",   "headers", "body",       "delay_ms", "chunks",
                                         "interval_ms", "times", "fault",   "delay",    "delay_seed",
                                         "template", "responses", "after", "proxy", NULL};
  if (!json_is_object(s)) return fail(c, w, "wrong_type: must be an object with match and response");
  if (check_keys(c, w, s, stub_keys)) return -1;
  cb_stub_t st;
  memset(&st, 0, sizeof st);
  char *owned = NULL, *mowned = NULL;
  int rc = -1;
  memset(out, 0, sizeof *out);
  json_t *name = json_object_get(s, "name"), *match = json_object_get(s, "match"), *res = json_object_get(s, "response");
  where_t wm = sub(w, "match", 0), wr = sub(w, "response", 0);
  if (name != NULL) {
    where_t f = sub(w, "name", 0);
    if (!json_is_string(name)) return fail(c, &f, "wrong_type: must be a string");
    st.name = (cb_str_t){json_string_value(name), json_string_length(name)};
  }
  if (!json_is_object(match))
    return fail(c, &wm, "%s: must be an object with at least a path", match ? "wrong_type" : "missing");
  if (res != NULL && !json_is_object(res)) return fail(c, &wr, "wrong_type: must be an object");
  if (check_keys(c, &wm, match, match_keys) || (res && check_keys(c, &wr, res, res_keys))) return -1;
  json_t *path = json_object_get(match, "path");
  where_t wp = sub(&wm, "path", 0);
  if (!json_is_string(path)) /* the engine checks the pattern itself (cb_error_detail) */
    return fail(c, &wp, "%s: must be a path pattern starting with /", path ? "wrong_type" : "missing");
  st.match.path = (cb_str_t){json_string_value(path), json_string_length(path)};
  where_t wmeth = sub(&wm, "method", 0), wh = sub(&wm, "headers", 0), wq = sub(&wm, "query", 0);
  if (parse_methods(c, &wmeth, json_object_get(match, "method"), &st.match.methods)) return -1;
  cb_matcher_t *hm = NULL, *qm = NULL;
  cb_header_t *rh = NULL;
  seq_t seq = {0};
  proxy_mem_t *pm = NULL;
  if (parse_scenario(c, &wm, match, &st)) return -1;
  if (parse_matchers(c, &wh, json_object_get(match, "headers"), &hm, &st.match.nheaders)) goto out;
  st.match.headers = hm;
  if (parse_matchers(c, &wq, json_object_get(match, "query"), &qm, &st.match.nquery)) goto out;
  st.match.query = qm;
  json_t *prio = json_object_get(match, "priority");
  if (prio != NULL) {
    where_t f = sub(&wm, "priority", 0);
    if (!json_is_integer(prio) || json_integer_value(prio) < -1000000 || json_integer_value(prio) > 1000000) {
      fail(c, &f, "%s: must be an integer from -1000000 to 1000000",
           json_is_integer(prio) ? "out_of_range" : "wrong_type");
      goto out;
    }
    st.match.priority = (int)json_integer_value(prio);
  }
  where_t wmb = sub(&wm, "body", 0);
  if (parse_body_match(c, &wmb, json_object_get(match, "body"), &st.match.body, &mowned)) goto out;
  st.response.status = 200;
  if (res != NULL) {
    if (parse_response(c, &wr, res, &st.response, &rh, &owned, 1)) goto out;
    if (json_object_get(res, "responses") != NULL && parse_sequence(c, &wr, res, &st, &seq)) goto out;
    json_t *proxy = json_object_get(res, "proxy");
    if (proxy != NULL) {
      if (parse_proxy(c, &wr, proxy, &pm)) goto out;
      st.response.proxy = &pm->p;
      if (json_object_get(res, "status") == NULL) st.response.status = 0; /* set, it is the engine's conflict */
    }
  }
  where_t we = sub(w, "expect", 0);
  if (parse_expect(c, &we, json_object_get(s, "expect"), out)) goto out;
  rc = 0;
out:
  *out = (parsed_t){.st = st, .hm = hm, .qm = qm, .rh = rh, .owned = owned, .mowned = mowned,
                    .expect = out->expect, .expect_n = out->expect_n, .seq = seq, .pm = pm};
  if (rc) parsed_free(out);
  return rc;
}

/* What the engine refused of stub s (parsed as st): the field and why when it names one (the reasons of
 * cb_error_detail(), the Erlang API's too: a pattern's syntax, header names and values, what JSON types cannot
 * say), else the error. */
static int refused(const ctx_t *c, const where_t *w, json_t *s, const cb_stub_t *st, int err) {
  /* The engine names every proxy option response.proxy; a `to' it refuses is named as the Erlang API names it,
   * response.proxy.to (asked again on its own only after a refusal, so a good file resolves each host once). */
  if (err == CB_EINVAL && cb_error_detail()->field == CB_FIELD_PROXY && st->response.proxy != NULL &&
      cb__proxy_check_to(st->response.proxy->to) == CB_EINVAL) {
    const cb_error_detail_t *d = cb_error_detail();
    where_t f = sub(w, "response", 0);
    f = sub(&f, "proxy", 0);
    f = sub(&f, "to", 0);
    if (c->err != NULL) snprintf(c->err->value, sizeof c->err->value, "%s", d->text);
    return fail(c, &f, "%s: \"%s\" (docs/routes.md)", d->why_name, d->text);
  }
  if (err == CB_EINVAL && cb_error_detail()->field != CB_FIELD_NONE)
    return fail_detail(c, w, cb_error_detail(), json_object_get(s, "match"), json_object_get(s, "response"));
  const char *hint = st->response.body_kind == CB_BODY_FILE && err != CB_EINVAL ? "response.body.file: " : "";
  return fail(c, w, "%s%s (%s): see docs/routes.md for the rules of match.path, headers and body%s", hint,
              cb_strerror(err), cb_err_name(err), st->response.fault.ptr ? ", docs/faults.md for response.fault" : "");
}

/* Parses the text of c (one stub object, a list of stubs, or {"stubs": [...]}) and adds every stub in one
 * call. Returns the number added, or -1 with c->msg (and c->err) filled. */
static int add_text(cb_server_t *srv, ctx_t *c, cb_stub_added_t **added) {
  char *msg = c->msg;
  size_t msgcap = c->msgcap, n;
  json_error_t e;
  /* A key given twice in one object would be taken silently with its last value: refused, with its line. */
  json_t *root = json_loadb(c->text, c->len, JSON_REJECT_DUPLICATES, &e), *one = NULL;
  int count = -1;
  if (added != NULL) *added = NULL;
  if (root == NULL) {
    snprintf(msg, msgcap, "%s:%d: column %d: %s", c->file, e.line, e.column, e.text);
    escape_msg(msg, msgcap);
    if (c->err != NULL) {
      snprintf(c->err->why, sizeof c->err->why, "bad_json");
      c->err->line = e.line;
      c->err->column = e.column;
    }
    goto done;
  }
  where_t w = {0};
  json_t *stubs = root;
  if (json_is_object(root) && json_object_get(root, "stubs") == NULL && c->single_ok) {
    /* One stub object (the admin API's POST /stubs): a list of one. */
    one = json_array();
    if (one == NULL || json_array_append(one, root) != 0) {
      snprintf(msg, msgcap, "%s: out of memory", c->file);
      goto done;
    }
    stubs = one;
    c->lone = 1;
  } else if (json_is_object(root)) {
    /* The file's object holds the list and nothing else: another key ("stub", a stub's "match") would be
     * skipped in silence. Named from the root (root_is_object would hide its first step, the key itself). An
     * object without "stubs" at all is told what it lacks, below. */
    static const char *const root_keys[] = {"stubs", NULL};
    if (json_object_get(root, "stubs") != NULL && check_keys(c, &w, root, root_keys)) goto done;
    c->root_is_object = 1;
    w = sub(&w, "stubs", 0);
    stubs = json_object_get(root, "stubs");
  }
  if (!json_is_array(stubs)) {
    fail(c, &w, "wrong_type: must be a list of stubs (or an object with a \"stubs\" list)");
    goto done;
  }
  /* Every stub parsed first, then added in one call: one route table for the whole file. */
  n = json_array_size(stubs);
  size_t i, parsed = 0;
  parsed_t *ps = calloc(n + 1, sizeof *ps);
  uint64_t *ids = calloc(n + 1, sizeof *ids);
  if (ps == NULL || ids == NULL) {
    snprintf(msg, msgcap, "%s: out of memory", c->file);
  } else {
    json_t *s;
    json_array_foreach(stubs, i, s) {
      where_t ws = sub(&w, NULL, i);
      if (parse_stub(c, &ws, s, &ps[i]) != 0) break;
      parsed++;
    }
  }
  if (ps != NULL && ids != NULL && parsed == n) {
    cb_stub_t *all = malloc((n + 1) * sizeof *all);
    size_t bad = n;
    int err = all ? 0 : CB_ENOMEM;
    for (i = 0; i < n && all; i++) all[i] = ps[i].st;
    if (err == 0) err = cb_server_route_add_many(srv, all, n, ids, &bad);
    if (err == 0 && added != NULL && n > 0) {
      *added = malloc(n * sizeof **added);
      if (*added == NULL) err = CB_ENOMEM; /* the stubs are in: said as a failure all the same */
      for (i = 0; i < n && *added; i++)
        (*added)[i] = (cb_stub_added_t){.id = ids[i], .expect = ps[i].expect, .expect_n = ps[i].expect_n};
    }
    if (err == 0) {
      count = (int)n;
    } else if (bad < n) {
      where_t ws = sub(&w, NULL, bad);
      refused(c, &ws, json_array_get(stubs, bad), &all[bad], err);
    } else {
      snprintf(msg, msgcap, "%s: %s (%s)", c->file, cb_strerror(err), cb_err_name(err));
    }
    free(all);
  }
  for (i = 0; i < parsed; i++) parsed_free(&ps[i]);
  free(ps);
  free(ids);
done:
  json_decref(one);
  json_decref(root);
  return count;
}

int cb_stubs_json_add(cb_server_t *srv, const char *label, const char *dir, const char *text, size_t len,
                      cb_stub_added_t **added, cb_stubs_json_error_t *err) {
  memset(err, 0, sizeof *err);
  ctx_t c = {.file = label, .text = text ? text : "", .len = text ? len : 0, .dir = dir ? dir : "",
             .dir_len = dir ? strlen(dir) : 0, .msg = err->msg, .msgcap = sizeof err->msg, .err = err,
             .single_ok = 1};
  return add_text(srv, &c, added);
}

int cb_stubs_json_load(cb_server_t *srv, const char *path, char *msg, size_t msgcap) {
  return cb_stubs_json_load_added(srv, path, NULL, msg, msgcap);
}

int cb_stubs_json_load_added(cb_server_t *srv, const char *path, cb_stub_added_t **added, char *msg,
                             size_t msgcap) {
  /* A FIFO is a fine stub file (--stubs <(generate)): its open waits for a writer, and the CLI's signal
   * handling ends the wait on SIGINT or SIGTERM. The text is bounded so that /dev/zero cannot take the memory. */
  FILE *f = fopen(path, "rb");
  struct stat sb;
  if (added != NULL) *added = NULL;
  if (f == NULL || fstat(fileno(f), &sb) != 0 || S_ISDIR(sb.st_mode)) {
    snprintf(msg, msgcap, "%s: %s", path, f == NULL || !S_ISDIR(sb.st_mode) ? strerror(errno) : "is a directory");
    escape_msg(msg, msgcap);
    if (f != NULL) fclose(f);
    return -1;
  }
  char *text = NULL;
  size_t len = 0, cap = 0, n;
  char buf[65536];
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) {
    if (len + n > CB_STUBS_FILE_MAX) {
      free(text);
      fclose(f);
      snprintf(msg, msgcap, "%s: more than %u bytes: a stub file may have at most that", path, CB_STUBS_FILE_MAX);
      escape_msg(msg, msgcap);
      return -1;
    }
    if (len + n > cap) {
      cap = (len + n) * 2;
      char *t = realloc(text, cap);
      if (t == NULL) {
        free(text);
        fclose(f);
        snprintf(msg, msgcap, "%s: out of memory", path);
        return -1;
      }
      text = t;
    }
    memcpy(text + len, buf, n);
    len += n;
  }
  fclose(f);
  const char *slash = strrchr(path, '/');
  ctx_t c = {.file = path, .text = text ? text : "", .len = len, .dir = path,
             .dir_len = slash ? (size_t)(slash - path) : 0, .msg = msg, .msgcap = msgcap};
  if (slash == path) c.dir_len = 1; /* "/x.json": the root */
  int count = add_text(srv, &c, added);
  free(text);
  return count;
}

int cb_server_stubs_file(cb_server_t *srv, const char *path, char *msg, size_t msgcap) {
  if (srv == NULL || path == NULL || msg == NULL || msgcap == 0) return UV_EINVAL;
  if (cb__on_worker_thread()) return UV_EBUSY;
  cb_stub_added_t *added = NULL;
  /* The stubs and their expectations are one step against the admin API's POST /reset. */
  if (srv->admin != NULL) cb__admin_add_begin(srv->admin);
  int n = cb_stubs_json_load_added(srv, path, &added, msg, msgcap);
  /* The stubs are in; their expectations are the admin API's to verify (kept only when it runs). */
  int err = n >= 0 && srv->admin != NULL ? cb__admin_expect(srv->admin, added, (size_t)n) : 0;
  if (srv->admin != NULL) cb__admin_add_end(srv->admin);
  if (n < 0) return UV_EINVAL;
  free(added);
  if (err) snprintf(msg, msgcap, "%s: %s (%s)", path, cb_strerror(err), cb_err_name(err));
  return err ? err : n;
}
