/* Body matchers (cb_match_t.body): compiled once when a route is added, run on a request's complete body when the
 * lookup reaches a route that has one (route_table.c holds the body until then). JSON through jansson; regular
 * expressions checked by libc's regcomp and run by the Thompson NFA below. */
#include <jansson.h>
#include <regex.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "routes/routes.h"

/* A regex compiled for the NFA: instructions, each RE_SET naming one of the byte sets. */
enum { RE_SET, RE_SPLIT, RE_JMP, RE_BOL, RE_EOL, RE_MATCH };
typedef struct {
  uint8_t op;
  uint16_t set;  /* RE_SET: index into sets */
  int32_t x, y;  /* RE_JMP: x; RE_SPLIT: x and y */
} re_inst_t;

struct cb__body_match_s {
  int kind;
  char *bytes; /* EQUAL, CONTAINS */
  size_t len;
  json_t *json; /* JSON, JSON_SUBSET */
  /* REGEX */
  re_inst_t *prog;
  int nprog;
  uint8_t (*sets)[32];
  uint8_t first[32]; /* the bytes a match can begin with (when skip) */
  uint8_t skip;      /* a match consumes a byte of first: positions with another byte need no thread */
  uint8_t anchored;  /* every match begins with '^': only position 0 can start one */
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

/* ---- the regex matcher ----
 * glibc's regexec was not linear: an unanchored search runs its DFA from every start position (a+b against 40 KB
 * of 'a': 6.7 s of CPU), and a pattern such as a(a|b){200}c builds a new DFA state for almost every byte (26 s
 * for 100 KB); regcomp of ((a{255}){255}){255} took 11 s and 3.4 GB. A request body would stall its worker. So
 * regcomp only checks a pattern (the refusals stay glibc's) and the match is a Thompson NFA run over the body
 * once, every live state advanced together: each step is one instruction for one state, the steps of one
 * request are bounded by CB__REGEX_STEPS and CB__REGEX_STEPS_PER_BYTE of the body (over them: no match, as
 * ehttpd's PCRE match_limit; a pattern that keeps a few states alive, such as a+b, takes 5 a byte), and a counted
 * repetition written out may not make a program over CB__REGEX_PROG instructions (bad_regex). The language is
 * glibc's in the C locale, byte for byte: '.' is any byte but NUL, a bracket's ranges compare byte values, its
 * classes are ASCII's. */

enum { N_SET, N_CAT, N_ALT, N_REP, N_BOL, N_EOL, N_EMPTY };
typedef struct {
  uint8_t type;
  uint16_t set;
  int a, b;     /* children: CAT and ALT both, REP a */
  int min, max; /* REP: max -1 when unbounded */
} re_node_t;

typedef struct {
  const char *p;
  size_t n, i;
  re_node_t *nodes;
  int nn;
  uint8_t (*sets)[32];
  int nsets;
} re_parse_t;

static int re_node(re_parse_t *ps, int type, int a, int b) {
  ps->nodes[ps->nn] = (re_node_t){(uint8_t)type, 0, a, b, 0, 0};
  return ps->nn++;
}

static int re_set_node(re_parse_t *ps, const uint8_t set[32]) {
  memcpy(ps->sets[ps->nsets], set, 32);
  int k = re_node(ps, N_SET, -1, -1);
  ps->nodes[k].set = (uint16_t)ps->nsets++;
  return k;
}

static void set_add(uint8_t set[32], unsigned c) { set[c >> 3] |= (uint8_t)(1u << (c & 7)); }
static int set_has(const uint8_t set[32], unsigned c) { return set[c >> 3] >> (c & 7) & 1; }

/* The C locale's classes (ASCII): the same whatever locale the process runs in. */
static int class_has(const char *name, size_t len, unsigned c) {
  int up = c >= 'A' && c <= 'Z', lo = c >= 'a' && c <= 'z', dg = c >= '0' && c <= '9';
  int graph = c >= 0x21 && c <= 0x7e;
#define IS(s) (len == sizeof s - 1 && memcmp(name, s, len) == 0)
  if (IS("alpha")) return up || lo;
  if (IS("digit")) return dg;
  if (IS("alnum")) return up || lo || dg;
  if (IS("upper")) return up;
  if (IS("lower")) return lo;
  if (IS("space")) return c == ' ' || (c >= '\t' && c <= '\r');
  if (IS("punct")) return graph && !up && !lo && !dg;
  if (IS("print")) return c == ' ' || graph;
  if (IS("graph")) return graph;
  if (IS("cntrl")) return c < 0x20 || c == 0x7f;
  if (IS("xdigit")) return dg || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
  return c == ' ' || c == '\t'; /* blank: cb__regex_subset_ok let no other name through */
#undef IS
}

/* A bracket expression from p[i] = '[' (cb__regex_subset_ok checked its form; regcomp refuses what is left
 * wrong, such as a backward range). */
static int re_bracket(re_parse_t *ps) {
  const char *p = ps->p;
  size_t n = ps->n, i = ps->i + 1;
  uint8_t set[32] = {0};
  int neg = i < n && p[i] == '^';
  if (neg) i++;
  for (int first = 1; i < n && (first || p[i] != ']'); first = 0) {
    if (p[i] == '[' && i + 1 < n && p[i + 1] == ':') {
      size_t k = i + 2;
      while (k + 1 < n && !(p[k] == ':' && p[k + 1] == ']')) k++;
      for (unsigned c = 0; c < 256; c++)
        if (class_has(p + i + 2, k - i - 2, c)) set_add(set, c);
      i = k + 2;
      continue;
    }
    unsigned lo = (unsigned char)p[i++], hi = lo;
    if (i + 1 < n && p[i] == '-' && p[i + 1] != ']') {
      hi = (unsigned char)p[i + 1];
      i += 2;
    }
    for (unsigned c = lo; c <= hi; c++) set_add(set, c);
  }
  ps->i = i + 1;
  if (neg)
    for (int k = 0; k < 32; k++) set[k] = (uint8_t)~set[k];
  return re_set_node(ps, set);
}

static int re_alt(re_parse_t *ps);

static int re_atom(re_parse_t *ps) {
  unsigned char c = (unsigned char)ps->p[ps->i];
  uint8_t set[32] = {0};
  switch (c) {
    case '(': {
      ps->i++;
      int k = re_alt(ps);
      ps->i++; /* ')' */
      return k;
    }
    case '[':
      return re_bracket(ps);
    case '^':
      ps->i++;
      return re_node(ps, N_BOL, -1, -1);
    case '$':
      ps->i++;
      return re_node(ps, N_EOL, -1, -1);
    case '.':
      memset(set, 0xff, sizeof set);
      set[0] &= 0xfe; /* not NUL: glibc's RE_DOT_NOT_NULL */
      ps->i++;
      return re_set_node(ps, set);
    case '\\':
      c = (unsigned char)ps->p[ps->i + 1];
      ps->i++;
      /* fall through */
    default:
      set_add(set, c);
      ps->i++;
      return re_set_node(ps, set);
  }
}

static int re_piece(re_parse_t *ps) {
  int k = re_atom(ps);
  if (ps->i >= ps->n) return k;
  int min, max;
  switch (ps->p[ps->i]) {
    case '*': min = 0, max = -1; break;
    case '+': min = 1, max = -1; break;
    case '?': min = 0, max = 1; break;
    case '{': {
      size_t i = ps->i + 1;
      min = 0;
      while (ps->p[i] >= '0' && ps->p[i] <= '9') min = min * 10 + (ps->p[i++] - '0');
      max = min;
      if (ps->p[i] == ',') {
        i++;
        max = ps->p[i] == '}' ? -1 : 0;
        while (ps->p[i] >= '0' && ps->p[i] <= '9') max = max * 10 + (ps->p[i++] - '0');
      }
      ps->i = i; /* at '}' */
      break;
    }
    default:
      return k;
  }
  ps->i++;
  int r = re_node(ps, N_REP, k, -1);
  ps->nodes[r].min = min;
  ps->nodes[r].max = max;
  return r;
}

static int re_cat(re_parse_t *ps) {
  int k = -1;
  while (ps->i < ps->n && ps->p[ps->i] != '|' && ps->p[ps->i] != ')') {
    int at = re_piece(ps);
    k = k < 0 ? at : re_node(ps, N_CAT, k, at);
  }
  return k < 0 ? re_node(ps, N_EMPTY, -1, -1) : k;
}

static int re_alt(re_parse_t *ps) {
  int k = re_cat(ps);
  while (ps->i < ps->n && ps->p[ps->i] == '|') {
    ps->i++;
    k = re_node(ps, N_ALT, k, re_cat(ps));
  }
  return k;
}

/* Instructions node k takes, at most CB__REGEX_PROG + 1 (enough to say it is too many). */
static size_t re_size(const re_parse_t *ps, int k) {
  const size_t cap = CB__REGEX_PROG + 1;
  const re_node_t *nd = &ps->nodes[k];
  size_t s, t;
  switch (nd->type) {
    case N_EMPTY: return 0;
    case N_CAT: s = re_size(ps, nd->a) + re_size(ps, nd->b); break;
    case N_ALT: s = re_size(ps, nd->a) + re_size(ps, nd->b) + 2; break;
    case N_REP:
      t = re_size(ps, nd->a);
      if (nd->max < 0) s = nd->min ? (size_t)nd->min * t + 1 : t + 2;
      else s = (size_t)nd->min * t + (size_t)(nd->max - nd->min) * (t + 1);
      break;
    default: s = 1;
  }
  return s < cap ? s : cap;
}

static void re_emit(const re_parse_t *ps, int k, re_inst_t *prog, int *pc) {
  const re_node_t *nd = &ps->nodes[k];
  switch (nd->type) {
    case N_SET: prog[(*pc)++] = (re_inst_t){RE_SET, nd->set, 0, 0}; break;
    case N_BOL: prog[(*pc)++] = (re_inst_t){RE_BOL, 0, 0, 0}; break;
    case N_EOL: prog[(*pc)++] = (re_inst_t){RE_EOL, 0, 0, 0}; break;
    case N_CAT:
      re_emit(ps, nd->a, prog, pc);
      re_emit(ps, nd->b, prog, pc);
      break;
    case N_ALT: {
      int split = (*pc)++;
      re_emit(ps, nd->a, prog, pc);
      int jmp = (*pc)++;
      prog[split] = (re_inst_t){RE_SPLIT, 0, split + 1, *pc};
      re_emit(ps, nd->b, prog, pc);
      prog[jmp] = (re_inst_t){RE_JMP, 0, *pc, 0};
      break;
    }
    case N_REP: {
      int copies = nd->max < 0 && nd->min > 0 ? nd->min - 1 : nd->min;
      for (int c = 0; c < copies; c++) re_emit(ps, nd->a, prog, pc);
      if (nd->max < 0 && nd->min > 0) { /* x+: x, then back to it or on */
        int top = *pc;
        re_emit(ps, nd->a, prog, pc);
        prog[*pc] = (re_inst_t){RE_SPLIT, 0, top, *pc + 1};
        (*pc)++;
      } else if (nd->max < 0) { /* x*: a split before x, a jump back after it */
        int split = (*pc)++;
        re_emit(ps, nd->a, prog, pc);
        prog[*pc] = (re_inst_t){RE_JMP, 0, split, 0};
        (*pc)++;
        prog[split] = (re_inst_t){RE_SPLIT, 0, split + 1, *pc};
      } else {
        for (int c = nd->min; c < nd->max; c++) { /* x?: each optional copy */
          int split = (*pc)++;
          re_emit(ps, nd->a, prog, pc);
          prog[split] = (re_inst_t){RE_SPLIT, 0, split + 1, *pc};
        }
      }
      break;
    }
    default: break; /* N_EMPTY */
  }
}

/* What the states reachable from pc 0 without reading a byte say: the bytes a match can begin with and whether
 * it can match without one (no skip), and whether every path meets '^' first (anchored). */
static void re_start(cb__body_match_t *m, int *stack, uint8_t *seen, int follow_bol, int *reach_set, int *reach_end) {
  int sp = 0;
  memset(seen, 0, (size_t)m->nprog);
  stack[sp++] = 0;
  while (sp > 0) {
    int pc = stack[--sp];
    if (seen[pc]) continue;
    seen[pc] = 1;
    const re_inst_t *in = &m->prog[pc];
    switch (in->op) {
      case RE_SET:
        *reach_set = 1;
        for (int k = 0; k < 32; k++) m->first[k] |= m->sets[in->set][k];
        break;
      case RE_JMP: stack[sp++] = in->x; break;
      case RE_SPLIT:
        stack[sp++] = in->x;
        stack[sp++] = in->y;
        break;
      case RE_BOL:
        if (follow_bol) stack[sp++] = pc + 1;
        break;
      default: *reach_end = 1; /* RE_EOL, RE_MATCH */
    }
  }
}

/* Compiles p[0..n), which cb__regex_subset_ok accepted, into m: 0, UV_E2BIG over CB__REGEX_PROG instructions,
 * UV_ENOMEM. */
static int re_compile(cb__body_match_t *m, const char *p, size_t n) {
  re_parse_t ps = {p, n, 0, calloc(4 * n + 4, sizeof(re_node_t)), 0, calloc(n + 1, 32), 0};
  if (ps.nodes == NULL || ps.sets == NULL) {
    free(ps.nodes);
    free(ps.sets);
    return UV_ENOMEM;
  }
  int root = re_alt(&ps);
  size_t size = re_size(&ps, root) + 1;
  int err = size > CB__REGEX_PROG ? UV_E2BIG : 0;
  if (err == 0 && (m->prog = malloc(size * sizeof *m->prog)) == NULL) err = UV_ENOMEM;
  if (err == 0) {
    int pc = 0;
    re_emit(&ps, root, m->prog, &pc);
    m->prog[pc++] = (re_inst_t){RE_MATCH, 0, 0, 0};
    m->nprog = pc;
    m->sets = ps.sets;
    ps.sets = NULL;
    int *stack = malloc((2 * size + 2) * sizeof *stack);
    uint8_t *seen = malloc(size);
    if (stack == NULL || seen == NULL) {
      err = UV_ENOMEM;
    } else {
      int any = 0, end = 0;
      re_start(m, stack, seen, 1, &any, &end);
      m->skip = !end;
      int unanchored = 0;
      re_start(m, stack, seen, 0, &unanchored, &unanchored);
      m->anchored = !unanchored;
    }
    free(stack);
    free(seen);
  }
  free(ps.nodes);
  free(ps.sets);
  return err;
}

/* Adds pc and the states it reaches without reading a byte (at position pos of n) to list, each once (mark[pc]
 * == gen: in the list already). 1: a match. */
typedef struct {
  uint64_t *mark;
  int *cur, *next, *stack;
  uint64_t steps;
} re_run_t;

static int re_add(const cb__body_match_t *m, re_run_t *st, int *list, int *cnt, uint64_t gen, int pc, size_t pos,
                  size_t n) {
  int sp = 0;
  st->stack[sp++] = pc;
  while (sp > 0) {
    pc = st->stack[--sp];
    if (st->mark[pc] == gen) continue;
    st->mark[pc] = gen;
    st->steps++;
    const re_inst_t *in = &m->prog[pc];
    switch (in->op) {
      case RE_SET: list[(*cnt)++] = pc; break;
      case RE_JMP: st->stack[sp++] = in->x; break;
      case RE_SPLIT:
        st->stack[sp++] = in->y;
        st->stack[sp++] = in->x;
        break;
      case RE_BOL:
        if (pos == 0) st->stack[sp++] = pc + 1;
        break;
      case RE_EOL:
        if (pos == n) st->stack[sp++] = pc + 1;
        break;
      default: return 1; /* RE_MATCH */
    }
  }
  return 0;
}

/* Whether p[0..n) has a match of m's regex; *steps: the request's steps so far, the budget for this run is what
 * they leave of CB__REGEX_STEPS + CB__REGEX_STEPS_PER_BYTE * n (spent: no match). 0 also when out of memory. */
int cb__regex_run(const cb__body_match_t *m, const char *p, size_t n, uint64_t *steps) {
  const uint64_t limit = CB__REGEX_STEPS + CB__REGEX_STEPS_PER_BYTE * (uint64_t)n;
  if (*steps >= limit) return 0;
  size_t np = (size_t)m->nprog;
  re_run_t st = {calloc(np, sizeof(uint64_t)), malloc(np * sizeof(int)), malloc(np * sizeof(int)),
                 malloc((2 * np + 2) * sizeof(int)), 0};
  int found = 0;
  const uint64_t budget = limit - *steps;
  if (st.mark == NULL || st.cur == NULL || st.next == NULL || st.stack == NULL) goto done;
  uint64_t gen = 1;
  int ncur = 0;
  for (size_t pos = 0;; pos++) {
    if (ncur == 0) {
      if (pos > 0 && m->anchored) break;
      if (m->skip) { /* no state alive: on to a byte a match can begin with (free: no state steps) */
        while (pos < n && !set_has(m->first, (unsigned char)p[pos])) pos++;
        if (pos == n) break;
      }
      gen++; /* a fresh list: what the empty one marked is forgotten */
    }
    if ((pos == 0 || !m->anchored) && re_add(m, &st, st.cur, &ncur, gen, 0, pos, n)) {
      found = 1;
      break;
    }
    if (pos == n || st.steps > budget) break;
    unsigned c = (unsigned char)p[pos];
    int nnext = 0;
    for (int k = 0; k < ncur; k++) {
      int pc = st.cur[k];
      st.steps++;
      if (set_has(m->sets[m->prog[pc].set], c) && re_add(m, &st, st.next, &nnext, gen + 1, pc + 1, pos + 1, n)) {
        found = 1;
        goto done;
      }
    }
    int *t = st.cur;
    st.cur = st.next;
    st.next = t;
    ncur = nnext;
    gen++;
  }
done:
  *steps = st.steps >= budget ? UINT64_MAX : *steps + st.steps; /* spent: the request's next regexes too */
  free(st.mark);
  free(st.cur);
  free(st.next);
  free(st.stack);
  return found;
}

/* The pattern (which cb__regex_subset_ok took) without its counted repetitions, NUL-terminated into out (n + 1
 * bytes), for regcomp to judge the rest: its brackets (a backward range, a class as a range's end) and groups.
 * The counts were checked already, and regcomp writes them out, which a few bytes can make take seconds however
 * small the program above: "(0|||||){9,}|||||||" took 2.2 s to compile (and 28 s under ASan). */
static void without_counts(const char *p, size_t n, char *out) {
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    if (p[i] == '\\' && i + 1 < n) { /* an escaped character (never '{' as a count) */
      out[o++] = p[i++];
      out[o++] = p[i];
    } else if (p[i] == '[') { /* a bracket expression as it is, to its ']' (cb__regex_subset_ok's reading) */
      size_t j = i + 1;
      if (j < n && p[j] == '^') j++;
      if (j < n && p[j] == ']') j++;
      while (j < n && p[j] != ']') {
        if (p[j] == '[' && j + 1 < n && p[j + 1] == ':') {
          for (j += 2; j + 1 < n && !(p[j] == ':' && p[j + 1] == ']'); j++) {}
          j += 2;
        } else {
          j++;
        }
      }
      if (j >= n) j = n - 1;
      memcpy(out + o, p + i, j - i + 1);
      o += j - i + 1;
      i = j;
    } else if (p[i] == '{') { /* a count: left out */
      while (i + 1 < n && p[i] != '}') i++;
    } else {
      out[o++] = p[i];
    }
  }
  out[o] = '\0';
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
      int err = re_compile(m, v, n);
      if (err == UV_ENOMEM) {
        cb__body_match_free(m);
        return err;
      }
      regex_t re;
      without_counts(v, n, pat);
      if (err != 0 || regcomp(&re, pat, REG_EXTENDED | REG_NOSUB) != 0) {
        cb__body_match_free(m);
        return cb__bad_bytes(CB_FIELD_MATCH_BODY, -1, CB_WHY_BAD_REGEX, v, n);
      }
      regfree(&re);
    }
  }
  *out = m;
  return 0;
}

void cb__body_match_free(cb__body_match_t *m) {
  if (m == NULL) return;
  free(m->prog);
  free(m->sets);
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
  r->mre_steps = 0;
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
    default:
      return cb__regex_run(m, p, n, &r->mre_steps);
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
