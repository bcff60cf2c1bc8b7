/* Canonical compact JSON text (json_text.h). jansson's json_dumps keeps an object's member order and writes
 * reals with 17 significant digits (0.1 as 0.10000000000000001), while ehttpd's encoder sees maps (no order)
 * and writes the shortest float: the two agree only on one form, written here. */
#include "json_text.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  char *p;
  size_t len, cap;
  int oom;
} text_t;

static void put(text_t *t, const char *s, size_t n) {
  if (t->oom) return;
  if (t->len + n + 1 > t->cap) {
    size_t cap = t->cap ? t->cap : 64;
    while (cap < t->len + n + 1) cap *= 2;
    char *p = realloc(t->p, cap);
    if (p == NULL) {
      t->oom = 1;
      return;
    }
    t->p = p;
    t->cap = cap;
  }
  memcpy(t->p + t->len, s, n);
  t->len += n;
  t->p[t->len] = '\0';
}

static void put_str(text_t *t, const char *s) { put(t, s, strlen(s)); }

static void put_string(text_t *t, const char *s, size_t n) {
  put(t, "\"", 1);
  size_t from = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)s[i];
    const char *esc = NULL;
    char u[8];
    switch (ch) {
    case '"': esc = "\\\""; break;
    case '\\': esc = "\\\\"; break;
    case '\b': esc = "\\b"; break;
    case '\f': esc = "\\f"; break;
    case '\n': esc = "\\n"; break;
    case '\r': esc = "\\r"; break;
    case '\t': esc = "\\t"; break;
    default:
      if (ch < 0x20) {
        snprintf(u, sizeof u, "\\u%04X", ch);
        esc = u;
      }
    }
    if (esc == NULL) continue;
    put(t, s + from, i - from);
    put_str(t, esc);
    from = i + 1;
  }
  put(t, s + from, n - from);
  put(t, "\"", 1);
}

/* The shortest digits that read back to d (as "%.*e" rounds them: the nearest of that length), then the notation
 * Erlang's [short] chooses (float_to_list/2's documentation): from 2^53 up in magnitude always scientific, below it
 * the shorter of the two, the plain one on a tie: 100.0 (not 1.0e2), 0.0001 (not 1.0e-4), 1.0e3 (not 1000.0),
 * 1.23e-4 (not 0.000123), 9.007199254740992e15 (2^53, not 9007199254740992.0). */
/* The digits of a decimal m * 10^e that reads back to d, or 0 when it does not: digits without trailing zeros in
 * out, and the power of ten of the first digit in *exp10. */
static size_t round_trips(double d, unsigned long long m, int e, char *out, int *exp10) {
  char text[48];
  snprintf(text, sizeof text, "%llue%d", m, e);
  if (strtod(text, NULL) != fabs(d)) return 0;
  size_t n = (size_t)snprintf(out, 24, "%llu", m);
  *exp10 = e + (int)n - 1;
  while (n > 1 && out[n - 1] == '0') n--;
  return n;
}

static void put_real(text_t *t, double d) {
  char digits[24];
  size_t nd = 0;
  int exp10 = 0;
  /* At each length the nearest decimal ("%.*e" rounds correctly), or the one next to it on the other side of d:
   * next to a power of two the doubles that read back are not centred on d, and the nearest may fall outside
   * while its neighbour is inside (-2^-1017 is -7.120236347223045e-307, not ...0444e-307). 17 digits always do. */
  for (int prec = 0; nd == 0 && prec < 17; prec++) {
    char e[40];
    snprintf(e, sizeof e, "%.*e", prec, fabs(d));
    unsigned long long m = 0;
    const char *x = e;
    for (; *x != 'e'; x++)
      if (*x != '.') m = m * 10 + (unsigned long long)(*x - '0');
    int last = atoi(x + 1) - prec; /* the power of ten of the last digit */
    nd = round_trips(d, m, last, digits, &exp10);
    if (nd == 0) nd = round_trips(d, m + 1, last, digits, &exp10);
    if (nd == 0 && m > 0) nd = round_trips(d, m - 1, last, digits, &exp10);
  }
  char sci[48], plain[400];
  /* Scientific: D.DDDeX, with ".0" when there is one digit. */
  snprintf(sci, sizeof sci, "%c.%.*se%d", digits[0], nd > 1 ? (int)nd - 1 : 1, nd > 1 ? digits + 1 : "0", exp10);
  size_t p = 0;
  if (exp10 < 0) {
    p += (size_t)snprintf(plain, sizeof plain, "0.");
    for (int z = -1; z > exp10; z--) plain[p++] = '0';
    memcpy(plain + p, digits, nd);
    p += nd;
  } else {
    for (size_t i = 0; i < nd || i <= (size_t)exp10; i++) {
      if (i == (size_t)exp10 + 1) plain[p++] = '.';
      plain[p++] = i < nd ? digits[i] : '0';
    }
    if (nd <= (size_t)exp10 + 1) {
      plain[p++] = '.';
      plain[p++] = '0';
    }
  }
  plain[p] = '\0';
  if (signbit(d)) put(t, "-", 1);
  put_str(t, fabs(d) >= 9007199254740992.0 || strlen(sci) < p ? sci : plain);
}

static int by_key(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

static void put_value(text_t *t, const json_t *v) {
  char num[32];
  switch (json_typeof(v)) {
  case JSON_OBJECT: {
    size_t n = json_object_size(v), i = 0;
    const char **keys = malloc((n ? n : 1) * sizeof *keys);
    if (keys == NULL) {
      t->oom = 1;
      return;
    }
    const char *key;
    json_t *x;
    json_object_foreach((json_t *)v, key, x) keys[i++] = key;
    /* strcmp compares as unsigned char: the byte order of Erlang's sorted binary keys. */
    qsort(keys, n, sizeof *keys, by_key);
    put(t, "{", 1);
    for (i = 0; i < n; i++) {
      if (i) put(t, ",", 1);
      put_string(t, keys[i], strlen(keys[i]));
      put(t, ":", 1);
      put_value(t, json_object_get(v, keys[i]));
    }
    put(t, "}", 1);
    free(keys);
    return;
  }
  case JSON_ARRAY:
    put(t, "[", 1);
    for (size_t i = 0; i < json_array_size(v); i++) {
      if (i) put(t, ",", 1);
      put_value(t, json_array_get(v, i));
    }
    put(t, "]", 1);
    return;
  case JSON_STRING: put_string(t, json_string_value(v), json_string_length(v)); return;
  case JSON_INTEGER:
    snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    put_str(t, num);
    return;
  case JSON_REAL: put_real(t, json_real_value(v)); return;
  case JSON_TRUE: put_str(t, "true"); return;
  case JSON_FALSE: put_str(t, "false"); return;
  case JSON_NULL: put_str(t, "null"); return;
  }
}

char *cb__json_text(const json_t *v) {
  text_t t = {0};
  put_value(&t, v);
  if (t.oom) {
    free(t.p);
    return NULL;
  }
  return t.p;
}
