/* Scenarios: named states shared by the stubs of one server (cb_stub_t.scenario, docs/routes.md).
 *
 * States are interned: each state name gets a small number when a stub or a call first names it (0 is
 * "started"), so that a worker reads and moves a scenario's state with one atomic load and one compare-and-swap
 * of a 32-bit number, and never looks at a string. Names, states and their numbers only grow during a server's
 * life (a stub that is removed leaves them), under this registry's mutex, which the workers never take; each
 * scenario is allocated on its own and never moves, so a stub keeps a plain pointer to it. */
#include <stdlib.h>
#include <string.h>

#include "routes/routes.h"

struct cb__scenarios_s {
  uv_mutex_t mu;
  cb__scenario_t **items; /* by first use */
  uint32_t n, cap;
  char **states; /* states[i]: the name of state i, NUL-terminated; states[0] is "started" */
  uint32_t nstates, states_cap;
  uint64_t moves; /* atomic: cb__scenarios_moves */
};

uint64_t *cb__scenarios_moves(cb__scenarios_t *s) { return &s->moves; }

int cb__scenarios_new(cb__scenarios_t **out) {
  cb__scenarios_t *s = calloc(1, sizeof *s);
  if (s == NULL) return UV_ENOMEM;
  s->states = malloc(sizeof *s->states * 8);
  if (s->states == NULL || (s->states[0] = strdup(CB_SCENARIO_STARTED)) == NULL || uv_mutex_init(&s->mu) != 0) {
    if (s->states) free(s->states[0]);
    free(s->states);
    free(s);
    return UV_ENOMEM;
  }
  s->nstates = 1;
  s->states_cap = 8;
  *out = s;
  return 0;
}

void cb__scenarios_free(cb__scenarios_t *s) {
  if (s == NULL) return;
  for (uint32_t i = 0; i < s->n; i++) {
    free(s->items[i]->name);
    free(s->items[i]);
  }
  for (uint32_t i = 0; i < s->nstates; i++) free(s->states[i]);
  free(s->items);
  free(s->states);
  uv_mutex_destroy(&s->mu);
  free(s);
}

static int same(cb_str_t a, const char *b) { return strlen(b) == a.len && memcmp(a.ptr, b, a.len) == 0; }

static char *dup_str(cb_str_t v) {
  char *p = malloc(v.len + 1);
  if (p == NULL) return NULL;
  memcpy(p, v.ptr, v.len);
  p[v.len] = '\0';
  return p;
}

/* Under s->mu. */
static int find_locked(cb__scenarios_t *s, cb_str_t name, cb__scenario_t **out) {
  for (uint32_t i = 0; i < s->n; i++)
    if (same(name, s->items[i]->name)) {
      *out = s->items[i];
      return 0;
    }
  if (s->n >= CB_MAX_SCENARIOS) return CB_ELIMIT;
  if (s->n == s->cap) {
    uint32_t cap = s->cap ? 2 * s->cap : 8;
    cb__scenario_t **items = realloc(s->items, sizeof *items * cap);
    if (items == NULL) return UV_ENOMEM;
    s->items = items;
    s->cap = cap;
  }
  cb__scenario_t *sc = calloc(1, sizeof *sc);
  if (sc == NULL || (sc->name = dup_str(name)) == NULL) {
    free(sc);
    return UV_ENOMEM;
  }
  sc->moves = &s->moves;
  s->items[s->n++] = sc;
  *out = sc;
  return 0;
}

/* Under s->mu. */
static int state_locked(cb__scenarios_t *s, cb_str_t state, uint32_t *id) {
  for (uint32_t i = 0; i < s->nstates; i++)
    if (same(state, s->states[i])) {
      *id = i;
      return 0;
    }
  if (s->nstates >= CB_MAX_SCENARIOS) return CB_ELIMIT;
  if (s->nstates == s->states_cap) {
    char **states = realloc(s->states, sizeof *states * 2 * s->states_cap);
    if (states == NULL) return UV_ENOMEM;
    s->states = states;
    s->states_cap *= 2;
  }
  if ((s->states[s->nstates] = dup_str(state)) == NULL) return UV_ENOMEM;
  *id = s->nstates++;
  return 0;
}

int cb__scenario_find(cb__scenarios_t *s, cb_str_t name, cb__scenario_t **out) {
  uv_mutex_lock(&s->mu);
  int err = find_locked(s, name, out);
  uv_mutex_unlock(&s->mu);
  return err;
}

int cb__scenario_state_id(cb__scenarios_t *s, cb_str_t state, uint32_t *id) {
  uv_mutex_lock(&s->mu);
  int err = state_locked(s, state, id);
  uv_mutex_unlock(&s->mu);
  return err;
}

/* A name or a state: as a route's name (1..CB_MAX_NAME printable ASCII bytes, no space). */
static int check(cb_str_t v) {
  if (v.ptr == NULL || v.len == 0 || v.len > CB_MAX_NAME) return UV_EINVAL;
  for (size_t i = 0; i < v.len; i++)
    if ((unsigned char)v.ptr[i] <= 0x20 || (unsigned char)v.ptr[i] >= 0x7f) return UV_EINVAL;
  return 0;
}

int cb_server_scenario(cb_server_t *srv, cb_str_t name, char *out, size_t cap) {
  if (srv == NULL || out == NULL || check(name)) return UV_EINVAL;
  cb__scenarios_t *s = cb__routes_scenarios(srv->routes);
  uv_mutex_lock(&s->mu);
  const char *state = CB_SCENARIO_STARTED;
  for (uint32_t i = 0; i < s->n; i++)
    if (same(name, s->items[i]->name)) state = s->states[__atomic_load_n(&s->items[i]->state, __ATOMIC_ACQUIRE)];
  size_t n = strlen(state);
  int ret = n + 1 > cap ? UV_ENOBUFS : (int)n;
  if (ret >= 0) memcpy(out, state, n + 1);
  uv_mutex_unlock(&s->mu);
  return ret;
}

int cb_server_scenario_set(cb_server_t *srv, cb_str_t name, cb_str_t state) {
  if (srv == NULL || check(name) || check(state)) return UV_EINVAL;
  cb__scenarios_t *s = cb__routes_scenarios(srv->routes);
  uv_mutex_lock(&s->mu);
  cb__scenario_t *sc;
  uint32_t id;
  int err = find_locked(s, name, &sc);
  if (err == 0) err = state_locked(s, state, &id);
  if (err == 0) {
    __atomic_store_n(&sc->state, id, __ATOMIC_RELEASE);
    __atomic_add_fetch(&s->moves, 1, __ATOMIC_RELEASE);
  }
  uv_mutex_unlock(&s->mu);
  return err;
}

int cb_server_scenarios_reset(cb_server_t *srv) {
  if (srv == NULL) return UV_EINVAL;
  cb__scenarios_t *s = cb__routes_scenarios(srv->routes);
  uv_mutex_lock(&s->mu);
  for (uint32_t i = 0; i < s->n; i++) __atomic_store_n(&s->items[i]->state, 0, __ATOMIC_RELEASE);
  __atomic_add_fetch(&s->moves, 1, __ATOMIC_RELEASE);
  uv_mutex_unlock(&s->mu);
  return 0;
}
